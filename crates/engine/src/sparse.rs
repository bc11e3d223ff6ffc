//! Sparse rows (docs/data.md): at 1 ms a row for every container and domain in every
//! interval is mostly repetition. A (container, domain) row is kept when something changed —
//! occupancy by at least one upscale unit since the last row *kept*, any counter moved, the
//! status or RMID changed, a value appeared or vanished — plus a keyframe row for every
//! (container, domain) once per second. Readers carry occupancy forward; a counter absent
//! from an interval moved by 0.

use crate::row::Row;
use std::collections::HashMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kept {
    occupancy: Option<u64>,
    rmid: Option<u32>,
    status: crate::Status,
    /// Which counters were present (a counter going None ↔ Some is a change).
    present: u8,
    /// The keyframe period of the row kept: a (container, domain) gets one row per period.
    period: i64,
}

pub struct Sparse {
    upscale: u64,
    keyframe_ns: i64,
    /// container id → domain → the last row kept (nested so the hot path looks up by &str
    /// and allocates only for a new container).
    last: HashMap<String, HashMap<u32, Kept>>,
    pub kept: u64,
    pub skipped: u64,
}

fn present(counters: &[Option<u64>; crate::row::COUNTERS]) -> u8 {
    counters.iter().enumerate().fold(0, |acc, (i, v)| acc | (u8::from(v.is_some()) << i))
}

fn moved(counters: &[Option<u64>; crate::row::COUNTERS]) -> bool {
    counters.iter().any(|v| v.is_some_and(|x| x > 0))
}

impl Sparse {
    /// `upscale`: bytes per occupancy unit (the smallest change the hardware can show).
    pub fn new(upscale: u64, keyframe_ns: i64) -> Sparse {
        Sparse { upscale: upscale.max(1), keyframe_ns: keyframe_ns.max(1), last: HashMap::new(), kept: 0, skipped: 0 }
    }

    /// Filter rows (of one or more intervals, in time order), keeping those worth writing.
    pub fn filter(&mut self, rows: Vec<Row>) -> Vec<Row> {
        let mut out = Vec::with_capacity(rows.len() / 4 + 1);
        for r in rows {
            let counters = r.counters();
            let period = r.time_ns.div_euclid(self.keyframe_ns);
            let now = Kept {
                occupancy: r.llc_occupancy_bytes,
                rmid: r.rmid,
                status: r.status,
                present: present(&counters),
                period,
            };
            let prev = self.last.get(r.container.id.as_str()).and_then(|d| d.get(&r.domain));
            let keep = moved(&counters)
                || match prev {
                    None => true,
                    Some(k) => {
                        k.period != now.period
                            || k.rmid != now.rmid
                            || k.status != now.status
                            || k.present != now.present
                            || match (k.occupancy, now.occupancy) {
                                (Some(a), Some(b)) => a.abs_diff(b) >= self.upscale,
                                (a, b) => a.is_some() != b.is_some(),
                            }
                    }
                };
            if keep {
                match self.last.get_mut(r.container.id.as_str()) {
                    Some(d) => {
                        d.insert(r.domain, now);
                    }
                    None => {
                        self.last.insert(r.container.id.clone(), HashMap::from([(r.domain, now)]));
                    }
                }
                self.kept += 1;
                out.push(r);
            } else {
                self.skipped += 1;
            }
        }
        out
    }

    /// A container stopped: forget it, so a later one with the same id starts fresh.
    pub fn forget(&mut self, id: &str) {
        self.last.remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::row::{ContainerMeta, Pmu, Status};

    fn row(t_ms: i64, occ: Option<u64>, mbm: Option<u64>, status: Status) -> Row {
        Row {
            time_ns: t_ms * 1_000_000,
            interval_ns: 1_000_000,
            container: ContainerMeta::named("a"),
            domain: 0,
            rmid: Some(1),
            llc_occupancy_bytes: occ,
            mbm_total_bytes: mbm,
            mbm_local_bytes: mbm,
            pmu: Pmu::default(),
            cpu_ns: None,
            status,
        }
    }

    #[test]
    fn keeps_changes_and_keyframes_only() {
        let mut s = Sparse::new(100, 1_000_000_000);
        // First row: kept (keyframe period starts).
        assert_eq!(s.filter(vec![row(1, Some(1000), Some(0), Status::Ok)]).len(), 1);
        // Less than one unit of drift: skipped, twice, although the sum passes a unit...
        assert!(s.filter(vec![row(2, Some(1050), Some(0), Status::Ok)]).is_empty());
        assert!(s.filter(vec![row(3, Some(1099), Some(0), Status::Ok)]).is_empty());
        // ...the drift is measured from the last kept row, so it is not lost.
        assert_eq!(s.filter(vec![row(4, Some(1100), Some(0), Status::Ok)]).len(), 1);
        // A counter moved.
        assert_eq!(s.filter(vec![row(5, Some(1100), Some(64), Status::Ok)]).len(), 1);
        assert!(s.filter(vec![row(6, Some(1100), Some(0), Status::Ok)]).is_empty());
        // Status change, and a value vanishing.
        assert_eq!(s.filter(vec![row(7, None, Some(0), Status::Unavailable)]).len(), 1);
        assert!(s.filter(vec![row(8, None, Some(0), Status::Unavailable)]).is_empty());
        assert_eq!(s.filter(vec![row(9, None, None, Status::Unavailable)]).len(), 1);
        // The next second: a keyframe although nothing changed.
        assert!(s.filter(vec![row(999, None, None, Status::Unavailable)]).is_empty());
        assert_eq!(s.filter(vec![row(1000, None, None, Status::Unavailable)]).len(), 1);
        assert!(s.filter(vec![row(1001, None, None, Status::Unavailable)]).is_empty());
        assert_eq!((s.kept, s.skipped), (6, 6));
    }

    #[test]
    fn forgotten_container_starts_fresh() {
        let mut s = Sparse::new(100, 1_000_000_000);
        s.filter(vec![row(1, Some(1000), Some(0), Status::Ok)]);
        assert!(s.filter(vec![row(2, Some(1000), Some(0), Status::Ok)]).is_empty());
        s.forget("a");
        assert_eq!(s.filter(vec![row(3, Some(1000), Some(0), Status::Ok)]).len(), 1);
    }
}
