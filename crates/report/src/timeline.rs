//! Recorded rows on a regular time grid, per L3 domain and container: what the charts draw and
//! the noisy-neighbour finder reads. Rows are sparse (docs/data.md), so a row's status and
//! occupancy hold until the next row of its series, and its bytes and counts were moved during
//! its own interval: they are spread over that interval and split at the bucket edges (a late
//! or long interval adds its bytes where they were moved, not to the bucket where it ended).

use crate::summary::Recorded;
use cachescope_sinks::read::Point;
use std::collections::BTreeMap;

/// Grid steps a person reads easily, ns.
const STEPS: [i64; 17] = [
    1_000_000,
    2_000_000,
    5_000_000,
    10_000_000,
    20_000_000,
    50_000_000,
    100_000_000,
    200_000_000,
    500_000_000,
    1_000_000_000,
    2_000_000_000,
    5_000_000_000,
    10_000_000_000,
    30_000_000_000,
    60_000_000_000,
    300_000_000_000,
    600_000_000_000,
];

/// One container in one domain, bucket by bucket (`None`: nothing measured there).
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub id: String,
    pub name: String,
    /// Bytes at the end of the bucket, carried forward from the last row.
    pub occupancy: Vec<Option<f64>>,
    /// MBM total, bytes per second over the bucket.
    pub bandwidth: Vec<Option<f64>>,
    pub ipc: Vec<Option<f64>>,
    /// LLC misses per thousand instructions.
    pub mpki: Vec<Option<f64>>,
    /// Share of the bucket the container spent without an RMID.
    pub no_rmid: Vec<f64>,
    /// CPU time over the bucket, in CPUs (1.0: one CPU busy throughout).
    pub cpu: Vec<Option<f64>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Domain {
    pub domain: i32,
    pub lines: Vec<Line>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// Start of the first bucket, CLOCK_REALTIME ns (a multiple of `bucket_ns`).
    pub start_ns: i64,
    pub bucket_ns: i64,
    pub buckets: usize,
    pub domains: Vec<Domain>,
}

impl Timeline {
    /// The end of bucket `k`, ns.
    pub fn end_of(&self, k: usize) -> i64 {
        self.start_ns + (k as i64 + 1) * self.bucket_ns
    }
}

/// The grid step: no finer than the typical sampling interval, at most `max_buckets` buckets.
pub fn step_for(span_ns: i64, interval_ns: i64, max_buckets: usize) -> i64 {
    let min = span_ns.max(1) / max_buckets.max(1) as i64;
    STEPS.iter().copied().find(|s| *s >= min && *s >= interval_ns).unwrap_or(STEPS[STEPS.len() - 1])
}

/// The median of the rows' intervals (their sampling period), ns.
pub fn typical_interval(containers: &BTreeMap<String, Recorded>) -> i64 {
    let mut v: Vec<i64> =
        containers.values().flat_map(|c| c.points.iter()).filter(|p| !p.stopped).map(|p| p.interval_ns).collect();
    if v.is_empty() {
        return 1_000_000;
    }
    let mid = v.len() / 2;
    *v.select_nth_unstable(mid).1
}

/// Add `value`, spread uniformly over [s, e), to the buckets it overlaps.
fn spread(acc: &mut [f64], touched: &mut [bool], start_ns: i64, w: i64, s: i64, e: i64, value: f64) {
    if e <= s || acc.is_empty() {
        return;
    }
    let n = acc.len() as i64;
    let first = ((s - start_ns).div_euclid(w)).clamp(0, n - 1);
    let last = ((e - 1 - start_ns).div_euclid(w)).clamp(0, n - 1);
    for k in first..=last {
        let (b0, b1) = (start_ns + k * w, start_ns + (k + 1) * w);
        let overlap = (e.min(b1) - s.max(b0)).max(0);
        acc[k as usize] += value * overlap as f64 / (e - s) as f64;
        touched[k as usize] = true;
    }
}

/// One series (container × domain) being built, row by row in time order.
struct LineAcc {
    name: String,
    occupancy: Vec<Option<f64>>,
    /// The first bucket whose occupancy is not set yet, and the value it will carry.
    next_k: usize,
    cur: Option<f64>,
    no_rmid: Vec<f64>,
    /// A no-RMID row whose span ends where the next row's interval begins.
    pending_no_rmid: Option<(i64, i64)>,
    /// MBM total, cycles, instructions, LLC misses, CPU time: spread sums and whether measured.
    sums: [Vec<f64>; 5],
    touched: [Vec<bool>; 5],
    /// The series' life: the start of its first interval, the end of its last.
    life: Option<(i64, i64)>,
}

