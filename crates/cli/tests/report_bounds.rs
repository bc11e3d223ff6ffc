//! A report no file can exhaust: a small Parquet file crafted with 20,000 distinct `domain`
//! values (it once took `report` 888 MB and 10.6 s: a structure per domain) is read in bounded
//! memory, every row of a domain past the cap left out before anything is kept for it, and
//! what was left out said; and files other tools compressed with gzip, lz4 or zstd are read.
//! The time taken is printed, not judged.

#![allow(clippy::unwrap_used)] // tests: a panic is the report

mod common;

use arrow_array::{ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray};
use common::bin;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, GzipLevel, ZstdLevel};
use parquet::file::properties::WriterProperties;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// `n` rows, one per (container, domain) from `ids` and `domains`, 1 ms apart.
fn batch(n: usize, id: impl Fn(usize) -> String, domain: impl Fn(usize) -> i32) -> RecordBatch {
    let t0 = 1_790_000_000_000_000_000i64;
    let ids: Vec<String> = (0..n).map(&id).collect();
    let i64s = |f: &dyn Fn(usize) -> i64| -> ArrayRef { Arc::new(Int64Array::from((0..n).map(f).collect::<Vec<_>>())) };
    RecordBatch::try_from_iter(vec![
        ("time_ns", i64s(&|i| t0 + i as i64 * 1_000_000)),
        ("interval_ns", i64s(&|_| 1_000_000)),
        ("host", Arc::new(StringArray::from(vec!["crafted"; n])) as ArrayRef),
        ("container_id", Arc::new(StringArray::from(ids.clone())) as ArrayRef),
        ("container_name", Arc::new(StringArray::from(ids)) as ArrayRef),
        ("domain", Arc::new(Int32Array::from((0..n).map(domain).collect::<Vec<_>>())) as ArrayRef),
        ("llc_occupancy_bytes", i64s(&|i| (i as i64 % 100) << 16)),
        ("mbm_total_bytes", i64s(&|_| 1 << 20)),
        ("mbm_local_bytes", i64s(&|_| 1 << 19)),
        ("cycles", i64s(&|_| 1000)),
        ("instructions", i64s(&|_| 2000)),
        ("llc_misses", i64s(&|_| 10)),
        ("status", Arc::new(StringArray::from(vec!["ok"; n])) as ArrayRef),
    ])
    .unwrap()
}

fn write(path: &Path, b: &RecordBatch, compression: Compression) {
    let props = WriterProperties::builder().set_compression(compression).build();
    let mut w = ArrowWriter::try_new(std::fs::File::create(path).unwrap(), b.schema(), Some(props)).unwrap();
    w.write(b).unwrap();
    w.close().unwrap();
}

/// `report` on `path`: (exit status, stdout, stderr, peak RSS of the child in KiB, wall time).
/// A minute is a hang (0.1 s here).
fn report(path: &Path, extra: &[&str]) -> (i32, String, String, i64, Duration) {
    let (o, took) = common::output_within(bin().arg("report").arg(path).args(extra), Duration::from_secs(60));
    // SAFETY: getrusage writes one rusage we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; RUSAGE_CHILDREN covers every child waited for so far (the largest wins).
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    (o.status.code().unwrap_or(-1), text(&o.stdout), text(&o.stderr), ru.ru_maxrss, took)
}

#[test]
fn a_crafted_file_with_20000_domains_is_read_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("domains.parquet");
    write(&f, &batch(20_000, |i| format!("c{}", i % 4), |i| i as i32), Compression::ZSTD(ZstdLevel::default()));
    let size = std::fs::metadata(&f).unwrap().len();
    let (code, out, err, rss_kib, took) = report(&f, &["--json"]);
    println!("{size} B file: exit {code}, peak RSS {} MiB, {took:?}; {err}", rss_kib / 1024);
    assert_eq!(code, 0, "{err}");
    // The first 256 domains kept, every row of the other 19,744 left out (one row each).
    assert!(err.contains("more than 256 L3 domains"), "what was cut is said: {err}");
    assert!(err.contains(": 19744 rows of the others left out"), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["domains"].as_array().unwrap().len(), 256);
    assert!(rss_kib < 300 * 1024, "peak RSS {} MiB", rss_kib / 1024);
    // Many series in few domains: the charts keep the first 2048, the table has them all.
    let g = dir.path().join("series.parquet");
    write(&g, &batch(6_000, |i| format!("c{i}"), |i| (i % 2) as i32), Compression::SNAPPY);
    let (code, out, err, rss_kib, took) = report(&g, &["--json"]);
    println!("6,000 series: exit {code}, peak RSS {} MiB, {took:?}; {err}", rss_kib / 1024);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("follow 2048 container x domain series at most"), "{err}");
    assert!(err.contains("(3952 rows) left out"), "the rows of every series past 2048 (one each): {err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["containers"].as_array().unwrap().len(), 6_000);
    assert!(rss_kib < 300 * 1024, "peak RSS {} MiB", rss_kib / 1024);
}

#[test]
fn files_other_tools_compressed_are_read() {
    let dir = tempfile::tempdir().unwrap();
    let b = batch(100, |i| format!("c{}", i % 3), |i| (i % 2) as i32);
    for (name, c) in [
        ("gzip", Compression::GZIP(GzipLevel::default())),
        ("lz4", Compression::LZ4_RAW),
        ("lz4-hadoop", Compression::LZ4),
        ("zstd", Compression::ZSTD(ZstdLevel::default())),
        ("snappy", Compression::SNAPPY),
        ("none", Compression::UNCOMPRESSED),
    ] {
        let f = dir.path().join(format!("{name}.parquet"));
        write(&f, &b, c);
        let (code, out, err, ..) = report(&f, &["--json"]);
        assert_eq!(code, 0, "{name}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["run"]["rows"], 100, "{name}");
        assert_eq!(v["run"]["values"], "unknown", "{name}: no metadata, no provenance column");
    }
}
