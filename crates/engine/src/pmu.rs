//! PMU columns: a source counts per container and L3 domain in its own time slots (the eBPF
//! attribution samples 1 ms slots in the kernel; perf cgroup events are read when drained),
//! and is drained in batches. [`Join`] keeps what was drained until the rows of the
//! intervals it belongs to are made.

use crate::containers::Container;
use crate::error::PartResult;
use crate::row::{addr, ById, ContainerMeta, Pmu};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// Counts of one container on one domain over one slot.
#[derive(Debug, Clone)]
pub struct PmuSample {
    pub container: Arc<ContainerMeta>,
    pub domain: u32,
    /// End of the slot, CLOCK_MONOTONIC.
    pub end: Duration,
    /// cycles, instructions, LLC references, LLC misses (0 where not counted).
    pub values: [u64; 4],
    pub cpu_ns: u64,
}

/// Which columns a source fills; the others stay null.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    pub pmu: [bool; 4],
    pub cpu_ns: bool,
}

impl Counted {
    pub fn any(&self) -> bool {
        self.cpu_ns || self.pmu.iter().any(|&b| b)
    }
}

/// A time the source could not count completely (its kernel buffer filled while the collector
/// fell behind): CLOCK_MONOTONIC, and the charges it dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gap {
    pub from: Duration,
    pub to: Duration,
    pub charges: u64,
}

/// CPU time a source spends in the kernel for the collector (eBPF programs) since its start,
/// which the collector's own CPU time does not include.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelCpu {
    /// Timer callbacks, always counted, and how many ran.
    pub timers: Duration,
    pub timer_runs: u64,
    /// Program runs, as the kernel counts them: only while kernel.bpf_stats_enabled is 1;
    /// and how many.
    pub programs: Option<Duration>,
    pub runs: u64,
}

impl KernelCpu {
    /// In words, for the run's summary.
    pub fn describe(&self) -> String {
        match self.programs {
            Some(p) => format!(
                "eBPF CPU time: {:.3} s (programs {:.3} s in {} runs, tick timers {:.3} s in {} runs)",
                (p + self.timers).as_secs_f64(),
                p.as_secs_f64(),
                self.runs,
                self.timers.as_secs_f64(),
                self.timer_runs
            ),
            None => format!(
                "eBPF CPU time: tick timers {:.3} s in {} runs; program runs not counted (kernel.bpf_stats_enabled is 0)",
                self.timers.as_secs_f64(),
                self.timer_runs
            ),
        }
    }
}

pub trait PmuSource {
    /// What is counted and how, for the header and the file metadata.
    fn describe(&self) -> String;
    fn counted(&self) -> Counted;
    /// How often it wants draining (the kernel keeps slots meanwhile).
    fn drain_every(&self) -> Duration;
    /// The longest time one of its slots covers, up to its end (eBPF's 1 ms slots; a perf
    /// read's period): how far before a slot's end its counts may have begun.
    fn slot_len(&self) -> Duration {
        Duration::from_millis(1)
    }
    /// Count a container (from its start).
    fn follow(&mut self, c: &Container);
    fn unfollow(&mut self, id: &str);
    /// Move the completed slots into `out`; returns the watermark: every slot ending at or
    /// before it (CLOCK_MONOTONIC) has been delivered. An error ends counting.
    ///
    /// `wake` is the run's sample time this drain belongs to (CLOCK_MONOTONIC). A source that
    /// reads its counters in user space, after that time when the wake-up is late, gives what
    /// accrued before it to that time (rows end there) and the rest to the instant of the
    /// read: stamped wholly at the read, a late last wake-up's counts fell past every row (a
    /// recorder stalled 450 ms lost that much CPU time). Sources whose slots carry the
    /// kernel's times ignore it.
    fn drain(&mut self, wake: Duration, out: &mut Vec<PmuSample>) -> PartResult<Duration>;
    /// What the source has to say when the run ends (e.g. how much of its counts the kernel
    /// scaled because other users of the counters made it multiplex them).
    fn closing(&mut self) -> Vec<String> {
        Vec::new()
    }
    /// Whether container `id` is followed without counters (they could not be opened for it):
    /// its rows' PMU columns and CPU time are null, never 0.
    fn uncounted(&self, _id: &str) -> bool {
        false
    }
    /// After [`PmuSource::drain`]: a time whose counts are incomplete, found by that drain.
    fn gap(&mut self) -> Option<Gap> {
        None
    }
    /// A header line for the period since it was last asked (e.g. CPU use per container).
    fn header(&mut self, _period: Duration) -> Option<String> {
        None
    }
    /// Its CPU time in the kernel since start, where it runs there.
    fn kernel_cpu(&mut self) -> Option<KernelCpu> {
        None
    }
}

