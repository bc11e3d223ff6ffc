//! Reading recorded Parquet files back (docs/data.md): which files a path names, what each
//! says of itself, and its plausible rows streamed in file order, one file at a time, with
//! files that cannot be read and rows that cannot have been measured named, not fatal.
//! What is made of the rows (summaries, timelines, episodes) is `cachescope-report`'s.

use crate::pages::Checked;
use crate::SinkError;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder};
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
    /// CPU time in the interval (schema 3's `cpu_ns`; None in older files).
    pub cpu_ns: Option<i64>,
    pub no_rmid: bool,
    /// A `stopped` row (schema 2): the end of this (container, domain) series, no values.
    pub stopped: bool,
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
/// Its pages' headers are checked as they are read (crate::pages).
fn open(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<Checked>, SinkError> {
    let ctx = |e: &dyn std::fmt::Display| SinkError::Parquet(format!("{}: {e}", path.display()));
    crate::footer::check_file(path).map_err(|e| ctx(&e))?;
    let f = File::open(path).map_err(|error| SinkError::Io { what: path.display().to_string(), error })?;
    let len = f.metadata().map_err(|error| SinkError::Io { what: path.display().to_string(), error })?.len();
    let meta = ArrowReaderMetadata::load(&f, ArrowReaderOptions::default()).map_err(|e| ctx(&e))?;
    let b = ParquetRecordBatchReaderBuilder::new_with_metadata(Checked::new(f, meta.metadata()), meta);
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
    let non_negative = [p.occupancy, p.mbm_total, p.mbm_local, p.cycles, p.instructions, p.misses, p.cpu_ns]
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
        // At most 4,096 CPUs' worth of CPU time in the interval.
        && p.cpu_ns.is_none_or(|c| c / p.interval_ns.max(1) <= 4096)
}

/// What the files say of themselves, without their rows.
#[derive(Debug, Default, Clone)]
pub struct FileInfo {
    /// Each metadata key with the values the files gave it (one, unless runs were mixed).
    pub metadata: BTreeMap<String, BTreeSet<String>>,
    pub hosts: BTreeSet<String>,
    /// Where the values come from, one entry per kind seen: `measured`, `emulated`, or
    /// `unknown` (neither the rows' `provenance` nor cachescope's metadata says).
    pub provenance: BTreeSet<String>,
    /// Files read.
    pub files: usize,
    /// PMU charges dropped while they were written (their `cachescope.pmu_lost_charges`).
    pub pmu_lost_charges: u64,
}

impl FileInfo {
    /// Add what other files said (another run's), as if they had been read with these.
    pub fn absorb(&mut self, other: FileInfo) {
        for (k, v) in other.metadata {
            self.metadata.entry(k).or_default().extend(v);
        }
        self.hosts.extend(other.hosts);
        self.provenance.extend(other.provenance);
        self.files += other.files;
        self.pmu_lost_charges += other.pmu_lost_charges;
    }
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
        // Files from before the column: no CPU time, not an error.
        let cpu = if b.column_by_name("cpu_ns").is_some() { col_i64(&b, "cpu_ns").map_err(named)? } else { Vec::new() };
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
                cpu_ns: cpu.get(i).copied().flatten(),
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

/// The metadata key naming the recorder run a file belongs to (docs/data.md): random, made
/// at the run's start, the same in every file of that run (and in a file recovered after it
/// crashed).
pub const RUN_ID: &str = "cachescope.run_id";

/// One recorder run's files: one stretch of measured time. Between two runs nothing was
/// recorded (a restart, an upgrade, a crash): that time is a gap, not time without activity.
#[derive(Debug, Clone, Default)]
pub struct RunFiles {
    /// [`RUN_ID`]; for files from before it (2026-11-29), the host and the recorder's PID from
    /// the file name (`cachescope-HOST-STAMP-PID-SEQ.parquet`), else the file's own name.
    pub id: String,
    /// The first row's `host`, and `cachescope.backend`: runs that differ in either are
    /// unrelated recordings.
    pub host: String,
    pub backend: String,
    pub files: Vec<PathBuf>,
    /// Start of the first interval and end of the last, ns (None: no row).
    pub span: Option<(i64, i64)>,
    /// Rows per sampling interval (stopped rows, interval 0, left out).
    pub intervals: BTreeMap<i64, u64>,
    /// A file whose metadata or time columns could not be read: a run of its own, which
    /// [`stream`] names with why.
    pub unreadable: bool,
}

impl RunFiles {
    /// The interval most of its rows have (1 ms where none has).
    pub fn typical_interval(runs: &[&RunFiles]) -> i64 {
        let mut all: BTreeMap<i64, u64> = BTreeMap::new();
        for r in runs {
            for (iv, n) in &r.intervals {
                *all.entry(*iv).or_default() += n;
            }
        }
        let n: u64 = all.values().sum();
        let mut acc = 0;
        all.iter()
            .find(|(_, c)| {
                acc += **c;
                acc * 2 > n
            })
            .map_or(1_000_000, |(iv, _)| *iv)
    }
}

/// The run id of a file without [`RUN_ID`]: host and PID from its name, which a recorder's
/// files share (`cachescope-HOST-YYYYmmddTHHMMSSZ-PID-SEQ.parquet`; HOST may hold dashes).
fn legacy_run_id(path: &Path) -> String {
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let stem = name.strip_suffix(".parquet").unwrap_or(&name);
    let parts: Vec<&str> = stem.rsplitn(4, '-').collect();
    match parts.as_slice() {
        [seq, pid, stamp, host_part]
            if seq.parse::<u64>().is_ok() && pid.parse::<u32>().is_ok() && stamp.ends_with('Z') =>
        {
            format!("{}-pid{pid}", host_part.strip_prefix("cachescope-").unwrap_or(host_part))
        }
        _ => format!("file {name}"),
    }
}

/// Which run each file belongs to, with each run's time span and intervals, from the files'
/// metadata and time columns only (a first, cheap pass). Runs in the order their first file
/// comes in `files`; a file that cannot be read is left to [`stream`] to name.
pub fn runs(files: &[PathBuf]) -> Vec<RunFiles> {
    let mut out: Vec<RunFiles> = Vec::new();
    for path in files {
        let read = guarded(path, || {
            let b = open(path)?;
            let kv = b.metadata().file_metadata().key_value_metadata().cloned().unwrap_or_default();
            let meta = |k: &str| kv.iter().find(|x| x.key == k).and_then(|x| x.value.clone());
            let id = meta(RUN_ID).unwrap_or_else(|| legacy_run_id(path));
            let backend = meta("cachescope.backend").unwrap_or_default();
            let cols: Vec<&str> = ["time_ns", "interval_ns", "host"]
                .into_iter()
                .filter(|c| b.schema().fields().iter().any(|f| f.name() == c))
                .collect();
            let mask = parquet::arrow::ProjectionMask::columns(b.parquet_schema(), cols);
            let reader = b.with_projection(mask).build().map_err(|e| SinkError::Parquet(e.to_string()))?;
            let (mut first, mut last) = (i64::MAX, i64::MIN);
            let mut intervals: BTreeMap<i64, u64> = BTreeMap::new();
            let mut host = None;
            for batch in reader {
                let b = batch.map_err(|e| SinkError::Parquet(e.to_string()))?;
                if host.is_none() {
                    host = strings(&b, "host")
                        .ok()
                        .and_then(|h| (h.len() > 0).then(|| text(h, 0)))
                        .flatten()
                        .map(String::from);
                }
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
            let i = match out.iter().position(|r| r.id == id) {
                Some(i) => i,
                None => {
                    out.push(RunFiles { id, backend, ..RunFiles::default() });
                    out.len() - 1
                }
            };
            let r = &mut out[i];
            r.files.push(path.clone());
            if r.host.is_empty() {
                r.host = host.unwrap_or_default();
            }
            if first <= last {
                r.span = Some(r.span.map_or((first, last), |(a, b)| (a.min(first), b.max(last))));
            }
            for (iv, n) in intervals {
                *r.intervals.entry(iv).or_default() += n;
            }
            Ok(())
        });
        if read.is_err() {
            let id = format!("unreadable {}", path.display());
            out.push(RunFiles { id, files: vec![path.clone()], unreadable: true, ..RunFiles::default() });
        }
    }
    out
}
