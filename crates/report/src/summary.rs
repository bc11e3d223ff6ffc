//! Per-container summaries of recorded rows (`cachescope report`'s table). Rows are sparse
//! (docs/data.md), so every value holds until the next row of its (container, domain):
//! occupancy percentiles and the share of time without an RMID are weighted by how long each
//! value held.

use cachescope_engine::row::{ipc, mpki};
use cachescope_sinks::read::{stream, Point};
use cachescope_sinks::SinkError;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// One container's rows, in file order.
#[derive(Debug, Default, Clone)]
pub struct Recorded {
    pub name: Option<String>,
    pub points: Vec<Point>,
}

/// What a set of files holds: rows per container id, and what the files say of themselves.
#[derive(Debug, Default, Clone)]
pub struct Recording {
    pub containers: BTreeMap<String, Recorded>,
    /// Each metadata key with the values the files gave it (one, unless runs were mixed).
    pub metadata: BTreeMap<String, BTreeSet<String>>,
    pub hosts: BTreeSet<String>,
    /// Where the files' values come from, one entry per kind seen: `measured`, `emulated`, or
    /// `unknown` (neither the rows' `provenance` nor cachescope's metadata says).
    pub provenance: BTreeSet<String>,
    /// Files read.
    pub files: usize,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    pub container_id: String,
    pub container_name: Option<String>,
    /// From the start of the first interval to the end of the last, seconds.
    pub seconds: f64,
    /// Distinct sample times recorded (sparse: unchanged intervals are not rows).
    pub samples: u64,
    pub occupancy_p50_bytes: Option<u64>,
    pub occupancy_p99_bytes: Option<u64>,
    pub occupancy_max_bytes: Option<u64>,
    pub mbm_total_mean_bytes_per_sec: Option<f64>,
    /// Highest total over any whole second.
    pub mbm_total_peak_bytes_per_sec: Option<f64>,
    pub mbm_local_mean_bytes_per_sec: Option<f64>,
    pub ipc: Option<f64>,
    /// LLC misses per thousand instructions.
    pub llc_mpki: Option<f64>,
    /// Share of the covered time (summed over domains) spent as `no_rmid`.
    pub no_rmid_share: f64,
    /// CPU time over the covered time, in CPUs (1.0: one CPU busy throughout), summed over
    /// domains; None where no row has `cpu_ns`.
    pub cpu_mean: Option<f64>,
    /// The median and the 99th percentile of its CPU use per whole second, in CPUs: a second
    /// without a row used none (rows are sparse).
    pub cpu_p50: Option<f64>,
    pub cpu_p99: Option<f64>,
}

/// Summaries for every container in `files`, sorted by p99 occupancy (highest first), and
/// what was passed over (see [`stream`]).
pub fn summarize(files: &[PathBuf]) -> Result<(Vec<Summary>, Vec<String>), SinkError> {
    let mut accs: BTreeMap<String, SummaryAcc> = BTreeMap::new();
    let (_, mut problems) = stream(files, &mut |id, name, p| match accs.get_mut(id) {
        Some(a) => a.row(name, p),
        None => {
            let mut a = SummaryAcc::default();
            a.row(name, p);
            accs.insert(id.to_string(), a);
        }
    })?;
    Ok((finish_all(accs, &mut problems), problems))
}

/// The summaries of every accumulated container, sorted by p99 occupancy (highest first);
/// containers whose rows came out of time order are named in `problems`.
/// How often a sparse recording writes a row of every live series (docs/data.md).
const KEYFRAME_NS: i64 = 1_000_000_000;

