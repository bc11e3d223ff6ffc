//! How fast the record pipeline encodes and writes rows, and how many bytes a row costs on
//! disk: 100 containers × 2 domains of busy rows (every value changes every interval), sparse
//! filter + Parquet (zstd) against JSON lines of the same rows as the baseline, medians of 5.
//! `cargo run --release -p cachescope-sinks --example sink_bench [-- INTERVALS]`

use cachescope_engine::row::{ContainerMeta, Pmu, Row, Status};
use cachescope_engine::Sparse;
use cachescope_sinks::parquet::{Options, ParquetSink};
use std::sync::Arc;
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let intervals: i64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let metas: Vec<Arc<ContainerMeta>> = (0..100)
        .map(|i| {
            Arc::new(ContainerMeta {
                id: format!("{:064x}", 0x5eed_u64.wrapping_mul(i + 1)),
                name: Some(format!("pod-{i}/app")),
                pod_name: Some(format!("pod-{i}")),
                pod_namespace: Some("default".into()),
                pod_uid: Some(format!("0000{i:04}-1111-2222-3333-444455556666")),
                cgroup_path: format!("kubepods.slice/kubepods-pod{i}.slice/cri-containerd-{:064x}.scope", i),
                ..Default::default()
            })
        })
        .collect();
    let t0 = 1_790_000_000_000_000_000i64;
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % 1000
    };
    let batches: Vec<Vec<Row>> = (1..=intervals)
        .map(|k| {
            metas
                .iter()
                .enumerate()
                .flat_map(|(i, m)| (0..2u32).map(move |d| (i, m.clone(), d)))
                .map(|(i, m, d)| Row {
                    time_ns: t0 + k * 1_000_000,
                    interval_ns: 1_000_000,
                    container: m,
                    domain: d,
                    rmid: Some(i as u32 + 1),
                    llc_occupancy_bytes: Some((1000 + rnd()) * 98304),
                    mbm_total_bytes: Some(rnd() * 65536),
                    mbm_local_bytes: Some(rnd() * 32768),
                    pmu: Pmu {
                        cycles: Some(2_000_000 + rnd()),
                        instructions: Some(3_000_000 + rnd()),
                        llc_references: Some(20_000 + rnd()),
                        llc_misses: Some(5_000 + rnd()),
                        lost: false,
                    },
                    cpu_ns: Some(900_000 + rnd()),
                    status: Status::Ok,
                    mbm_counter: None,
                })
                .collect()
        })
        .collect();
    let rows: usize = batches.iter().map(|b| b.len()).sum();
    let (mut pq_rate, mut js_rate, mut pq_bytes, mut js_bytes) = (Vec::new(), Vec::new(), 0u64, 0u64);
    for _ in 0..5 {
        let dir = tempfile::tempdir().expect("tempdir");
        let start = Instant::now();
        let mut sink = ParquetSink::new(Options::new(dir.path().to_path_buf(), "bench-host".into())).expect("sink");
        let mut sparse = Sparse::new(98304, 1_000_000_000);
        for (i, b) in batches.iter().enumerate() {
            sink.push(sparse.filter(b.clone()));
            if i % 1000 == 999 {
                sink.flush(Instant::now()).expect("flush");
            }
        }
        let st = {
            let (st, e) = sink.close();
            assert!(e.is_none(), "close: {e:?}");
            st
        };
        pq_rate.push(rows as f64 / start.elapsed().as_secs_f64());
        pq_bytes = st.bytes_closed;
        let path = dir.path().join("rows.jsonl");
        let start = Instant::now();
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).expect("jsonl"));
        for b in &batches {
            cachescope_sinks::jsonl::write_rows(&mut f, "bench-host", Default::default(), b).expect("write");
        }
        drop(f);
        js_rate.push(rows as f64 / start.elapsed().as_secs_f64());
        js_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    }
    let (p, j) = (median(pq_rate), median(js_rate));
    let per_row = pq_bytes as f64 / rows as f64;
    println!("rows: {rows} (100 containers x 2 domains x {intervals} intervals of 1 ms, every value changing)");
    println!("parquet (sparse filter + zstd): {:.0} rows/s median of 5, {:.2} bytes/row", p, per_row);
    println!(
        "json lines baseline:            {:.0} rows/s median of 5, {:.1} bytes/row",
        j,
        js_bytes as f64 / rows as f64
    );
    println!("parquet/jsonl: {:.2}x the speed, {:.1}x smaller", p / j, js_bytes as f64 / pq_bytes.max(1) as f64);
    println!(
        "at 1 ms with every value changing: {:.1} MB/hour per container (2 domains)",
        per_row * 2.0 * 1000.0 * 3600.0 / 1e6
    );
}
