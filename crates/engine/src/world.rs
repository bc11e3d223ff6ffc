//! An emulated platform's time: the world a virtual backend reads advances here, after the
//! containers that start in a step are attached (so their first traffic is already tagged)
//! and before the step's counters are read.

use crate::containers::Container;
use crate::pmu::Ran;
use std::time::Duration;

pub trait World {
    /// A container started (before it is attached).
    fn started(&mut self, _c: &Container) {}
    /// A container stopped (after its last interval was read).
    fn stopped(&mut self, _id: &str) {}
    /// Advance to `to` (since the run's start). `ran`: what the PMU source counted over the
    /// step for each container and domain where it counted anything (the others did not
    /// run), for worlds driven by real containers.
    fn advance(&mut self, to: Duration, ran: &[Ran]);
    /// What drives it, in words.
    fn describe(&self) -> String;
}
