//! `report` knows runs (issue 41): a directory written by several recorder runs (restarts, a
//! crash) is one recording whose gaps are not time. Means are over measured time, checked
//! against DuckDB reading the same files (Σ bytes / Σ each run's span, the run from each file's
//! `cachescope.run_id`); percentiles hold no value across a gap; the text says the gaps; and
//! recordings of different hosts or backends are reported apart unless `--merge`.
//!
//! The files are written here by the recorder's own sink (sparse, as `record` writes them) at
//! chosen times, so that gaps from 1 s to 1 h need no waiting; one run crashes (its sink
//! abandoned mid-file) and is recovered from its journal as the next `record` would.

#![allow(clippy::unwrap_used)] // tests: a panic is the report

mod common;

use cachescope_engine::row::{ContainerMeta, Pmu, Row, Status};
use cachescope_engine::Sparse;
use cachescope_sinks::parquet::{recover_dir, Options, ParquetSink};
use common::bin;
use serde_json::Value;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

const T0: i64 = 1_790_000_000_000_000_000;
const S: i64 = 1_000_000_000;
const IV: i64 = 10_000_000;
const MIB: u64 = 1 << 20;

/// One recorder run: when it starts, how long it records, the `steady` container's occupancy
/// (MiB) throughout, and whether it crashes (its last row group never closed).
struct Run {
    start: i64,
    secs: i64,
    occ_mib: u64,
    crash: bool,
}

/// A run's files into `dir`: `steady` moves 1 MB and uses 5 ms of CPU per 10 ms interval (100
/// MB/s, half a CPU) at `occ_mib`; `idle` holds 1 MiB and moves nothing (sparse: keyframes
/// only). Written through the recorder's sink in a directory of its own (a crash leaves that
/// directory's lock with this process), then moved.
fn write_run(dir: &Path, host: &str, backend: &str, n: usize, r: &Run) {
    let own = tempfile::tempdir().unwrap();
    let mut o = Options::new(own.path().to_path_buf(), host.into());
    o.metadata = vec![
        ("cachescope.run_id".into(), format!("test-run-{host}-{backend}-{n}")),
        ("cachescope.backend".into(), backend.into()),
    ];
    let mut sink = ParquetSink::new(o).unwrap();
    let mut sparse = Sparse::new(65536, S);
    let (steady, idle) = (ContainerMeta::named("steady"), ContainerMeta::named("idle"));
    let row = |c: &std::sync::Arc<ContainerMeta>, t: i64, occ: u64, mbm: u64, cpu: u64| Row {
        time_ns: t,
        interval_ns: IV,
        container: c.clone(),
        domain: 0,
        rmid: None,
        llc_occupancy_bytes: Some(occ),
        mbm_total_bytes: Some(mbm),
        mbm_local_bytes: Some(mbm),
        pmu: Pmu::default(),
        cpu_ns: Some(cpu),
        status: Status::Ok,
        mbm_counter: None,
    };
    let intervals = r.secs * S / IV;
    for k in 1..=intervals {
        let t = r.start + k * IV;
        sink.push(
            sparse.filter(vec![row(&steady, t, r.occ_mib * MIB, 1_000_000, 5_000_000), row(&idle, t, MIB, 0, 0)]),
        );
        if k % 100 == 0 {
            sink.flush(Instant::now()).unwrap();
        }
        // A crash half-way: what was flushed is in the journal, the rest is lost.
        if r.crash && k == intervals / 2 {
            std::mem::forget(sink);
            let rec = recover_dir(own.path()).unwrap();
            assert!(!rec.is_empty(), "the crashed run's file recovered");
            return move_files(own.path(), dir, n);
        }
    }
    let (_, e) = sink.close();
    assert!(e.is_none(), "{e:?}");
    move_files(own.path(), dir, n);
}

/// The run's finished files into `to`, named apart (runs written in the same second by this
/// one process would otherwise have the same names).
fn move_files(from: &Path, to: &Path, n: usize) {
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if name.ends_with(".parquet") {
            std::fs::rename(e.path(), to.join(format!("run{n}-{name}"))).unwrap();
        }
    }
}

fn report_json(dir: &Path, more: &[&str]) -> Vec<Value> {
    let o = bin().arg("report").arg(dir).arg("--json").args(more).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // One object per recording, one after the other.
    serde_json::Deserializer::from_slice(&o.stdout).into_iter::<Value>().map(|v| v.unwrap()).collect()
}

