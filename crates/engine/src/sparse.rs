//! Sparse rows (docs/data.md): at 1 ms a row for every container and domain in every
//! interval is mostly repetition. A (container, domain) row is kept when something changed —
//! occupancy by at least one upscale unit since the last row *kept*, any counter moved, the
//! status or RMID changed, a value appeared or vanished — plus a keyframe row for every
//! (container, domain) once per second. Readers carry occupancy forward; a counter absent
//! from an interval moved by 0. When a container stops, [`Sparse::stop`] gives the row that
//! ends each of its (container, domain) series (status `stopped`), where carrying forward ends.

use crate::row::{ById, Pmu, Row};
use crate::FastMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kept {
    occupancy: Option<u64>,
    rmid: Option<u32>,
    status: crate::row::Status,
    /// Which counters were present (a counter going None ↔ Some is a change).
    present: u8,
    /// The keyframe period of the row kept: a (container, domain) gets one row per period.
    period: i64,
}

/// One container's series.
struct Entry {
    /// The end of the last interval seen (kept or not): where its series end.
    seen_ns: i64,
    /// Its few domains (one on most hosts): a Vec, where a map took 200 bytes for one.
    domains: Vec<(u32, Kept)>,
}

impl Entry {
    fn get(&self, domain: u32) -> Option<&Kept> {
        self.domains.iter().find(|(d, _)| *d == domain).map(|(_, k)| k)
    }

    fn set(&mut self, domain: u32, k: Kept) {
        match self.domains.iter_mut().find(|(d, _)| *d == domain) {
            Some((_, was)) => *was = k,
            None => self.domains.push((domain, k)),
        }
    }
}

pub struct Sparse {
    upscale: u64,
    keyframe_ns: i64,
    /// container → its series (looked up by id; the key is the container's shared meta).
    last: FastMap<ById, Entry>,
    pub kept: u64,
    pub skipped: u64,
}

fn present(counters: &[Option<u64>; crate::row::COUNTERS]) -> u8 {
    counters.iter().enumerate().fold(0, |acc, (i, v)| acc | (u8::from(v.is_some()) << i))
}

/// Whether lost row `r` continues `held` (same series state, same keyframe period).
fn mergeable(held: &Row, r: &Row, keyframe_ns: i64) -> bool {
    held.pmu.lost
        && held.container.id == r.container.id
        && held.domain == r.domain
        && held.status == r.status
        && held.rmid == r.rmid
        && present(&held.counters()) == present(&r.counters())
        && held.time_ns.div_euclid(keyframe_ns) == r.time_ns.div_euclid(keyframe_ns)
}

/// Extend `held` over `r`'s interval: one row whose interval spans both, counters summed.
fn merge(held: &mut Row, r: &Row) {
    held.interval_ns += r.interval_ns.max(0);
    held.time_ns = r.time_ns;
    held.llc_occupancy_bytes = r.llc_occupancy_bytes;
    let add = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| a.saturating_add(b));
    held.mbm_total_bytes = add(held.mbm_total_bytes, r.mbm_total_bytes);
    held.mbm_local_bytes = add(held.mbm_local_bytes, r.mbm_local_bytes);
}

fn moved(counters: &[Option<u64>; crate::row::COUNTERS]) -> bool {
    counters.iter().any(|v| v.is_some_and(|x| x > 0))
}

impl Sparse {
    /// `upscale`: bytes per occupancy unit (the smallest change the hardware can show).
    pub fn new(upscale: u64, keyframe_ns: i64) -> Sparse {
        Sparse {
            upscale: upscale.max(1),
            keyframe_ns: keyframe_ns.max(1),
            last: FastMap::default(),
            kept: 0,
            skipped: 0,
        }
    }

