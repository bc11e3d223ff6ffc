//! `cachescope monitor` end to end on the emulated platform, and its refusals.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use common::{bin, signal, tmux, wait_within, Watch};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn scenario() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/noisy-neighbour.toml").to_str().unwrap().to_string()
}

/// `cachescope ARGS` to its end (a minute is a hang: none of these takes more than a few
/// seconds).
fn run(args: &[&str]) -> Output {
    common::output_within(bin().args(args).stdin(Stdio::null()), Duration::from_secs(60)).0
}

#[test]
fn scenario_table_shows_known_answers() {
    let s = scenario();
    let out = run(&["monitor", "--scenario", &s, "--duration", "3s", "--print-every", "1s", "--fast"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    let tables: Vec<&str> = text.split("\n\n").filter(|t| t.starts_with("t=")).collect();
    assert_eq!(tables.len(), 3, "{text}");
    let row = |table: &str, name: &str, dom: &str| -> Vec<String> {
        let line = table.lines().find(|l| l.starts_with(name) && l.split_whitespace().nth(1) == Some(dom));
        line.unwrap_or_else(|| panic!("no {name} row for domain {dom} in {table}"))
            .split_whitespace()
            .map(String::from)
            .collect()
    };
    // First second: thrash (24 MiB footprint) fills most of domain 0, never past its footprint.
    let thrash: f64 = row(tables[0], "thrash", "0")[4].parse().unwrap();
    assert!(thrash > 20.0 && thrash <= 24.0, "{thrash}");
    // thrash stops at 2 s: gone from the table, its RMID in limbo with its lines still resident.
    assert!(!tables[1].contains("thrash") && tables[1].contains("limbo=1"), "{}", tables[1]);
    // Third second: batch (9000 MB/s, 60 % local, 40 MiB footprint) on domain 1 alone.
    let b = row(tables[2], "batch", "1");
    let (pct, tot, loc): (f64, f64, f64) = (b[5].parse().unwrap(), b[6].parse().unwrap(), b[7].parse().unwrap());
    assert!(pct > 95.0 && pct <= 100.0, "{b:?}");
    assert!((tot - 9000.0).abs() < 1.0 && (loc - 5400.0).abs() < 1.0, "{b:?}");
    // A container with no CPU in a domain has no data there: reported, not 0.
    assert_eq!(row(tables[2], "web", "1")[3], "unavailable");
}

fn one_line_error(args: &[&str], code: i32, needle: &str) {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(needle), "{args:?}: {err}");
}

#[test]
fn refusals() {
    let s = scenario();
    one_line_error(&["monitor", "--scenario", "/nonexistent.toml"], 2, "/nonexistent.toml");
    one_line_error(&["monitor", "--scenario", &s, "--interval", "5parsecs"], 2, "unknown unit");
    // Each duration flag has its range, said with the units accepted.
    one_line_error(
        &["monitor", "--scenario", &s, "--interval", "0.5us"],
        2,
        "from 100us to 10m (units us, ms, s, m or h)",
    );
    one_line_error(&["monitor", "--scenario", &s, "--duration", "99999999999h"], 2, "longer than 10 years");
    one_line_error(&["monitor", "--scenario", &s, "--duration", "5"], 2, "no unit (use us, ms, s, m or h)");
    one_line_error(&["monitor", "--scenario", &s, "--print-every", "1ms"], 2, "from 10ms to 1h");
    one_line_error(&["record", "--scenario", &s, "--output", "/tmp/x", "--rotate-every", "10ms"], 2, "from 1s to 168h");
    // A file where a directory belongs is named as such (create_dir_all said "File exists").
    one_line_error(&["record", "--scenario", &s, "--output", "/etc/hostname"], 2, "/etc/hostname is not a directory");
    one_line_error(
        &["record", "--scenario", &s, "--output", "/etc/hostname/rec"],
        2,
        "/etc/hostname is not a directory",
    );
    one_line_error(&["monitor", "--scenario", &s, "--emulate", "pentium"], 2, "unknown model");
    one_line_error(&["monitor", "--scenario", &s, "--emulate", "intel-core-i7-4770"], 2, "PQM");
    // Skylake-SP: 24-bit counters of 96 KiB: a wrap every 3.3 s at 500 GB/s.
    one_line_error(&["monitor", "--scenario", &s, "--interval", "5s"], 2, "longest safe MBM interval");
    // Without a scenario the host's containers drive the model: in real time, not with --fast.
    one_line_error(&["monitor", "--emulate", "amd-epyc-7742", "--fast"], 2, "--fast needs --scenario");
    one_line_error(&["monitor", "--emulate", "amd-epyc-7742", "--cores", "0-1"], 2, "needs --scenario");
    one_line_error(&["monitor", "--emulate", "pentium"], 2, "unknown model");
    one_line_error(&["monitor", "--scenario", &s, "--cores", "0-3,2"], 2, "two groups");
}

#[test]
fn hardware_backend_unavailable_is_exit_3() {
    let info = run(&["info", "--json"]);
    let j: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    let msr = j["backends"].as_array().unwrap().iter().find(|b| b["name"] == "msr").unwrap().clone();
    if msr["available"] == true {
        cachescope_testkit::skip("this host has a usable msr backend; the refusal path cannot be checked here");
        return;
    }
    one_line_error(&["monitor", "--backend", "msr", "--cores", "0"], 3, "backend msr is unavailable");
    one_line_error(&["monitor", "--backend", "perf-cqm", "--duration", "1s"], 3, "backend perf-cqm is unavailable");
}

#[test]
fn sigterm_restores_core_associations() {
    let s = scenario();
    let mut child = bin()
        .args(["monitor", "--scenario", &s, "--cores", "0-1,4-5", "--print-every", "100ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, err) = (Watch::new(child.stdout.take().unwrap()), Watch::new(child.stderr.take().unwrap()));
    // Its first table shown (both groups associated with their cores; 30 s is a hang), it is
    // stopped.
    let shown = out.until(Duration::from_secs(30), |t| t.contains("cores 4-5"));
    signal(&child, libc::SIGTERM);
    let status = wait_within(&mut child, Duration::from_secs(30));
    let (text, err) = (out.finish(), err.finish());
    assert!(shown, "no table: {text}\n{err}");
    assert!(status.is_some_and(|s| s.success()), "{status:?} (None: still running 30 s after SIGTERM): {err}");
    assert!(err.contains("restored IA32_PQR_ASSOC on 4 CPUs"), "{err}");
    assert!(text.contains("cores 0-1") && text.contains("cores 4-5"), "{text}");
}

/// Root, /dev/fuse and cgroup v2: what `--backend resctrl --emulate` needs.
fn emulated_resctrl_possible() -> bool {
    // SAFETY: geteuid has no preconditions and touches no memory.
    if unsafe { libc::geteuid() } != 0 {
        cachescope_testkit::skip("not root");
        return false;
    }
    if std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse").is_err() {
        cachescope_testkit::skip("/dev/fuse cannot be opened");
        return false;
    }
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if !mi.lines().any(|l| l.contains(" - cgroup2 ")) {
        cachescope_testkit::skip("no cgroup v2");
        return false;
    }
    true
}

/// `monitor --backend resctrl` on the emulated filesystem playing the noisy-neighbour scenario.
fn emulated_resctrl(extra: &[&str]) -> Output {
    emulated_resctrl_with_pid(extra).0
}

/// The same, and the run's pid (what its sandbox cgroup and mount are named after).
fn emulated_resctrl_with_pid(extra: &[&str]) -> (Output, u32) {
    let child = bin()
        .args(["monitor", "--backend", "resctrl", "--emulate", "intel-xeon-platinum-8160", "--scenario", &scenario()])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    (child.wait_with_output().unwrap(), pid)
}

/// Where the cgroup v2 hierarchy is mounted.
fn cgroup2_root() -> PathBuf {
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    PathBuf::from(mi.lines().find(|l| l.contains(" - cgroup2 ")).unwrap().split(' ').nth(4).unwrap())
}

#[test]
fn resctrl_backend_on_the_emulated_filesystem() {
    if !emulated_resctrl_possible() {
        return;
    }
    let (out, pid) = emulated_resctrl_with_pid(&["--duration", "3200ms", "--print-every", "1s"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    let tables: Vec<&str> = text.split("\n\n").filter(|t| t.starts_with("t=")).collect();
    assert!(tables.len() >= 2, "{text}");
    assert!(tables[0].contains("backend=resctrl (emulated") && tables[0].contains("groups=3"), "{}", tables[0]);
    // resctrl does not say how many RMIDs wait in limbo: unknown, never a reassuring 0.
    assert!(tables[0].contains("limbo=?"), "{}", tables[0]);
    let line = tables[0].lines().find(|l| l.starts_with("thrash") && l.split_whitespace().nth(1) == Some("0")).unwrap();
    let f: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(f[3], "ok");
    let mib: f64 = f[4].parse().unwrap();
    assert!(mib > 18.0 && mib <= 24.0, "{line}");
    // web has no CPU in domain 1: the kernel's word, not 0.
    assert!(tables[0].lines().any(|l| l.starts_with("web") && l.contains(" 1 ") && l.contains("unavailable")));
    // Per-container PMU counts from the eBPF attribution, in 1 ms slots: IPC where the CPU
    // counts cycles and instructions, else (a VM without a virtual PMU) CPU time from cpu-clock.
    let pmu_cols = tables[0].lines().any(|l| l.starts_with("thrash") && l.split_whitespace().nth(8) != Some("-"));
    assert!(pmu_cols || tables[0].contains("CPUs used (eBPF cpu-clock, "), "{}", tables[0]);
    // thrash stops at 2 s: its group is gone from later tables.
    assert!(!tables.last().unwrap().contains("thrash"), "{}", tables.last().unwrap());
    // Nothing left behind: no sandbox cgroup, no mount. Only this run's: the tests beside it
    // make and clean sandboxes of their own.
    assert!(!cgroup2_root().join(format!("cachescope-emu-{pid}")).exists(), "sandbox cgroup left behind");
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mi.contains(&format!("cachescope-resctrl-{pid}-")), "FUSE mount left behind");
}

#[test]
fn resctrl_refusals() {
    let s = scenario();
    one_line_error(
        &["monitor", "--backend", "resctrl", "--emulate", "intel-xeon-platinum-8160"],
        2,
        "needs --scenario",
    );
    one_line_error(
        &["monitor", "--backend", "resctrl", "--scenario", &s, "--interval", "500us"],
        2,
        "shorter than resctrl can sustain",
    );
    one_line_error(&["monitor", "--backend", "resctrl", "--scenario", &s, "--fast"], 2, "--fast");
    if !std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default().contains(" - resctrl ") {
        // A kernel without resctrl (our machines) is told apart: no advice to mount it.
        let fs = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
        let why = if fs.lines().any(|l| l.ends_with("\tresctrl")) {
            "resctrl is not mounted"
        } else {
            "offers no resctrl filesystem"
        };
        one_line_error(&["monitor", "--backend", "resctrl"], 3, why);
    }
}

/// On a terminal `monitor` is the live view: it takes the alternate screen, sorts by occupancy,
/// re-sorts by bandwidth on `b`, quits on `q` and gives the terminal back before its summary.
/// The terminal is a pseudo-terminal from util-linux `script`.
#[test]
fn live_view_on_a_terminal() {
    if Command::new("script").arg("--version").output().is_err() {
        cachescope_testkit::skip("no `script` (util-linux) to provide a pseudo-terminal");
        return;
    }
    let cmd =
        format!("stty cols 120 rows 30; exec {} monitor --scenario {}", env!("CARGO_BIN_EXE_cachescope"), scenario());
    let mut child = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let (screen, _err) = (Watch::new(child.stdout.take().unwrap()), Watch::new(child.stderr.take().unwrap()));
    // Each key once the screen shows what it acts on (30 s: a hang).
    let ceiling = Duration::from_secs(30);
    let drawn = screen.until(ceiling, |t| t.contains("LLC MiB▼") && t.contains("thrash"));
    let before_b = screen.text();
    use std::io::Write;
    stdin.write_all(b"b").unwrap();
    stdin.flush().unwrap();
    let resorted = screen.until(ceiling, |t| t.contains("MBM MB/s▼"));
    stdin.write_all(b"q").unwrap();
    stdin.flush().unwrap();
    let status = wait_within(&mut child, ceiling);
    drop(stdin);
    let screen = screen.finish();
    assert!(drawn && resorted, "drawn {drawn}, re-sorted {resorted}: {screen}");
    assert!(!before_b.contains("MBM MB/s▼"), "sorted by bandwidth before `b`: {before_b}");
    assert!(status.is_some_and(|s| s.success()), "{status:?} (None: monitor did not quit on q): {screen}");
    let (enter, leave) = (screen.find("\x1b[?1049h").unwrap(), screen.rfind("\x1b[?1049l").unwrap());
    assert!(enter < leave, "alternate screen entered and left");
    let inside = &screen[enter..leave];
    assert!(inside.contains("sorted by LLC occupancy") && inside.contains("LLC MiB▼"), "{inside}");
    assert!(inside.contains("thrash") && inside.contains("backend=emulated"), "{inside}");
    // After `b` the sort marker moves to the bandwidth column.
    assert!(inside.contains("MBM MB/s▼"), "{inside}");
    assert!(screen[leave..].contains("ticks, lateness"), "summary after the terminal is back");
}

/// What a person sees in tmux at 80, 100 and 160 columns: host and time, per-domain totals,
/// one line per container, whole headers and values; `d` unfolds the domains, `/` filters,
/// `?` helps, `q` quits.
#[test]
fn live_view_in_tmux_at_three_widths() {
    if Command::new("tmux").arg("-V").output().is_err() {
        cachescope_testkit::skip("no tmux (scripts/setup.sh installs it)");
        return;
    }
    for width in [80, 100, 160] {
        let session = format!("cachescope-test-{}-{width}", std::process::id());
        let cmd = format!("{} monitor --scenario {} --duration 10m", env!("CARGO_BIN_EXE_cachescope"), scenario());
        let w = width.to_string();
        tmux(&["new-session", "-d", "-s", &session, "-x", &w, "-y", "30", &cmd]);
        // Send `keys`, then the screen once it shows what they do (or after 20 s, a hang: then
        // the assertions below say what it showed).
        let pane = |keys: &[&str], shown: &dyn Fn(&str) -> bool| {
            if !keys.is_empty() {
                let mut a = vec!["send-keys", "-t", &session];
                a.extend_from_slice(keys);
                tmux(&a);
            }
            let t = Instant::now();
            loop {
                let s = tmux(&["capture-pane", "-p", "-t", &session]);
                if shown(&s) || t.elapsed() > Duration::from_secs(20) {
                    return s;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        };
        let count = |s: &str, name: &str| s.lines().filter(|l| l.starts_with(name)).count();
        let s = pane(&[], &|s| {
            s.lines().next().is_some_and(|l| l.ends_with(" UTC"))
                && s.lines().any(|l| l.starts_with("CONTAINER"))
                && count(s, "web") > 0
        });
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines[0].starts_with("cachescope on ") && lines[0].ends_with(" UTC"), "{width}:\n{s}");
        assert!(s.contains("L3 0: ") && s.contains("L3 1: ") && s.contains(" MiB used"), "{width}: totals\n{s}");
        let head = lines.iter().find(|l| l.starts_with("CONTAINER")).unwrap_or_else(|| panic!("{width}:\n{s}"));
        for t in ["STATUS", "LLC MiB▼", "LLC %", "MBM MB/s", "IPC", "MPKI"] {
            assert!(head.contains(t), "{width}: '{t}' in {head}");
        }
        assert_eq!(count(&s, "web"), 1, "{width}: one line per container\n{s}");
        assert!(lines.iter().all(|l| l.chars().count() <= width), "{width}: wider than the terminal");
        let unfolded = |s: &str| s.contains("  L3 1") && s.contains("unavailable");
        let s = pane(&["d"], &unfolded);
        assert!(unfolded(&s), "{width}: domains unfolded\n{s}");
        let s = pane(&["/", "w", "e", "Enter"], &|s| s.contains("filter: we (1 of "));
        assert_eq!((count(&s, "web"), count(&s, "batch")), (1, 0), "{width}: filtered\n{s}");
        assert!(s.contains("filter: we (1 of "), "{width}:\n{s}");
        let help = "show or fold each container's L3 domains";
        let s = pane(&["?"], &|s| s.contains(help));
        assert!(s.contains(help), "{width}: help\n{s}");
        let s = pane(&["Escape"], &|s| !s.contains(help));
        assert!(!s.contains(help), "{width}: help closed\n{s}");
        tmux(&["send-keys", "-t", &session, "q"]);
        let has = || Command::new("tmux").args(["has-session", "-t", &session]).status().unwrap().success();
        let t = Instant::now();
        while has() && t.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(100));
        }
        let alive = has();
        if alive {
            tmux(&["kill-session", "-t", &session]);
        }
        assert!(!alive, "{width}: q quits");
    }
}

/// Narrow terminals in tmux: columns are dropped whole (least needed first), never cut: the
/// name and the occupancy at 20 columns, the bandwidth from 30, the status from 45.
#[test]
fn live_view_in_tmux_at_narrow_widths() {
    if Command::new("tmux").arg("-V").output().is_err() {
        return cachescope_testkit::skip("no tmux (scripts/setup.sh installs it)");
    }
    let all = ["STATUS", "LLC MiB", "LLC %", "MBM MB/s", "IPC", "MPKI"];
    for (width, shown) in [
        (20usize, &["LLC MiB▼"][..]),
        (30, &["LLC MiB▼", "MBM MB/s"][..]),
        (45, &["STATUS", "LLC MiB▼", "MBM MB/s"][..]),
    ] {
        let session = format!("cachescope-narrow-{}-{width}", std::process::id());
        // A duration of its own, to find this monitor among the processes.
        let duration = format!("{}s", 300 + width);
        let cmd =
            format!("{} monitor --scenario {} --duration {duration}", env!("CARGO_BIN_EXE_cachescope"), scenario());
        tmux(&["new-session", "-d", "-s", &session, "-x", &width.to_string(), "-y", "30", &cmd]);
        // The screen once it shows containers under the header (20 s: a hang).
        let t = Instant::now();
        let s = loop {
            let s = tmux(&["capture-pane", "-p", "-t", &session]);
            let drawn = s.lines().skip_while(|l| !l.starts_with("CONTAINER")).skip(1).any(|l| l.contains('.'));
            if drawn || t.elapsed() > Duration::from_secs(20) {
                break s;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        // Closing the terminal (SIGHUP, then a hung-up tty) ends the monitor: it once spun
        // forever in crossterm's poll of the dead terminal.
        tmux(&["kill-session", "-t", &session]);
        let alive = || {
            Command::new("pgrep")
                .args(["-f", &format!("monitor --scenario .* --duration {duration}")])
                .status()
                .unwrap()
                .success()
        };
        // (Within a second; 30 s is the spin the test guards against.)
        let t = Instant::now();
        while alive() && t.elapsed() < Duration::from_secs(30) {
            std::thread::sleep(Duration::from_millis(100));
        }
        println!("{width}: monitor gone {:?} after its terminal closed", t.elapsed());
        assert!(!alive(), "{width}: monitor still runs after its terminal closed");
        let head = s.lines().find(|l| l.starts_with("CONTAINER")).unwrap_or_else(|| panic!("{width}:\n{s}"));
        for t in shown {
            assert!(head.contains(t), "{width}: '{t}' in {head}");
        }
        for t in all.iter().filter(|t| !shown.iter().any(|s| s.starts_with(**t))) {
            assert!(!head.contains(t), "{width}: '{t}' should be dropped: {head}");
        }
        // Values whole: every occupancy cell a number with two decimals (or "-").
        let rows: Vec<&str> = s
            .lines()
            .skip_while(|l| !l.starts_with("CONTAINER"))
            .skip(1)
            .filter(|l| !l.trim().is_empty() && !l.contains('↓') && !l.contains('·') && !l.starts_with("lines "))
            .take(3)
            .collect();
        assert!(!rows.is_empty(), "{width}: no container line\n{s}");
        for r in &rows {
            let words: Vec<&str> = r.split_whitespace().collect();
            assert!(
                words
                    .iter()
                    .any(|w| *w == "-" || w.split_once('.').is_some_and(|(a, b)| !a.is_empty() && b.len() == 2)),
                "{width}: a number cut in {r:?}\n{s}"
            );
        }
        assert!(s.lines().all(|l| l.chars().count() <= width), "{width}: wider than the terminal\n{s}");
    }
}

/// TERM=dumb (or none) cannot place a cursor: `monitor` prints the plain tables instead of
/// taking the screen, even on a terminal.
#[test]
fn term_dumb_gets_the_plain_tables() {
    if Command::new("script").arg("--version").output().is_err() {
        return cachescope_testkit::skip("no `script` (util-linux) to provide a pseudo-terminal");
    }
    let cmd = format!(
        "stty cols 120 rows 30; exec {} monitor --scenario {} --duration 2s",
        env!("CARGO_BIN_EXE_cachescope"),
        scenario()
    );
    let out = Command::new("script").args(["-qec", &cmd, "/dev/null"]).env("TERM", "dumb").output().unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{screen}");
    assert!(!screen.contains("\x1b[?1049h"), "no alternate screen: {screen}");
    assert!(screen.contains("CONTAINER") && screen.contains("backend=emulated"), "{screen}");
}

/// A vector whose leaf 0xF.1 holds `ecx` (max RMID) and `ebx` (upscale factor).
fn hostile_vector(dir: &Path, ecx: u32, ebx: u32) -> String {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/cpuid/intel-xeon-platinum-8160.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(src).unwrap()).unwrap();
    let hex = |s: &serde_json::Value| u32::from_str_radix(s.as_str().unwrap().trim_start_matches("0x"), 16).unwrap();
    for l in v["leaves"].as_array_mut().unwrap() {
        if hex(&l["leaf"]) == 0xF && hex(&l["subleaf"]) == 1 {
            l["ecx"] = format!("{ecx:#010x}").into();
            l["ebx"] = format!("{ebx:#010x}").into();
        }
    }
    let p = dir.join(format!("hostile-{ecx}-{ebx}.json"));
    std::fs::write(&p, v.to_string()).unwrap();
    p.to_str().unwrap().to_string()
}

/// Sizes taken from input are bounded and the field out of range is named: no allocation of
/// 100 GB for a vector claiming 2^32 RMIDs, no upscale factor 0 blamed on the interval.
#[test]
fn hostile_cpuid_fields_are_named_not_allocated() {
    let dir = tempfile::tempdir().unwrap();
    let s = scenario();
    let huge = hostile_vector(dir.path(), u32::MAX, 98304);
    let info = run(&["info", "--json", "--cpuid-dump", &huge]);
    assert!(info.status.success());
    let j: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    assert_eq!(j["monitoring"]["supported"], false);
    let reason = j["monitoring"]["reason"].as_str().unwrap();
    assert!(reason.contains("CPUID.0xF.1:ECX (max RMID) is 4294967295, out of range"), "{reason}");
    one_line_error(&["monitor", "--emulate", &huge, "--scenario", &s, "--fast", "--duration", "10ms"], 2, "max RMID");
    let zero = hostile_vector(dir.path(), 191, 0);
    one_line_error(
        &["monitor", "--emulate", &zero, "--scenario", &s, "--fast", "--duration", "10ms"],
        2,
        "upscale factor",
    );
}

/// Inputs that would hang or exhaust memory are refused at once, naming the culprit.
#[test]
fn special_files_and_overflowing_numbers_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("s.toml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path; no memory is shared.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // Nothing waits on a FIFO: each command answers at once (`run` fails the test after a
    // minute, a hang).
    let started = Instant::now();
    one_line_error(&["monitor", "--scenario", fifo.to_str().unwrap()], 2, "not a regular file");
    one_line_error(&["monitor", "--scenario", "/dev/zero"], 2, "not a regular file");
    let pq = dir.path().join("x.parquet");
    let c = std::ffi::CString::new(pq.to_str().unwrap()).unwrap();
    // SAFETY: as above.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    one_line_error(&["report", pq.to_str().unwrap()], 2, "not a regular file");
    // A FIFO inside a directory is passed over, not opened.
    let out = run(&["report", dir.path().to_str().unwrap()]);
    assert!(!String::from_utf8_lossy(&out.stderr).is_empty() || out.status.success());
    println!("the FIFOs and /dev/zero refused in {:?}", started.elapsed());
    let over = dir.path().join("over.toml");
    std::fs::write(
        &over,
        "[platform]\nmodel = \"intel-xeon-platinum-8160\"\nl3_mib = 32\ndomains = 2\ncpus_per_domain = 2147483648\n",
    )
    .unwrap();
    one_line_error(&["monitor", "--scenario", over.to_str().unwrap(), "--fast"], 2, "cpus_per_domain");
}

/// A file on which the parquet crate itself panics (found by fuzzing `report`): one line that
/// names it, exit 2, no panic message.
#[test]
fn report_of_a_file_the_parquet_reader_panics_on() {
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/malformed/parquet-thrift-unwrap.parquet");
    // (Now refused by the footer check before the parquet crate sees it; a panic in that
    // crate would still be caught and named.)
    one_line_error(&["report", f.to_str().unwrap()], 2, "parquet-thrift-unwrap.parquet: malformed footer");
    // A 6 KiB file whose footer declares 2^28 schema elements (found by fuzzing: the parquet
    // crate asked for 19.7 GB): refused before anything is allocated.
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/malformed/parquet-footer-huge-list.parquet");
    one_line_error(&["report", f.to_str().unwrap()], 2, "malformed footer");
    // A 4.8 KiB file whose footer declares its key/value list an i64, which the parquet
    // crate reads as a list of 205 million (found by fuzzing: it asked for 9.8 GB).
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/malformed/parquet-kv-declared-i64.parquet");
    one_line_error(&["report", f.to_str().unwrap()], 2, "parquet-kv-declared-i64.parquet: malformed footer");
    // The input of a CI run's fuzzing (4.2 GB asked for): its version declared an i16.
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/malformed/parquet-version-declared-i16.parquet");
    one_line_error(&["report", f.to_str().unwrap()], 2, "parquet-version-declared-i16.parquet: malformed footer");
}

/// Smaller refusals: a run too short to sample, a bandwidth of 0 (fractions are fine), an
/// output directory on cgroupfs (mkdir there creates a cgroup).
#[test]
fn small_refusals() {
    let s = scenario();
    one_line_error(&["monitor", "--scenario", &s, "--fast", "--duration", "1us"], 2, "shorter than one interval");
    one_line_error(&["monitor", "--scenario", &s, "--fast", "--peak-bandwidth-gbps", "0"], 2, "--peak-bandwidth-gbps");
    let ok = run(&["monitor", "--scenario", &s, "--fast", "--duration", "10ms", "--peak-bandwidth-gbps", "0.5"]);
    // 0.5 GB/s makes 24-bit counters of 96 KiB safe for 3.3 s: 1 ms is fine.
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let mi = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if let Some(cg) = mi.lines().find(|l| l.contains(" - cgroup2 ")).and_then(|l| l.split(' ').nth(4)) {
        let target = format!("{cg}/cachescope-not-a-dir");
        one_line_error(
            &["record", "--scenario", &s, "--fast", "--duration", "10ms", "--output", &target],
            2,
            "cgroup2",
        );
        assert!(!Path::new(&target).exists(), "no cgroup created");
    }
}

/// What a run killed with SIGKILL leaves (its sandbox cgroup with an idle process, its
/// emulated resctrl mount) is cleaned at the next emulated resctrl start.
#[test]
fn leftovers_of_a_killed_run_are_cleaned() {
    if !emulated_resctrl_possible() {
        return;
    }
    let cg = cgroup2_root();
    // A pid that is no longer alive.
    let mut gone = Command::new("true").spawn().unwrap();
    let dead = gone.id();
    gone.wait().unwrap();
    let sandbox = cg.join(format!("cachescope-emu-{dead}"));
    std::fs::create_dir_all(sandbox.join("web")).unwrap();
    let mut idle = Command::new("sleep").arg("60").spawn().unwrap();
    std::fs::write(sandbox.join("web/cgroup.procs"), idle.id().to_string()).unwrap();
    let mount = std::env::temp_dir().join(format!("cachescope-resctrl-{dead}-0"));
    std::fs::create_dir_all(&mount).unwrap();
    let mounted = Command::new("mount").args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"]).arg(&mount).status().unwrap();
    let out = emulated_resctrl(&["--duration", "300ms", "--plain"]);
    let err = String::from_utf8_lossy(&out.stderr);
    // Killed by the cleaning (it is not our child's to end): reaped here once it is (10 s:
    // it never was).
    let reaped = wait_within(&mut idle, Duration::from_secs(10)).is_some();
    assert!(out.status.success(), "{err}");
    // (Counts may include other tests' killed runs: tests run side by side.)
    assert!(err.contains("removed what a killed run left: ") || !sandbox.exists(), "{err}");
    assert!(!sandbox.exists(), "the dead run's cgroup is gone");
    assert!(reaped, "its idle process was killed");
    if mounted.success() {
        assert!(!std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains(&format!("cachescope-resctrl-{dead}-")));
        assert!(!mount.exists());
    }
}

/// kill -9 of a run that serves its own emulated resctrl filesystem: the process exits (it
/// once waited forever in FUSE's uninterruptible FLUSH on the server it had just lost), its
/// idle processes die with it, and the next start removes its mount and cgroup.
#[test]
fn sigkill_of_emulated_resctrl_exits_and_is_cleaned() {
    if !emulated_resctrl_possible() {
        return;
    }
    let s = scenario();
    let mut child = bin()
        .args(["monitor", "--backend", "resctrl", "--emulate", "intel-xeon-platinum-8160", "--scenario", &s])
        .args(["--duration", "60s", "--plain"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let cg = cgroup2_root();
    let sandbox = cg.join(format!("cachescope-emu-{pid}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    // Killed while it plays: its containers' cgroups exist and hold idle processes (30 s: a
    // hang). (The half second more lets it get on with playing; what is checked does not
    // depend on it.)
    while Instant::now() < deadline && cachescope_cgroups::threads(&cg, &sandbox, true).unwrap().len() < 2 {
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let idle = cachescope_cgroups::threads(&cg, &sandbox, true).unwrap_or_default();
    child.kill().unwrap();
    let killed_at = Instant::now();
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait());
    });
    // At once; the wedge this guards against was forever (30 s).
    let exited = rx.recv_timeout(Duration::from_secs(30)).is_ok();
    if !exited {
        // Free the wedged process (abort every FUSE connection) before failing.
        let _ = Command::new("sh")
            .args(["-c", "mount -t fusectl none /sys/fs/fuse/connections; for a in /sys/fs/fuse/connections/*/abort; do echo 1 > $a; done"])
            .status();
    }
    let _ = waiter.join();
    assert!(exited, "exits on SIGKILL (still there after 30 s)");
    assert!(idle.len() >= 2, "the run was playing when killed: {idle:?}");
    println!("exited {:?} after SIGKILL", killed_at.elapsed());
    // Dead: gone, or a zombie until init reaps it.
    let living = |t: &&u32| {
        std::fs::read_to_string(format!("/proc/{t}/stat"))
            .is_ok_and(|s| s.rsplit(") ").next().is_some_and(|r| !r.starts_with('Z')))
    };
    let mut alive: Vec<&u32> = idle.iter().filter(living).collect();
    let t = Instant::now();
    while !alive.is_empty() && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
        alive.retain(living);
    }
    assert!(alive.is_empty(), "its idle processes died with it: {alive:?}");
    let out = emulated_resctrl(&["--duration", "100ms", "--plain"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!sandbox.exists(), "the killed run's cgroup is gone: {err}");
    assert!(
        !std::fs::read_to_string("/proc/self/mountinfo").unwrap().contains(&format!("cachescope-resctrl-{pid}-")),
        "the killed run's mount is gone: {err}"
    );
}

/// Overloaded (3,000 emulated containers at 500 µs), a run stopped by SIGTERM in the middle of
/// a batch stops there, says it spread its reads as the budget promises, and leaves a readable
/// file. The overload does not depend on the machine: the budget judges the sampling thread's
/// CPU time, and emulating 3,000 containers takes about 5 ms of it per interval in a debug
/// build here, 20 times the 300 µs an interval of 500 µs may use.
#[test]
fn overloaded_run_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let s = dir.path().join("many.toml");
    let mut text = String::from(
        "[platform]\nmodel = \"intel-xeon-platinum-8160\"\nl3_mib = 32\ndomains = 2\ncpus_per_domain = 8\n",
    );
    for i in 0..3000 {
        text.push_str(&format!(
            "\n[[container]]\nname = \"c{i:04}\"\ncpus = [{}]\nfootprint_mib = 2\nbandwidth_mbps = 100\n",
            i % 16
        ));
    }
    std::fs::write(&s, text).unwrap();
    let out_dir = dir.path().join("rec");
    let addr = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
    let interval = Duration::from_micros(500);
    let mut child = bin()
        .args(["record", "--scenario", s.to_str().unwrap(), "--interval", "500us", "--duration", "10m"])
        .args(["--listen", &addr, "--output"])
        .arg(&out_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let said = Watch::new(child.stderr.take().unwrap());
    // Its second wake-up counted on /metrics: the first batch (judged by the budget from its
    // 4th interval) is done and the next, longer, is under way (2 minutes: a hang).
    let wakes = || {
        common::get(&addr, "/metrics")
            .and_then(|p| {
                p.lines().find_map(|l| l.strip_prefix("cachescope_sample_lateness_seconds_count ")?.trim().parse().ok())
            })
            .unwrap_or(0.0)
    };
    let t = Instant::now();
    while wakes() < 2.0 && t.elapsed() < Duration::from_secs(120) && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(50));
    }
    let into = t.elapsed();
    signal(&child, libc::SIGTERM);
    let asked = Instant::now();
    // At once (0.2-0.4 s here, the file's end included); the batch it was in would take
    // seconds to minutes (30 s: a hang).
    let status = wait_within(&mut child, Duration::from_secs(30));
    let took = asked.elapsed();
    let err = said.finish();
    println!("SIGTERM {into:?} after the start; stopped {took:?} after it\n{err}");
    assert!(status.is_some_and(|s| s.success()), "{status:?} (None: still running 30 s after SIGTERM): {err}");
    let (cut, of, least) = common::overloaded(&err).unwrap_or_else(|| panic!("not overloaded: {err}"));
    assert!(cut > 0 && cut <= of, "{err}");
    let most = interval * cachescope_engine::budget::MAX_GROUPS as u32;
    assert!(least <= most, "a container waited {least:?} for a read: {err}");
    let rep = run(&["report", out_dir.to_str().unwrap()]);
    assert!(rep.status.success(), "{}", String::from_utf8_lossy(&rep.stderr));
}

/// `scripts/run.sh` with no argument runs `monitor` on this host. Where the host has no cache
/// monitoring (our machines), the header says why the cache columns are empty and names the
/// flag that fills them, and that flag works as written.
#[test]
fn a_host_without_cache_monitoring_says_so_and_names_the_demo_flag() {
    let info = run(&["info", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
    if v["auto"]["cache_monitoring"] != "none" {
        cachescope_testkit::skip("this host has cache monitoring: the header shows its backend instead");
        return;
    }
    let out =
        bin().args(["monitor", "--duration", "1s", "--print-every", "500ms"]).env("TERM", "dumb").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line =
        text.lines().find(|l| l.contains("no cache monitoring on this host")).unwrap_or_else(|| panic!("{text}"));
    let flag = line.split_once("--emulate ").map(|(_, rest)| rest.split_whitespace().next().unwrap()).unwrap();
    let demo =
        bin().args(["monitor", "--emulate", flag, "--duration", "1s", "--print-every", "500ms"]).output().unwrap();
    assert!(demo.status.success(), "--emulate {flag}: {}", String::from_utf8_lossy(&demo.stderr));
    assert!(String::from_utf8_lossy(&demo.stdout).contains("EMULATED"), "{}", String::from_utf8_lossy(&demo.stdout));
}
