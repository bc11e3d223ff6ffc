use super::*;
use cachescope_engine::row::{ContainerMeta, Pmu, Row, Status};
use cachescope_engine::Sparse;
use cachescope_sinks::parquet::{Options, ParquetSink};
use cachescope_sinks::read::files;
use std::path::Path;

const T0: i64 = 1_700_000_000_000_000_000;

/// 3 s at 10 ms of a container whose occupancy is 1 MiB for the first 2 s and 3 MiB for the
/// last, moving 1 MB per interval (100 MB/s), plus one that waits without an RMID for its
/// first second. Written sparse, as `record` does.
fn record(dir: &Path) {
    let mut sink = ParquetSink::new(Options::new(dir.to_path_buf(), "h".into())).expect("sink");
    let mut sparse = Sparse::new(65536, 1_000_000_000);
    let (a, b) = (ContainerMeta::named("a"), ContainerMeta::named("b"));
    for k in 1..=300i64 {
        let t = T0 + k * 10_000_000;
        let mk = |c: &std::sync::Arc<ContainerMeta>, occ, mbm, status| Row {
            time_ns: t,
            interval_ns: 10_000_000,
            container: c.clone(),
            domain: 0,
            rmid: None,
            llc_occupancy_bytes: occ,
            mbm_total_bytes: mbm,
            mbm_local_bytes: mbm.map(|x| x / 2),
            pmu: Pmu {
                cycles: Some(1000),
                instructions: Some(500),
                llc_references: None,
                llc_misses: Some(5),
                lost: false,
            },
            cpu_ns: None,
            status,
            mbm_counter: None,
        };
        let occ_a = if k <= 200 { 1 << 20 } else { 3 << 20 };
        let rows = vec![
            mk(&a, Some(occ_a), Some(1_000_000), Status::Ok),
            // b runs nothing: no counter moves.
            Row {
                pmu: Pmu::default(),
                cpu_ns: None,
                ..if k <= 100 {
                    mk(&b, None, None, Status::NoRmid)
                } else {
                    mk(&b, Some(4096 * 16), Some(0), Status::Ok)
                }
            },
        ];
        sink.push(sparse.filter(rows));
    }
    {
        let (st, e) = sink.close();
        assert!(e.is_none(), "close: {e:?}");
        st
    };
}

#[test]
fn summaries_weight_sparse_rows_by_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    record(dir.path());
    let (f, _) = files(&[dir.path().to_path_buf()]).expect("files");
    let (s, problems) = summarize(&f).expect("summarize");
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(s.len(), 2);
    let a = s.iter().find(|x| x.container_id == "a").expect("a");
    assert!((a.seconds - 3.0).abs() < 1e-9, "{}", a.seconds);
    assert_eq!(a.occupancy_p50_bytes, Some(1 << 20));
    assert_eq!(a.occupancy_p99_bytes, Some(3 << 20));
    assert_eq!(a.occupancy_max_bytes, Some(3 << 20));
    let mean = a.mbm_total_mean_bytes_per_sec.expect("mean");
    assert!((mean - 100e6).abs() < 1.0, "{mean}");
    assert_eq!(a.mbm_total_peak_bytes_per_sec, Some(100e6));
    assert_eq!(a.ipc, Some(0.5));
    assert_eq!(a.llc_mpki, Some(10.0));
    assert_eq!(a.no_rmid_share, 0.0);
    let b = s.iter().find(|x| x.container_id == "b").expect("b");
    // b's rows are sparse: a second of no_rmid, then unchanged occupancy (keyframes only).
    assert!(b.samples < 20, "{}", b.samples);
    assert!((b.no_rmid_share - 1.0 / 3.0).abs() < 0.02, "{}", b.no_rmid_share);
    assert_eq!(b.occupancy_p99_bytes, Some(4096 * 16));
}