fn begin(p: &Point) -> i64 {
    if p.stopped {
        p.time_ns
    } else {
        p.time_ns - p.interval_ns
    }
}

/// Builds a [`Timeline`] from rows streamed in time order, in memory that grows with the
/// series and the grid, not with the rows.
pub struct Builder {
    start_ns: i64,
    w: i64,
    n: usize,
    lines: BTreeMap<(i32, String), LineAcc>,
    /// Rows of series beyond [`MAX_SERIES`], left out.
    pub cut_rows: u64,
    cut_series: std::collections::BTreeSet<(i32, String)>,
    /// The measured stretches (recorder runs), sorted and disjoint; empty: all of it.
    covered: Vec<(i64, i64)>,
}

/// Container × domain series the grid holds at most: each takes ~60 bytes per bucket (~48 KB
/// at 800 buckets), so a file with thousands of made-up domains cannot exhaust memory.
pub const MAX_SERIES: usize = 2048;

impl Builder {
    /// A grid over [first, last] of at most `max_buckets`, no finer than `interval_ns`.
    pub fn new(first: i64, last: i64, interval_ns: i64, max_buckets: usize) -> Builder {
        let w = step_for(last - first, interval_ns, max_buckets);
        let start_ns = first.div_euclid(w) * w;
        let n = ((last - start_ns + w - 1) / w).max(1) as usize;
        Builder {
            start_ns,
            w,
            n,
            lines: BTreeMap::new(),
            cut_rows: 0,
            cut_series: Default::default(),
            covered: Vec::new(),
        }
    }

    /// Only `spans` (the recorder runs' stretches) were measured: a bucket outside all of them
    /// is a gap in every line (None, a break in the chart), not a fall to zero, and a rate is
    /// over the measured part of its bucket.
    pub fn covering(mut self, mut spans: Vec<(i64, i64)>) -> Builder {
        spans.sort_unstable();
        let mut merged: Vec<(i64, i64)> = Vec::new();
        for (a, b) in spans {
            match merged.last_mut() {
                Some(l) if a <= l.1 => l.1 = l.1.max(b),
                _ => merged.push((a, b)),
            }
        }
        self.covered = merged;
        self
    }

    /// Series left out for [`MAX_SERIES`].
    pub fn cut_series(&self) -> usize {
        self.cut_series.len()
    }

    pub fn row(&mut self, id: &str, name: Option<&str>, p: &Point) {
        let (n, w, start_ns) = (self.n, self.w, self.start_ns);
        let end_of = |k: usize| start_ns + (k as i64 + 1) * w;
        let key = (p.domain, id.to_string());
        if self.lines.len() >= MAX_SERIES && !self.lines.contains_key(&key) {
            self.cut_rows += 1;
            // The names of what was cut, up to as many as were kept.
            if self.cut_series.len() < MAX_SERIES {
                self.cut_series.insert(key);
            }
            return;
        }
        let acc = self.lines.entry(key).or_insert_with(|| LineAcc {
            name: name.map_or_else(|| id.to_string(), String::from),
            occupancy: vec![None; n],
            next_k: 0,
            cur: None,
            no_rmid: vec![0.0; n],
            pending_no_rmid: None,
            sums: std::array::from_fn(|_| vec![0.0; n]),
            touched: std::array::from_fn(|_| vec![false; n]),
            life: None,
        });
        // Occupancy at a bucket's end: the last row at or before it (a stopped row ends it).
        while acc.next_k < n && end_of(acc.next_k) < p.time_ns {
            acc.occupancy[acc.next_k] = acc.cur;
            acc.next_k += 1;
        }
        acc.cur = if p.stopped { None } else { p.occupancy.map(|o| o as f64) };
        // A row's status holds from its interval's start to the next row's.
        if let Some((b, t)) = acc.pending_no_rmid.take() {
            let until = begin(p).max(t);
            spread_share(&mut acc.no_rmid, start_ns, w, b, until);
        }
        if p.no_rmid {
            acc.pending_no_rmid = Some((begin(p), p.time_ns));
        }
        let (a, b) = (begin(p), p.time_ns);
        acc.life = Some(acc.life.map_or((a, b), |(x, y)| (x.min(a), y.max(b))));
        if p.stopped {
            return;
        }
        for (slot, v) in [p.mbm_total, p.cycles, p.instructions, p.misses, p.cpu_ns].into_iter().enumerate() {
            if let Some(v) = v {
                spread(&mut acc.sums[slot], &mut acc.touched[slot], start_ns, w, begin(p), p.time_ns, v as f64);
            }
        }
    }

