//! The README's DuckDB queries, run as a user would run them, against recordings of the bundled
//! scenario (whose answers are known): peak occupancy per minute, a 100 ms bandwidth series
//! within 2 % of the scenario's constant rates, and L3 domain totals that never exceed the L3
//! (the `stopped` rows end what readers carry forward). Also: a recording in progress is
//! readable, and files written back by DuckDB and pyarrow (snappy) are read by `report`.
//! DuckDB comes from PyPI (scripts/setup.sh installs it); without it the test says so and skips.

#![allow(clippy::unwrap_used)] // tests: a panic is the report

mod common;

use common::bin;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn scenario() -> String {
    repo().join("scenarios/noisy-neighbour.toml").display().to_string()
}

/// The README's ```sql blocks that start with `-- query: NAME`.
fn readme_queries() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let mut out = BTreeMap::new();
    for block in text.split("```sql\n").skip(1) {
        let body = block.split("```").next().unwrap();
        if let Some(name) = body.lines().next().and_then(|l| l.strip_prefix("-- query: ")) {
            out.insert(name.trim().to_string(), body.to_string());
        }
    }
    out
}

/// Runs each SQL text in DuckDB (Python); per query, its rows (timestamps as strings) and
/// how long it took.
const RUNNER: &str = r#"
import duckdb, json, sys, time
con = duckdb.connect()
out = []
for q in json.load(sys.stdin):
    t = time.perf_counter()
    rows = con.sql(q).fetchall() if q.lstrip().upper().startswith(("SELECT", "WITH", "--")) else con.execute(q).fetchall()
    out.append({"rows": rows, "seconds": time.perf_counter() - t})
print(json.dumps(out, default=str))
"#;

fn duckdb(queries: &[String]) -> Vec<(Vec<Vec<Value>>, f64)> {
    let mut child = Command::new("python3")
        .args(["-c", RUNNER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(serde_json::to_string(queries).unwrap().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "duckdb: {}", String::from_utf8_lossy(&out.stderr));
    let v: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    v.into_iter()
        .map(|r| {
            let rows = r["rows"].as_array().unwrap().iter().map(|row| row.as_array().unwrap().clone()).collect();
            (rows, r["seconds"].as_f64().unwrap())
        })
        .collect()
}

fn duckdb_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import duckdb, pytz"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        cachescope_testkit::skip(
            "python3 with duckdb and pytz is not installed (scripts/setup.sh installs them from PyPI)",
        );
    }
    ok
}

fn on(dir: &Path, sql: &str) -> String {
    sql.replace("'DIR/*.parquet'", &format!("'{}/*.parquet'", dir.display()))
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

/// The 100 ms series of `container` with the first and last bucket of its life left out
/// (partial buckets), in MB/s, by bucket.
fn buckets<'a>(rows: &'a [Vec<Value>], container: &str) -> Vec<(&'a str, f64)> {
    let v: Vec<(&str, f64)> = rows.iter().filter(|r| s(&r[1]) == container).map(|r| (s(&r[0]), f(&r[2]))).collect();
    assert!(v.len() > 4, "{container}: {} buckets", v.len());
    v[1..v.len() - 1].to_vec()
}

fn series(rows: &[Vec<Value>], container: &str) -> Vec<f64> {
    buckets(rows, container).into_iter().map(|b| b.1).collect()
}

fn within(v: &[f64], rate: f64, tol: f64, what: &str) {
    let (lo, hi) = v.iter().fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    println!("{what}: {} buckets of 100 ms, {lo:.1}..{hi:.1} MB/s (scenario: {rate})", v.len());
    assert!(lo >= rate * (1.0 - tol) && hi <= rate * (1.0 + tol), "{what}: {lo:.1}..{hi:.1} MB/s, not {rate} ± {tol}");
}

