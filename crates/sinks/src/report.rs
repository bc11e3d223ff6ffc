//! `cachescope report`: per-container summaries of recorded Parquet files. Rows are sparse
//! (docs/data.md), so every value holds until the next row of its (container, domain): occupancy
//! percentiles and the share of time without an RMID are weighted by how long each value held.

use crate::SinkError;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use cachescope_engine::row::{ipc, mpki};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::path::{Path, PathBuf};

/// Parquet files named by `paths` (files, or directories searched one level deep), sorted.
/// Partial files a crash left are listed separately: run `record` on the directory again, or
/// [`crate::parquet::recover_dir`], to make them readable.
pub fn files(paths: &[PathBuf]) -> Result<(Vec<PathBuf>, Vec<PathBuf>), SinkError> {
    let (mut out, mut partial) = (Vec::new(), Vec::new());
    for p in paths {
        let md = std::fs::metadata(p).map_err(|error| SinkError::Io { what: p.display().to_string(), error })?;
        if md.is_dir() {
            let rd = std::fs::read_dir(p).map_err(|error| SinkError::Io { what: p.display().to_string(), error })?;
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().to_string();
                // Only regular files: a FIFO named *.parquet would block the read forever.
                if !std::fs::metadata(e.path()).is_ok_and(|m| m.is_file()) {
                    continue;
                }
                if name.ends_with(".parquet") {
                    out.push(e.path());
                } else if name.ends_with(".parquet.partial") {
                    partial.push(e.path());
                }
            }
        } else if md.is_file() {
            out.push(p.clone());
        } else {
            return Err(SinkError::Io {
                what: p.display().to_string(),
                error: std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file or directory"),
            });
        }
    }
    out.sort();
    partial.sort();
    Ok((out, partial))
}

/// One row as the report needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    pub time_ns: i64,
    pub interval_ns: i64,
    pub domain: i32,
    pub occupancy: Option<i64>,
    pub mbm_total: Option<i64>,
    pub mbm_local: Option<i64>,
    pub cycles: Option<i64>,
    pub instructions: Option<i64>,
    pub misses: Option<i64>,
    pub no_rmid: bool,
    /// A `stopped` row (schema 2): the end of this (container, domain) series, no values.
    pub stopped: bool,
}

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

/// A file's provenance: its metadata's word where it has cachescope's metadata (schema 1 and
/// 2 have no `provenance` column), else its rows'.
fn provenance_of(kv: &[parquet::file::metadata::KeyValue], rows: &BTreeSet<String>) -> BTreeSet<String> {
    let has = |k: &str| kv.iter().any(|x| x.key == k);
    if has("cachescope.emulated") {
        return BTreeSet::from(["emulated".to_string()]);
    }
    if !rows.is_empty() {
        return rows.clone();
    }
    let word = if has("cachescope.schema_version") { "measured" } else { "unknown" };
    BTreeSet::from([word.to_string()])
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
}

fn col_i64(b: &RecordBatch, name: &str) -> Result<Vec<Option<i64>>, SinkError> {
    let c = b.column_by_name(name).ok_or_else(|| SinkError::Parquet(format!("no column {name}")))?;
    let a =
        c.as_primitive_opt::<Int64Type>().ok_or_else(|| SinkError::Parquet(format!("column {name} is not int64")))?;
    Ok((0..a.len()).map(|i| a.is_valid(i).then(|| a.value(i))).collect())
}

/// The parquet crate panics on some malformed files (an `unwrap` in its metadata decoder,
/// found by fuzzing `report`): a read runs with the panic caught and reported as that file's
/// error. The panic message is kept from the terminal meanwhile (`report` reads on one
/// thread), and goes into the error.
fn guarded<T>(path: &Path, read: impl FnOnce() -> Result<T, SinkError>) -> Result<T, SinkError> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(read));
    std::panic::set_hook(hook);
    r.unwrap_or_else(|p| {
        let why = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned());
        Err(SinkError::Parquet(format!(
            "{}: the Parquet reader failed on it (malformed file: {})",
            path.display(),
            why.unwrap_or_default()
        )))
    })
}

