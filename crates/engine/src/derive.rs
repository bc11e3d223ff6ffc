//! The one place rows are made from raw cumulative samples: MBM bytes per interval (wrap of
//! the backend's counter width, a reset, a re-created group or re-assigned RMID all handled by
//! [`cumulative_delta`]), and each row's own interval from its sample's timestamp.

use crate::backend::RawSample;
use crate::row::{ById, ContainerMeta, Pmu, Row};
use crate::FastMap;
use cachescope_hw::mbm_cf::MbmCorrection;
use cachescope_hw::msr::{cumulative_delta, Cumulative};
use std::sync::Arc;
use std::time::Duration;

#[derive(Debug, Clone, Copy, Default)]
struct Prev {
    at: Duration,
    total: Option<Cumulative>,
    local: Option<Cumulative>,
    /// What the MBM correction left below one count so far (2^-20 counts): carried, so that
    /// many small intervals add up to the corrected whole, as the kernel's cumulative count.
    rem_total: u32,
    rem_local: u32,
}

pub struct Derive {
    width: u32,
    unit: u64,
    correction: Option<MbmCorrection>,
    /// CLOCK_REALTIME ns at the run's t = 0.
    start_real_ns: i64,
    /// Per container (keyed by its metadata's address, which the chain keeps alive: a
    /// multiply instead of hashing a 64-hex id on the per-row path), its few domains'
    /// previous samples.
    /// Keyed by the meta's address: no one chooses it, the integer hasher spreads it enough.
    prev: cachescope_platform::hash::IntMap<usize, Chain>,
    /// container id → the addresses its chains are under (for forget).
    by_id: FastMap<ById, Vec<usize>>,
}

/// A container's previous samples: its first domain's in place (most containers' only one:
/// an idle container's keyframe row finds it in the map's own slot, without the extra cache
/// miss of a Vec's), any others after.
struct Chain {
    _meta: Arc<ContainerMeta>,
    first: (u32, Prev),
    more: Vec<(u32, Prev)>,
}

impl Chain {
    fn get(&self, domain: u32) -> Option<Prev> {
        if self.first.0 == domain {
            return Some(self.first.1);
        }
        self.more.iter().find(|(d, _)| *d == domain).map(|(_, p)| *p)
    }

    fn set(&mut self, domain: u32, p: Prev) {
        if self.first.0 == domain {
            self.first.1 = p;
        } else if let Some(e) = self.more.iter_mut().find(|(d, _)| *d == domain) {
            e.1 = p;
        } else {
            self.more.push((domain, p));
        }
    }
}

impl Derive {
    pub fn new(width: u32, unit: u64, start_real_ns: i64) -> Derive {
        Derive {
            width,
            unit: unit.max(1),
            correction: None,
            start_real_ns,
            prev: Default::default(),
            by_id: FastMap::default(),
        }
    }

    /// MBM counts corrected as Linux does on the parts that need it (see [`MbmCorrection`]).
    pub fn with_correction(mut self, correction: Option<MbmCorrection>) -> Derive {
        self.correction = correction;
        self
    }

    /// The row of `s`. `since`: where its interval starts when the container has no earlier
    /// sample in that domain (the previous step of the run).
    pub fn row(&mut self, s: RawSample, since: Duration) -> Row {
        let key = crate::row::addr(&s.container);
        let mut fresh = false;
        let chain = self.prev.entry(key).or_insert_with(|| {
            self.by_id.entry(ById(s.container.clone())).or_default().push(key);
            fresh = true;
            // The first domain in place; `more` allocates only for a second.
            Chain { _meta: s.container.clone(), first: (s.domain, Prev::default()), more: Vec::new() }
        });
        let prev = if fresh { None } else { chain.get(s.domain) };
        let (width, unit) = (self.width, self.unit);
        let fix = self.correction.zip(s.rmid);
        let delta = |p: Option<Cumulative>, c: Option<Cumulative>, rem: &mut u32| -> Option<u64> {
            let Some(d) = c.and_then(|c| cumulative_delta(p, c, width)) else {
                *rem = 0;
                return None;
            };
            Some(fix.map_or(d, |(f, rmid)| f.apply_carrying(rmid, d, rem)).saturating_mul(unit))
        };
        let (mut rem_total, mut rem_local) = prev.map_or((0, 0), |p| (p.rem_total, p.rem_local));
        let mbm_total_bytes = delta(prev.and_then(|p| p.total), s.mbm_total, &mut rem_total);
        let mbm_local_bytes = delta(prev.and_then(|p| p.local), s.mbm_local, &mut rem_local);
        let cur = Prev { at: s.at, total: s.mbm_total, local: s.mbm_local, rem_total, rem_local };
        chain.set(s.domain, cur);
        let start = prev.map_or(since, |p| p.at);
        Row {
            time_ns: self.start_real_ns.saturating_add(s.at.as_nanos() as i64),
            interval_ns: s.at.saturating_sub(start).as_nanos() as i64,
            container: s.container,
            domain: s.domain,
            rmid: s.rmid,
            llc_occupancy_bytes: s.occupancy_bytes,
            mbm_total_bytes,
            mbm_local_bytes,
            pmu: Pmu::default(),
            cpu_ns: None,
            status: s.status,
            mbm_counter: s.mbm_counter,
        }
    }

