//! One writer per output directory, and signals that never cost a recording: a second
//! `record` into a directory in use exits 2 naming the first and touches nothing; a killed
//! writer's lock is taken over; SIGUSR1/SIGUSR2 are ignored and SIGHUP finishes the file and
//! goes on.

#![allow(clippy::unwrap_used)] // tests: a panic is the report

mod common;

use common::{bin, scenario};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

fn record(dir: &Path, seconds: u32) -> Child {
    bin()
        .args(["record", "--duration", &format!("{seconds}s"), "--interval", "10ms", "--scenario"])
        .arg(scenario())
        .arg("--output")
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Names in `dir` ending in `ext`, sorted.
fn named(dir: &Path, ext: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    v.retain(|n| n.ends_with(ext));
    v.sort();
    v
}

/// Wait until the recorder has a file open in `dir` (its first row group is written after
/// 5 s).
fn wait_partial(dir: &Path) {
    let t = Instant::now();
    while named(dir, ".parquet.partial").is_empty() {
        assert!(t.elapsed() < Duration::from_secs(20), "no .partial in {}", dir.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn signal(c: &Child, sig: i32) {
    // SAFETY: kill(2) with a pid we spawned and still hold (not yet waited for).
    assert_eq!(unsafe { libc::kill(c.id() as i32, sig) }, 0);
}

#[test]
fn a_second_writer_is_refused_and_touches_nothing() {
    let d = tempfile::tempdir().unwrap();
    let first = record(d.path(), 8);
    wait_partial(d.path());
    let live = named(d.path(), ".parquet.partial");
    let o = bin()
        .args(["record", "--duration", "1s", "--scenario"])
        .arg(scenario())
        .arg("--output")
        .arg(d.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("another cachescope (pid {}) records into", first.id())), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert_eq!(named(d.path(), ".parquet.partial"), live, "the live file is the first one's still");
    let out = first.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(named(d.path(), ".parquet.partial").is_empty() && !named(d.path(), ".parquet").is_empty());
    assert!(named(d.path(), ".partial.footer").is_empty(), "no stale checkpoint");
}

#[test]
fn a_killed_writers_lock_is_taken_over() {
    let d = tempfile::tempdir().unwrap();
    let mut first = record(d.path(), 30);
    wait_partial(d.path());
    // Its first row group's checkpoint written: a crash now.
    let t = Instant::now();
    while named(d.path(), ".partial.footer").is_empty() {
        assert!(t.elapsed() < Duration::from_secs(10), "no checkpoint");
        std::thread::sleep(Duration::from_millis(20));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let o = bin()
        .args(["record", "--duration", "1s", "--fast", "--scenario"])
        .arg(scenario())
        .arg("--output")
        .arg(d.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(named(d.path(), ".parquet.partial").is_empty(), "the killed one's file was recovered");
    assert!(named(d.path(), ".parquet").len() >= 2, "{:?}", named(d.path(), ""));
}

#[test]
fn stray_signals_do_not_end_a_recording_and_sighup_starts_a_new_file() {
    let d = tempfile::tempdir().unwrap();
    let c = record(d.path(), 9);
    wait_partial(d.path());
    signal(&c, libc::SIGUSR1);
    signal(&c, libc::SIGUSR2);
    std::thread::sleep(Duration::from_millis(500));
    signal(&c, libc::SIGHUP);
    // The rotation is seen at the writer's next poll (every 500 ms at most).
    let t = Instant::now();
    while named(d.path(), ".parquet").is_empty() && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(named(d.path(), ".parquet").len(), 1, "SIGHUP finished the first file while recording");
    let out = c.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    let files = named(d.path(), ".parquet");
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(named(d.path(), ".parquet.partial").is_empty());
    let o = bin().arg("report").arg(d.path()).arg("--json").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Killed (SIGKILL) at random points of its life, over and over (before, between and across
/// its 5-second flushes): each next `record` recovers what the last left and says so, and in
/// the end every file in the directory is whole: `report` reads them all, nothing is partial
/// or kept aside.
#[test]
fn random_kills_never_cost_a_file() {
    let d = tempfile::tempdir().unwrap();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let mut x = seed | 1;
    let mut recovered = 0;
    for (round, base) in [1000, 5000, 6500, 9500, 10500].into_iter().enumerate() {
        let mut c = bin()
            .args(["record", "--duration", "30s", "--interval", "10ms", "--scenario"])
            .arg(scenario())
            .arg("--output")
            .arg(d.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // xorshift: up to a second after each base.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let wait = Duration::from_millis(base + x % 1000);
        std::thread::sleep(wait);
        c.kill().unwrap();
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        recovered += err.matches("recovered ").count();
        assert!(!err.contains("kept ") && !err.contains("left out"), "seed {seed} round {round}: {err}");
    }
    let o = bin()
        .args(["record", "--duration", "1s", "--fast", "--scenario"])
        .arg(scenario())
        .arg("--output")
        .arg(d.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    recovered += err.matches("recovered ").count();
    assert!(recovered >= 3, "seed {seed}: every kill after the first flush leaves a file to recover");
    let left: Vec<String> = named(d.path(), "").into_iter().filter(|n| !n.ends_with(".parquet") && !n.starts_with(".")).collect();
    assert!(left.is_empty(), "seed {seed}: {left:?}");
    let o = bin().arg("report").arg(d.path()).arg("--json").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("skipped"), "seed {seed}: {err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["run"]["files"].as_u64(), Some(named(d.path(), ".parquet").len() as u64), "seed {seed}: every file read");
}
