//! One writer per output directory, and signals that never cost a recording: a second
//! `record` into a directory in use exits 2 naming the first and touches nothing; a killed
//! writer's lock is taken over; stray signals (SIGUSR1/2, SIGPIPE, timers, SIGIO, SIGPWR,
//! SIGXFSZ) are ignored, SIGHUP finishes the file and goes on, SIGQUIT and SIGXCPU end the run
//! as SIGTERM does.

#![allow(clippy::unwrap_used)] // tests: a panic is the report

mod common;

use common::{bin, scenario, signal, wait_within};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A `record` into `dir` that goes on until it is stopped.
fn record(dir: &Path) -> Child {
    bin()
        .args(["record", "--duration", "10m", "--interval", "10ms", "--scenario"])
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

/// Wait until `what` holds (60 s: a hang; the slowest thing waited for here is a first flush,
/// after 5 s).
fn wait_for(what: &str, done: impl Fn() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < Duration::from_secs(60), "still no {what} after 60 s");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait until the recorder has a file open in `dir`.
fn wait_partial(dir: &Path) {
    wait_for(&format!(".partial in {}", dir.display()), || !named(dir, ".parquet.partial").is_empty());
}

/// SIGTERM, then the run's end (60 s after it: a hang): its status and stderr.
fn stop(mut c: Child) -> (std::process::ExitStatus, String) {
    signal(&c, libc::SIGTERM);
    let err = common::Watch::new(c.stderr.take().unwrap());
    let status = wait_within(&mut c, Duration::from_secs(60));
    let err = err.finish();
    (status.unwrap_or_else(|| panic!("still running 60 s after SIGTERM: {err}")), err)
}

#[test]
fn a_second_writer_is_refused_and_touches_nothing() {
    let d = tempfile::tempdir().unwrap();
    let first = record(d.path());
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
    let (status, err) = stop(first);
    assert!(status.success(), "{err}");
    assert!(named(d.path(), ".parquet.partial").is_empty() && !named(d.path(), ".parquet").is_empty());
    assert!(named(d.path(), ".partial.footer").is_empty(), "no stale checkpoint");
}

#[test]
fn a_killed_writers_lock_is_taken_over() {
    let d = tempfile::tempdir().unwrap();
    let mut first = record(d.path());
    wait_partial(d.path());
    // Its first row group's journal entry written (the journal is created holding only its
    // 4-byte magic): a crash now.
    let journaled = |dir: &Path| {
        named(dir, ".partial.footer")
            .first()
            .and_then(|n| std::fs::metadata(dir.join(n)).ok())
            .is_some_and(|m| m.len() > 4)
    };
    wait_for("checkpoint", || journaled(d.path()));
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
    let c = record(d.path());
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
    signal(&c, libc::SIGHUP);
    // The rotation is seen at the writer's next poll (every 500 ms at most).
    wait_for("file finished on SIGHUP", || !named(d.path(), ".parquet").is_empty());
    assert_eq!(named(d.path(), ".parquet").len(), 1, "SIGHUP finished the first file while recording");
    // Still recording: a new file open (none of the signals ended it), then ended as a service is.
    wait_partial(d.path());
    let (status, err) = stop(c);
    assert!(status.success(), "{status:?}: {err}");
    let files = named(d.path(), ".parquet");
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(named(d.path(), ".parquet.partial").is_empty());
    let o = bin().arg("report").arg(d.path()).arg("--json").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Stop `c` (SIGSTOP) and wait until every thread of it is stopped: its files hold still.
fn freeze(c: &Child) {
    signal(c, libc::SIGSTOP);
    let task = format!("/proc/{}/task", c.id());
    let stopped = |stat: &str| stat.rsplit(") ").next().is_some_and(|r| r.starts_with(['T', 't', 'Z']));
    wait_for("stop", || {
        std::fs::read_dir(&task).map_or(true, |d| {
            d.flatten().all(|t| std::fs::read_to_string(t.path().join("stat")).map_or(true, |s| stopped(&s)))
        })
    });
}

/// What the next run makes of the file a crash leaves in `dir` now (crates/sinks/src/parquet/
/// recover.rs), as it says it: a journal entry vouches for a row group: "recovered"; no entry,
/// but bytes past the data file's magic (the crash came between a row group's sync and its
/// entry): "kept" aside, unverifiable; nothing past the magic: "removed"; no file: nothing.
fn to_recover(dir: &Path) -> Option<&'static str> {
    let partial = named(dir, ".parquet.partial");
    let len = |n: &str| std::fs::metadata(dir.join(n)).map_or(0, |m| m.len());
    let [p] = partial.as_slice() else {
        assert!(partial.is_empty(), "one file open at a time: {partial:?}");
        return None;
    };
    Some(if len(&format!("{p}.footer")) > 4 {
        "recovered "
    } else if len(p) > 4 {
        "kept "
    } else {
        "removed "
    })
}

/// Killed (SIGKILL) at random points of its life, over and over (before, between and across
/// its 5-second flushes): each next `record` does with what the last left what the state it
/// was killed in calls for, and says so (every file with a journaled row group recovered), and
/// in the end every file in the directory is whole: `report` reads them all, nothing is partial,
/// and nothing is kept aside but what a kill between a first row group and its journal entry
/// left (not verifiable: such a file is renamed, never deleted).
#[test]
fn random_kills_never_cost_a_file() {
    let d = tempfile::tempdir().unwrap();
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    let mut x = seed | 1;
    let mut said = String::new();
    let mut expected: Vec<&str> = Vec::new();
    for (round, base) in [1000, 5000, 6500, 9500, 10500].into_iter().enumerate() {
        let mut c = record(d.path());
        // xorshift: up to a second after each base.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let wait = Duration::from_millis(base + x % 1000);
        std::thread::sleep(wait);
        // Frozen, its files are what the kill leaves.
        freeze(&c);
        expected.extend(to_recover(d.path()));
        c.kill().unwrap();
        let out = c.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("left out"), "seed {seed} round {round}: {err}");
        said.push_str(&err);
    }
    let o = record_briefly(d.path());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    said.push_str(&err);
    let count = |what: &str| said.lines().filter(|l| l.starts_with(&format!("cachescope: {what}"))).count();
    let got: Vec<usize> = ["recovered ", "kept ", "removed "].iter().map(|w| count(w)).collect();
    let want: Vec<usize> =
        ["recovered ", "kept ", "removed "].iter().map(|w| expected.iter().filter(|e| *e == w).count()).collect();
    println!("seed {seed}: recovered, kept aside, removed: {got:?}");
    assert_eq!(got, want, "seed {seed}: {said}");
    let left: Vec<String> = named(d.path(), "")
        .into_iter()
        .filter(|n| !n.ends_with(".parquet") && !n.starts_with(".") && !n.contains(".parquet.unrecoverable"))
        // The runs' noisy-neighbour episodes files (docs/data.md) are finished files too.
        .filter(|n| !n.starts_with(cachescope_sinks::noisy::EPISODES_PREFIX))
        .collect();
    assert!(left.is_empty(), "seed {seed}: {left:?}");
    assert_eq!(named(d.path(), ".parquet.unrecoverable").len(), want[1], "seed {seed}");
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
    let mut c = bin()
        .args(["record", "--duration", "10m", "--interval", "1ms", "--rotate-every", "1s", "--scenario"])
        .arg(scenario())
        .arg("--output")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let said = common::Watch::new(c.stderr.take().unwrap());
    // Two files finished and the disk full (the run says writing fails): ended then, the disk
    // still full (60 s: a hang).
    let full = said.until(Duration::from_secs(60), |t| t.contains("writing Parquet failed"));
    wait_for("two finished files", || named(&out, ".parquet").len() >= 2);
    signal(&c, libc::SIGTERM);
    let status = wait_within(&mut c, Duration::from_secs(60));
    let err = said.finish();
    assert!(full, "the disk never filled: {err}");
    assert_eq!(status.and_then(|s| s.code()), Some(4), "{status:?} (None: still running 60 s after SIGTERM): {err}");
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
    let left: Vec<String> = named(&out, "")
        .into_iter()
        .filter(|n| {
            !n.ends_with(".parquet") && !n.starts_with('.') && !n.starts_with(cachescope_sinks::noisy::EPISODES_PREFIX)
        })
        .collect();
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
    let mut c = bin()
        .args(["record", "--duration", "10m", "--interval", "10ms", "--rotate-every", "2s", "--scenario"])
        .arg(scenario())
        .arg("--output")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let said = common::Watch::new(c.stderr.take().unwrap());
    wait_for("finished file", || !named(&out, ".parquet").is_empty());
    std::fs::remove_dir_all(&out).unwrap();
    // Ended once it has found its directory gone (at its next flush or rotation; 60 s: a hang).
    let failed = said.until(Duration::from_secs(60), |t| t.contains("writing Parquet failed"));
    signal(&c, libc::SIGTERM);
    let status = wait_within(&mut c, Duration::from_secs(60));
    let err = said.finish();
    assert!(failed, "the run never found its directory gone: {err}");
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{status:?} (None: still running 60 s after SIGTERM): {err}");
    assert!(err.contains(&format!("the output directory {}", out.display())), "{err}");
    assert!(err.contains(" rows lost: "), "{err}");
}

