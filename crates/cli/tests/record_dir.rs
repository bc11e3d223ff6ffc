//! One writer per output directory, and signals that never cost a recording: a second
//! `record` into a directory in use exits 2 naming the first and touches nothing; a killed
//! writer's lock is taken over; stray signals (SIGUSR1/2, SIGPIPE, timers, SIGIO, SIGPWR,
//! SIGXFSZ) are ignored, SIGHUP finishes the file and goes on, SIGQUIT and SIGXCPU end the run
//! as SIGTERM does.

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

/// A short `record` into `dir` (in virtual time) to its end: what the next run after a crash
/// is.
fn record_briefly(dir: &Path) -> std::process::Output {
    bin()
        .args(["record", "--duration", "1s", "--fast", "--scenario"])
        .arg(scenario())
        .arg("--output")
        .arg(dir)
        .output()
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
    // Its first row group's journal entry written (the journal is created holding only its
    // 4-byte magic when the file opens): a crash now.
    let journaled = |dir: &Path| {
        named(dir, ".partial.footer")
            .first()
            .and_then(|n| std::fs::metadata(dir.join(n)).ok())
            .is_some_and(|m| m.len() > 4)
    };
    let t = Instant::now();
    while !journaled(d.path()) {
        assert!(t.elapsed() < Duration::from_secs(10), "no checkpoint");
        std::thread::sleep(Duration::from_millis(20));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let o = record_briefly(d.path());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(named(d.path(), ".parquet.partial").is_empty(), "the killed one's file was recovered");
    assert!(named(d.path(), ".parquet").len() >= 2, "{:?}", named(d.path(), ""));
}

#[test]
fn stray_signals_do_not_end_a_recording_and_sighup_starts_a_new_file() {
    let d = tempfile::tempdir().unwrap();
    let c = record(d.path(), 9);
    wait_partial(d.path());
    for sig in [
        libc::SIGUSR1,
        libc::SIGUSR2,
        libc::SIGPIPE,
        libc::SIGALRM,
        libc::SIGVTALRM,
        libc::SIGPROF,
        libc::SIGIO,
        libc::SIGPWR,
        libc::SIGXFSZ,
    ] {
        signal(&c, sig);
    }
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
    let o = record_briefly(d.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    recovered += err.matches("recovered ").count();
    assert!(recovered >= 3, "seed {seed}: every kill after the first flush leaves a file to recover");
    let left: Vec<String> =
        named(d.path(), "").into_iter().filter(|n| !n.ends_with(".parquet") && !n.starts_with(".")).collect();
    assert!(left.is_empty(), "seed {seed}: {left:?}");
    let o = bin().arg("report").arg(d.path()).arg("--json").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !err.contains("skipped"), "seed {seed}: {err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["run"]["files"].as_u64(),
        Some(named(d.path(), ".parquet").len() as u64),
        "seed {seed}: every file read"
    );
}

fn mount_tmpfs(at: &Path, size: &str) -> bool {
    std::fs::create_dir_all(at).unwrap();
    std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(at)
        .status()
        .is_ok_and(|s| s.success())
}

struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// A disk that fills up and is still full at the end: the run ends with the documented
/// "finished with losses" (exit 4), after its summary; the rows it could not keep are counted;
/// every file it wrote is finished and readable, numbered without gaps, and holds exactly the
/// rows the summary says.
#[test]
fn a_disk_still_full_at_the_end_finishes_with_losses() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return cachescope_testkit::skip(
            "a_disk_still_full_at_the_end_finishes_with_losses needs root to mount a tmpfs",
        );
    }
    let d = tempfile::tempdir().unwrap();
    let mnt = d.path().join("tiny");
    if !mount_tmpfs(&mnt, "160k") {
        return cachescope_testkit::skip("could not mount a tmpfs");
    }
    let _u = Unmount(mnt.clone());
    let out = mnt.join("rec");
    let o = bin()
        .args(["record", "--duration", "8s", "--interval", "1ms", "--rotate-every", "1s", "--scenario"])
        .arg(scenario())
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(4), "{err}");
    let last = err.trim_end().lines().last().unwrap();
    assert!(last.starts_with("cachescope: finished with losses: ") && last.contains(" rows lost: "), "{err}");
    assert!(last.contains("No space left on device"), "{last}");
    let recorded: u64 = err
        .lines()
        .find_map(|l| l.strip_prefix("cachescope: recorded "))
        .and_then(|l| l.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary: {err}"));
    let files = named(&out, ".parquet");
    assert!(files.len() >= 2, "{files:?}");
    for (i, f) in files.iter().enumerate() {
        assert!(f.ends_with(&format!("-{:04}.parquet", i + 1)), "numbers without gaps: {files:?}");
    }
    let left: Vec<String> =
        named(&out, "").into_iter().filter(|n| !n.ends_with(".parquet") && !n.starts_with('.')).collect();
    assert!(left.is_empty(), "{left:?}");
    let o = bin().arg("report").arg(&out).arg("--json").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["run"]["rows"].as_u64(), Some(recorded), "the summary counts the rows on disk: {err}");
}