    /// Filter rows (of one or more intervals, in time order), keeping those worth writing.
    /// Consecutive rows of one (container, domain) whose PMU counts were lost become one row
    /// spanning them (in one call and one keyframe period): when the collector falls behind,
    /// a row per container per interval of unknown counts would make it fall further behind.
    pub fn filter(&mut self, rows: Vec<Row>) -> Vec<Row> {
        let mut out = Vec::with_capacity(rows.len() / 4 + 1);
        // (container, domain) → the index in `out` of its lost row still open for merging.
        // Keyed by a hash of the id (no allocation per row); a hit is checked by id.
        let mut open: FastMap<(u64, u32), usize> = FastMap::default();
        let key = |r: &Row| {
            use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
            (BuildHasherDefault::<DefaultHasher>::default().hash_one(r.container.id.as_str()), r.domain)
        };
        let mut merged = false;
        for r in rows {
            let counters = r.counters();
            if r.pmu.lost {
                let key = key(&r);
                if let Some(&i) = open.get(&key) {
                    if let Some(into) = out.get_mut(i).filter(|h: &&mut Row| mergeable(h, &r, self.keyframe_ns)) {
                        merge(into, &r);
                        self.skipped += 1;
                        merged = true;
                        if let Some(k) = self.last.get_mut(r.container.id.as_str()) {
                            k.seen_ns = k.seen_ns.max(r.time_ns);
                        }
                        continue;
                    }
                }
                open.insert(key, out.len());
            } else if !open.is_empty() {
                open.remove(&key(&r));
            }
            let period = r.time_ns.div_euclid(self.keyframe_ns);
            let now = Kept {
                occupancy: r.llc_occupancy_bytes,
                rmid: r.rmid,
                status: r.status,
                present: present(&counters),
                period,
            };
            // Looked up once: an idle container's keyframe row is a cache miss in each map.
            let mut entry = self.last.get_mut(r.container.id.as_str());
            let prev = match entry.as_deref_mut() {
                Some(e) => {
                    e.seen_ns = e.seen_ns.max(r.time_ns);
                    e.get(r.domain).copied()
                }
                None => None,
            };
            let keep = moved(&counters)
                || r.pmu.lost
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
                match entry {
                    Some(e) => e.set(r.domain, now),
                    None => {
                        let e = Entry { seen_ns: r.time_ns, domains: vec![(r.domain, now)] };
                        self.last.insert(ById(r.container.clone()), e);
                    }
                }
                self.kept += 1;
                out.push(r);
            } else {
                self.skipped += 1;
            }
        }
        if merged {
            // A merged row ends later than the rows after it: back in time order.
            out.sort_by_key(|r| r.time_ns);
        }
        out
    }

    /// A container stopped: the rows that end its series (one per domain it had rows in, at
    /// the end of its last interval, status `stopped`, no values), and it is forgotten, so a
    /// later one with the same id starts fresh.
    pub fn stop(&mut self, id: &str) -> Vec<Row> {
        let Some((ById(container), e)) = self.last.remove_entry(id) else { return Vec::new() };
        let mut domains: Vec<u32> = e.domains.into_iter().map(|(d, _)| d).collect();
        domains.sort_unstable();
        self.kept += domains.len() as u64;
        domains
            .into_iter()
            .map(|domain| Row {
                time_ns: e.seen_ns,
                interval_ns: 0,
                container: container.clone(),
                domain,
                rmid: None,
                llc_occupancy_bytes: None,
                mbm_total_bytes: None,
                mbm_local_bytes: None,
                pmu: Pmu::default(),
                cpu_ns: None,
                status: crate::row::Status::Stopped,
                mbm_counter: None,
            })
            .collect()
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
            mbm_counter: None,
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
    fn rows_whose_counts_were_lost_are_kept_as_one_row_spanning_them() {
        let mut s = Sparse::new(100, 1_000_000_000);
        assert_eq!(s.filter(vec![row(1, Some(1000), Some(0), Status::Ok)]).len(), 1);
        let lost = |t| Row { pmu: Pmu { lost: true, ..Pmu::default() }, ..row(t, Some(1000), None, Status::Ok) };
        // Unchanged occupancy, no counter: skipped were it not for the loss; three lost
        // intervals of 1 ms are one row of 3 ms.
        let out = s.filter(vec![lost(2), lost(3), lost(4)]);
        assert_eq!(out.iter().map(|r| (r.time_ns, r.interval_ns)).collect::<Vec<_>>(), vec![(4_000_000, 3_000_000)]);
        assert!(out[0].pmu.lost && out[0].cpu_ns.is_none());
        assert_eq!((s.kept, s.skipped), (2, 2));
        // Another series between them stays apart and the output stays in time order.
        let mut other = lost(6);
        other.container = ContainerMeta::named("other");
        let out = s.filter(vec![lost(5), other, lost(7), row(8, Some(1000), Some(5), Status::Ok), lost(9)]);
        let got: Vec<(i64, i64, &str)> =
            out.iter().map(|r| (r.time_ns / 1_000_000, r.interval_ns / 1_000_000, r.container.id.as_str())).collect();
        assert_eq!(got, vec![(6, 1, "other"), (7, 2, "a"), (8, 1, "a"), (9, 1, "a")]);
        // A keyframe boundary ends a merged row.
        let out = s.filter(vec![lost(999), lost(1000)]);
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn stopped_container_ends_its_series_and_starts_fresh() {
        let mut s = Sparse::new(100, 1_000_000_000);
        let mut other = row(1, Some(500), Some(0), Status::Ok);
        other.domain = 1;
        s.filter(vec![row(1, Some(1000), Some(0), Status::Ok), other]);
        assert!(s.filter(vec![row(2, Some(1000), Some(0), Status::Ok)]).is_empty(), "unchanged: skipped");
        let end = s.stop("a");
        let got: Vec<_> = end.iter().map(|r| (r.time_ns, r.domain, r.status, r.llc_occupancy_bytes, r.rmid)).collect();
        assert_eq!(
            got,
            vec![(2_000_000, 0, Status::Stopped, None, None), (2_000_000, 1, Status::Stopped, None, None)],
            "one row per domain, at the last interval seen (even one not kept), values null"
        );
        assert!(s.stop("a").is_empty(), "stopped once");
        assert_eq!(s.filter(vec![row(3, Some(1000), Some(0), Status::Ok)]).len(), 1, "a new container of that id");
    }
}
