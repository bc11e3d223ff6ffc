//! What the run holds between sampling and the sinks: rows waiting for their PMU columns, and
//! the count of what the PMU source dropped.

use crate::row::Row;
use std::collections::VecDeque;
use std::time::Duration;

/// Rows waiting for their PMU columns, in order, and where the ends of containers' rows fall
/// among them. The sinks get the rows as a slice of this queue: a row (~200 bytes) is moved
/// once on its way, which at 20,000 rows a second is most of what the collector costs.
#[derive(Default)]
pub(super) struct Pending {
    pub(super) rows: Vec<Row>,
    /// Each row's sample time (since the run's start), for the PMU join and the watermark.
    pub(super) at: Vec<Duration>,
    /// A container's end: after how many rows since the run's start, and its id.
    pub(super) forgets: VecDeque<(u64, String)>,
    /// Rows handed to the sinks since the run's start.
    pub(super) released: u64,
}

impl Pending {
    pub(super) fn row(&mut self, at: Duration, row: Row) {
        self.at.push(at);
        self.rows.push(row);
    }

    /// Give back memory a burst left (a Vec keeps its largest size): down to `keep` rows'
    /// room when it holds far more than it needs.
    pub(super) fn trim(&mut self, keep: usize) {
        super::trim(&mut self.rows, keep);
        super::trim(&mut self.at, keep);
    }

    pub(super) fn forget(&mut self, id: String) {
        self.forgets.push_back((self.released + self.rows.len() as u64, id));
    }
}

/// What the PMU source could not count: the kernel's buffer filled while the collector fell
/// behind (stopped, starved of CPU).
#[derive(Debug, Default)]
pub(super) struct PmuLost {
    pub(super) charges: u64,
    pub(super) gaps: u64,
    pub(super) span: Duration,
    /// Rows given no PMU values (and no CPU time) for it.
    pub(super) rows: u64,
}

impl PmuLost {
    pub(super) fn summary(&self) -> Option<String> {
        (self.charges > 0).then(|| {
            format!(
                "PMU counts incomplete: {} charges dropped in {} gaps over {:.1} s (the collector fell behind and the \
                 kernel's slot map filled); {} rows of that time have null cpu_ns and PMU columns",
                self.charges,
                self.gaps,
                self.span.as_secs_f64(),
                self.rows
            )
        })
    }
}
