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
use std::collections::BTreeMap;
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
    pub metadata: BTreeMap<String, std::collections::BTreeSet<String>>,
    pub hosts: std::collections::BTreeSet<String>,
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
}

fn col_i64(b: &RecordBatch, name: &str) -> Result<Vec<Option<i64>>, SinkError> {
    let c = b.column_by_name(name).ok_or_else(|| SinkError::Parquet(format!("no column {name}")))?;
    let a =
        c.as_primitive_opt::<Int64Type>().ok_or_else(|| SinkError::Parquet(format!("column {name} is not int64")))?;
    Ok((0..a.len()).map(|i| a.is_valid(i).then(|| a.value(i))).collect())
}

fn col_str(b: &RecordBatch, name: &str) -> Result<Vec<Option<String>>, SinkError> {
    let c = b.column_by_name(name).ok_or_else(|| SinkError::Parquet(format!("no column {name}")))?;
    let a = c.as_string_opt::<i32>().ok_or_else(|| SinkError::Parquet(format!("column {name} is not a string")))?;
    Ok((0..a.len()).map(|i| a.is_valid(i).then(|| a.value(i).to_string())).collect())
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

fn weighted_quantile(v: &mut [(u64, i64)], q: f64) -> Option<u64> {
    v.sort_unstable();
    let total: i64 = v.iter().map(|x| x.1).sum();
    if v.is_empty() {
        return None;
    }
    let target = (q * total as f64).ceil() as i64;
    let mut acc = 0;
    for &(x, w) in v.iter() {
        acc += w;
        if acc >= target {
            return Some(x);
        }
    }
    v.last().map(|x| x.0)
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

/// Read one file's rows into `rec`; the number of implausible rows skipped.
fn read_file(path: &Path, rec: &mut Recording) -> Result<u64, SinkError> {
    let ctx = |e: &dyn std::fmt::Display| SinkError::Parquet(format!("{}: {e}", path.display()));
    let builder = open(path)?;
    let kv = builder.metadata().file_metadata().key_value_metadata().cloned().unwrap_or_default();
    let reader = builder.build().map_err(|e| ctx(&e))?;
    let mut hosts = std::collections::BTreeSet::new();
    let by = &mut rec.containers;
    let mut bad = 0;
    for batch in reader {
        let b = batch.map_err(|e| ctx(&e))?;
        let named = |e: SinkError| ctx(&e);
        let ids = col_str(&b, "container_id").map_err(named)?;
        let names = col_str(&b, "container_name").map_err(named)?;
        let status = col_str(&b, "status").map_err(named)?;
        if let Ok(h) = col_str(&b, "host") {
            hosts.extend(h.into_iter().flatten());
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
            let stopped = status[i].as_deref() == Some("stopped");
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
                no_rmid: status[i].as_deref() == Some("no_rmid"),
                stopped,
            };
            if !stopped && !plausible(&p) {
                bad += 1;
                continue;
            }
            let acc = by.entry(ids[i].clone().unwrap_or_default()).or_default();
            if acc.name.is_none() {
                acc.name = names[i].clone();
            }
            acc.points.push(p);
        }
    }
    // Only a file that could be read contributes what it says of itself.
    for k in kv {
        if let Some(v) = k.value {
            rec.metadata.entry(k.key).or_default().insert(v);
        }
    }
    rec.hosts.extend(hosts);
    rec.files += 1;
    Ok(bad)
}

/// Summaries for every container in `files`, sorted by p99 occupancy (highest first), and
/// what was passed over: files that cannot be read (each named, with why) and rows whose
/// values cannot have been measured. An error only when no file could be read.
pub fn summarize(files: &[PathBuf]) -> Result<(Vec<Summary>, Vec<String>), SinkError> {
    let (rec, problems) = load(files)?;
    Ok((summaries(rec.containers), problems))
}

/// Per-container summaries of what was loaded, sorted by p99 occupancy (highest first).
pub fn summaries(containers: BTreeMap<String, Recorded>) -> Vec<Summary> {
    let mut out: Vec<Summary> = containers.into_iter().map(|(id, acc)| summarize_one(id, acc)).collect();
    out.sort_by(|a, b| b.occupancy_p99_bytes.cmp(&a.occupancy_p99_bytes).then(a.container_id.cmp(&b.container_id)));
    out
}

/// Every row of `files`, and what was passed over: files that cannot be read (each named,
/// with why) and rows whose values cannot have been measured. An error only when no file
/// could be read.
pub fn load(files: &[PathBuf]) -> Result<(Recording, Vec<String>), SinkError> {
    let mut rec = Recording::default();
    let mut problems = Vec::new();
    let mut first_err = None;
    let mut read = 0;
    for path in files {
        match guarded(path, || read_file(path, &mut rec)) {
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
    Ok((rec, problems))
}

fn summarize_one(id: String, mut acc: Recorded) -> Summary {
    acc.points.retain(|p| !p.stopped);
    acc.points.sort_by_key(|p| (p.time_ns, p.domain));
    let pts = &acc.points;
    let first = pts.iter().map(|p| p.time_ns - p.interval_ns).min().unwrap_or(0);
    let last = pts.iter().map(|p| p.time_ns).max().unwrap_or(0);
    let seconds = (last - first).max(0) as f64 / 1e9;
    let mut times: Vec<i64> = pts.iter().map(|p| p.time_ns).collect();
    times.dedup();
    // Occupancy: the container's total over domains, each domain's value carried forward,
    // held from one sample time to the next.
    let mut cur: BTreeMap<i32, Option<i64>> = BTreeMap::new();
    let mut occ: Vec<(u64, i64)> = Vec::new();
    let (mut held_total, mut held_no_rmid) = (0i64, 0i64);
    let mut no_rmid: BTreeMap<i32, bool> = BTreeMap::new();
    let mut i = 0;
    for (k, &t) in times.iter().enumerate() {
        while i < pts.len() && pts[i].time_ns == t {
            cur.insert(pts[i].domain, pts[i].occupancy);
            no_rmid.insert(pts[i].domain, pts[i].no_rmid);
            i += 1;
        }
        let until = times.get(k + 1).copied().unwrap_or(t + pts[i - 1].interval_ns.max(1));
        let w = (until - t).max(1);
        let known: Vec<i64> = cur.values().flatten().copied().collect();
        if !known.is_empty() {
            occ.push((known.iter().sum::<i64>().max(0) as u64, w));
        }
        held_total += w * no_rmid.len() as i64;
        held_no_rmid += w * no_rmid.values().filter(|x| **x).count() as i64;
    }
    let max = occ.iter().map(|x| x.0).max();
    let sum = |f: fn(&Point) -> Option<i64>| -> Option<i64> {
        pts.iter().filter_map(f).fold(None, |a: Option<i64>, x| Some(a.unwrap_or(0).saturating_add(x)))
    };
    let per_sec = |v: Option<i64>| v.filter(|_| seconds > 0.0).map(|b| b as f64 / seconds);
    let mut per_second: BTreeMap<i64, i64> = BTreeMap::new();
    for p in pts {
        if let Some(b) = p.mbm_total {
            *per_second.entry((p.time_ns - 1).div_euclid(1_000_000_000)).or_default() += b;
        }
    }
    // Whole seconds only: the first and last are usually partial.
    let whole: Vec<i64> = if per_second.len() > 2 {
        per_second.values().skip(1).take(per_second.len() - 2).copied().collect()
    } else {
        per_second.values().copied().collect()
    };
    // Counts are never negative on disk; the columns are int64 only because Parquet has no u64.
    let counted = |f: fn(&Point) -> Option<i64>| sum(f).map(|x| x.max(0) as u64);
    let (cycles, instructions, misses) = (counted(|p| p.cycles), counted(|p| p.instructions), counted(|p| p.misses));
    Summary {
        container_id: id,
        container_name: acc.name,
        seconds,
        samples: times.len() as u64,
        occupancy_p50_bytes: weighted_quantile(&mut occ.clone(), 0.5),
        occupancy_p99_bytes: weighted_quantile(&mut occ, 0.99),
        occupancy_max_bytes: max,
        mbm_total_mean_bytes_per_sec: per_sec(sum(|p| p.mbm_total)),
        mbm_total_peak_bytes_per_sec: whole.iter().max().map(|b| *b as f64),
        mbm_local_mean_bytes_per_sec: per_sec(sum(|p| p.mbm_local)),
        ipc: ipc(instructions, cycles),
        llc_mpki: mpki(misses, instructions),
        no_rmid_share: if held_total > 0 { held_no_rmid as f64 / held_total as f64 } else { 0.0 },
    }
}

/// The summaries as a plain table.
pub fn table(rows: &[Summary]) -> String {
    use std::fmt::Write;
    let mib = |v: Option<u64>| v.map_or("-".into(), |b| format!("{:.2}", b as f64 / 1048576.0));
    let mbs = |v: Option<f64>| v.map_or("-".into(), |b| format!("{:.1}", b / 1e6));
    let f2 = |v: Option<f64>| v.map_or("-".into(), |x| format!("{x:.2}"));
    let mut o = String::new();
    let _ = writeln!(
        o,
        "{:<28} {:>8} {:>8} {:>9} {:>9} {:>9} {:>10} {:>10} {:>6} {:>7} {:>7}",
        "CONTAINER",
        "SECONDS",
        "SAMPLES",
        "OCC_P50",
        "OCC_P99",
        "OCC_MAX",
        "MBM_MEAN",
        "MBM_PEAK",
        "IPC",
        "MPKI",
        "NO_RMID"
    );
    let _ = writeln!(
        o,
        "{:<28} {:>8} {:>8} {:>9} {:>9} {:>9} {:>10} {:>10} {:>6} {:>7} {:>7}",
        "", "", "", "MiB", "MiB", "MiB", "MB/s", "MB/s", "", "", "%"
    );
    for s in rows {
        // Names come from cgroup paths and runtimes: control characters are shown escaped.
        let label: String = s
            .container_name
            .as_deref()
            .unwrap_or(&s.container_id)
            .chars()
            .flat_map(|c| if c.is_control() { c.escape_default().collect() } else { vec![c] })
            .collect();
        let _ = writeln!(
            o,
            "{:<28} {:>8.1} {:>8} {:>9} {:>9} {:>9} {:>10} {:>10} {:>6} {:>7} {:>7.1}",
            label,
            s.seconds,
            s.samples,
            mib(s.occupancy_p50_bytes),
            mib(s.occupancy_p99_bytes),
            mib(s.occupancy_max_bytes),
            mbs(s.mbm_total_mean_bytes_per_sec),
            mbs(s.mbm_total_peak_bytes_per_sec),
            f2(s.ipc),
            f2(s.llc_mpki),
            s.no_rmid_share * 100.0
        );
    }
    o
}

#[cfg(test)]
mod tests;
