//! Outputs that fail as a person sees them: a reader that stops reading ends `report`, `info`
//! and `monitor` quietly (exit 0, nothing on stderr); a stdout that refuses writes (a full disk)
//! is exit 1 with one line; a closed stderr never stops `record`.

#![allow(clippy::unwrap_used)] // tests: a panic is the report

mod common;

use common::{bin, scenario};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A pipe whose reading end is already closed: every write to the other end is EPIPE.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe(2) returns.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: pipe(2) just returned these descriptors; each is owned once.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read);
    Stdio::from(write)
}

fn dev_full() -> Stdio {
    Stdio::from(std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap())
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A short emulated recording (the bundled scenario, virtual time).
fn recording(dir: &Path) -> PathBuf {
    let out = dir.join("rec");
    let o = bin()
        .args(["record", "--fast", "--duration", "3s", "--scenario"])
        .arg(scenario())
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    out
}

/// Exit 0, nothing said: what a filter does when its reader is gone.
fn quiet(what: &str, o: &Output) {
    assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(o));
    assert!(o.stderr.is_empty(), "{what} said: {}", stderr(o));
}

/// Exit 1 and one line naming stdout.
fn refused(what: &str, o: &Output) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{what}: {e}");
    let last = e.lines().last().unwrap_or("");
    assert!(last.starts_with("cachescope: writing to stdout: No space left on device"), "{what}: {e}");
    assert!(!e.contains("panicked"), "{what}: {e}");
}

#[test]
fn a_reader_that_stops_reading_ends_a_command_quietly() {
    let dir = tempfile::tempdir().unwrap();
    let rec = recording(dir.path());
    let o = bin().arg("report").arg(&rec).stdout(closed_pipe()).output().unwrap();
    quiet("report | (closed)", &o);
    let o = bin().arg("report").arg(&rec).arg("--json").stdout(closed_pipe()).output().unwrap();
    quiet("report --json | (closed)", &o);
    let o = bin().args(["info", "--json"]).stdout(closed_pipe()).output().unwrap();
    quiet("info --json | (closed)", &o);
    // monitor's rows: the run stops at its first write, long before its duration (a minute
    // is one that went on with no reader).
    let mut c = bin()
        .args(["monitor", "--jsonl", "--duration", "10m", "--scenario"])
        .arg(scenario())
        .stdout(closed_pipe())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    let err = common::Watch::new(c.stderr.take().unwrap());
    let status = common::wait_within(&mut c, std::time::Duration::from_secs(60));
    let err = err.finish();
    println!("monitor --jsonl | (closed) ended after {:?}", t.elapsed());
    assert!(status.is_some(), "monitor went on with no reader: {err}");
    assert_eq!(status.and_then(|s| s.code()), Some(0), "monitor --jsonl | (closed): {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_stdout_that_refuses_writes_is_exit_1_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let rec = recording(dir.path());
    // Not an output failure but bad input: a file where --svg wants a directory.
    let o = bin().arg("report").arg(&rec).args(["--svg", "/etc/hostname"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--svg /etc/hostname: /etc/hostname is not a directory"), "{}", stderr(&o));
    refused("info", &bin().arg("info").stdout(dev_full()).output().unwrap());
    refused("info --json", &bin().args(["info", "--json"]).stdout(dev_full()).output().unwrap());
    refused("report", &bin().arg("report").arg(&rec).stdout(dev_full()).output().unwrap());
    refused("report --json", &bin().arg("report").arg(&rec).arg("--json").stdout(dev_full()).output().unwrap());
    for mode in ["--jsonl", "--plain"] {
        let o = bin()
            .args(["monitor", mode, "--fast", "--duration", "2s", "--scenario"])
            .arg(scenario())
            .stdout(dev_full())
            .output()
            .unwrap();
        refused(&format!("monitor {mode}"), &o);
        // What the run measured is still said before the failure.
        assert!(stderr(&o).contains("ticks, lateness"), "monitor {mode}: {}", stderr(&o));
    }
}

#[test]
fn a_closed_stderr_does_not_stop_record() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rec");
    let o = bin()
        .args(["record", "--duration", "2s", "--interval", "10ms", "--print-every", "100ms", "--scenario"])
        .arg(scenario())
        .arg("--output")
        .arg(&out)
        .stderr(closed_pipe())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let files: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "parquet"))
        .collect();
    assert!(!files.is_empty(), "no finished Parquet file in {}", out.display());
    let o = bin().arg("report").arg(&out).arg("--json").output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// `--pmu bpf` or `--pmu perf` named by the user and refused by the kernel (an unprivileged
/// user) is exit 3 with one line, as a named backend is; `auto` goes on without PMU columns.
#[test]
fn a_named_pmu_source_that_cannot_start_is_exit_3() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0
        || !Command::new("setpriv").arg("--version").output().is_ok_and(|o| o.status.success())
    {
        return cachescope_testkit::skip("needs root and setpriv to run as nobody");
    }
    let as_nobody = |pmu: &str| {
        Command::new("setpriv")
            .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_cachescope"))
            .args(["monitor", "--backend", "none", "--jsonl", "--duration", "300ms", "--pmu", pmu])
            .stdout(Stdio::null())
            .output()
            .unwrap()
    };
    for pmu in ["bpf", "perf"] {
        let o = as_nobody(pmu);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(3), "--pmu {pmu}: {e}");
        let last = e.lines().last().unwrap_or("");
        assert!(last.starts_with(&format!("cachescope: --pmu {pmu}: ")), "--pmu {pmu}: {e}");
        // libbpf's own lines come through our one line, never raw.
        assert!(!e.lines().any(|l| l.starts_with("libbpf:")), "--pmu {pmu}: {e}");
    }
    let o = as_nobody("auto");
    assert_eq!(o.status.code(), Some(0), "--pmu auto: {}", stderr(&o));
    assert!(stderr(&o).contains("PMU columns: off"), "{}", stderr(&o));
}

