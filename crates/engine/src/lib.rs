//! The engine of cachescope. So far: the sampling scheduler ([`sched`]); backends, RMID policy
//! and sinks are wired in the CLI until they move here.

pub mod sched;

pub use sched::{Lateness, Tick, Ticker, TickerError, MAX_INTERVAL, MIN_INTERVAL};