    pub fn start_real_ns(&self) -> i64 {
        self.start_real_ns
    }

    /// A container stopped (or changed RMID): its next sample starts a new chain.
    pub fn forget(&mut self, id: &str) {
        for key in self.by_id.remove(id).unwrap_or_default() {
            self.prev.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::Status;

    thread_local! {
        // One container's metadata, as a backend keeps it from attach to detach.
        static A: Arc<ContainerMeta> = ContainerMeta::named("a");
    }

    fn sample(at_ms: u64, generation: u64, total: u64) -> RawSample {
        RawSample {
            container: A.with(Arc::clone),
            domain: 0,
            at: Duration::from_millis(at_ms),
            rmid: Some(1),
            status: Status::Ok,
            mbm_counter: None,
            occupancy_bytes: Some(0),
            mbm_total: Some(Cumulative { generation, value: total }),
            mbm_local: None,
        }
    }

    #[test]
    fn deltas_wraps_regenerations_and_own_intervals() {
        let mut d = Derive::new(24, 1000, 5_000);
        let r = d.row(sample(2, 0, 10), Duration::from_millis(1));
        assert_eq!((r.mbm_total_bytes, r.interval_ns, r.time_ns), (None, 1_000_000, 2_005_000), "no baseline");
        let r = d.row(sample(5, 0, 15), Duration::from_millis(4));
        assert_eq!((r.mbm_total_bytes, r.interval_ns), (Some(5000), 3_000_000), "interval from its own last sample");
        let r = d.row(sample(6, 0, 2), Duration::ZERO);
        assert_eq!(r.mbm_total_bytes, Some(((1 << 24) - 15 + 2) * 1000), "wrap at the width");
        let r = d.row(sample(7, 1, 100), Duration::ZERO);
        assert_eq!(r.mbm_total_bytes, None, "a new generation has no baseline");
        assert_eq!(r.mbm_local_bytes, None, "absent stays absent");
        d.forget("a");
        let r = d.row(sample(9, 1, 200), Duration::from_millis(8));
        assert_eq!((r.mbm_total_bytes, r.interval_ns), (None, 1_000_000));
        // A container attached again under the same id (new metadata) starts a new chain.
        let again = RawSample { container: ContainerMeta::named("a"), ..sample(10, 1, 300) };
        assert_eq!(d.row(again, Duration::from_millis(9)).mbm_total_bytes, None);
        d.forget("a");
        assert!(d.prev.is_empty() && d.by_id.is_empty(), "forget drops every chain of the id");
    }

    #[test]
    fn the_correction_factor_applies_above_its_rmid() {
        // 24 RMIDs on a Skylake-X: RMIDs above 15 count 0.969650 of what they read.
        let mut d = Derive::new(24, 1000, 0).with_correction(MbmCorrection::for_rmids(23));
        let at = |ms, rmid, total| RawSample { rmid: Some(rmid), ..sample(ms, 0, total) };
        d.row(at(1, 15, 0), Duration::ZERO);
        assert_eq!(d.row(at(2, 15, 1_000_000), Duration::ZERO).mbm_total_bytes, Some(1_000_000_000));
        d.forget("a");
        d.row(at(3, 16, 0), Duration::ZERO);
        assert_eq!(d.row(at(4, 16, 1_000_000), Duration::ZERO).mbm_total_bytes, Some(969_650_000));
        // At 1 ms an interval holds a few counts: what each leaves below one count is carried,
        // so 1,000 intervals of 3 counts add up to the corrected 3,000 (2,908), not 1,000 x 2.
        d.forget("a");
        d.row(at(10, 16, 0), Duration::ZERO);
        let sum: u64 = (1..=1000).map(|k| d.row(at(10 + k, 16, 3 * k), Duration::ZERO).mbm_total_bytes.unwrap()).sum();
        assert_eq!(sum, 2_908 * 1000);
    }
}
