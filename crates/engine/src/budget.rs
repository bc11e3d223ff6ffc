//! The read budget: how a run degrades when reading every container at every interval costs
//! more than the interval (thousands of containers at 1 ms).
//!
//! Sampling may use a share of each interval ([`SHARE`]). After each interval the run reports
//! what it cost (CPU time of the sampling thread: time it was preempted is not its cost); over the share, the number of containers read per interval is cut to what
//! fits (from the smoothed cost of a read), and raised again as reads get cheaper, until all
//! are read. When cut, the
//! containers that ran in the interval (CPU time from the PMU source, where counted) are read
//! first and every other container in turn, one group of `1/k` of them per interval, so each
//! is read at least every `k` intervals. Nothing is lost: counters are cumulative, and a
//! row's `interval_ns` spans everything since that container's previous row (its effective
//! sampling period).

use std::hash::{Hash, Hasher};
use std::time::Duration;

/// The share of an interval that sampling may take; the rest is for the sinks, the PMU
/// drain and the machine's own work.
pub const SHARE: f64 = 0.6;

/// The most read groups: every container is read at least every this many intervals.
pub const MAX_GROUPS: u64 = 100;

/// A run's first intervals are not judged: they touch their memory for the first time (1,000
/// emulated containers at 1 ms: 750–1,500 µs, then 160), and judging the first cut every such
/// run to 1 container in 17–100 for its first 20–30 ms.
pub const WARMUP: u32 = 3;

#[derive(Debug, Clone, Default)]
pub struct ReadBudget {
    /// Containers read per interval; None: every one.
    capacity: Option<usize>,
    /// The round-robin group read in the current interval.
    phase: u64,
    /// Groups (k) while cut: a container is read at least every `groups` intervals.
    groups: u64,
    /// The grouping the next round uses: a container's group changes with their number, so
    /// it changes only between rounds (else one could keep missing its turn).
    next_groups: u64,
    /// The most groups used during the run, and the intervals sampled with a cut.
    pub max_groups: u64,
    pub cut_intervals: u64,
    /// The sum of `groups` over the intervals sampled with a cut (their mean is the typical
    /// effective sampling period, in intervals).
    pub cut_groups: u64,
    /// Seconds per container read, and of the rest of an interval's sampling, smoothed.
    per_read: f64,
    fixed: f64,
    /// Intervals seen, up to [`WARMUP`].
    warm: u32,
}

/// A stable group for each id (a hash: no per-container state, no allocation).
fn group_of(id: &str, groups: u64) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.hash(&mut h);
    h.finish() % groups.max(1)
}

impl ReadBudget {
    /// Whether reads are cut now.
    pub fn cut(&self) -> bool {
        self.capacity.is_some()
    }

    /// The read groups while cut (1 when every container is read).
    pub fn groups(&self) -> u64 {
        if self.cut() {
            self.groups
        } else {
            1
        }
    }

    /// Move to the next interval's group.
    pub fn next_interval(&mut self) {
        if self.cut() {
            self.cut_intervals += 1;
            self.cut_groups += self.groups;
            self.phase += 1;
            if self.phase >= self.groups.max(1) {
                // A round is over (every container was read once): regroup now.
                self.phase = 0;
                self.groups = self.next_groups.max(1);
            }
        }
    }

    /// Read `id` in this interval? `ran`: it used CPU in the interval (None: not known).
    pub fn wants(&self, id: &str, ran: impl FnOnce() -> Option<bool>) -> bool {
        if !self.cut() {
            return true;
        }
        group_of(id, self.groups) == self.phase || ran() == Some(true)
    }