/// A directory with a good file, a file that is not Parquet, and a hand-made file with
/// impossible values: the good one is summarized, the bad one named, the impossible rows
/// counted and left out (no mean of 4.6e12 MB/s, no peak of -0.0).
#[test]
fn bad_files_are_named_and_impossible_rows_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    record(dir.path());
    std::fs::write(dir.path().join("zz-broken.parquet"), b"not parquet at all").expect("write");
    let odd = tempfile::tempdir().expect("tempdir");
    let mut sink = ParquetSink::new(Options::new(odd.path().to_path_buf(), "h".into())).expect("sink");
    let c = ContainerMeta::named("odd");
    let mk = |k: i64, interval: i64, mbm: i64| Row {
        time_ns: T0 + k * 1_000_000,
        interval_ns: interval,
        container: c.clone(),
        domain: 0,
        rmid: None,
        llc_occupancy_bytes: Some(4096),
        mbm_total_bytes: Some(mbm as u64),
        mbm_local_bytes: None,
        pmu: Pmu::default(),
        cpu_ns: None,
        status: Status::Ok,
        mbm_counter: None,
    };
    // 1 GB in 1 ns, and a zero interval: impossible; then two plausible rows.
    sink.push(vec![mk(1, 1, 1_000_000_000), mk(2, 0, 10), mk(3, 1_000_000, 1_000_000), mk(4, 1_000_000, 1_000_000)]);
    {
        let (st, e) = sink.close();
        assert!(e.is_none(), "close: {e:?}");
        st
    };
    for f in std::fs::read_dir(odd.path()).expect("dir").flatten() {
        let name = format!("odd-{}", f.file_name().to_string_lossy());
        std::fs::copy(f.path(), dir.path().join(name)).expect("copy");
    }
    let (f, _) = files(&[dir.path().to_path_buf()]).expect("files");
    let (s, problems) = summarize(&f).expect("the good files are read");
    assert!(s.iter().any(|x| x.container_id == "a"), "{s:?}");
    assert!(problems.iter().any(|p| p.contains("zz-broken.parquet")), "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("2 rows with impossible values")), "{problems:?}");
    let odd = s.iter().find(|x| x.container_id == "odd").expect("odd");
    let mean = odd.mbm_total_mean_bytes_per_sec.expect("mean");
    assert!((mean - 1e9).abs() < 1e6, "{mean}");
    // Nothing readable at all is an error that names the file.
    let e = summarize(&[dir.path().join("zz-broken.parquet")]).unwrap_err().to_string();
    assert!(e.contains("zz-broken.parquet"), "{e}");
}

/// An idle container's last sparse row is a keyframe up to a second before the recording
/// ends; it ran to the end all the same (no `stopped` row), and SECONDS says so.
#[test]
fn an_idle_container_lasts_to_the_end_of_the_recording() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut sink = ParquetSink::new(Options::new(dir.path().to_path_buf(), "h".into())).expect("sink");
    let mut sparse = Sparse::new(65536, 1_000_000_000);
    let (busy, idle) = (ContainerMeta::named("busy"), ContainerMeta::named("idle"));
    for k in 1..=290i64 {
        let mk = |c: &std::sync::Arc<ContainerMeta>, mbm| Row {
            time_ns: T0 + k * 10_000_000,
            interval_ns: 10_000_000,
            container: c.clone(),
            domain: 0,
            rmid: None,
            llc_occupancy_bytes: Some(1 << 20),
            mbm_total_bytes: mbm,
            mbm_local_bytes: None,
            pmu: Pmu::default(),
            cpu_ns: None,
            status: Status::Ok,
            mbm_counter: None,
        };
        sink.push(sparse.filter(vec![mk(&busy, Some(1_000_000)), mk(&idle, Some(0))]));
    }
    {
        let (st, e) = sink.close();
        assert!(e.is_none(), "close: {e:?}");
        st
    };
    let (f, _) = files(&[dir.path().to_path_buf()]).expect("files");
    let (s, _) = summarize(&f).expect("summarize");
    let seconds = |id: &str| s.iter().find(|x| x.container_id == id).expect(id).seconds;
    assert!((seconds("busy") - 2.9).abs() < 1e-9, "{}", seconds("busy"));
    assert!((seconds("idle") - 2.9).abs() < 1e-9, "idle ran to the end: {}", seconds("idle"));
}

/// CPU time (the `none` backend's one measured column): mean over the covered time, and the
/// median and 99th percentile of each whole second's use, a second without a row counting 0.
#[test]
fn cpu_use_is_summarised_per_second_with_silent_seconds_as_zero() {
    let pt = |k: i64, cpu: i64| Point {
        time_ns: T0 + k * 10_000_000,
        interval_ns: 10_000_000,
        domain: 0,
        occupancy: None,
        mbm_total: None,
        mbm_local: None,
        cycles: None,
        instructions: None,
        misses: None,
        cpu_ns: Some(cpu),
        no_rmid: false,
        stopped: false,
    };
    // 4 s at 10 ms: 1 ms of CPU per interval (0.1 CPU) for 2 s, no row for 1 s (sparse: it
    // ran nothing), then 5 ms per interval (0.5 CPU) for 1 s.
    let mut points: Vec<Point> = (1..=200).map(|k| pt(k, 1_000_000)).collect();
    points.extend((301..=400).map(|k| pt(k, 5_000_000)));
    let s = summaries(BTreeMap::from([("a".to_string(), Recorded { name: None, points })])).remove(0);
    assert!((s.seconds - 4.0).abs() < 1e-9, "{s:?}");
    let mean = s.cpu_mean.unwrap();
    assert!((mean - (0.1 * 2.0 + 0.5) / 4.0).abs() < 1e-9, "{mean}");
    assert!((s.cpu_p50.unwrap() - 0.1).abs() < 1e-9, "{s:?}");
    assert!((s.cpu_p99.unwrap() - 0.5).abs() < 1e-9, "{s:?}");
    // Files without the column: no figure, not 0.
    let mut p = pt(1, 0);
    p.cpu_ns = None;
    let s = summaries(BTreeMap::from([("b".to_string(), Recorded { name: None, points: vec![p] })])).remove(0);
    assert_eq!((s.cpu_mean, s.cpu_p50, s.cpu_p99), (None, None, None));
}