/// Sums of a container's slots.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub values: [u64; 4],
    pub cpu_ns: u64,
}

impl Totals {
    fn add(&mut self, values: &[u64; 4], cpu_ns: u64) {
        for (t, v) in self.values.iter_mut().zip(values) {
            *t = t.wrapping_add(*v);
        }
        self.cpu_ns = self.cpu_ns.wrapping_add(cpu_ns);
    }

    /// The row's columns: counted ones as values (0 when nothing ran), the others null.
    pub fn columns(&self, c: Counted) -> (Pmu, Option<u64>) {
        let v = |i: usize| c.pmu[i].then_some(self.values[i]);
        (Pmu::from_values([v(0), v(1), v(2), v(3)]), c.cpu_ns.then_some(self.cpu_ns))
    }
}

/// One container's slots in one domain, in time order, and where its last row there ended:
/// a row reaches back to earlier slots no further than that (rows never overlap).
#[derive(Default)]
struct Slots {
    q: VecDeque<(Duration, Totals)>,
    row_end: Option<Duration>,
}

/// A container's slots per domain, by domain. Most containers run in one or two domains: a
/// sorted Vec holds that in 56 bytes a domain, where a BTreeMap's first node took 584 (5.8 MB
/// of 10,000 containers' memory).
#[derive(Default)]
struct Domains(Vec<(u32, Slots)>);

impl Domains {
    fn entry(&mut self, domain: u32) -> &mut Slots {
        let i = match self.0.binary_search_by_key(&domain, |(d, _)| *d) {
            Ok(i) => i,
            Err(i) => {
                self.0.insert(i, (domain, Slots::default()));
                i
            }
        };
        &mut self.0[i].1
    }

    fn get(&self, domain: u32) -> Option<&Slots> {
        self.0.binary_search_by_key(&domain, |(d, _)| *d).ok().map(|i| &self.0[i].1)
    }
}

/// A followed container's slots: its meta (held, so that its address, the key, is not reused
/// while it is followed) and its domains.
struct Followed {
    _meta: Arc<ContainerMeta>,
    doms: Domains,
}

/// Drained slots waiting for their rows: container → domain → slots; and the gaps, where
/// rows get no values rather than a part of them.
#[derive(Default)]
pub struct Join {
    /// Keyed by the address of the container's meta, which every row and sample of it shares:
    /// an idle container's keyframe row finds its slots with a multiply and one probe, not by
    /// hashing and comparing its id, a cache miss of its own (docs/cost.md).
    slots: cachescope_platform::hash::IntMap<usize, Followed>,
    /// container id → that address, for what asks by id (and a sample whose meta is another
    /// copy of the container's).
    by_id: crate::FastMap<ById, usize>,
    gaps: VecDeque<(Duration, Duration)>,
    /// The containers that ran (a slot with CPU time or a count), and the end of the latest
    /// such slot: who ran in an interval is found here, without looking at every container.
    ran: crate::FastMap<Arc<str>, Duration>,
    /// CPU time each container that ran was charged so far, in ns.
    cpu: crate::FastMap<Arc<str>, u64>,
}

/// A container that ran in a step, on one domain, and its counts there.
#[derive(Debug, Clone)]
pub struct Ran {
    pub id: Arc<str>,
    pub domain: u32,
    pub totals: Totals,
}

impl Join {
    pub fn follow(&mut self, meta: &Arc<ContainerMeta>) {
        if self.by_id.contains_key(meta.id.as_str()) {
            return;
        }
        self.by_id.insert(ById(meta.clone()), addr(meta));
        self.slots.insert(addr(meta), Followed { _meta: meta.clone(), doms: Domains::default() });
    }

    pub fn forget(&mut self, id: &str) {
        if let Some(a) = self.by_id.remove(id) {
            self.slots.remove(&a);
        }
        self.ran.remove(id);
        self.cpu.remove(id);
    }