pub fn finish_all(accs: BTreeMap<String, SummaryAcc>, problems: &mut Vec<String>) -> Vec<Summary> {
    // Where each run's recording ends: the last row of any container in it.
    let mut ends: BTreeMap<usize, i64> = BTreeMap::new();
    for s in accs.values().flat_map(|a| a.segments.iter()) {
        if let Some(l) = s.last {
            let e = ends.entry(s.run).or_insert(l);
            *e = (*e).max(l);
        }
    }
    let mut out: Vec<Summary> = accs
        .into_iter()
        .map(|(id, a)| {
            if a.out_of_order > 0 {
                problems.push(format!(
                    "{id}: {} rows out of time order (several recorders into one directory?): summarized as they came",
                    a.out_of_order
                ));
            }
            a.finish_runs(id, &|r| ends.get(&r).copied())
        })
        .collect();
    out.sort_by(|a, b| b.occupancy_p99_bytes.cmp(&a.occupancy_p99_bytes).then(a.container_id.cmp(&b.container_id)));
    out
}

/// Per-container summaries of rows held in memory, sorted by p99 occupancy (highest first).
pub fn summaries(containers: BTreeMap<String, Recorded>) -> Vec<Summary> {
    let accs = containers
        .into_iter()
        .map(|(id, mut c)| {
            c.points.sort_by_key(|p| (p.time_ns, p.domain));
            let mut a = SummaryAcc::default();
            for p in &c.points {
                a.row(c.name.as_deref(), p);
            }
            (id, a)
        })
        .collect();
    finish_all(accs, &mut Vec::new())
}

/// Every row of `files` held in memory (for small sets and tests; [`stream`] does not hold
/// them), and what was passed over.
pub fn load(files: &[PathBuf]) -> Result<(Recording, Vec<String>), SinkError> {
    let mut containers: BTreeMap<String, Recorded> = BTreeMap::new();
    let (info, problems) = stream(files, &mut |id, name, p| {
        let c = containers.entry(id.to_string()).or_default();
        if c.name.is_none() {
            c.name = name.map(String::from);
        }
        c.points.push(p.clone());
    })?;
    let (metadata, hosts, provenance, files) = (info.metadata, info.hosts, info.provenance, info.files);
    Ok((Recording { containers, metadata, hosts, provenance, files }, problems))
}

/// One container's summary, built row by row in time order: its occupancy over domains
/// (each domain's value carried forward) held from one sample time to the next, kept as a
/// weighted histogram (occupancy takes few distinct values: multiples of the upscale unit),
/// counter sums, and MBM per whole second.
#[derive(Debug, Default)]
pub struct SummaryAcc {
    name: Option<String>,
    /// The sample time being gathered, and the interval of its last row.
    t: Option<i64>,
    t_interval: i64,
    occ: BTreeMap<i32, Option<i64>>,
    no_rmid: BTreeMap<i32, bool>,
    hist: BTreeMap<u64, i64>,
    held_total: i64,
    held_no_rmid: i64,
    /// Its stretches of measured time, one per recorder run it appears in.
    segments: Vec<Segment>,
    samples: u64,
    /// MBM total, MBM local, cycles, instructions, LLC misses.
    sums: [Option<i64>; 5],
    /// MBM total per second: the second being summed, its bytes; the first second's; the
    /// best complete second after it; how many seconds.
    sec: Option<(i64, i64)>,
    first_sec: Option<i64>,
    middle_max: Option<i64>,
    seconds: u64,
    pub out_of_order: u64,
    /// CPU time per second (by the second its interval ends in), ns; its sum.
    cpu_sec: BTreeMap<i64, i64>,
    cpu_total: Option<i64>,
}

/// A container's rows within one recorder run: from the start of its first interval to the end
/// of its last. Between runs nothing was measured: no time, no value held.
#[derive(Debug, Clone, Copy)]
struct Segment {
    run: usize,
    first: Option<i64>,
    last: Option<i64>,
    /// Its series ended with a `stopped` row (else it ran to the end of the run).
    stopped: bool,
}

impl SummaryAcc {
    /// A row of a recording made in one run.
    pub fn row(&mut self, name: Option<&str>, p: &Point) {
        self.row_in(0, name, p)
    }

