use super::*;
use crate::report;
use arrow_array::cast::AsArray;
use cachescope_engine::row::{ContainerMeta, Pmu, Status};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

fn rows(t_ms: i64, containers: usize) -> Vec<Row> {
    (0..containers)
        .map(|c| Row {
            time_ns: 1_700_000_000_000_000_000 + t_ms * 1_000_000,
            interval_ns: 1_000_000,
            container: ContainerMeta::named(&format!("c{c}")),
            domain: 0,
            rmid: if c == 0 { None } else { Some(c as u32) },
            llc_occupancy_bytes: if c == 0 { None } else { Some(c as u64 * 98304) },
            mbm_total_bytes: Some(64),
            mbm_local_bytes: None,
            pmu: Pmu { cycles: Some(1000), instructions: Some(2000), ..Default::default() },
            cpu_ns: None,
            status: if c == 0 { Status::NoRmid } else { Status::Ok },
        })
        .collect()
}

fn opts(dir: &Path) -> Options {
    let mut o = Options::new(dir.to_path_buf(), "testhost".into());
    o.metadata.push(("cachescope.backend".into(), "emulated".into()));
    o
}

fn read_all(files: &[PathBuf]) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    for f in files {
        let r = ParquetRecordBatchReaderBuilder::try_new(File::open(f).expect("open"))
            .expect("parquet")
            .build()
            .expect("reader");
        out.extend(r.map(|b| b.expect("batch")));
    }
    out
}

#[test]
fn writes_schema_metadata_and_nulls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = ParquetSink::new(opts(dir.path())).expect("sink");
    for t in 1..=10 {
        s.push(rows(t, 3));
    }
    let st = s.close().expect("close");
    assert_eq!((st.rows_accepted, st.rows_written, st.files_closed), (30, 30, 1));
    let (files, partial) = report::files(&[dir.path().to_path_buf()]).expect("files");
    assert_eq!(files.len(), 1);
    assert!(partial.is_empty());
    let md = report::file_metadata(&files[0]).expect("metadata");
    assert_eq!(md.get("cachescope.schema_version").map(String::as_str), Some("3"));
    assert_eq!(md.get("cachescope.backend").map(String::as_str), Some("emulated"));
    let batches = read_all(&files);
    let b = &batches[0];
    assert_eq!(
        b.schema().fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>(),
        schema().fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>()
    );
    for (got, want) in b.schema().fields().iter().zip(schema().fields().iter()) {
        assert_eq!(got.data_type(), want.data_type(), "{}", got.name());
    }
    let total: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(total, 30);
    let occ = b.column_by_name("llc_occupancy_bytes").expect("col");
    assert!(occ.is_null(0), "no_rmid occupancy is null, not 0");
    let status =
        b.column_by_name("status").expect("col").as_any().downcast_ref::<arrow_array::StringArray>().expect("str");
    assert_eq!(status.value(0), "no_rmid");
    assert_eq!(status.value(1), "ok");
    let host = b.column_by_name("host").expect("col").as_any().downcast_ref::<arrow_array::StringArray>().expect("str");
    assert_eq!(host.value(2), "testhost");
    // Version 2: the interval's end and start as TIMESTAMP(ns, UTC), from time_ns and interval_ns.
    let ns = |n: &str| b.column_by_name(n).expect("col").as_primitive::<arrow_array::types::Int64Type>().clone();
    let ts = |n: &str| {
        b.column_by_name(n).expect("col").as_primitive::<arrow_array::types::TimestampNanosecondType>().clone()
    };
    let (time_ns, interval_ns, time, start) = (ns("time_ns"), ns("interval_ns"), ts("time"), ts("interval_start"));
    assert_eq!(time.timezone(), Some("UTC"));
    for i in 0..b.num_rows() {
        assert_eq!(time.value(i), time_ns.value(i));
        assert_eq!(start.value(i), time_ns.value(i) - interval_ns.value(i));
    }
    let pq = parquet::file::reader::SerializedFileReader::new(std::fs::File::open(&files[0]).expect("open"))
        .expect("parquet");
    let col = parquet::file::reader::FileReader::metadata(&pq).file_metadata().schema_descr().column(20);
    assert_eq!(col.name(), "time");
    assert_eq!(
        col.logical_type_ref(),
        Some(&parquet::basic::LogicalType::Timestamp {
            is_adjusted_to_u_t_c: true,
            unit: parquet::basic::TimeUnit::NANOS
        }),
        "what DuckDB and pandas read as a UTC timestamp"
    );
}

