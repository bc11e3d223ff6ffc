//! The engine of cachescope: one run loop ([`run`]) that every command and backend goes
//! through, and the parts it is built from, each a trait with its implementations living
//! beside what they touch:
//! - [`backend::CacheBackend`]: cache occupancy and bandwidth (kmod, resctrl, msr, perf-cqm,
//!   emulated, none), each built by its own crate;
//! - [`containers::ContainerSource`]: containers starting and stopping;
//! - [`pmu::PmuSource`]: PMU and CPU columns, sampled in their own slots, drained in batches;
//! - [`world::World`]: an emulated platform's time;
//! - [`sink::Sink`]: where rows go (Parquet, Prometheus, the terminal), several at once.
//!
//! The engine owns what must be done once for all of them: deltas from raw cumulative
//! samples ([`derive`]), the RMID policy and the `no_rmid` rows ([`slots`]), the sampling
//! clock ([`clock`], [`sched`]), the row every sink consumes ([`row`], docs/data.md) and the
//! sparse-row filter ([`sparse`]).

pub mod backend;
pub mod budget;
pub mod clock;
pub mod containers;
pub mod derive;
pub mod error;
pub mod pmu;
pub mod quiet;
pub mod row;
pub mod run;
pub mod sched;
pub mod sink;
pub mod slots;
pub mod sparse;
pub mod world;

pub use backend::{Attach, BackendInfo, CacheBackend, RawSample, Read, Sampling, SlotCounts};
pub use containers::{Change, Container, ContainerSource};
pub use error::{PartError, PartResult};
pub use row::{ById, ContainerMeta, MbmCounter, Pmu, Row, RuntimeCell, RuntimeMeta, Status};
pub use run::{run, Options, Parts, RunError, Summary};
pub use sched::{Lateness, Tick, Ticker, TickerError, MAX_INTERVAL, MIN_INTERVAL};
pub use sink::{Flow, OutputError, RunStatus, Sink};
pub use slots::{Policy, WaitReason};
pub use sparse::Sparse;

use cachescope_platform::hash::{FastMap, FastSet, IntMap};
