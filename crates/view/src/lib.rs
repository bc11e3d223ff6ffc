//! The live view of `cachescope monitor`, apart from the command line that starts it: the
//! rows of a period as a person reads them ([`rows`]: rates, shares, IPC, folding domains,
//! sorting), and the terminal screen ([`tui`]: layout at any width, keys, scrolling, the
//! filter, help, and the active noisy-neighbour episodes). The CLI parses, builds the run's
//! parts and hands this crate frames.

pub mod rows;
pub mod tui;