/// The file-level key/value metadata (schema version, backend, ...).
pub fn file_metadata(path: &Path) -> Result<BTreeMap<String, String>, SinkError> {
    guarded(path, || metadata_of(path))
}

/// A reader of `path` once its footer is known to be sound (crate::footer) and its column
/// chunks of a plausible size: the parquet crate allocates what they declare.
fn open(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>, SinkError> {
    let ctx = |e: &dyn std::fmt::Display| SinkError::Parquet(format!("{}: {e}", path.display()));
    crate::footer::check_file(path).map_err(|e| ctx(&e))?;
    let f = File::open(path).map_err(|error| SinkError::Io { what: path.display().to_string(), error })?;
    let len = f.metadata().map_err(|error| SinkError::Io { what: path.display().to_string(), error })?.len();
    let b = ParquetRecordBatchReaderBuilder::try_new(f).map_err(|e| ctx(&e))?;
    for rg in b.metadata().row_groups() {
        for c in rg.columns() {
            // Our row groups hold at most 65,536 rows: a column chunk is MiBs at most.
            if c.uncompressed_size() > 1 << 30 || c.compressed_size() as u64 > len {
                return Err(ctx(&format!("column chunk of implausible size in {}", c.column_path())));
            }
        }
    }
    Ok(b)
}

fn metadata_of(path: &Path) -> Result<BTreeMap<String, String>, SinkError> {
    let b = open(path)?;
    Ok(b.metadata()
        .file_metadata()
        .key_value_metadata()
        .map(|kv| kv.iter().filter_map(|k| Some((k.key.clone(), k.value.clone()?))).collect())
        .unwrap_or_default())
}

/// Whether a row's values could have been measured: a positive interval of at most an hour,
/// no negative bytes or counts, no bandwidth above 10 TB/s. Anything else is a damaged or
/// hand-made file, and would print nonsense (a mean of 4.6e12 MB/s, a peak of -0.0).
fn plausible(p: &Point) -> bool {
    const HOUR_NS: i64 = 3_600_000_000_000;
    const MAX_BYTES_PER_NS: i64 = 10_000; // 10 TB/s
    let non_negative = [p.occupancy, p.mbm_total, p.mbm_local, p.cycles, p.instructions, p.misses]
        .iter()
        .all(|v| v.is_none_or(|x| x >= 0));
    let rate_ok = |v: Option<i64>| v.is_none_or(|x| x / p.interval_ns.max(1) <= MAX_BYTES_PER_NS);
    p.interval_ns > 0
        && p.interval_ns <= HOUR_NS
        && p.time_ns > 0
        && non_negative
        && rate_ok(p.mbm_total)
        && rate_ok(p.mbm_local)
        && p.occupancy.is_none_or(|o| o <= 1 << 50)
}

/// What the files say of themselves, without their rows.
#[derive(Debug, Default, Clone)]
pub struct FileInfo {
    /// Each metadata key with the values the files gave it (one, unless runs were mixed).
    pub metadata: BTreeMap<String, BTreeSet<String>>,
    pub hosts: BTreeSet<String>,
    /// As [`Recording::provenance`].
    pub provenance: BTreeSet<String>,
    /// Files read.
    pub files: usize,
    /// PMU charges dropped while they were written (their `cachescope.pmu_lost_charges`).
    pub pmu_lost_charges: u64,
}

fn strings<'a>(b: &'a RecordBatch, name: &str) -> Result<&'a arrow_array::StringArray, SinkError> {
    let c = b.column_by_name(name).ok_or_else(|| SinkError::Parquet(format!("no column {name}")))?;
    c.as_string_opt::<i32>().ok_or_else(|| SinkError::Parquet(format!("column {name} is not a string")))
}

fn text(a: &arrow_array::StringArray, i: usize) -> Option<&str> {
    a.is_valid(i).then(|| a.value(i))
}

