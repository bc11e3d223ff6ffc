//! The noisy-neighbour finder: episodes in which one container's LLC occupancy or memory
//! bandwidth rose while others in the same L3 domain lost occupancy or IPC.
//!
//! On each series, swings are found with hysteresis (a move counts once it exceeds `h`
//! against the last extreme), so noise below `h` never makes an episode. A rise of the
//! aggressor (occupancy by at least 10 % of the L3; or bandwidth by at least 1 GB/s and to at
//! least twice its level) is an episode when, over the same buckets, some other container
//! that lived through them lost at least 2 % of the L3 and 10 % of what it held, or (where
//! IPC is measured) at least 15 % of its IPC. Containers that merely start side by side in
//! a cache big enough for both take nothing from each other, and make no episode.

use crate::timeline::{Line, Timeline};

// The episode's types are the live finder's too (shared with /metrics and the live view):
// they live in `cachescope-sinks`, which both sides depend on.
pub use cachescope_sinks::noisy::{Episode, Kind, Victim};

/// What counts: `l3_bytes` (per domain; None: 32 MiB assumed).
#[derive(Debug, Clone, Copy)]
pub struct Thresholds {
    pub l3_bytes: f64,
}

impl Thresholds {
    fn rise(&self) -> f64 {
        0.10 * self.l3_bytes
    }
    fn loss(&self) -> f64 {
        0.02 * self.l3_bytes
    }
    fn hysteresis(&self) -> f64 {
        0.02 * self.l3_bytes
    }
}

const LOSS_SHARE: f64 = 0.10;
const IPC_DROP: f64 = 0.15;
const BW_RISE: f64 = 1e9;

/// Rising legs (start bucket, peak bucket) of `v`: a move counts only beyond `h` against
/// the last extreme; a gap (not running, not measured) ends a leg. A leg starts where it
/// leaves its trough's level (the last bucket less than `h` above it): a container that sat
/// nearly flat for seconds before it rose rose when it left the flat, not when the flat began.
fn rises(v: &[Option<f64>], h: f64) -> Vec<(usize, usize)> {
    type Leg = ((usize, f64), (usize, f64)); // (trough, peak)
    let mut out = Vec::new();
    let close = |c: Option<Leg>, out: &mut Vec<(usize, usize)>| {
        if let Some((l, p)) = c {
            if p.1 - l.1 >= h {
                let flat = (l.0..p.0).take_while(|&k| v[k].is_some_and(|x| x - l.1 < h)).last().unwrap_or(l.0);
                out.push((flat, p.0));
            }
        }
    };
    let mut cur: Option<Leg> = None;
    for (k, x) in v.iter().enumerate() {
        let Some(x) = *x else {
            close(cur.take(), &mut out);
            continue;
        };
        cur = Some(match cur {
            None => ((k, x), (k, x)),
            Some((l, p)) if x > p.1 => (l, (k, x)),
            Some((l, p)) if p.1 - x >= h => {
                close(Some((l, p)), &mut out);
                ((k, x), (k, x))
            }
            // Below the trough, or level with it before any rise: the trough moves on (a rise
            // starts where the flat before it ends).
            Some((l, p)) if x < l.1 || (p.0 == l.0 && x <= l.1) => ((k, x), (k, x)),
            Some(c) => c,
        });
    }
    close(cur, &mut out);
    out
}