/// The output directory removed under a running `record`: an error (exit 1), with the rows
/// that were written into it and the rows lost counted apart.
#[test]
fn a_removed_output_directory_is_an_error() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("rec");
    let c = bin()
        .args(["record", "--duration", "8s", "--interval", "10ms", "--rotate-every", "2s", "--scenario"])
        .arg(scenario())
        .arg("--output")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while named(&out, ".parquet").is_empty() {
        assert!(t.elapsed() < Duration::from_secs(10), "no finished file");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::remove_dir_all(&out).unwrap();
    let o = c.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("the output directory {}", out.display())), "{err}");
    assert!(err.contains(" rows lost: "), "{err}");
}

/// Uploads to a store that takes connections and never answers: the run's end waits 10 s at
/// most for them, and a second SIGTERM ends that wait at once; the summary counts every file
/// left for the next run.
#[test]
fn a_silent_store_never_holds_the_end_of_a_run() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", l.local_addr().unwrap());
    let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let h = held.clone();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            h.lock().unwrap().push(s);
        }
    });
    let d = tempfile::tempdir().unwrap();
    let run = |secs: &str| {
        bin()
            .args(["record", "--duration", secs, "--interval", "10ms", "--rotate-every", "1s", "--scenario"])
            .arg(scenario())
            .arg("--output")
            .arg(d.path())
            .args(["--upload", "s3://fleet", "--s3-endpoint", &endpoint])
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Left to its deadline.
    let t = Instant::now();
    let o = run("3s").wait_with_output().unwrap();
    let took = t.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(took < Duration::from_secs(3 + 10 + 4), "{took:?}: {err}");
    let files = named(d.path(), ".parquet").len();
    assert!(files >= 3, "{files}");
    assert!(err.contains(&format!("; {files} not yet (kept on disk")), "every file counted: {err}");
    // A SIGTERM ends the run, a second one the wait for the store.
    let c = run("30s");
    std::thread::sleep(Duration::from_millis(2500));
    signal(&c, libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(1000));
    let t = Instant::now();
    signal(&c, libc::SIGTERM);
    let o = c.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}: {err}", t.elapsed());
    assert!(o.status.success(), "{err}");
    assert!(err.contains(" not yet (kept on disk"), "{err}");
}

/// SIGQUIT (whose default dumps core) and SIGXCPU (a soft CPU limit) end a recording as
/// SIGTERM does: exit 0, every file finished.
#[test]
fn sigquit_and_sigxcpu_finish_the_recording() {
    for sig in [libc::SIGQUIT, libc::SIGXCPU] {
        let d = tempfile::tempdir().unwrap();
        let c = record(d.path(), 30);
        wait_partial(d.path());
        signal(&c, sig);
        let t = Instant::now();
        let out = c.wait_with_output().unwrap();
        assert!(t.elapsed() < Duration::from_secs(5), "signal {sig}");
        assert!(out.status.success(), "signal {sig}: {:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
        assert!(
            named(d.path(), ".parquet.partial").is_empty() && named(d.path(), ".parquet").len() == 1,
            "signal {sig}"
        );
    }
}