#[test]
fn readme_queries_on_recordings() {
    if !duckdb_available() {
        return;
    }
    let q = readme_queries();
    let names: Vec<&str> = q.keys().map(String::as_str).collect();
    assert_eq!(names, ["bandwidth-100ms", "domain-occupancy", "peak-occupancy-per-minute"], "the README's queries");

    // A 1 ms recording of the bundled scenario in real time, read while it runs; ended by
    // SIGTERM, its length is the host's: the scenario without `backup` (from 10 s on), whose
    // known answers do not change with it.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(scenario()).unwrap();
    let kept: Vec<&str> = text.split("[[container]]").filter(|c| !c.contains("name = \"backup\"")).collect();
    assert_eq!(kept.len(), text.split("[[container]]").count() - 1, "the scenario has a backup to leave out");
    let sc = dir.path().join("noisy-neighbour.toml");
    std::fs::write(&sc, kept.join("[[container]]")).unwrap();
    let a = dir.path().join("a");
    std::fs::create_dir(&a).unwrap();
    let mut rec = bin()
        .args(["record", "--scenario", sc.to_str().unwrap(), "--duration", "10m", "--rotate-every", "2s", "--output"])
        .arg(&a)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let said = common::Watch::new(rec.stderr.take().unwrap());
    let t0 = Instant::now();
    let finished = |d: &Path| {
        std::fs::read_dir(d)
            .unwrap()
            .filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".parquet")))
            .count()
    };
    // Two files finished: past 4 s of the scenario (thrash stopped at 2 s, batch on since 1 s;
    // 60 s: a hang).
    while finished(&a) < 2 && t0.elapsed() < Duration::from_secs(60) && rec.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(100));
    }
    let live = duckdb(&[on(&a, "SELECT count(*) FROM 'DIR/*.parquet'")]);
    assert!(rec.try_wait().unwrap().is_none(), "the recording is still running: {}", said.text());
    let rows_live = f(&live[0].0[0][0]);
    println!("during the recording, after {:.1} s: {rows_live} rows readable", t0.elapsed().as_secs_f64());
    assert!(rows_live > 0.0, "a finished file while recording");
    common::signal(&rec, libc::SIGTERM);
    let status = common::wait_within(&mut rec, Duration::from_secs(60));
    let err = said.finish();
    assert!(status.is_some_and(|s| s.success()), "{status:?} (None: still running 60 s after SIGTERM): {err}");
    println!("recorded for {:.1} s", t0.elapsed().as_secs_f64());

    let queries: Vec<String> = q.values().map(|sql| on(&a, sql)).collect();
    let res = duckdb(&queries);
    for (name, (rows, secs)) in q.keys().zip(&res) {
        println!("query {name}: {} rows in {:.1} ms", rows.len(), secs * 1e3);
    }
    let (bw, dom, peak) = (&res[0].0, &res[1].0, &res[2].0);

    // Peak occupancy: batch fills its domain's L3 (footprint 40 > 32 MiB), thrash its 24 MiB
    // footprint, web its 12; the order is by peak.
    let top: Vec<(&str, f64)> = peak.iter().map(|r| (s(&r[1]), f(&r[2]))).collect();
    println!("peak occupancy per minute: {peak:?}");
    let minutes: std::collections::BTreeSet<&str> = peak.iter().map(|r| s(&r[0])).collect();
    for m in minutes {
        let in_m: Vec<(&str, f64)> = peak.iter().filter(|r| s(&r[0]) == m).map(|r| (s(&r[1]), f(&r[2]))).collect();
        assert!(in_m.windows(2).all(|w| w[0].1 >= w[1].1), "sorted by peak: {in_m:?}");
    }
    let max_of = |c: &str| top.iter().filter(|t| t.0 == c).map(|t| t.1).fold(0.0, f64::max);
    assert!(max_of("batch") > 31.0 && max_of("batch") <= 32.0, "{top:?}");
    assert!(max_of("thrash") > 20.0 && max_of("thrash") <= 24.0, "{top:?}");
    assert!(max_of("web") > 10.0 && max_of("web") <= 12.0, "{top:?}");

    // Bandwidth at 100 ms: the scenario's constant rates, within 2 %.
    within(&series(bw, "web"), 800.0, 0.02, "web, 1 ms recording");
    within(&series(bw, "batch"), 9000.0, 0.02, "batch, 1 ms recording");

    // Domain totals: never above the L3, and once thrash stopped domain 0 holds web's alone.
    let l3 = 32.0 * 1048576.0;
    // (A domain where nothing was measured yet sums to NULL.)
    let dom: Vec<&Vec<Value>> = dom.iter().filter(|r| !r[2].is_null()).collect();
    let max_dom = dom.iter().map(|r| f(&r[2])).fold(0.0, f64::max);
    println!("largest domain total: {:.2} MiB of 32", max_dom / 1048576.0);
    assert!(max_dom <= l3, "a domain above its L3: {max_dom}");
    let last0 = dom.iter().rfind(|r| f(&r[0]) == 0.0).unwrap();
    assert!(f(&last0[2]) <= 12.0 * 1048576.0, "thrash's last value no longer counts: {last0:?}");

    // Files written back by other tools with their defaults (snappy): `report` reads them and
    // finds what it finds in ours.
    let ours = report(std::slice::from_ref(&a));
    let copy = dir.path().join("duckdb.parquet");
    duckdb(&[on(&a, &format!("COPY (SELECT * FROM 'DIR/*.parquet') TO '{}' (FORMAT parquet)", copy.display()))]);
    assert_eq!(report(&[copy]), ours, "report on DuckDB's snappy copy");
    let pyarrow = Command::new("python3").args(["-c", "import pyarrow"]).status().is_ok_and(|s| s.success());
    if pyarrow {
        let copy = dir.path().join("pyarrow.parquet");
        let script = format!(
            "import glob, pyarrow.parquet as pq, pyarrow as pa\n\
             t = pa.concat_tables([pq.read_table(f) for f in sorted(glob.glob('{}/*.parquet'))])\n\
             pq.write_table(t, '{}')\n\
             print(pq.ParquetFile('{}').metadata.row_group(0).column(0).compression)",
            a.display(),
            copy.display(),
            copy.display()
        );
        let out = Command::new("python3").args(["-c", &script]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "SNAPPY");
        assert_eq!(report(&[copy]), ours, "report on pyarrow's snappy copy");
    } else {
        println!("skip (part): pyarrow is not installed");
    }

    // Irregular intervals: resctrl (emulated, over FUSE) read at 10 ms on the wall clock,
    // where some reads are late and intervals cross the 100 ms edges.
    let Some(_) = fuse_and_root() else { return };
    let b = dir.path().join("b");
    std::fs::create_dir(&b).unwrap();
    let out = bin()
        .args(["record", "--backend", "resctrl", "--emulate", "intel-xeon-platinum-8160", "--scenario", &scenario()])
        .args(["--interval", "10ms", "--duration", "4s", "--output"])
        .arg(&b)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let naive = "SELECT count(*) FILTER (WHERE interval_ns NOT BETWEEN 9500000 AND 10500000) FROM 'DIR/*.parquet' \
                 WHERE container_id = 'web' AND status = 'ok'";
    // Over the whole run: its bytes over its time, the scenario's rate.
    let total = "SELECT sum(mbm_total_bytes) / sum(interval_ns) * 1e3 FROM 'DIR/*.parquet' \
                 WHERE container_id = 'web' AND mbm_total_bytes IS NOT NULL AND interval_ns > 0";
    // The buckets a row read more than a tenth of an interval off its time reaches into: the
    // emulated counters move with the run's sample times, the rows span their reads, and a read
    // late by x at a bucket's edge moves x / 100 ms of the rate across it (the host's doing).
    // Elsewhere the README's spreading of each row over its interval holds the rate to 0.1 %
    // here (one upscale unit of 96 KiB in 80 MB); bucketing by `time` alone would be 10 % off.
    let late = "WITH r AS (SELECT epoch_ns(interval_start) AS s, epoch_ns(time) AS e FROM 'DIR/*.parquet' \
                WHERE container_id = 'web' AND mbm_total_bytes IS NOT NULL \
                AND abs(interval_ns - 10000000) > 1000000) \
                SELECT DISTINCT make_timestamp(unnest(range(s // 100000000, (e - 1) // 100000000 + 1)) * 100000) FROM r";
    let res = duckdb(&[on(&b, &q["bandwidth-100ms"]), on(&b, naive), on(&b, total), on(&b, late)]);
    let rate = f(&res[2].0[0][0]);
    let late: std::collections::BTreeSet<&str> = res[3].0.iter().map(|r| s(&r[0])).collect();
    let all = buckets(&res[0].0, "web");
    let on_time: Vec<f64> = all.iter().filter(|b| !late.contains(b.0)).map(|b| b.1).collect();
    println!(
        "web rows with an interval other than 10 ms: {}; over the run {rate:.1} MB/s; {} of {} buckets without a late read",
        res[1].0[0][0],
        on_time.len(),
        all.len()
    );
    assert!((rate - 800.0).abs() <= 800.0 * 0.02, "web over the run: {rate:.1} MB/s, not 800 ± 2 %");
    within(&on_time, 800.0, 0.02, "web, 10 ms reads on the wall clock");
}

/// `report --json` of `paths`: per container, its name and peak occupancy and mean bandwidth.
fn report(paths: &[PathBuf]) -> Vec<(String, Value, Value)> {
    let out = bin().arg("report").args(paths).arg("--json").output().unwrap();
    assert!(out.status.success(), "report: {}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let list = v.get("containers").unwrap_or(&v).as_array().unwrap().clone();
    list.iter()
        .map(|c| {
            (
                c["container_id"].as_str().unwrap().to_string(),
                c["occupancy_max_bytes"].clone(),
                c["mbm_total_mean_bytes_per_sec"].clone(),
            )
        })
        .collect()
}

fn fuse_and_root() -> Option<()> {
    // SAFETY: geteuid has no preconditions and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        println!("skip (part): not root");
        return None;
    }
    if std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse").is_err() {
        println!("skip (part): /dev/fuse cannot be opened");
        return None;
    }
    Some(())
}
