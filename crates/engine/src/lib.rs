//! The engine of cachescope: the sampling scheduler ([`sched`]), the row every backend produces
//! and every sink consumes ([`row`], DESIGN.md §5.3), and the sparse-row filter ([`sparse`]).
//! The backends are driven from the CLI's run loops.

pub mod row;
pub mod sched;
pub mod sparse;

pub use row::{ContainerMeta, Pmu, Row, Status};
pub use sched::{Lateness, Tick, Ticker, TickerError, MAX_INTERVAL, MIN_INTERVAL};
pub use sparse::Sparse;
