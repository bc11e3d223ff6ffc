//! `cachescope report` beyond the per-container table: recorded rows on a time grid
//! ([`timeline`]), the noisy-neighbour finder ([`episodes`]), the run's facts, and a
//! self-contained HTML page with SVG charts ([`html`]).

pub mod episodes;
pub mod html;
pub mod svg;
pub mod timeline;

use cachescope_sinks::report::{summaries, Recording, Summary};
use episodes::Episode;
use serde::Serialize;
use std::collections::BTreeSet;
use timeline::Timeline;

/// The JSON layout of `report --json` (docs/cli.md): 1 was a bare array of summaries.
pub const JSON_VERSION: u32 = 2;

/// Buckets across the charts and the finder at most.
pub const MAX_BUCKETS: usize = 800;

/// What the files say about the run(s) they hold.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Facts {
    pub hosts: Vec<String>,
    pub backends: Vec<String>,
    pub cpus: Vec<String>,
    /// Why the values are emulated (absent: measured).
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

fn values(rec: &Recording, key: &str) -> Vec<String> {
    rec.metadata.get(key).map(|v| v.iter().cloned().collect()).unwrap_or_default()
}

fn facts(rec: &Recording) -> Facts {
    let pts = || rec.containers.values().flat_map(|c| c.points.iter()).filter(|p| !p.stopped);
    let interval_ns = timeline::typical_interval(&rec.containers);
    let long: Vec<i64> = pts().map(|p| p.interval_ns).filter(|iv| *iv * 2 > interval_ns * 3).collect();
    let l3: BTreeSet<u64> = values(rec, "cachescope.l3_bytes").iter().filter_map(|v| v.parse().ok()).collect();
    Facts {
        hosts: rec.hosts.iter().cloned().collect(),
        backends: values(rec, "cachescope.backend"),
        cpus: values(rec, "cachescope.cpuid"),
        emulated: values(rec, "cachescope.emulated"),
        pmu: values(rec, "cachescope.pmu"),
        schema_versions: values(rec, "cachescope.schema_version"),
        // One size where the files agree; none where they do not (mixed machines).
        l3_bytes: (l3.len() == 1).then(|| l3.iter().next().copied()).flatten(),
        files: rec.files,
        rows: rec.containers.values().map(|c| c.points.len() as u64).sum(),
        containers: rec.containers.len(),
        start_ns: pts().map(|p| p.time_ns - p.interval_ns).min(),
        end_ns: pts().map(|p| p.time_ns).max(),
        interval_ns,
        long_intervals: long.len() as u64,
        longest_interval_ns: long.iter().max().copied(),
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

/// Everything `report` says about `rec`.
pub fn analyze(rec: Recording) -> Report {
    let run = facts(&rec);
    let tl = timeline::build(&rec.containers, MAX_BUCKETS);
    let l3 = run.l3_bytes;
    let episodes = tl.as_ref().map(|t| episodes::find(t, |_| l3.map(|b| b as f64))).unwrap_or_default();
    let domains = tl.as_ref().map(|t| domain_summaries(t, l3)).unwrap_or_default();
    Report { report_version: JSON_VERSION, run, containers: summaries(rec.containers), domains, episodes, timeline: tl }
}