fn container<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["containers"].as_array().unwrap().iter().find(|c| c["container_id"] == id).unwrap()
}

/// DuckDB over the same files: per container, Σ MBM bytes / Σ over runs of the span its rows
/// cover in that run (first interval's start to last row's end), and that Σ in seconds.
fn duckdb_means(dir: &Path) -> Option<Vec<(String, f64, f64)>> {
    let ok = Command::new("python3").args(["-c", "import duckdb"]).stderr(Stdio::null()).status();
    if !ok.is_ok_and(|s| s.success()) {
        cachescope_testkit::skip("python3 with duckdb is not installed (scripts/setup.sh installs it from PyPI)");
        return None;
    }
    let sql = format!(
        "WITH runs AS (SELECT file_name, decode(value) AS run FROM parquet_kv_metadata('{d}/*.parquet') \
                       WHERE decode(key) = 'cachescope.run_id'), \
              r AS (SELECT container_id, run, sum(mbm_total_bytes) AS bytes, \
                           max(time_ns) - min(time_ns - interval_ns) AS span \
                    FROM read_parquet('{d}/*.parquet', filename = true) p JOIN runs ON p.filename = runs.file_name \
                    WHERE status <> 'stopped' GROUP BY container_id, run) \
         SELECT container_id, sum(bytes) / (sum(span) / 1e9), sum(span) / 1e9 FROM r GROUP BY container_id ORDER BY 1",
        d = dir.display()
    );
    let py = "import duckdb, json, sys; print(json.dumps(duckdb.sql(sys.stdin.read()).fetchall()))";
    let mut child = Command::new("python3")
        .args(["-c", py])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(sql.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "duckdb: {}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<Vec<Value>> = serde_json::from_slice(&out.stdout).unwrap();
    Some(
        rows.iter()
            .map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_f64().unwrap(), r[2].as_f64().unwrap()))
            .collect(),
    )
}

#[test]
fn means_and_percentiles_are_over_measured_time_across_runs_and_gaps() {
    // (case, runs): one run; two 1 s apart; five with gaps of 1 s, 40 s, 10 min and 1 h; three
    // whose middle one crashed, 40 s before the last.
    let cases: Vec<(&str, Vec<Run>)> = vec![
        ("1 run", vec![Run { start: T0, secs: 6, occ_mib: 8, crash: false }]),
        (
            "2 runs, 1 s gap",
            vec![
                Run { start: T0, secs: 3, occ_mib: 8, crash: false },
                Run { start: T0 + 4 * S, secs: 9, occ_mib: 16, crash: false },
            ],
        ),
        (
            "5 runs, gaps 1 s to 1 h",
            vec![
                Run { start: T0, secs: 2, occ_mib: 8, crash: false },
                Run { start: T0 + 3 * S, secs: 2, occ_mib: 8, crash: false },
                Run { start: T0 + 45 * S, secs: 2, occ_mib: 8, crash: false },
                Run { start: T0 + 647 * S, secs: 2, occ_mib: 16, crash: false },
                Run { start: T0 + 4249 * S, secs: 6, occ_mib: 16, crash: false },
            ],
        ),
        (
            "3 runs, the middle one crashed",
            vec![
                Run { start: T0, secs: 3, occ_mib: 8, crash: false },
                Run { start: T0 + 5 * S, secs: 4, occ_mib: 8, crash: true },
                Run { start: T0 + 49 * S, secs: 9, occ_mib: 16, crash: false },
            ],
        ),
    ];
    for (case, runs) in &cases {
        let dir = tempfile::tempdir().unwrap();
        for (n, r) in runs.iter().enumerate() {
            write_run(dir.path(), "node-a", "emulated (test)", n, r);
        }
        let reports = report_json(dir.path(), &[]);
        assert_eq!(reports.len(), 1, "{case}: one host, one backend: one recording");
        let rep = &reports[0];
        assert_eq!(rep["run"]["runs"], runs.len(), "{case}: {:#}", rep["run"]);
        assert_eq!(rep["run"]["gaps"].as_array().unwrap().len(), runs.len() - 1, "{case}: {:#}", rep["run"]);
        let steady = container(rep, "steady");
        // The generator's truth: 100 MB/s and half a CPU whenever recorded, whatever the gaps.
        let mean = steady["mbm_total_mean_bytes_per_sec"].as_f64().unwrap();
        assert!((mean - 100e6).abs() < 1e-6 * 100e6, "{case}: {mean} B/s, not 100 MB/s: {steady:#}");
        let cpu = steady["cpu_mean"].as_f64().unwrap();
        assert!((cpu - 0.5).abs() < 1e-9, "{case}: {cpu} CPUs: {steady:#}");
        // Occupancy weighted by measured time only: 16 MiB for most of it where the later
        // runs are longer (carried across a gap, 8 MiB would win).
        let measured: i64 = runs.iter().map(|r| if r.crash { r.secs / 2 } else { r.secs }).sum();
        let at16: i64 = runs.iter().filter(|r| r.occ_mib == 16).map(|r| r.secs).sum();
        let p50 = steady["occupancy_p50_bytes"].as_u64().unwrap();
        assert_eq!(p50, if at16 * 2 > measured { 16 * MIB } else { 8 * MIB }, "{case}: {steady:#}");
        // And DuckDB, computing the same from the files alone.
        let Some(duck) = duckdb_means(dir.path()) else { return };
        for (id, bps, secs) in &duck {
            let c = container(rep, id);
            let (ours, seconds) = (c["mbm_total_mean_bytes_per_sec"].as_f64().unwrap(), c["seconds"].as_f64().unwrap());
            assert!((ours - bps).abs() <= 1e-6 * bps.max(1.0), "{case} {id}: report {ours} B/s, DuckDB {bps}");
            if id == "steady" {
                assert!((seconds - secs).abs() < 1e-9, "{case} {id}: report {seconds} s, DuckDB {secs} s");
            } else {
                // Sparse: an idle series' last row is a keyframe up to 1 s before its run's
                // end, to which the report extends it; DuckDB sees the rows only.
                assert!(
                    seconds >= *secs && seconds - secs <= runs.len() as f64 * 1.02,
                    "{case} {id}: {seconds} vs {secs}"
                );
            }
        }
        // The text says what was recorded and where the gaps are.
        let text = String::from_utf8_lossy(&bin().arg("report").arg(dir.path()).output().unwrap().stdout).into_owned();
        if runs.len() > 1 {
            assert!(text.contains(&format!("in {} runs; not recorded", runs.len())), "{case}: {text}");
        } else {
            assert!(!text.contains("not recorded"), "{case}: {text}");
        }
        println!("{case}: steady {mean:.0} B/s, p50 {} MiB; DuckDB {duck:?}", p50 / MIB);
    }
}