    /// The domains of a followed container: by its meta's address, else by its id.
    fn doms_mut(&mut self, meta: &Arc<ContainerMeta>) -> Option<&mut Domains> {
        let a = match self.slots.contains_key(&addr(meta)) {
            true => addr(meta),
            false => *self.by_id.get(meta.id.as_str())?,
        };
        self.slots.get_mut(&a).map(|f| &mut f.doms)
    }

    fn doms(&self, id: &str) -> Option<&Domains> {
        self.by_id.get(id).and_then(|a| self.slots.get(a)).map(|f| &f.doms)
    }

    /// CPU time a followed container was charged so far, in µs, as its cgroup's `cpu.stat`
    /// would say since it was followed: the RMID policy's measure where the PMU source counts
    /// CPU time, without a file read per container.
    pub fn cpu_usage_usec(&self, id: &str) -> Option<u64> {
        self.by_id.contains_key(id).then(|| self.cpu.get(id).copied().unwrap_or(0) / 1000)
    }

    pub fn push(&mut self, samples: &mut Vec<PmuSample>) {
        for s in samples.drain(..) {
            // Slots of a container no longer followed are dropped.
            let Some(doms) = self.doms_mut(&s.container) else { continue };
            let mut t = Totals::default();
            t.add(&s.values, s.cpu_ns);
            doms.entry(s.domain).q.push_back((s.end, t));
            if t.cpu_ns > 0 {
                match self.cpu.get_mut(s.container.id.as_str()) {
                    Some(c) => *c += t.cpu_ns,
                    None => {
                        self.cpu.insert(Arc::from(s.container.id.as_str()), t.cpu_ns);
                    }
                }
            }
            if t.cpu_ns > 0 || t.values.iter().any(|&v| v > 0) {
                match self.ran.get_mut(s.container.id.as_str()) {
                    Some(until) => *until = (*until).max(s.end),
                    None => {
                        self.ran.insert(Arc::from(s.container.id.as_str()), s.end);
                    }
                }
            }
        }
    }

    /// The containers whose latest run (as far as drained) ended after `after`, and when;
    /// those that ran last at or before it are let go from the index. The work is the number
    /// that ran since, not the number followed.
    pub fn ran_after(&mut self, after: Duration, out: &mut Vec<(Arc<str>, Duration)>) {
        out.clear();
        self.ran.retain(|id, until| {
            let keep = *until > after;
            if keep {
                out.push((id.clone(), *until));
            }
            keep
        });
    }

    /// The counts of container `id` in each domain over slots that end in (`after`, `until`],
    /// where something was counted.
    pub fn ran_in(&self, id: &Arc<str>, after: Duration, until: Duration, out: &mut Vec<Ran>) {
        let Some(doms) = self.doms(id) else { return };
        for &(domain, ref slots) in &doms.0 {
            let totals = Self::sum(Some(&slots.q), after, until);
            if totals != Totals::default() {
                out.push(Ran { id: id.clone(), domain, totals });
            }
        }
    }

    fn sum(q: Option<&VecDeque<(Duration, Totals)>>, after: Duration, until: Duration) -> Totals {
        let mut t = Totals::default();
        let Some(q) = q else { return t };
        // Slots are in time order: the first after `after` by a binary search (a batch of
        // 50 ms holds 50 slots, looked at once per interval).
        let first = q.partition_point(|(end, _)| *end <= after);
        for (_, x) in q.range(first..).take_while(|(end, _)| *end <= until) {
            t.add(&x.values, x.cpu_ns);
        }
        t
    }

    /// Counts in (`from`, `to`] are incomplete: rows overlapping it get none.
    pub fn gap(&mut self, from: Duration, to: Duration) {
        match self.gaps.back_mut() {
            Some(last) if from <= last.1 => *last = (last.0.min(from), last.1.max(to)),
            _ => self.gaps.push_back((from, to)),
        }
    }

    /// Whether (`from`, `until`] overlaps a gap. Gaps are disjoint and in order: a binary
    /// search. Rows come roughly in time order, but one row can span many intervals (a
    /// budgeted read, a long `--interval`): a gap is let go only once it ended more than the
    /// longest interval there is (an hour, MAX_INTERVAL) before the row asked about.
    pub fn in_gap(&mut self, from: Duration, until: Duration) -> bool {
        let horizon = from.saturating_sub(crate::sched::MAX_INTERVAL);
        while self.gaps.front().is_some_and(|g| g.1 <= horizon) {
            self.gaps.pop_front();
        }
        let i = self.gaps.partition_point(|g| g.1 <= from);
        self.gaps.get(i).is_some_and(|&(a, _)| a < until)
    }

