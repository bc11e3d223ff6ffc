//! An emulated platform's time: the world a virtual backend reads advances here, after the
//! containers that start in a step are attached (so their first traffic is already tagged)
//! and before the step's counters are read.

use crate::containers::Container;
use crate::pmu::Totals;
use std::time::Duration;

pub trait World {
    /// A container started (before it is attached).
    fn started(&mut self, _c: &Container) {}
    /// A container stopped (after its last interval was read).
    fn stopped(&mut self, _id: &str) {}
    /// Advance to `to` (since the run's start). `measured(id, domain)`: what the PMU source
    /// counted for a container over the step, for worlds driven by real containers.
    fn advance(&mut self, to: Duration, measured: &mut dyn FnMut(&str, u32) -> Totals);
    /// What drives it, in words.
    fn describe(&self) -> String;
}