/// Uploads to a store that takes connections and never finishes an answer: the run's end waits
/// 10 s at most for them (it says it ran out of time), and a second SIGTERM ends that wait at
/// once (it says it was interrupted); the summary counts every file left for the next run.
#[test]
fn a_silent_store_never_holds_the_end_of_a_run() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", l.local_addr().unwrap());
    // It takes all it is sent and answers a header a byte a second, never ending it: the
    // client's stall timeout (10 s without a byte) never fires, so the end of the wait is the
    // run's doing alone.
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let Ok(mut r) = s.try_clone() else { continue };
            std::thread::spawn(move || std::io::copy(&mut r, &mut std::io::sink()));
            let mut w = s;
            std::thread::spawn(move || {
                use std::io::Write;
                let mut more = w.write_all(b"HTTP/1.1 200 OK\r\nX-Wait: ").is_ok();
                while more {
                    std::thread::sleep(Duration::from_secs(1));
                    more = w.write_all(b"a").is_ok();
                }
            });
        }
    });
    let d = tempfile::tempdir().unwrap();
    let run = || {
        bin()
            .args(["record", "--duration", "10m", "--interval", "10ms", "--rotate-every", "1s", "--scenario"])
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
    let finished = || named(d.path(), ".parquet").len();
    // Left to its deadline: stopped once three files are finished (each in the store's hands,
    // or waiting for it).
    let c = run();
    wait_for("three finished files", || finished() >= 3);
    let t = Instant::now();
    let (status, err) = stop(c);
    println!("ended {:?} after SIGTERM (the wait for the store: 10 s at most)", t.elapsed());
    assert!(status.success(), "{err}");
    let files = finished();
    assert!(err.contains(&format!("; {files} not yet (kept on disk")), "every file counted: {err}");
    // The wait ended at its deadline.
    assert!(err.contains("not yet (kept on disk, uploaded by the next run into this directory): out of time"), "{err}");
    // A SIGTERM ends the run, a second one the wait for the store.
    let mut c = run();
    let before = finished();
    wait_for("a finished file", || finished() > before);
    signal(&c, libc::SIGTERM);
    let err = common::Watch::new(c.stderr.take().unwrap());
    // A SIGTERM every 100 ms until it ends: those before the wait for the store find the run
    // stopping already; the first during the wait ends it (60 s: a hang).
    let t = Instant::now();
    while c.try_wait().unwrap().is_none() && t.elapsed() < Duration::from_secs(60) {
        signal(&c, libc::SIGTERM);
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = wait_within(&mut c, Duration::from_secs(1));
    let err = err.finish();
    println!("ended {:?} after the second SIGTERM", t.elapsed());
    assert!(status.is_some_and(|s| s.success()), "{status:?}: {err}");
    assert!(
        err.contains(" not yet (kept on disk, uploaded by the next run into this directory): interrupted"),
        "{err}"
    );
}

/// SIGQUIT (whose default dumps core) and SIGXCPU (a soft CPU limit) end a recording as
/// SIGTERM does: exit 0, every file finished.
#[test]
fn sigquit_and_sigxcpu_finish_the_recording() {
    for sig in [libc::SIGQUIT, libc::SIGXCPU] {
        let d = tempfile::tempdir().unwrap();
        let mut c = record(d.path());
        wait_partial(d.path());
        signal(&c, sig);
        let t = Instant::now();
        let err = common::Watch::new(c.stderr.take().unwrap());
        // At once (60 s: it did not end).
        let status = wait_within(&mut c, Duration::from_secs(60));
        let err = err.finish();
        println!("signal {sig}: ended {:?} after it", t.elapsed());
        assert!(status.is_some_and(|s| s.success()), "signal {sig}: {status:?}: {err}");
        assert!(
            named(d.path(), ".parquet.partial").is_empty() && named(d.path(), ".parquet").len() == 1,
            "signal {sig}"
        );
    }
}

/// Runs that share a PID and a second (PID 1 in a PID namespace: a crash-looping pod) keep
/// every file: ten short runs under `unshare --pid --fork` had claimed 3,013 rows and left
/// 1,204, each one's file renamed over the last's.
#[test]
fn runs_with_the_same_pid_in_one_second_keep_every_file() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 || !common::have("unshare") {
        return cachescope_testkit::skip("a PID namespace needs root and unshare(1)");
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rec");
    let mut claimed = 0u64;
    for _ in 0..5 {
        let o = std::process::Command::new("unshare")
            .args(["--pid", "--fork", "--"])
            .arg(env!("CARGO_BIN_EXE_cachescope"))
            .args(["record", "--duration", "1s", "--fast", "--scenario"])
            .arg(scenario())
            .arg("--output")
            .arg(&out)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        claimed += err
            .lines()
            .find_map(|l| l.strip_prefix("cachescope: recorded "))
            .and_then(|l| l.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no summary: {err}"));
    }
    let files = named(&out, ".parquet");
    let o = bin().arg("report").arg(&out).arg("--json").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    println!("5 runs as PID 1: {claimed} rows claimed, {} on disk in {files:?}", v["run"]["rows"]);
    assert_eq!(v["run"]["rows"].as_u64(), Some(claimed), "every row claimed is on disk: {files:?}");
}