    /// A row of recorder run `run` (runs come in time order, each one's rows in time order).
    pub fn row_in(&mut self, run: usize, name: Option<&str>, p: &Point) {
        if self.name.is_none() {
            self.name = name.map(String::from);
        }
        if self.segments.last().is_none_or(|s| s.run != run) {
            // A new run: what the last one measured is held for its own interval, not across
            // the time nothing was recorded; no occupancy is carried over.
            if self.t.take().is_some() {
                self.hold(self.t_interval.max(1));
            }
            self.occ.clear();
            self.no_rmid.clear();
            self.segments.push(Segment { run, first: None, last: None, stopped: false });
        }
        let Some(seg) = self.segments.last_mut() else { return };
        if p.stopped {
            // Its life ends here, however long ago its last sparse row was.
            seg.last = Some(seg.last.map_or(p.time_ns, |l| l.max(p.time_ns)));
            seg.stopped = true;
            return;
        }
        seg.stopped = false;
        let start = p.time_ns - p.interval_ns;
        seg.first = Some(seg.first.map_or(start, |f| f.min(start)));
        seg.last = Some(seg.last.map_or(p.time_ns, |l| l.max(p.time_ns)));
        match self.t {
            Some(t) if p.time_ns > t => {
                self.hold(p.time_ns - t);
                self.t = Some(p.time_ns);
            }
            Some(t) if p.time_ns < t => self.out_of_order += 1,
            Some(_) => {}
            None => self.t = Some(p.time_ns),
        }
        self.t_interval = p.interval_ns;
        self.occ.insert(p.domain, p.occupancy);
        self.no_rmid.insert(p.domain, p.no_rmid);
        for (slot, v) in self.sums.iter_mut().zip([p.mbm_total, p.mbm_local, p.cycles, p.instructions, p.misses]) {
            if let Some(v) = v {
                *slot = Some(slot.unwrap_or(0).saturating_add(v));
            }
        }
        if let Some(c) = p.cpu_ns {
            *self.cpu_sec.entry((p.time_ns - 1).div_euclid(1_000_000_000)).or_default() += c;
            self.cpu_total = Some(self.cpu_total.unwrap_or(0).saturating_add(c));
        }
        if let Some(b) = p.mbm_total {
            let s = (p.time_ns - 1).div_euclid(1_000_000_000);
            match self.sec {
                Some((cur, ref mut v)) if s <= cur => *v += b,
                Some((_, v)) => {
                    // The second that ended is complete: the first, or one after it.
                    match self.first_sec {
                        None => self.first_sec = Some(v),
                        Some(_) => self.middle_max = Some(self.middle_max.map_or(v, |m| m.max(v))),
                    }
                    self.sec = Some((s, b));
                    self.seconds += 1;
                }
                None => {
                    self.sec = Some((s, b));
                    self.seconds += 1;
                }
            }
        }
    }

    /// The state gathered at the current sample time held for `w` ns.
    fn hold(&mut self, w: i64) {
        let w = w.max(1);
        let known: Vec<i64> = self.occ.values().flatten().copied().collect();
        if !known.is_empty() {
            *self.hist.entry(known.iter().sum::<i64>().max(0) as u64).or_default() += w;
        }
        self.held_total += w * self.no_rmid.len() as i64;
        self.held_no_rmid += w * self.no_rmid.values().filter(|x| **x).count() as i64;
        self.samples += 1;
    }

    fn quantile(&self, q: f64) -> Option<u64> {
        let total: i64 = self.hist.values().sum();
        let target = (q * total as f64).ceil() as i64;
        let mut acc = 0;
        for (v, w) in &self.hist {
            acc += w;
            if acc >= target {
                return Some(*v);
            }
        }
        self.hist.keys().last().copied()
    }

    /// The summary of a recording made in one run; `end`: the end of the recording.
    pub fn finish(self, id: String, end: Option<i64>) -> Summary {
        self.finish_runs(id, &|_| end)
    }