    /// After an interval of length `interval` was sampled: it cost `total`, of which `reads`
    /// went to reading containers (the backend's reads and their rows; the rest, an emulated
    /// platform's time or the PMU's join, is paid whoever is read), with `containers` followed.
    pub fn adjust(&mut self, total: Duration, reads: Duration, interval: Duration, containers: usize) {
        if containers == 0 {
            return;
        }
        if self.warm < WARMUP {
            self.warm += 1;
            return;
        }
        let (total, reads) = (total.as_secs_f64(), reads.as_secs_f64().min(total.as_secs_f64()));
        let target = interval.as_secs_f64() * SHARE;
        let reading = self.capacity.unwrap_or(containers).min(containers).max(1);
        // Smoothed: one slow interval (a page fault, a preemption) does not cut the next ones.
        let smooth = |avg: f64, x: f64| if avg > 0.0 { 0.8 * avg + 0.2 * x } else { x };
        self.per_read = smooth(self.per_read, reads / reading as f64);
        self.fixed = smooth(self.fixed, total - reads);
        if !self.cut() && total <= target {
            return;
        }
        // As many as fit in 90 % of the share after the fixed part; at least 1 % of them
        // (each read at least every 100 intervals) even when the fixed part alone overruns.
        let room = (0.9 * target - self.fixed).max(0.0);
        let fit = if self.per_read > 0.0 { (room / self.per_read) as usize } else { containers };
        let next = fit.max(containers.div_ceil(MAX_GROUPS as usize)).max(1);
        if next >= containers {
            self.capacity = None;
            self.groups = 1;
            self.next_groups = 1;
            self.phase = 0;
        } else {
            let groups = containers.div_ceil(next) as u64;
            if !self.cut() {
                (self.groups, self.phase) = (groups, 0);
            }
            self.capacity = Some(next);
            self.next_groups = groups;
            // A round of the old grouping, then one of the new: the longest a container waits.
            self.max_groups = self.max_groups.max(self.groups.max(groups));
        }
    }

    /// What the run did under overload, for people; None when it never was.
    pub fn summary(&self, interval: Duration, intervals: u64) -> Option<String> {
        (self.cut_intervals > 0).then(|| {
            format!(
                "overloaded: {} of {intervals} intervals read only part of the containers; each was read every {:?} \
                 on average then, and at least every {:?}",
                self.cut_intervals,
                interval.mul_f64(self.cut_groups as f64 / self.cut_intervals as f64),
                interval * self.max_groups as u32
            )
        })
    }

    /// A line for people while cut.
    pub fn describe(&self, interval: Duration, containers: usize) -> Option<String> {
        let c = self.capacity?;
        Some(format!(
            "overloaded: reading about {} of {containers} containers per interval (those that ran first); \
             each at least every {:?}",
            c.min(containers),
            interval * self.groups as u32
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// A budget past its warm-up, which costs as dear as they come leave uncut.
    fn warmed() -> ReadBudget {
        let mut b = ReadBudget::default();
        for _ in 0..WARMUP {
            b.adjust(MS * 50, MS * 50, MS, 1000);
            assert!(!b.cut(), "a warm-up interval is not judged");
        }
        b
    }

    #[test]
    fn cuts_in_proportion_and_recovers() {
        let mut b = warmed();
        assert!(b.wants("a", || None), "all are read until a cost is known");
        // 1000 containers costing 2 ms per 1 ms interval: about a quarter are read.
        b.adjust(MS * 2, MS * 2, MS, 1000);
        assert!(b.cut());
        let cap = b.capacity.unwrap();
        assert!((200..=300).contains(&cap), "{cap}");
        assert_eq!(b.groups(), 1000u64.div_ceil(cap as u64));
        // Every container is read within `groups` intervals, about 1/k of them per interval.
        let ids: Vec<String> = (0..1000).map(|i| format!("c{i}")).collect();
        let mut seen = vec![false; ids.len()];
        for _ in 0..b.groups() {
            let mut n = 0;
            for (i, id) in ids.iter().enumerate() {
                if b.wants(id, || None) {
                    seen[i] = true;
                    n += 1;
                }
            }
            assert!(n < 2 * cap, "{n} of {cap}");
            b.next_interval();
        }
        assert!(seen.iter().all(|&s| s), "round robin reaches everyone");
        assert!(b.wants("c1", || Some(true)), "a container that ran is read");
        // One slow interval (seven times the cost) moves it only part of the way.
        b.adjust(MS * 4, MS * 4, MS, 1000);
        let after = b.capacity.unwrap();
        assert!(after < cap && after > cap / 3, "{cap} then {after}");
        // Cheap again (a tenth of the cost per read): back to all, in a few steps.
        for _ in 0..30 {
            let reading = b.capacity.unwrap_or(1000) as u32;
            b.adjust(MS * reading / 5000, MS * reading / 5000, MS, 1000);
        }
        assert!(!b.cut() && b.groups() == 1);
        assert!(b.max_groups >= 4);
        // A fixed part that alone overruns the interval: reads are cut to the floor, not to
        // nothing.
        let mut b = warmed();
        b.adjust(MS * 2, MS / 10, MS, 1000);
        assert_eq!(b.groups(), MAX_GROUPS);
        // Reads that fit beside the fixed part: cut to what fits.
        let mut b = warmed();
        b.adjust(MS, MS / 2, MS, 1000);
        let cap = b.capacity.unwrap();
        assert!((75..=85).contains(&cap), "(0.54 ms - 0.5 ms) at 0.5 us a read: {cap}");
    }
}