    pub fn finish(self) -> Timeline {
        let (n, w) = (self.n, self.w);
        let mut by_domain: BTreeMap<i32, Vec<Line>> = BTreeMap::new();
        for ((domain, id), mut acc) in self.lines {
            for k in acc.next_k..n {
                acc.occupancy[k] = acc.cur;
            }
            if let Some((b, t)) = acc.pending_no_rmid.take() {
                spread_share(&mut acc.no_rmid, self.start_ns, w, b, t);
            }
            let start_ns = self.start_ns;
            let end_of = |k: usize| start_ns + (k as i64 + 1) * w;
            let life = acc.life;
            let covered = &self.covered;
            // The ns of [s, e) that were measured (inside a run).
            let measured = |s: i64, e: i64| -> i64 {
                if covered.is_empty() {
                    return (e - s).max(0);
                }
                covered.iter().map(|&(a, b)| (e.min(b) - s.max(a)).max(0)).sum()
            };
            let gap = |k: usize| measured(end_of(k) - w, end_of(k)) == 0;
            // Sparse rows: an interval without a row moved nothing. Within the series' life a
            // bucket of a counter the series has is 0, not unknown; between runs it is unknown.
            let in_life = |k: usize| life.is_some_and(|(a, b)| end_of(k) > a && end_of(k) - w < b);
            let value = |slot: usize, k: usize| -> Option<f64> {
                let has = acc.touched[slot].iter().any(|t| *t);
                (has && !gap(k) && (acc.touched[slot][k] || in_life(k))).then_some(acc.sums[slot][k])
            };
            // A rate over the part of the bucket the series lived in and was measured: a
            // container that starts or stops mid-bucket (or a recording that ends there, or a
            // run) shows no false dip.
            let secs = |k: usize| {
                let (b0, b1) = (end_of(k) - w, end_of(k));
                let (s, e) = life.map_or((b0, b1), |(a, b)| (b0.max(a), b1.min(b)));
                measured(s, e) as f64 / 1e9
            };
            for (k, o) in acc.occupancy.iter_mut().enumerate() {
                if gap(k) {
                    *o = None;
                    acc.no_rmid[k] = 0.0;
                }
            }
            let bandwidth = (0..n).map(|k| value(0, k).filter(|_| secs(k) > 0.0).map(|b| b / secs(k))).collect();
            let ipc = (0..n)
                .map(|k| match (value(2, k), value(1, k)) {
                    (Some(i), Some(c)) if c > 0.0 => Some(i / c),
                    _ => None,
                })
                .collect();
            let mpki = (0..n)
                .map(|k| match (value(3, k), value(2, k)) {
                    (Some(m), Some(i)) if i > 0.0 => Some(m * 1000.0 / i),
                    _ => None,
                })
                .collect();
            let no_rmid = acc.no_rmid.iter().map(|v| v.clamp(0.0, 1.0)).collect();
            let cpu = (0..n).map(|k| value(4, k).filter(|_| secs(k) > 0.0).map(|ns| ns / 1e9 / secs(k))).collect();
            let line = Line { id, name: acc.name, occupancy: acc.occupancy, bandwidth, ipc, mpki, no_rmid, cpu };
            by_domain.entry(domain).or_default().push(line);
        }
        let domains = by_domain.into_iter().map(|(domain, lines)| Domain { domain, lines }).collect();
        Timeline { start_ns: self.start_ns, bucket_ns: w, buckets: n, domains }
    }
}

/// Add the share of each bucket that [s, e) covers.
fn spread_share(acc: &mut [f64], start_ns: i64, w: i64, s: i64, e: i64) {
    let n = acc.len();
    let mut tmp = vec![0.0; n];
    spread(&mut tmp, &mut vec![false; n], start_ns, w, s, e, (e - s) as f64);
    for (b, v) in acc.iter_mut().zip(tmp) {
        *b += v / w as f64;
    }
}