/// `--listen 127.0.0.1:0` says the port the kernel chose, and /metrics answers there.
#[test]
fn listen_on_port_0_says_the_port_bound() {
    use std::io::{BufRead, Read, Write};
    let mut child = bin()
        .args(["serve", "--listen", "127.0.0.1:0", "--duration", "10m", "--scenario"])
        .arg(scenario())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let said = lines.by_ref().map_while(Result::ok).find(|l| l.contains("serving Prometheus metrics at")).unwrap();
    let addr = said.split("http://").nth(1).and_then(|r| r.strip_suffix("/metrics")).unwrap().to_string();
    assert!(!addr.ends_with(":0"), "{said}");
    let mut s = std::net::TcpStream::connect(&addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut page = String::new();
    s.read_to_string(&mut page).unwrap();
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    let _ = child.kill();
    let _ = child.wait();
}

/// `cachescope hook oci` never stops a container: a pid it cannot tag (here: not in any
/// container's cgroup) is said on stderr with exit 0; input that is not an OCI state is exit 2
/// with one line (docs/cli.md).
#[test]
fn the_oci_hook_exits_0_unless_its_input_is_not_an_oci_state() {
    use std::io::Write;
    let run = |input: &str| {
        let mut c = bin()
            .args(["hook", "oci"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        c.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        c.wait_with_output().unwrap()
    };
    let o = run("not json");
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("not an OCI state"), "{}", stderr(&o));
    let o = run(r#"{"ociVersion":"1.0.2","id":"x","status":"created","pid":1,"bundle":"/b"}"#);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("pid 1:") && stderr(&o).contains("next poll"), "{}", stderr(&o));
}

/// `cachescope hook nri` without a runtime's socket is exit 3, and a plugin index that is not
/// two digits exit 2, each with one line naming the culprit (docs/cli.md).
#[test]
fn the_nri_plugin_says_what_is_missing_in_one_line() {
    let d = tempfile::tempdir().unwrap();
    let sock = d.path().join("nri.sock");
    let o = bin().args(["hook", "nri", "--socket"]).arg(&sock).output().unwrap();
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains(&sock.display().to_string()), "{}", stderr(&o));
    // The index is checked first.
    let o = bin().args(["hook", "nri", "--plugin-index", "7", "--socket"]).arg(&sock).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("--plugin-index") && stderr(&o).contains("\"7\""), "{}", stderr(&o));
}

/// A bad output is said in one line before any backend or eBPF set-up (issue 43): nothing
/// about backends or PMU events precedes it, and a port in use leaves the directory unlocked.
#[test]
fn bad_outputs_are_refused_before_any_backend_is_set_up() {
    let dir = tempfile::tempdir().unwrap();
    let o = bin().args(["record", "--duration", "1s", "--output", "/proc/cachescope-test"]).output().unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert_eq!(e.lines().count(), 1, "one line, nothing before it: {e}");
    assert!(e.starts_with("cachescope: --output /proc/cachescope-test: ") && e.contains("proc filesystem"), "{e}");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = dir.path().join("rec");
    let o = bin().args(["record", "--duration", "1s", "--listen", &addr, "--output"]).arg(&out).output().unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert_eq!(e.lines().count(), 1, "one line, nothing before it: {e}");
    assert!(e.contains(&addr), "{e}");
    // The directory it opened first is free again: a recorder starts there.
    let o = bin().args(["record", "--duration", "300ms", "--pmu", "off", "--output"]).arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

/// On a host without cache monitoring, what `record` says before it samples is at most three
/// lines of at most 240 characters (it was ~1,500 characters: every backend's reason, "no
/// hardware PMU" four times), pointing at `cachescope info` and -v; -v says it all.
#[test]
fn the_start_up_text_without_rdt_is_three_short_lines() {
    let info = bin().args(["info", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    if v["auto"]["cache_monitoring"] != "none" {
        return cachescope_testkit::skip("this host has cache monitoring: its start-up says which backend runs");
    }
    let dir = tempfile::tempdir().unwrap();
    let said = |more: &[&str]| {
        let o = bin()
            .args(["record", "--duration", "300ms", "--print-every", "10s", "--output"])
            .arg(dir.path().join("rec"))
            .args(more)
            .output()
            .unwrap();
        let e = stderr(&o);
        assert!(o.status.success(), "{e}");
        // The start-up block: up to its last line (what is null and why), before anything the
        // run says of the containers it meets (other tests' containers come and go here).
        let lines: Vec<String> = e.lines().map(String::from).collect();
        let last =
            lines.iter().rposition(|l| l.starts_with("cachescope: PMU columns") || l.contains("no cache monitoring"));
        lines[..last.map_or(0, |i| i + 1)].to_vec()
    };
    let short = said(&[]);
    assert!(!short.is_empty() && short.len() <= 3, "{short:#?}");
    for l in &short {
        assert!(l.chars().count() <= 240, "{} characters: {l}", l.chars().count());
    }
    let all = short.join("\n");
    assert!(all.contains("no cache monitoring on this host") && all.contains("`cachescope info`, or -v"), "{all}");
    let long = said(&["-v"]).join("\n");
    assert!(long.contains("kmod: ") && long.contains("resctrl: "), "-v names every backend's reason: {long}");
}

/// A reason is one line of bounded length, however long what it quotes (issue 41: a
/// 200,000-deep scenario was refused with an 800 KB "one-line" reason).
#[test]
fn a_refusal_is_one_bounded_line_whatever_the_input() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("deep.toml");
    std::fs::write(&deep, format!("x = {}{}\n", "[".repeat(200_000), "]".repeat(200_000))).unwrap();
    let o = bin()
        .args(["record", "--duration", "1s", "--scenario"])
        .arg(&deep)
        .arg("--output")
        .arg(dir.path().join("r"))
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{}", &e[..e.len().min(300)]);
    assert_eq!(e.lines().count(), 1, "{}", &e[..e.len().min(300)]);
    assert!(e.chars().count() <= 700 && e.contains("deep.toml") && e.contains("characters left out"), "{e}");
}
