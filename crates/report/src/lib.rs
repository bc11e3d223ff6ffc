//! `cachescope report` beyond the per-container table: recorded rows on a time grid
//! ([`timeline`]), the noisy-neighbour finder ([`episodes`]), the run's facts, and a
//! self-contained HTML page with SVG charts ([`html`]).

pub mod episodes;
pub mod html;
pub mod live;
pub mod summary;
pub mod svg;
pub mod text;
pub mod timeline;

use cachescope_sinks::read::{runs, stream, FileInfo, Point, RunFiles};
use cachescope_sinks::SinkError;
use episodes::Episode;
use serde::Serialize;
use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::PathBuf;
use summary::{finish_all, Recording, Summary, SummaryAcc};
use timeline::Timeline;

/// The JSON layout of `report --json` (docs/cli.md): 1 was a bare array of summaries.
pub const JSON_VERSION: u32 = 2;

/// Buckets across the charts and the finder at most.
pub const MAX_BUCKETS: usize = 800;
/// L3 domains a report follows at most: more than any machine has (32 on a two-socket EPYC
/// Turin); the rows of further domains are left out, and said.
pub const MAX_DOMAINS: usize = 256;

/// What the files say about the run(s) they hold.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Facts {
    pub hosts: Vec<String>,
    pub backends: Vec<String>,
    pub cpus: Vec<String>,
    /// Where the values come from: `measured`, `emulated`, `unknown` (files without
    /// cachescope's metadata or `provenance` column, e.g. rewritten by another tool), or
    /// several of them joined by `+` (mixed files).
    pub values: String,
    /// Why the values are emulated (empty: not emulated, or nothing says why).
    pub emulated: Vec<String>,
    /// Why the PMU columns hold what they hold.
    pub pmu: Vec<String>,
    pub schema_versions: Vec<String>,
    pub l3_bytes: Option<u64>,
    pub files: usize,
    pub rows: u64,
    pub containers: usize,
    /// CLOCK_REALTIME ns: the start of the first interval, the end of the last.
    pub start_ns: Option<i64>,
    pub end_ns: Option<i64>,
    /// The sampling interval most rows have, and how many rows span more than 1.5 of it
    /// (reads that came late, or were spread under overload), the longest of them.
    pub interval_ns: i64,
    pub long_intervals: u64,
    pub longest_interval_ns: Option<i64>,
    /// PMU charges the recorder dropped because it fell behind; the rows of that time have
    /// null cpu_ns and PMU columns.
    pub pmu_lost_charges: u64,
    /// Recorder runs the files come from (a restart, an upgrade or a crash starts another).
    pub runs: usize,
    /// The time the runs measured, ns: what means and shares are over.
    pub recorded_ns: i64,
    /// Between runs, what nothing recorded: neither zero nor the last value, a gap.
    pub gaps: Vec<Gap>,
}

/// A stretch between two recorder runs, CLOCK_REALTIME ns.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Gap {
    pub start_ns: i64,
    pub end_ns: i64,
}