/// The grid over rows held in memory (for tests and small sets); `max_buckets` bounds its size.
pub fn build(containers: &BTreeMap<String, Recorded>, max_buckets: usize) -> Option<Timeline> {
    let all = || containers.values().flat_map(|c| c.points.iter());
    let first = all().map(begin).min()?;
    let last = all().map(|p| p.time_ns).max()?;
    let mut b = Builder::new(first, last, typical_interval(containers), max_buckets);
    for (id, c) in containers {
        let mut pts: Vec<&Point> = c.points.iter().collect();
        pts.sort_by_key(|p| (p.time_ns, p.stopped));
        for p in pts {
            b.row(id, c.name.as_deref(), p);
        }
    }
    Some(b.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(t_ms: i64, iv_ms: i64, occ: Option<i64>, mbm: Option<i64>) -> Point {
        Point {
            time_ns: t_ms * 1_000_000,
            interval_ns: iv_ms * 1_000_000,
            domain: 0,
            occupancy: occ,
            mbm_total: mbm,
            mbm_local: None,
            cycles: None,
            instructions: None,
            misses: None,
            cpu_ns: None,
            no_rmid: false,
            stopped: false,
        }
    }

    fn rec(points: Vec<Point>) -> BTreeMap<String, Recorded> {
        BTreeMap::from([("a".to_string(), Recorded { name: None, points })])
    }

    #[test]
    fn between_runs_every_line_breaks_and_rates_are_over_measured_time() {
        // Run 1: 0–15 ms, run 2: 40–60 ms, 1 ms rows of 1000 bytes at 100 bytes of occupancy;
        // 10 ms buckets: 10–20 half measured, 20–40 a gap.
        let mut pts: Vec<Point> = (1..=15).map(|t| p(t, 1, Some(100), Some(1000))).collect();
        pts.extend((41..=60).map(|t| p(t, 1, Some(200), Some(1000))));
        let mut b = Builder::new(0, 60_000_000, 1_000_000, 6).covering(vec![(40_000_000, 60_000_000), (0, 15_000_000)]);
        for q in &pts {
            b.row("a", None, q);
        }
        let t = b.finish();
        let l = &t.domains[0].lines[0];
        let mbs = 1000.0 / 1e-3;
        assert_eq!(l.bandwidth, vec![Some(mbs), Some(mbs), None, None, Some(mbs), Some(mbs)]);
        // Occupancy is not carried across the gap: no value, not the last one.
        assert_eq!(l.occupancy, vec![Some(100.0), Some(100.0), None, None, Some(200.0), Some(200.0)]);
    }

    #[test]
    fn bytes_go_where_they_were_moved() {
        // 1 ms rows of 1000 bytes, then a late row covering 3 ms across the 10 ms edge.
        let mut pts: Vec<Point> = (1..=8).map(|t| p(t, 1, Some(100), Some(1000))).collect();
        pts.push(p(11, 3, Some(100), Some(3000)));
        pts.extend((12..=20).map(|t| p(t, 1, Some(100), Some(1000))));
        let t = build(&rec(pts), 2).unwrap();
        assert_eq!((t.bucket_ns, t.buckets, t.start_ns), (10_000_000, 2, 0));
        let bw = &t.domains[0].lines[0].bandwidth;
        // 10,000 bytes in each 10 ms: 1 MB/s, the late row's third millisecond in the second.
        assert_eq!(bw, &vec![Some(1_000_000.0), Some(1_000_000.0)]);
    }

    #[test]
    fn sparse_rows_carry_occupancy_and_count_zero_bytes_until_stopped() {
        let mut stop = p(30, 0, None, None);
        stop.stopped = true;
        let pts = vec![p(1, 1, Some(500), Some(10)), p(15, 1, Some(700), Some(0)), stop, p(40, 1, None, None)];
        let mut r = rec(pts);
        // Another container keeps the grid going to 60 ms.
        r.insert("b".into(), Recorded { name: Some("bee".into()), points: vec![p(60, 1, Some(1), None)] });
        let t = build(&r, 6).unwrap();
        assert_eq!((t.bucket_ns, t.buckets), (10_000_000, 6));
        let a = &t.domains[0].lines[0];
        assert_eq!(a.occupancy, vec![Some(500.0), Some(700.0), None, None, None, None], "carried until stopped");
        let b = &t.domains[0].lines[1];
        assert_eq!(b.name, "bee");
        assert_eq!(b.bandwidth, vec![None; 6], "no MBM in its rows: unknown, not 0");
        assert_eq!(a.bandwidth[..3], [Some(1000.0), Some(0.0), Some(0.0)]);
    }

    #[test]
    fn a_series_that_starts_mid_bucket_shows_its_rate_not_a_dip() {
        // 1000 bytes per ms from 15 ms to 30 ms; another series spans 0..30 ms.
        let mut r = rec((16..=30).map(|t| p(t, 1, Some(1), Some(1000))).collect());
        r.insert("b".into(), Recorded { name: None, points: vec![p(1, 1, Some(1), None), p(30, 1, Some(1), None)] });
        let t = build(&r, 3).unwrap();
        assert_eq!(t.bucket_ns, 10_000_000);
        assert_eq!(t.domains[0].lines[0].bandwidth, vec![None, Some(1e6), Some(1e6)]);
    }

    #[test]
    fn steps_are_round_and_bounded() {
        assert_eq!(step_for(20_000_000_000, 1_000_000, 800), 50_000_000);
        assert_eq!(step_for(500_000_000, 1_000_000, 800), 1_000_000);
        assert_eq!(step_for(500_000_000, 100_000_000, 800), 100_000_000, "never finer than sampling");
    }
}