#[test]
fn a_crash_loses_at_most_the_unflushed_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = ParquetSink::new(opts(dir.path())).expect("sink");
    s.push(rows(1, 4));
    s.flush(Instant::now()).expect("flush 1");
    s.push(rows(2, 4));
    s.flush(Instant::now()).expect("flush 2");
    s.push(rows(3, 4)); // never flushed
                        // Crash: no footer, no rename.
    crash(s);
    let (files, partial) = report::files(&[dir.path().to_path_buf()]).expect("files");
    assert!(files.is_empty());
    assert_eq!(partial.len(), 1);
    let recovered = recover_dir(dir.path()).expect("recover");
    assert_eq!(recovered.len(), 1);
    let total: usize = read_all(&recovered).iter().map(|b| b.num_rows()).sum();
    assert_eq!(total, 8, "both flushed row groups survive");
    assert_eq!(
        report::file_metadata(&recovered[0]).expect("md").get("cachescope.schema_version").map(String::as_str),
        Some("3")
    );
    // A partial file without any complete row group is removed.
    let mut s = ParquetSink::new(opts(dir.path())).expect("sink");
    s.push(rows(4, 1));
    s.open().expect("open");
    crash(s);
    assert!(recover_dir(dir.path()).expect("recover").is_empty());
    assert_eq!(report::files(&[dir.path().to_path_buf()]).expect("files").1.len(), 0);
}

#[test]
fn rotates_by_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut o = opts(dir.path());
    o.rotate_bytes = 1; // every row group closes its file
    let mut s = ParquetSink::new(o).expect("sink");
    for t in 0..3 {
        s.push(rows(t, 2));
        s.flush(Instant::now()).expect("flush");
    }
    let st = s.close().expect("close");
    assert_eq!(st.files_closed, 3);
    let (files, _) = report::files(&[dir.path().to_path_buf()]).expect("files");
    assert_eq!(files.len(), 3);
    assert_eq!(read_all(&files).iter().map(|b| b.num_rows()).sum::<usize>(), 6);
}

#[test]
fn an_unwritable_directory_is_refused_up_front() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"x").expect("write");
    let e = ParquetSink::new(opts(&file.join("sub"))).err().expect("refused");
    assert!(e.to_string().contains("plain-file"), "{e}");
}

/// Tier 3 (root): a tiny tmpfs fills up; the rows that could not be written stay in memory
/// and reach the disk once there is room again; nothing accepted is lost.
#[test]
fn disk_full_is_survived() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        cachescope_testkit::skip("disk_full_is_survived needs root to mount a tmpfs");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mnt = dir.path().join("tiny");
    std::fs::create_dir(&mnt).expect("mkdir");
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(&mnt)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        cachescope_testkit::skip("disk_full_is_survived could not mount a tmpfs");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(mnt.clone());
    let out = mnt.join("rec");
    let mut s = ParquetSink::new(opts(&out)).expect("sink");
    s.push(rows(0, 50));
    s.flush(Instant::now()).expect("first row group fits");
    // Fill the filesystem.
    let filler = mnt.join("filler");
    let mut f = File::create(&filler).expect("filler");
    let chunk = vec![0x5au8; 4096];
    while f.write_all(&chunk).is_ok() {}
    let _ = f.sync_all();
    drop(f);
    let mut accepted = 50;
    let mut failures = 0;
    for t in 1..20 {
        s.push(rows(t, 50));
        accepted += 50;
        if s.flush(Instant::now()).is_err() {
            failures += 1;
        }
    }
    assert!(failures > 0, "the full disk was noticed");
    let st = s.stats().lock().expect("stats").clone();
    assert!(st.failing.is_some() && st.rows_pending > 0, "{st:?}");
    // Room again: everything pending is written.
    std::fs::remove_file(&filler).expect("rm filler");
    s.flush(Instant::now()).expect("flush after space is back");
    let st = s.close().expect("close");
    assert_eq!(st.rows_dropped, 0);
    let (files, partial) = report::files(std::slice::from_ref(&out)).expect("files");
    assert!(partial.is_empty(), "{partial:?} {st:?}");
    let total: usize = read_all(&files).iter().map(|b| b.num_rows()).sum();
    assert_eq!(total as u64, accepted, "every accepted row is on disk, in valid files: {st:?}");
    let left: Vec<String> = std::fs::read_dir(&out)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| !n.ends_with(".parquet") && n != LOCK)
        .collect();
    assert!(left.is_empty(), "nothing but finished files left behind: {left:?}");
}

/// What a crash leaves: the files as they are, the directory's lock released (the kernel
/// drops a dead process's flock; a forgotten sink in this process would still hold it).
fn crash(mut s: ParquetSink) {
    s._lock.take();
    std::mem::forget(s);
}
