//! PMU counters for cachescope: perf_event_open groups per CPU, per cgroup and per task
//! ([`counter`]), event encoding through sysfs `format/` files ([`format`]), the four
//! per-container quantities resolved for this CPU ([`events`]), the legacy `intel_cqm` PMU
//! ([`cqm`]), and the perf-cgroup collector used where BPF is unavailable ([`cgroup`]).

pub mod cgroup;
pub mod counter;
pub mod cqm;
pub mod cqm_backend;
pub mod events;
pub mod format;

pub use counter::{scale, CounterGroup, GroupReading, Scaled, Target};
pub use format::{Encoded, Pmu};