/// Stream one file's plausible rows to `f`; the number of implausible rows skipped.
fn read_file(
    path: &Path,
    info: &mut FileInfo,
    f: &mut dyn FnMut(&str, Option<&str>, &Point),
) -> Result<u64, SinkError> {
    let ctx = |e: &dyn std::fmt::Display| SinkError::Parquet(format!("{}: {e}", path.display()));
    let builder = open(path)?;
    let kv = builder.metadata().file_metadata().key_value_metadata().cloned().unwrap_or_default();
    let reader = builder.build().map_err(|e| ctx(&e))?;
    let mut bad = 0;
    let mut said = BTreeSet::new();
    for batch in reader {
        let b = batch.map_err(|e| ctx(&e))?;
        let named = |e: SinkError| ctx(&e);
        if let Ok(p) = strings(&b, "provenance") {
            for i in [0, b.num_rows().saturating_sub(1)].into_iter().filter(|i| *i < b.num_rows()) {
                if let Some(v) = text(p, i).filter(|v| !said.contains(*v)) {
                    said.insert(v.to_string());
                }
            }
        }
        let (ids, names, status) = (
            strings(&b, "container_id").map_err(named)?,
            strings(&b, "container_name").map_err(named)?,
            strings(&b, "status").map_err(named)?,
        );
        if let Ok(h) = strings(&b, "host") {
            // One host per file as we write them: look at the first and the last row only.
            for i in [0, b.num_rows().saturating_sub(1)].into_iter().filter(|i| *i < b.num_rows()) {
                if let Some(h) = text(h, i).filter(|h| !info.hosts.contains(*h)) {
                    info.hosts.insert(h.to_string());
                }
            }
        }
        let dom = b
            .column_by_name("domain")
            .and_then(|c| c.as_primitive_opt::<Int32Type>())
            .ok_or_else(|| ctx(&"no int32 column domain"))?;
        let (t, iv) = (col_i64(&b, "time_ns").map_err(named)?, col_i64(&b, "interval_ns").map_err(named)?);
        let occ = col_i64(&b, "llc_occupancy_bytes").map_err(named)?;
        let (tot, loc) =
            (col_i64(&b, "mbm_total_bytes").map_err(named)?, col_i64(&b, "mbm_local_bytes").map_err(named)?);
        let cyc = col_i64(&b, "cycles").map_err(named)?;
        let (ins, mis) = (col_i64(&b, "instructions").map_err(named)?, col_i64(&b, "llc_misses").map_err(named)?);
        for i in 0..b.num_rows() {
            let st = text(status, i);
            let stopped = st == Some("stopped");
            let p = Point {
                time_ns: t[i].unwrap_or(0),
                interval_ns: iv[i].unwrap_or(0),
                domain: dom.value(i),
                occupancy: occ[i],
                mbm_total: tot[i],
                mbm_local: loc[i],
                cycles: cyc[i],
                instructions: ins[i],
                misses: mis[i],
                no_rmid: st == Some("no_rmid"),
                stopped,
            };
            if !stopped && !plausible(&p) {
                bad += 1;
                continue;
            }
            f(text(ids, i).unwrap_or_default(), text(names, i), &p);
        }
    }
    // Only a file that could be read contributes what it says of itself.
    info.provenance.extend(provenance_of(&kv, &said));
    for k in kv {
        if k.key == crate::parquet::PMU_LOST {
            info.pmu_lost_charges += k.value.as_deref().and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            continue;
        }
        if let Some(v) = k.value {
            info.metadata.entry(k.key).or_default().insert(v);
        }
    }
    info.files += 1;
    Ok(bad)
}

/// Every plausible row of `files` to `f` (id, name, row), in file order, and what was passed
/// over: files that cannot be read (each named, with why) and rows whose values cannot have
/// been measured. An error only when no file could be read. Memory does not grow with rows.
pub fn stream(
    files: &[PathBuf],
    f: &mut dyn FnMut(&str, Option<&str>, &Point),
) -> Result<(FileInfo, Vec<String>), SinkError> {
    let mut info = FileInfo::default();
    let mut problems = Vec::new();
    let mut first_err = None;
    let mut read = 0;
    for path in files {
        match guarded(path, || read_file(path, &mut info, &mut *f)) {
            Ok(bad) => {
                read += 1;
                if bad > 0 {
                    problems.push(format!("{}: {bad} rows with impossible values skipped", path.display()));
                }
            }
            Err(e) => {
                problems.push(format!("skipped {e}"));
                first_err.get_or_insert(e);
            }
        }
    }
    if read == 0 {
        if let Some(e) = first_err {
            return Err(e);
        }
    }
    Ok((info, problems))
}