#[test]
fn unrelated_recordings_are_reported_apart_unless_merged() {
    let dir = tempfile::tempdir().unwrap();
    write_run(dir.path(), "node-a", "emulated (test)", 0, &Run { start: T0, secs: 2, occ_mib: 8, crash: false });
    write_run(dir.path(), "node-a", "none", 1, &Run { start: T0 + 10 * S, secs: 2, occ_mib: 4, crash: false });
    write_run(dir.path(), "node-b", "none", 2, &Run { start: T0 + 20 * S, secs: 2, occ_mib: 2, crash: false });
    let o = bin().arg("report").arg(dir.path()).output().unwrap();
    let (text, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    assert!(o.status.success(), "{err}");
    assert!(err.contains("these files hold 3 unrelated recordings") && err.contains("--merge"), "{err}");
    for (i, what) in
        ["host node-a, backend emulated", "host node-a, backend none", "host node-b, backend none"].iter().enumerate()
    {
        assert!(text.contains(&format!("== recording {} of 3: {what}", i + 1)), "{text}");
    }
    let apart = report_json(dir.path(), &[]);
    assert_eq!(apart.len(), 3, "one object per recording");
    for (rep, mib) in apart.iter().zip([8, 4, 2]) {
        assert_eq!(rep["run"]["runs"], 1);
        assert_eq!(container(rep, "steady")["occupancy_max_bytes"], mib * MIB, "{rep:#}");
    }
    let merged = report_json(dir.path(), &["--merge"]);
    assert_eq!(merged.len(), 1);
    assert_eq!(merged[0]["run"]["runs"], 3, "{:#}", merged[0]["run"]);
    // --html FILE: one page per recording, numbered, each path on stdout.
    let html = dir.path().join("r.html");
    let o = bin().arg("report").arg(dir.path()).arg("--html").arg(&html).output().unwrap();
    let listed = String::from_utf8_lossy(&o.stdout).into_owned();
    for f in ["r.html", "r-2.html", "r-3.html"] {
        assert!(dir.path().join(f).is_file() && listed.contains(f), "{f}: {listed}");
    }
}
