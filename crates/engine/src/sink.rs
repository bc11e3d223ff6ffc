//! Where rows go. A run hands every sink the same rows, in time order, so one process can
//! record, serve and show at once.

use crate::row::Row;
use crate::sched::Lateness;
use std::time::Duration;

/// What the run says about itself at every status period (the table header, self-metrics).
#[derive(Debug, Clone, Default)]
pub struct RunStatus {
    /// Time since the run's start.
    pub t: Duration,
    /// Since the previous status.
    pub period: Duration,
    pub backend: String,
    pub interval: Duration,
    /// Wake-up lateness over the period, and missed wake-ups since the start.
    pub lateness: Lateness,
    pub missed: u64,
    pub rmids_in_use: u64,
    /// None: the backend cannot tell.
    pub rmids_limbo: Option<u64>,
    pub unmonitored: u64,
    /// L3 size per domain (domain, bytes).
    pub l3_bytes: Vec<(u32, u64)>,
    /// Why values are emulated, when they are.
    pub emulated: Option<String>,
    /// Reads that failed where a value should exist (`error` rows), by kind.
    pub read_errors: Vec<(&'static str, u64)>,
    /// Charges the PMU source dropped since the start (its kernel buffer filled while the
    /// collector fell behind); the rows of that time have no PMU values.
    pub pmu_lost_charges: u64,
    /// The PMU source's CPU time in the kernel since the start (eBPF), where it has any.
    pub pmu_kernel_cpu: Option<crate::pmu::KernelCpu>,
    /// The backend's and the PMU source's own lines.
    pub extra: Vec<String>,
}

/// Whether the run should go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Stop the run (the terminal asked to quit, stdout was closed).
    Stop,
}

/// An output that could not finish (stdout refused a write, a file could not be closed):
/// what was lost, in words. The run still ends with its summary; the CLI exits 1.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OutputError(pub String);

pub trait Sink {
    /// Rows, in time order (of one or more intervals).
    fn rows(&mut self, rows: &[Row]) -> Flow;
    /// One wake-up of the run: its lateness and the wake-ups missed before it.
    fn tick(&mut self, _late: Duration, _missed: u64) {}
    /// The run's state, every status period.
    fn status(&mut self, _st: &RunStatus) -> Flow {
        Flow::Continue
    }
    /// A container stopped: its rows end.
    fn forget(&mut self, _id: &str) {}
    /// End of the run: close what is open; what was done, in words.
    fn finish(&mut self) -> Result<Vec<String>, OutputError>;
    /// After [`Sink::finish`]: what was accepted and did not reach the output (rows dropped
    /// for a full disk), in words. A run with losses finished, but not whole.
    fn losses(&self) -> Option<String> {
        None
    }
}