/// The time the rows span and their typical interval, from the time columns only: (start of
/// the first interval, end of the last, median interval of the measured rows).
pub fn span(files: &[PathBuf]) -> Option<(i64, i64, i64)> {
    let (mut first, mut last) = (i64::MAX, i64::MIN);
    let mut intervals: BTreeMap<i64, u64> = BTreeMap::new();
    for path in files {
        let _ = guarded(path, || {
            let b = open(path)?;
            let mask = parquet::arrow::ProjectionMask::columns(b.parquet_schema(), ["time_ns", "interval_ns"]);
            let reader = b.with_projection(mask).build().map_err(|e| SinkError::Parquet(e.to_string()))?;
            for batch in reader {
                let b = batch.map_err(|e| SinkError::Parquet(e.to_string()))?;
                let (t, iv) = (col_i64(&b, "time_ns")?, col_i64(&b, "interval_ns")?);
                for (t, iv) in t.into_iter().zip(iv) {
                    let (Some(t), Some(iv)) = (t, iv) else { continue };
                    if t <= 0 || !(0..=3_600_000_000_000).contains(&iv) {
                        continue;
                    }
                    first = first.min(t - iv);
                    last = last.max(t);
                    // Stopped rows (interval 0) end a series; they are not a sampling period.
                    if iv > 0 {
                        *intervals.entry(iv).or_default() += 1;
                    }
                }
            }
            Ok(())
        });
    }
    if first > last {
        return None;
    }
    let n: u64 = intervals.values().sum();
    let mut acc = 0;
    let median = intervals.iter().find(|(_, c)| {
        acc += **c;
        acc * 2 > n
    });
    Some((first, last, median.map_or(1_000_000, |(iv, _)| *iv)))
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
    let end = accs.values().filter_map(|a| a.last).max();
    let mut out: Vec<Summary> = accs
        .into_iter()
        .map(|(id, a)| {
            if a.out_of_order > 0 {
                problems.push(format!(
                    "{id}: {} rows out of time order (several recorders into one directory?): summarized as they came",
                    a.out_of_order
                ));
            }
            a.finish(id, end)
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
    first: Option<i64>,
    last: Option<i64>,
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
    /// Its series ended with a `stopped` row (else it ran to the end of the recording).
    stopped: bool,
}

impl SummaryAcc {
    pub fn row(&mut self, name: Option<&str>, p: &Point) {
        if self.name.is_none() {
            self.name = name.map(String::from);
        }
        if p.stopped {
            // Its life ends here, however long ago its last sparse row was.
            self.last = Some(self.last.map_or(p.time_ns, |l| l.max(p.time_ns)));
            self.stopped = true;
            return;
        }
        self.stopped = false;
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
        let start = p.time_ns - p.interval_ns;
        self.first = Some(self.first.map_or(start, |f| f.min(start)));
        self.last = Some(self.last.map_or(p.time_ns, |l| l.max(p.time_ns)));
        for (slot, v) in self.sums.iter_mut().zip([p.mbm_total, p.mbm_local, p.cycles, p.instructions, p.misses]) {
            if let Some(v) = v {
                *slot = Some(slot.unwrap_or(0).saturating_add(v));
            }
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

    /// The summary; `end`: the end of the recording. Rows are sparse: a series that was still
    /// running there (a keyframe row within the last second) lasts to it, though an idle
    /// container's last row may be a keyframe a second before; one whose rows stopped long
    /// before without a `stopped` row (a crash, another run) ends at its last row.
    pub fn finish(mut self, id: String, end: Option<i64>) -> Summary {
        if self.t.is_some() {
            self.hold(self.t_interval.max(1));
        }
        if let (false, Some(last), Some(end)) = (self.stopped, self.last, end) {
            if end > last && end - last <= KEYFRAME_NS + 2 * self.t_interval.max(0) {
                self.last = Some(end);
            }
        }
        let (first, last) = (self.first.unwrap_or(0), self.last.unwrap_or(0));
        let seconds = (last - first).max(0) as f64 / 1e9;
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
        }
    }
}

#[cfg(test)]
mod tests;