    /// The summary; `end_of(run)`: the end of that run's recording. Rows are sparse: a series
    /// that was still running there (a keyframe row within the last second) lasts to it,
    /// though an idle container's last row may be a keyframe a second before; one whose rows
    /// stopped long before without a `stopped` row (a crash) ends at its last row. Its time
    /// (`seconds`, and what means are over) is the sum of its runs' stretches: the time
    /// between runs was not measured.
    pub fn finish_runs(mut self, id: String, end_of: &dyn Fn(usize) -> Option<i64>) -> Summary {
        if self.t.is_some() {
            self.hold(self.t_interval.max(1));
        }
        let interval = self.t_interval.max(0);
        for seg in &mut self.segments {
            if let (false, Some(last), Some(end)) = (seg.stopped, seg.last, end_of(seg.run)) {
                if end > last && end - last <= KEYFRAME_NS + 2 * interval {
                    seg.last = Some(end);
                }
            }
        }
        let spans: Vec<(i64, i64)> = self.segments.iter().filter_map(|s| Some((s.first?, s.last?))).collect();
        let seconds = spans.iter().map(|(a, b)| (b - a).max(0)).sum::<i64>() as f64 / 1e9;
        let per_sec = |v: Option<i64>| v.filter(|_| seconds > 0.0).map(|b| b as f64 / seconds);
        // Whole seconds only: the first and the last are usually partial.
        let current = self.sec.map(|s| s.1);
        let peak = if self.seconds > 2 {
            self.middle_max
        } else {
            [self.first_sec, self.middle_max, current].into_iter().flatten().max()
        };
        // Counts are never negative on disk; the columns are int64 only because Parquet has no u64.
        let counted = |v: Option<i64>| v.map(|x| x.max(0) as u64);
        let [total, local, cycles, instructions, misses] = self.sums;
        let (cycles, instructions, misses) = (counted(cycles), counted(instructions), counted(misses));
        let (cpu_p50, cpu_p99) = self.cpu_quantiles(&spans);
        Summary {
            container_id: id,
            container_name: self.name.clone(),
            seconds,
            samples: self.samples,
            occupancy_p50_bytes: self.quantile(0.5),
            occupancy_p99_bytes: self.quantile(0.99),
            occupancy_max_bytes: self.hist.keys().last().copied(),
            mbm_total_mean_bytes_per_sec: per_sec(total),
            mbm_total_peak_bytes_per_sec: peak.map(|b| b as f64),
            mbm_local_mean_bytes_per_sec: per_sec(local),
            ipc: ipc(instructions, cycles),
            llc_mpki: mpki(misses, instructions),
            no_rmid_share: if self.held_total > 0 { self.held_no_rmid as f64 / self.held_total as f64 } else { 0.0 },
            cpu_mean: self.cpu_total.filter(|_| seconds > 0.0).map(|c| c.max(0) as f64 / 1e9 / seconds),
            cpu_p50,
            cpu_p99,
        }
    }

    /// The median and 99th percentile of CPU use per second over the seconds each measured
    /// span `[first, last)` touches, in CPUs; a second without a row counts 0. A span's first
    /// and last second count for the part of them covered, so a run that starts mid-second
    /// shows no false dip.
    fn cpu_quantiles(&self, spans: &[(i64, i64)]) -> (Option<f64>, Option<f64>) {
        const S: i64 = 1_000_000_000;
        let mut per: Vec<f64> = Vec::new();
        for &(first, last) in spans.iter().filter(|(a, b)| b > a) {
            let (s0, s1) = (first.div_euclid(S), (last - 1).div_euclid(S));
            per.extend((s0..=s1).map(|s| {
                let covered = ((s + 1) * S).min(last) - (s * S).max(first);
                self.cpu_sec.get(&s).copied().unwrap_or(0).max(0) as f64 / covered.max(1) as f64
            }));
        }
        if self.cpu_total.is_none() || per.is_empty() {
            return (None, None);
        }
        per.sort_by(f64::total_cmp);
        let at = |q: f64| per[((q * per.len() as f64).ceil() as usize).clamp(1, per.len()) - 1];
        (Some(at(0.5)), Some(at(0.99)))
    }
}

#[cfg(test)]
mod tests;
