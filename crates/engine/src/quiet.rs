//! Quiet intervals (docs/data.md, docs/cost.md): where the PMU source counts CPU time, an
//! interval reads, and makes rows for, only the containers that can have changed: those that
//! ran in it, the new, the stopping, and a keyframe share. A container that did not run has
//! counters that did not move; only its occupancy can change, by eviction, and that is read
//! at its keyframe: each followed container once per [`KEYFRAME`], the containers spread
//! evenly over the period's intervals (a wheel of buckets). The work per interval follows
//! the containers that ran plus followed ÷ (intervals per keyframe), not the number followed.

use crate::row::{ById, ContainerMeta};
use crate::{FastMap, IntMap};
use std::sync::Arc;
use std::time::Duration;

/// How often every followed container is read, run or not: the sparse rows' keyframe period
/// (docs/data.md), and the longest an idle container's occupancy goes unread.
pub const KEYFRAME: Duration = Duration::from_secs(1);

/// The visit set's smallest kept capacity: below it a clear costs less than reallocating.
const SEEN_KEPT: usize = 32;

pub struct Quiet {
    interval: Duration,
    /// One bucket per interval of a keyframe period; each container sits in one, as its
    /// shared meta: what reads it next (the backend, the rows) finds it by that, not by its id.
    wheel: Vec<Vec<ById>>,
    /// container id → its bucket.
    bucket: FastMap<ById, usize>,
    /// Where the next container goes: round robin, so the buckets stay even.
    next: usize,
    /// The grid index of the last interval whose bucket was read.
    last: Option<u64>,
    /// Containers whose CPU time is not counted (their perf events could not be opened): it
    /// is not known whether they ran, so they are read at every interval.
    always: Vec<ById>,
    /// This interval's containers to read, each once.
    visit: Vec<ById>,
    /// The same, by their meta's address: a multiply and a probe, where hashing the id read
    /// it (an idle container's keyframe is a cache miss in every structure it touches).
    seen: IntMap<usize, ()>,
}

impl Quiet {
    pub fn new(interval: Duration) -> Quiet {
        let per = (KEYFRAME.as_nanos() / interval.as_nanos().max(1)).clamp(1, 1 << 20) as usize;
        Quiet {
            interval,
            wheel: vec![Vec::new(); per],
            bucket: FastMap::default(),
            next: 0,
            last: None,
            always: Vec::new(),
            visit: Vec::new(),
            seen: IntMap::default(),
        }
    }

    /// Follow a container; `counted`: whether its CPU time is counted.
    pub fn follow(&mut self, meta: &Arc<ContainerMeta>, counted: bool) {
        if self.bucket.contains_key(meta.id.as_str()) {
            return;
        }
        let k = ById(meta.clone());
        let b = self.next % self.wheel.len();
        self.next = (b + 1) % self.wheel.len();
        self.wheel[b].push(k.clone());
        if !counted {
            self.always.push(k.clone());
        }
        self.bucket.insert(k, b);
    }

    /// Whether its CPU time is counted (it was followed as such).
    pub fn counted(&self, id: &str) -> bool {
        self.bucket.contains_key(id) && !self.always.iter().any(|x| x.id() == id)
    }

    pub fn forget(&mut self, id: &str) {
        let Some(b) = self.bucket.remove(id) else { return };
        if let Some(i) = self.wheel[b].iter().position(|x| x.id() == id) {
            self.wheel[b].swap_remove(i);
        }
        if let Some(i) = self.always.iter().position(|x| x.id() == id) {
            self.always.swap_remove(i);
        }
    }

    /// Start the interval that ends at `at`: its keyframe share (the buckets of every grid
    /// index since the last one read, so an interval skipped by a late wake-up does not skip
    /// its containers' keyframes) and the uncounted containers.
    pub fn begin(&mut self, at: Duration) {
        self.visit.clear();
        // Clearing a hash set costs its capacity, not its length (every control byte is
        // reset): after a burst (every container new at the start) it would stay that big
        // and cost 2,500 instructions an interval at 1,000 containers. Kept near its use.
        if self.seen.capacity() > 8 * self.seen.len().max(SEEN_KEPT) {
            self.seen = IntMap::with_capacity_and_hasher(self.seen.len().max(SEEN_KEPT), Default::default());
        } else {
            self.seen.clear();
        }
        let per = self.wheel.len() as u64;
        let now = (at.as_nanos() / self.interval.as_nanos().max(1)) as u64;
        let from = match self.last {
            Some(l) if l < now => (l + 1).max(now.saturating_sub(per - 1)),
            Some(_) => now + 1,
            None => now,
        };
        for k in from..=now {
            for id in &self.wheel[(k % per) as usize] {
                if self.seen.insert(id.addr(), ()).is_none() {
                    self.visit.push(id.clone());
                }
            }
        }
        self.last = Some(self.last.map_or(now, |l| l.max(now)));
        for id in &self.always {
            if self.seen.insert(id.addr(), ()).is_none() {
                self.visit.push(id.clone());
            }
        }
    }