/// `spans` merged where they overlap, in time order.
fn merged(mut spans: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    spans.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::new();
    for (a, b) in spans {
        match out.last_mut() {
            Some(l) if a <= l.1 => l.1 = l.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// One container in one domain, over the grid.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DomainShare {
    pub container_id: String,
    pub container_name: String,
    pub occupancy_max_bytes: Option<f64>,
    pub mbm_total_mean_bytes_per_sec: Option<f64>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DomainSummary {
    pub domain: i32,
    pub l3_bytes: Option<u64>,
    /// The highest total occupancy of all containers at a grid point.
    pub used_max_bytes: Option<f64>,
    pub containers: Vec<DomainShare>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub report_version: u32,
    pub run: Facts,
    pub containers: Vec<Summary>,
    pub domains: Vec<DomainSummary>,
    pub episodes: Vec<Episode>,
    #[serde(skip)]
    pub timeline: Option<Timeline>,
}

fn values(info: &FileInfo, key: &str) -> Vec<String> {
    info.metadata.get(key).map(|v| v.iter().cloned().collect()).unwrap_or_default()
}

/// What the rows say about the run, gathered as they stream by.
#[derive(Default)]
struct RowFacts {
    rows: u64,
    start_ns: Option<i64>,
    end_ns: Option<i64>,
    long_intervals: u64,
    longest_interval_ns: Option<i64>,
}

impl RowFacts {
    fn row(&mut self, p: &Point, interval_ns: i64) {
        self.rows += 1;
        if p.stopped {
            return;
        }
        let s = p.time_ns - p.interval_ns;
        self.start_ns = Some(self.start_ns.map_or(s, |x| x.min(s)));
        self.end_ns = Some(self.end_ns.map_or(p.time_ns, |x| x.max(p.time_ns)));
        if p.interval_ns * 2 > interval_ns * 3 {
            self.long_intervals += 1;
            self.longest_interval_ns = Some(self.longest_interval_ns.map_or(p.interval_ns, |l| l.max(p.interval_ns)));
        }
    }
}

fn facts(info: &FileInfo, r: RowFacts, containers: usize, interval_ns: i64, runs: &[(i64, i64)]) -> Facts {
    let covered = merged(runs.to_vec());
    let gaps = covered.windows(2).map(|w| Gap { start_ns: w[0].1, end_ns: w[1].0 }).collect();
    let l3: BTreeSet<u64> = values(info, "cachescope.l3_bytes").iter().filter_map(|v| v.parse().ok()).collect();
    Facts {
        hosts: info.hosts.iter().cloned().collect(),
        backends: values(info, "cachescope.backend"),
        cpus: values(info, "cachescope.cpuid"),
        values: if info.provenance.is_empty() {
            "unknown".to_string()
        } else {
            info.provenance.iter().cloned().collect::<Vec<_>>().join("+")
        },
        emulated: values(info, "cachescope.emulated"),
        pmu: values(info, "cachescope.pmu"),
        schema_versions: values(info, "cachescope.schema_version"),
        // One size where the files agree; none where they do not (mixed machines).
        l3_bytes: (l3.len() == 1).then(|| l3.iter().next().copied()).flatten(),
        files: info.files,
        rows: r.rows,
        containers,
        start_ns: r.start_ns,
        end_ns: r.end_ns,
        interval_ns,
        long_intervals: r.long_intervals,
        longest_interval_ns: r.longest_interval_ns,
        pmu_lost_charges: info.pmu_lost_charges,
        runs: runs.len().max(1),
        recorded_ns: if covered.is_empty() {
            r.end_ns.zip(r.start_ns).map_or(0, |(e, s)| e - s)
        } else {
            covered.iter().map(|(a, b)| b - a).sum()
        },
        gaps,
    }
}

/// Everything the report needs, fed one row at a time.
struct Analysis {
    interval_ns: i64,
    summaries: BTreeMap<String, SummaryAcc>,
    timeline: Option<timeline::Builder>,
    facts: RowFacts,
    domains: BTreeSet<i32>,
    /// Rows of domains beyond [`MAX_DOMAINS`], left out.
    cut_domain_rows: u64,
    /// Each recorder run's stretch (empty: one run, all of it).
    runs: Vec<(i64, i64)>,
}

impl Analysis {
    /// `span`: (first, last, typical interval) of all rows; `runs`: each run's stretch.
    fn new(span: Option<(i64, i64, i64)>, runs: Vec<(i64, i64)>) -> Analysis {
        let interval_ns = span.map_or(1_000_000, |s| s.2);
        Analysis {
            interval_ns,
            summaries: BTreeMap::new(),
            timeline: span.map(|(a, b, iv)| timeline::Builder::new(a, b, iv, MAX_BUCKETS).covering(runs.clone())),
            facts: RowFacts::default(),
            domains: BTreeSet::new(),
            cut_domain_rows: 0,
            runs,
        }
    }

    /// A row of recorder run `run` (runs in time order).
    fn row(&mut self, run: usize, id: &str, name: Option<&str>, p: &Point) {
        if !self.domains.contains(&p.domain) {
            if self.domains.len() >= MAX_DOMAINS {
                self.cut_domain_rows += 1;
                return;
            }
            self.domains.insert(p.domain);
        }
        match self.summaries.get_mut(id) {
            Some(a) => a.row_in(run, name, p),
            None => {
                let mut a = SummaryAcc::default();
                a.row_in(run, name, p);
                self.summaries.insert(id.to_string(), a);
            }
        }
        if let Some(t) = self.timeline.as_mut() {
            t.row(id, name, p);
        }
        self.facts.row(p, self.interval_ns);
    }

    fn finish(self, info: &FileInfo, problems: &mut Vec<String>) -> Report {
        if self.cut_domain_rows > 0 {
            problems.push(format!(
                "more than {MAX_DOMAINS} L3 domains in these files (no machine has that many): {} rows of the others left out",
                self.cut_domain_rows
            ));
        }
        if let Some(t) = self.timeline.as_ref().filter(|t| t.cut_rows > 0) {
            problems.push(format!(
                "the charts and the noisy-neighbour finder follow {} container x domain series at most: {}{} more series ({} rows) left out of them; the per-container table has every row",
                timeline::MAX_SERIES,
                t.cut_series(),
                if t.cut_series() >= timeline::MAX_SERIES { " or" } else { "" },
                t.cut_rows
            ));
        }
        let run = facts(info, self.facts, self.summaries.len(), self.interval_ns, &self.runs);
        let tl = self.timeline.map(timeline::Builder::finish);
        let l3 = run.l3_bytes;
        let episodes = tl.as_ref().map(|t| episodes::find(t, |_| l3.map(|b| b as f64))).unwrap_or_default();
        let domains = tl.as_ref().map(|t| domain_summaries(t, l3)).unwrap_or_default();
        Report {
            report_version: JSON_VERSION,
            run,
            containers: finish_all(self.summaries, problems),
            domains,
            episodes,
            timeline: tl,
        }
    }
}

fn domain_summaries(tl: &Timeline, l3: Option<u64>) -> Vec<DomainSummary> {
    let max = |v: &[Option<f64>]| v.iter().flatten().copied().reduce(f64::max);
    let mean = |v: &[Option<f64>]| {
        let xs: Vec<f64> = v.iter().flatten().copied().collect();
        (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
    };
    tl.domains
        .iter()
        .map(|d| {
            let used: Vec<Option<f64>> =
                (0..tl.buckets).map(|k| d.lines.iter().filter_map(|l| l.occupancy[k]).reduce(|a, b| a + b)).collect();
            let mut containers: Vec<DomainShare> = d
                .lines
                .iter()
                .map(|l| DomainShare {
                    container_id: l.id.clone(),
                    container_name: l.name.clone(),
                    occupancy_max_bytes: max(&l.occupancy),
                    mbm_total_mean_bytes_per_sec: mean(&l.bandwidth),
                })
                .collect();
            containers.sort_by(|a, b| {
                b.occupancy_max_bytes.partial_cmp(&a.occupancy_max_bytes).unwrap_or(std::cmp::Ordering::Equal)
            });
            DomainSummary { domain: d.domain, l3_bytes: l3, used_max_bytes: max(&used), containers }
        })
        .collect()
}

/// Everything `report` says about `files` taken as one recording (their runs merged: see
/// [`recordings`] to tell unrelated ones apart).
pub fn analyze_files(files: &[PathBuf]) -> Result<(Report, Vec<String>), SinkError> {
    let all = runs(files);
    analyze_runs(&all.iter().collect::<Vec<_>>())
}

/// Runs grouped into recordings: the runs of one host and backend (one recorder restarted,
/// upgraded, or crashed and started again) make one recording, with gaps between them;
/// runs of different hosts or backends are unrelated recordings, reported apart unless
/// `merge`. In order of their first row; files that could not be read go with the first.
pub fn recordings(all: Vec<RunFiles>, merge: bool) -> Vec<Vec<RunFiles>> {
    let (mut readable, unreadable): (Vec<RunFiles>, Vec<RunFiles>) = all.into_iter().partition(|r| !r.unreadable);
    readable.sort_by_key(|r| r.span.map_or(i64::MAX, |s| s.0));
    let mut out: Vec<Vec<RunFiles>> = Vec::new();
    for r in readable {
        let same = |g: &Vec<RunFiles>| merge || g.first().is_some_and(|f| f.host == r.host && f.backend == r.backend);
        match out.iter_mut().find(|g| same(g)) {
            Some(g) => g.push(r),
            None => out.push(vec![r]),
        }
    }
    match out.first_mut() {
        Some(g) => g.extend(unreadable),
        None if !unreadable.is_empty() => out.push(unreadable),
        None => {}
    }
    out
}

/// Everything `report` says about one recording's runs, their files read twice (the time
/// columns, then every row): memory grows with containers, domains and the chart grid, not
/// with rows. Time between runs is a gap: not counted in means and percentiles, a break in
/// the charts. Also what was passed over (files that cannot be read, impossible rows, rows
/// out of time order).
pub fn analyze_runs(runs: &[&RunFiles]) -> Result<(Report, Vec<String>), SinkError> {
    let spans: Vec<(i64, i64)> = runs.iter().filter_map(|r| r.span).collect();
    let first = spans.iter().map(|s| s.0).min();
    let last = spans.iter().map(|s| s.1).max();
    let span = first.zip(last).map(|(a, b)| (a, b, RunFiles::typical_interval(runs)));
    let mut a = Analysis::new(span, spans);
    let mut info = FileInfo::default();
    let (mut problems, mut first_err, mut read) = (Vec::new(), None, false);
    for (run, r) in runs.iter().enumerate() {
        match stream(&r.files, &mut |id, name, p| a.row(run, id, name, p)) {
            Ok((i, p)) => {
                info.absorb(i);
                problems.extend(p);
                read = true;
            }
            Err(e) => {
                problems.push(format!("skipped {e}"));
                first_err.get_or_insert(e);
            }
        }
    }
    if !read {
        if let Some(e) = first_err {
            return Err(e);
        }
    }
    let report = a.finish(&info, &mut problems);
    Ok((report, problems))
}

/// The same for rows held in memory (tests, small sets).
pub fn analyze(rec: Recording) -> Report {
    let all = || rec.containers.values().flat_map(|c| c.points.iter());
    let first = all().map(|p| if p.stopped { p.time_ns } else { p.time_ns - p.interval_ns }).min();
    let last = all().map(|p| p.time_ns).max();
    let span = first.zip(last).map(|(a, b)| (a, b, timeline::typical_interval(&rec.containers)));
    let mut a = Analysis::new(span, Vec::new());
    for (id, c) in &rec.containers {
        let mut pts: Vec<&Point> = c.points.iter().collect();
        pts.sort_by_key(|p| (p.time_ns, p.stopped));
        for p in pts {
            a.row(0, id, c.name.as_deref(), p);
        }
    }
    let info = FileInfo {
        metadata: rec.metadata.clone(),
        hosts: rec.hosts.clone(),
        provenance: rec.provenance.clone(),
        files: rec.files,
        pmu_lost_charges: 0,
    };
    a.finish(&info, &mut Vec::new())
}