    /// The sums of a container's slots on `domain` that end in (`after`, `until`], without
    /// taking them.
    pub fn peek(&self, id: &str, domain: u32, after: Duration, until: Duration) -> Totals {
        Self::sum(self.doms(id).and_then(|d| d.get(domain)).map(|s| &s.q), after, until)
    }

    /// Take the sums of a container's slots on `domain` that end in (`after`, `until`] (those
    /// ending by `after`, the run's start, are dropped: no row covers them), for a row ending
    /// at `until`; also the end of the earliest of them that counted something, and where
    /// the container's previous row there ended (this row may reach back to the first, not
    /// past the second).
    pub fn take(
        &mut self,
        meta: &Arc<ContainerMeta>,
        domain: u32,
        after: Duration,
        until: Duration,
    ) -> (Totals, Option<Duration>, Option<Duration>) {
        let Some(doms) = self.doms_mut(meta) else { return (Totals::default(), None, None) };
        let slots = doms.entry(domain);
        let prev = slots.row_end.replace(until);
        let q = &mut slots.q;
        while q.front().is_some_and(|(end, _)| *end <= after) {
            q.pop_front();
        }
        let t = Self::sum(Some(q), after, until);
        let mut first = None;
        while let Some((end, x)) = q.front().filter(|(end, _)| *end <= until) {
            if first.is_none() && *x != Totals::default() {
                first = Some(*end);
            }
            q.pop_front();
        }
        (t, first, prev)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_found_by_the_followed_meta_and_by_a_copy_of_it() {
        let ms = Duration::from_millis;
        let (meta, copy) = (ContainerMeta::named("a"), ContainerMeta::named("a"));
        let mut j = Join::default();
        j.follow(&meta);
        j.follow(&copy); // the same container again: still one
        let sample = |m: &Arc<ContainerMeta>, end| PmuSample {
            container: m.clone(),
            domain: 0,
            end,
            values: [1, 2, 0, 0],
            cpu_ns: 1_000_000,
        };
        // A source that made its own meta for the container: its samples still join.
        j.push(&mut vec![sample(&meta, ms(1)), sample(&copy, ms(2)), sample(&ContainerMeta::named("b"), ms(2))]);
        assert_eq!(j.cpu_usage_usec("a"), Some(2_000));
        assert_eq!(j.cpu_usage_usec("b"), None, "not followed: dropped");
        let (t, first, prev) = j.take(&copy, 0, ms(0), ms(2));
        assert_eq!((t.cpu_ns, t.values[1], first, prev), (2_000_000, 4, Some(ms(1)), None));
        let (t, _, prev) = j.take(&meta, 0, ms(2), ms(3));
        assert_eq!((t.cpu_ns, prev), (0, Some(ms(2))));
        j.forget("a");
        assert_eq!(j.take(&meta, 0, ms(3), ms(4)).2, None, "forgotten");
    }

    #[test]
    fn rows_overlapping_a_gap_are_in_it_and_gaps_merge() {
        let ms = Duration::from_millis;
        let mut j = Join::default();
        j.gap(ms(100), ms(200));
        j.gap(ms(150), ms(300)); // overlapping: one gap
        j.gap(ms(500), ms(501));
        assert_eq!(j.gaps.len(), 2);
        assert!(!j.in_gap(ms(99), ms(100)), "an interval ending where the gap starts");
        assert!(j.in_gap(ms(99), ms(101)));
        assert!(j.in_gap(ms(299), ms(300)));
        assert!(!j.in_gap(ms(300), ms(301)));
        assert!(j.in_gap(ms(400), ms(600)), "an interval spanning a gap");
        // A row spanning many intervals still sees a gap a shorter row before it passed.
        assert!(!j.in_gap(ms(20_000), ms(20_001)));
        assert!(j.in_gap(ms(50), ms(20_002)));
        // Gaps long past (beyond the longest interval) are let go.
        assert!(!j.in_gap(ms(3_700_000), ms(3_700_001)));
        assert!(j.gaps.is_empty());
    }
}