    /// Read container `id` in this interval too (it ran, is new or stops); ids not followed
    /// are passed over.
    pub fn add_id(&mut self, id: &str) {
        if let Some((k, _)) = self.bucket.get_key_value(id) {
            if self.seen.insert(k.addr(), ()).is_none() {
                self.visit.push(k.clone());
            }
        }
    }

    /// The containers to read in this interval.
    pub fn visit(&self) -> &[ById] {
        &self.visit
    }

    pub fn contains(&self, id: &str) -> bool {
        self.bucket.get_key_value(id).is_some_and(|(k, _)| self.seen.contains_key(&k.addr()))
    }

    pub fn followed(&self) -> usize {
        self.bucket.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn visits(q: &Quiet) -> Vec<String> {
        let mut v: Vec<String> = q.visit().iter().map(|s| s.id().to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn each_container_is_read_once_per_keyframe_and_the_share_is_even() {
        let mut q = Quiet::new(MS * 100); // 10 buckets
        for i in 0..25 {
            q.follow(&ContainerMeta::named(&format!("c{i:02}")), true);
        }
        let mut count: FastMap<String, u32> = FastMap::default();
        let mut most = 0;
        for k in 1..=30u32 {
            q.begin(MS * 100 * k);
            most = most.max(q.visit().len());
            for id in q.visit() {
                *count.entry(id.id().to_string()).or_default() += 1;
            }
        }
        // 30 intervals are 3 keyframe periods: each container read 3 times, 2 or 3 per interval.
        assert!(count.values().all(|&n| n == 3), "{count:?}");
        assert_eq!(count.len(), 25);
        assert_eq!(most, 3);
    }

    #[test]
    fn a_late_wake_up_reads_the_buckets_it_skipped_and_never_one_twice() {
        let mut q = Quiet::new(MS);
        for i in 0..1000 {
            q.follow(&ContainerMeta::named(&format!("c{i:04}")), true);
        }
        q.begin(MS);
        assert_eq!(q.visit().len(), 1);
        // 10 intervals skipped: their buckets come with the next.
        q.begin(MS * 12);
        assert_eq!(q.visit().len(), 11);
        // Asked again for the same time (a second sample at one instant): nothing new.
        q.begin(MS * 12);
        assert!(q.visit().is_empty());
        // More than a keyframe skipped: every container once.
        q.begin(MS * 5000);
        assert_eq!(q.visit().len(), 1000);
    }

    #[test]
    fn the_uncounted_are_always_read_and_added_ones_once() {
        let mut q = Quiet::new(MS);
        for i in 0..100 {
            q.follow(&ContainerMeta::named(&format!("c{i:03}")), i != 7);
        }
        q.begin(MS * 3); // bucket 3: c003
        q.add_id("c050");
        q.add_id("c050");
        q.add_id("c003");
        q.add_id("unknown");
        assert_eq!(visits(&q), ["c003", "c007", "c050"]);
        assert!(q.contains("c050") && !q.contains("c051"));
        q.forget("c007");
        q.forget("c003");
        q.begin(MS * 4);
        assert_eq!(visits(&q), ["c004"]);
        assert_eq!(q.followed(), 98);
    }

    #[test]
    fn a_burst_does_not_leave_every_later_interval_clearing_its_size() {
        let mut q = Quiet::new(MS);
        let ids: Vec<Arc<ContainerMeta>> = (0..1000).map(|i| ContainerMeta::named(&format!("c{i:04}"))).collect();
        for id in &ids {
            q.follow(id, true);
        }
        q.begin(MS);
        for id in &ids {
            q.add_id(&id.id); // the first interval: every container is new
        }
        assert_eq!(q.visit().len(), 1000);
        q.begin(MS * 2);
        q.begin(MS * 3);
        assert_eq!(visits(&q), ["c0003"]);
        assert!(q.seen.capacity() <= 8 * SEEN_KEPT, "capacity {}", q.seen.capacity());
        // A steady load keeps its capacity (no reallocation every interval).
        for k in 4..40u32 {
            q.begin(MS * k);
            for id in &ids[..200] {
                q.add_id(&id.id);
            }
        }
        let cap = q.seen.capacity();
        q.begin(MS * 40);
        assert_eq!(q.seen.capacity(), cap);
    }
}
