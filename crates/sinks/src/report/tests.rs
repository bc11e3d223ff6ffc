use super::*;
use crate::parquet::{Options, ParquetSink};
use cachescope_engine::row::{ContainerMeta, Pmu, Row, Status};
use cachescope_engine::Sparse;

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
            pmu: Pmu { cycles: Some(1000), instructions: Some(500), llc_references: None, llc_misses: Some(5) },
            cpu_ns: None,
            status,
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
    sink.close().expect("close");
}

#[test]
fn summaries_weight_sparse_rows_by_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    record(dir.path());
    let (f, _) = files(&[dir.path().to_path_buf()]).expect("files");
    let s = summarize(&f).expect("summarize");
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
    let t = table(&s);
    assert!(t.lines().count() == 4 && t.contains("100.0"), "{t}");
}