fn mean(v: &[Option<f64>]) -> Option<f64> {
    let xs: Vec<f64> = v.iter().flatten().copied().collect();
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

fn at(v: &[Option<f64>], k: usize) -> Option<f64> {
    v.get(k).copied().flatten()
}

/// Buckets of one episode: the aggressor's occupancy compared between the ends of `b` and `e`,
/// its neighbours' between the ends of `vb` and `e`; IPC and bandwidth over `during`, against
/// as many buckets before it.
struct Span {
    b: usize,
    e: usize,
    /// `b`, or the bucket before it where the aggressor's first row came at `b + 1`: it may have
    /// run for most of `b` before it was tagged (a backend that notices containers at a poll),
    /// and what its neighbours lost then is part of the episode.
    vb: usize,
    during: std::ops::RangeInclusive<usize>,
}

impl Span {
    fn before(&self) -> std::ops::Range<usize> {
        let len = self.during.end() + 1 - self.during.start();
        self.during.start().saturating_sub(len)..*self.during.start()
    }
}

/// Who lost over `sp` beside `agg`.
fn victims(lines: &[Line], agg: &Line, sp: &Span, t: &Thresholds) -> Vec<Victim> {
    lines
        .iter()
        .filter(|l| l.id != agg.id)
        .filter_map(|l| {
            let o0 = at(&l.occupancy, sp.vb).or_else(|| at(&l.occupancy, sp.b));
            // What it held at the aggressor's peak, or a bucket later: groups are read one
            // after another, so a neighbour read before the aggressor in the peak's last
            // interval still shows lines the aggressor's reading already counts as its own.
            let o1 = (sp.e..=sp.e + 1).filter_map(|k| at(&l.occupancy, k)).reduce(f64::min);
            let lost = o0.zip(o1).map(|(a, b)| a - b);
            let by_occ = o0.zip(lost).is_some_and(|(a, d)| d >= t.loss() && d >= LOSS_SHARE * a);
            let ipc_before = mean(&l.ipc[sp.before()]);
            let ipc_during = mean(&l.ipc[sp.during.clone()]);
            let by_ipc = ipc_before.zip(ipc_during).is_some_and(|(b, d)| b > 0.0 && d <= (1.0 - IPC_DROP) * b);
            (by_occ || by_ipc).then(|| Victim {
                container_id: l.id.clone(),
                container_name: l.name.clone(),
                occupancy_before_bytes: o0,
                occupancy_lost_bytes: lost,
                ipc_before,
                ipc_during,
            })
        })
        .collect()
}

/// Every episode of `tl`, in time order; `l3` gives each domain's L3 size where known.
///
/// A victim that refills what it held before the episodes that named it is recovering, not an
/// aggressor: two containers taking turns on a core would otherwise blame each other at every
/// turn. Its refill makes no episode unless it rises a full `rise` above that level.
pub fn find(tl: &Timeline, l3: impl Fn(i32) -> Option<f64>) -> Vec<Episode> {
    let mut out = Vec::new();
    for d in &tl.domains {
        let t = Thresholds { l3_bytes: l3(d.domain).unwrap_or(32.0 * 1048576.0) };
        let mut candidates: Vec<(&Line, Kind, Span)> = Vec::new();
        for agg in &d.lines {
            let mut spans: Vec<(Kind, Span)> = Vec::new();
            let occ = &agg.occupancy;
            // A container that starts rises from nothing, even when it fills the cache within
            // its first bucket: the bucket before its first value counts as 0.
            let mut from_zero = occ.clone();
            for k in 1..from_zero.len() {
                if from_zero[k].is_some() && from_zero[k - 1].is_none() {
                    from_zero[k - 1] = Some(0.0);
                }
            }
            for (b, e) in rises(&from_zero, t.hysteresis()) {
                if at(&from_zero, e).unwrap_or(0.0) - at(&from_zero, b).unwrap_or(0.0) < t.rise() {
                    continue;
                }
                let started = occ[b].is_none() && b > 0;
                let vb = if started { b - 1 } else { b };
                spans.push((Kind::Occupancy, Span { b, e, vb, during: (b + 1).min(e)..=e }));
            }
            let bw = &agg.bandwidth;
            let peak_bw = bw.iter().flatten().fold(0.0f64, |a, b| a.max(*b));
            for (s, e) in rises(bw, (0.2 * peak_bw).max(BW_RISE / 2.0)) {
                let (b0, b1) = (at(bw, s).unwrap_or(0.0), at(bw, e).unwrap_or(0.0));
                let covered = spans.iter().any(|(_, o)| s <= o.e && o.b <= e);
                if b1 - b0 < BW_RISE || b1 < 2.0 * b0 || covered {
                    continue;
                }
                // The episode lasts while the aggressor stays above halfway.
                let mid = (b0 + b1) / 2.0;
                let mut hold = e;
                while at(bw, hold + 1).is_some_and(|x| x >= mid) {
                    hold += 1;
                }
                spans.push((Kind::Bandwidth, Span { b: s, e: hold, vb: s, during: s + 1..=hold }));
            }
            candidates.extend(spans.into_iter().map(|(kind, sp)| (agg, kind, sp)));
        }
        candidates.sort_by_key(|(_, _, sp)| (sp.b, sp.e));
        // The most each victim held before an episode that named it.
        let mut held: std::collections::HashMap<String, f64> = std::collections::HashMap::new();
        for (agg, kind, sp) in candidates {
            let occ = &agg.occupancy;
            if kind == Kind::Occupancy {
                let level = held.get(&agg.id).copied().unwrap_or(f64::NEG_INFINITY);
                if at(occ, sp.e).is_some_and(|o| o < level + t.rise()) {
                    continue;
                }
            }
            let v = victims(&d.lines, agg, &sp, &t);
            if v.is_empty() {
                continue;
            }
            for victim in &v {
                if let Some(o) = victim.occupancy_before_bytes.filter(|_| victim.occupancy_lost_bytes.is_some()) {
                    let level = held.entry(victim.container_id.clone()).or_insert(o);
                    *level = level.max(o);
                }
            }
            let bw = &agg.bandwidth;
            out.push(Episode {
                domain: d.domain,
                kind,
                start_ns: tl.end_of(sp.b),
                end_ns: tl.end_of(sp.e),
                container_id: agg.id.clone(),
                container_name: agg.name.clone(),
                occupancy_before_bytes: at(occ, sp.b),
                occupancy_after_bytes: at(occ, sp.e),
                bandwidth_before_bytes_per_sec: mean(&bw[sp.before()]),
                bandwidth_during_bytes_per_sec: mean(&bw[sp.during.clone()]),
                victims: v,
            });
        }
    }
    out.sort_by(|a, b| a.start_ns.cmp(&b.start_ns).then(a.domain.cmp(&b.domain)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::Domain;

    const MIB: f64 = 1048576.0;

    fn line(id: &str, occ: &[f64], ipc: Option<&[f64]>) -> Line {
        let n = occ.len();
        Line {
            id: id.into(),
            name: id.into(),
            occupancy: occ.iter().map(|x| (*x >= 0.0).then_some(x * MIB)).collect(),
            bandwidth: vec![None; n],
            ipc: ipc.map_or(vec![None; n], |v| v.iter().map(|x| Some(*x)).collect()),
            mpki: vec![None; n],
            no_rmid: vec![0.0; n],
            cpu: vec![None; n],
        }
    }

    fn tl(lines: Vec<Line>) -> Timeline {
        let n = lines[0].occupancy.len();
        Timeline { start_ns: 0, bucket_ns: 100_000_000, buckets: n, domains: vec![Domain { domain: 0, lines }] }
    }

    #[test]
    fn a_filler_evicting_a_neighbour_is_named() {
        // web holds 12 MiB; batch arrives at bucket 3 and fills the 32 MiB L3.
        let web = line("web", &[12.0, 12.0, 12.0, 9.0, 5.0, 2.0, 1.5, 1.5], None);
        let batch = line("batch", &[-1.0, -1.0, -1.0, 4.0, 16.0, 28.0, 30.0, 30.0], None);
        let e = find(&tl(vec![web, batch]), |_| Some(32.0 * MIB));
        assert_eq!(e.len(), 1, "{e:#?}");
        let e = &e[0];
        assert_eq!(
            (e.container_id.as_str(), e.kind, e.start_ns, e.end_ns),
            ("batch", Kind::Occupancy, 300_000_000, 700_000_000)
        );
        assert_eq!(e.victims.len(), 1);
        assert_eq!(e.victims[0].container_id, "web");
        assert_eq!(e.victims[0].occupancy_lost_bytes, Some(10.5 * MIB));
    }

    #[test]
    fn a_filler_that_fills_within_its_first_bucket_is_named_for_occupancy() {
        let web = line("web", &[12.0, 12.0, 12.0, 4.0, 4.0, 4.0], None);
        let mut noisy = line("noisy", &[-1.0, -1.0, -1.0, 28.0, 28.0, 28.0], None);
        noisy.bandwidth = [None, None, None, Some(9e9), Some(9e9), Some(9e9)].to_vec();
        let e = find(&tl(vec![web, noisy]), |_| Some(32.0 * MIB));
        assert_eq!(e.len(), 1, "{e:#?}");
        assert_eq!((e[0].kind, e[0].start_ns, e[0].end_ns), (Kind::Occupancy, 300_000_000, 400_000_000));
        assert_eq!(e[0].occupancy_before_bytes, None, "it did not exist before");
        assert_eq!(e[0].victims[0].occupancy_lost_bytes, Some(8.0 * MIB));
    }

    #[test]
    fn what_a_late_tagged_filler_took_before_its_first_row_counts() {
        // noisy ran (untagged) through bucket 2, where web already lost most of its 12 MiB;
        // its first row is bucket 3.
        let web = line("web", &[12.0, 12.0, 5.0, 4.0, 4.0, 4.0], None);
        let noisy = line("noisy", &[-1.0, -1.0, -1.0, 28.0, 28.0, 28.0], None);
        let e = find(&tl(vec![web, noisy]), |_| Some(32.0 * MIB));
        assert_eq!(e.len(), 1, "{e:#?}");
        assert_eq!(e[0].victims[0].occupancy_before_bytes, Some(12.0 * MIB));
        assert_eq!(e[0].victims[0].occupancy_lost_bytes, Some(8.0 * MIB));
    }

    #[test]
    fn a_victim_refilling_its_own_lines_is_not_an_aggressor() {
        // Two containers take turns on a core: web (16 MiB) and thrash (32 MiB) evict each
        // other at every turn. Only thrash is named, at each of its turns.
        let web = line("web", &[16.0, 16.0, 16.0, 2.0, 16.0, 2.0, 16.0, 2.0], None);
        let thrash = line("thrash", &[-1.0, -1.0, -1.0, 30.0, 16.0, 30.0, 16.0, 30.0], None);
        let e = find(&tl(vec![web, thrash]), |_| Some(32.0 * MIB));
        assert!(!e.is_empty());
        for ep in &e {
            assert_eq!(ep.container_id, "thrash", "{e:#?}");
            assert_eq!(ep.victims[0].occupancy_lost_bytes, Some(14.0 * MIB));
        }
        assert_eq!(e.len(), 3, "{e:#?}");
        // A victim that then grows well past what it held is an aggressor again.
        let web = line("web", &[16.0, 16.0, 16.0, 2.0, 16.0, 28.0, 28.0, 28.0], None);
        let thrash = line("thrash", &[-1.0, -1.0, -1.0, 30.0, 16.0, 4.0, 4.0, 4.0], None);
        let e = find(&tl(vec![web, thrash]), |_| Some(32.0 * MIB));
        assert_eq!(e.iter().map(|ep| ep.container_id.as_str()).collect::<Vec<_>>(), ["thrash", "web"], "{e:#?}");
    }

    #[test]
    fn neighbours_that_fit_make_no_episode() {
        let a = line("a", &[2.0, 6.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0], None);
        let b = line("b", &[-1.0, -1.0, -1.0, 3.0, 7.0, 8.0, 8.0, 8.0], None);
        // Noise below the hysteresis does not count either.
        let c = line("c", &[4.0, 4.3, 3.9, 4.4, 3.8, 4.2, 4.0, 4.1], None);
        assert!(find(&tl(vec![a, b, c]), |_| Some(32.0 * MIB)).is_empty());
    }

    #[test]
    fn a_rise_that_costs_a_neighbour_ipc_is_named() {
        // No occupancy lost, but the neighbour's IPC falls by half while the aggressor's
        // bandwidth jumps from 0.5 to 6 GB/s.
        let mut agg = line("stream", &[1.0; 8], None);
        agg.bandwidth = [0.5, 0.5, 0.5, 0.5, 6.0, 6.0, 6.0, 6.0].iter().map(|x| Some(x * 1e9)).collect();
        let v = line("db", &[8.0; 8], Some(&[2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0]));
        let e = find(&tl(vec![agg, v]), |_| Some(32.0 * MIB));
        assert_eq!(e.len(), 1, "{e:#?}");
        assert_eq!((e[0].kind, e[0].container_id.as_str()), (Kind::Bandwidth, "stream"));
        assert_eq!(e[0].victims[0].ipc_before, Some(2.0));
        assert_eq!(e[0].victims[0].ipc_during, Some(1.0));
    }

    #[test]
    fn a_filler_tagged_long_before_it_rose_is_named_when_it_rose() {
        // thrash's container sat nearly empty (noise below the hysteresis) from bucket 0 and
        // filled the L3 from bucket 5: the episode runs from the end of bucket 4 (web holding its
        // 16 MiB) to the end of bucket 6.
        let web = line("web", &[16.0, 16.0, 16.0, 16.0, 16.0, 9.0, 2.0, 2.0], None);
        let thrash = line("thrash", &[0.2, 0.25, 0.22, 0.3, 0.25, 16.0, 30.0, 30.0], None);
        let e = find(&tl(vec![web, thrash]), |_| Some(32.0 * MIB));
        assert_eq!(e.len(), 1, "{e:#?}");
        assert_eq!((e[0].start_ns, e[0].end_ns), (500_000_000, 700_000_000));
        assert_eq!(e[0].victims[0].occupancy_before_bytes, Some(16.0 * MIB));
        assert_eq!(e[0].victims[0].occupancy_lost_bytes, Some(14.0 * MIB));
    }

    #[test]
    fn a_loss_read_a_bucket_after_the_peak_counts() {
        // web's group was read before thrash's in the interval of thrash's peak (bucket 5).
        let web = line("web", &[16.0, 16.0, 16.0, 16.0, 12.0, 9.0, 1.0, 1.0], None);
        let thrash = line("thrash", &[0.0, 0.0, 0.0, 0.0, 16.0, 30.0, 29.5, 30.0], None);
        let e = find(&tl(vec![web, thrash]), |_| Some(32.0 * MIB));
        assert_eq!(e.len(), 1, "{e:#?}");
        assert_eq!(e[0].end_ns, 600_000_000);
        assert_eq!(e[0].victims[0].occupancy_lost_bytes, Some(15.0 * MIB));
    }

    #[test]
    fn legs_follow_the_hysteresis() {
        let v: Vec<Option<f64>> = [0.0, 5.0, 10.0, 9.5, 10.2, 2.0, 3.0, 12.0, 12.0].iter().map(|x| Some(*x)).collect();
        assert_eq!(rises(&v, 1.0), vec![(0, 4), (5, 7)]);
        let gap = vec![Some(0.0), Some(5.0), None, Some(1.0), Some(9.0)];
        assert_eq!(rises(&gap, 1.0), vec![(0, 1), (3, 4)]);
        // A leg starts where it leaves its trough's level.
        let flat: Vec<Option<f64>> = [1.0, 1.5, 1.2, 1.9, 5.0].iter().map(|x| Some(*x)).collect();
        assert_eq!(rises(&flat, 1.0), vec![(3, 4)]);
    }
}
