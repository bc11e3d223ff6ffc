//! Scale (issue 24): 1,000 containers at 1 ms on the none path (eBPF PMU columns) and on the
//! host-driven emulated path, each run to its duration (± 1 s), with under 1 % of its
//! intervals overloaded (a second run when the first was not), nothing dropped and its memory
//! bounded; and the eBPF ticks' work following the followed containers, not the CPU count
//! (QEMU guests of 2 and 16 vCPUs, and the newest kernel Debian carries). The table of costs is scripts/bench-cost.sh's.

#![allow(clippy::unwrap_used)] // tests: a panic is the report

mod common;

use common::{console_tail, have, release_bin, sandbox};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const CONTAINERS: usize = 1000;
/// One at a time: a QEMU guest beside the 1,000 containers takes the CPU they are measured on.
static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
const SECONDS: u64 = 10;

/// Run `cmd` to its end: (exit status, stderr, peak RSS in kB from wait4).
#[allow(clippy::zombie_processes)] // waited for with wait4, for its rusage
fn run_measured(cmd: &mut Command) -> (bool, String, i64) {
    use std::io::Read;
    let mut child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    });
    let mut status = 0;
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: wait4 on our own child, not waited for elsewhere; `status` and `ru` outlive the
    // call and a zeroed rusage is valid.
    let (pid, ru) = unsafe { (libc::wait4(child.id() as i32, &mut status, 0, ru.as_mut_ptr()), ru.assume_init()) };
    assert_eq!(pid, child.id() as i32, "wait4: {}", std::io::Error::last_os_error());
    let ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    (ok, reader.join().unwrap(), ru.ru_maxrss)
}

/// "overloaded: X of Y intervals" → X / Y; 0 when the run never overloaded.
fn overloaded(err: &str) -> f64 {
    err.lines()
        .find_map(|l| {
            let rest = l.split("overloaded: ").nth(1)?;
            let mut w = rest.split_whitespace();
            let part: f64 = w.next()?.parse().ok()?;
            let all: f64 = w.nth(1)?.parse().ok()?;
            Some(part / all)
        })
        .unwrap_or(0.0)
}

#[test]
fn a_thousand_containers_at_1ms_on_the_none_and_emulated_paths() {
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    let Some(mut sb) = sandbox("cachescope-scale") else { return };
    let bin = release_bin();
    for i in 0..CONTAINERS {
        let name = format!("c{i:04}");
        sb.add(&name).unwrap();
        let mut c = Command::new(if i == 0 { "sh" } else { "sleep" });
        if i == 0 {
            // One busy container: the other CPU stays for the collector and the rest.
            c.args(["-c", "while :; do :; done"]);
        } else {
            c.arg("600");
        }
        sb.spawn(&name, c).unwrap();
    }
    let sel = format!("{}/*", sb.rel());
    for (path, extra) in
        [("none", vec!["--backend", "none"]), ("emulated", vec!["--emulate", "intel-xeon-platinum-8160"])]
    {
        // A second run when the first overloaded 1 % or more of its intervals: this 2-CPU VM's
        // neighbours now and then take the collector's CPU (seen here between passing runs, the
        // same build, nothing else of ours running: 1.15 % and 2.69 % on the emulated path).
        // The claim is that the collector keeps up, so a second run decides;
        // every run's figures are printed.
        let mut attempt = 0;
        let (ok, err, rss_mb, wall, over) = loop {
            attempt += 1;
            let out = tempfile::tempdir().unwrap();
            let t = Instant::now();
            let (ok, err, rss_kb) = run_measured(
                Command::new(&bin)
                    .args(["record", "--containers", &sel, "--interval", "1ms", "--duration", &format!("{SECONDS}s")])
                    .args(&extra)
                    .arg("--output")
                    .arg(out.path()),
            );
            let wall = t.elapsed();
            let rss_mb = rss_kb / 1024;
            let over = overloaded(&err);
            let rows = err.lines().find(|l| l.contains("recorded ")).unwrap_or("(no summary)").to_string();
            println!(
                "{path} (run {attempt}): {CONTAINERS} containers, wall {wall:.2?}, {:.3} % overloaded, peak RSS {rss_mb} MB; {rows}",
                over * 100.0
            );
            if over < 0.01 || attempt == 2 {
                break (ok, err, rss_mb, wall, over);
            }
        };
        assert!(ok, "{path}: {err}");
        assert!(err.contains("recorded "), "{path}: no summary: {err}");
        // Start (1,000 cgroups found, eBPF loaded) and end (the file closed) included.
        assert!(wall <= Duration::from_secs(SECONDS + 1), "{path}: a {SECONDS} s run took {wall:.2?}");
        assert!(over < 0.01, "{path}: {:.2} % of the intervals overloaded", over * 100.0);
        assert!(!err.contains("PMU counts incomplete"), "{path}: the collector fell behind: {err}");
        assert!(rss_mb < 256, "{path}: peak RSS {rss_mb} MB");
    }
}

/// One guest: (ticks asked, the header's words, program + timer runs per second) per tick
/// mode it ran. A guest that never reached its /init (TCG with many vCPUs on 2 host CPUs
/// sometimes stalls at boot: RCU stall reports, no init) is booted once more.
fn guest(vcpus: u32, kernel: &str, modes: &str) -> Vec<(String, String, f64)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for attempt in 1..=2 {
        let out = tempfile::tempdir().unwrap();
        let run = Command::new(root.join("scripts/guest-qemu.sh"))
            .arg(release_bin())
            .arg(out.path())
            .arg(root.join("crates/bpf/test/guest-ticks.sh"))
            .env("CACHESCOPE_GUEST_KMOD", "0")
            .env("CACHESCOPE_GUEST_KERNEL", kernel)
            .env("CACHESCOPE_QEMU_MACHINE", format!("-cpu max -smp {vcpus}"))
            .env("CACHESCOPE_QEMU_APPEND", format!("secs=5 modes={modes}"))
            .env("CACHESCOPE_QEMU_TIMEOUT", "240")
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&run.stdout).to_string() + &String::from_utf8_lossy(&run.stderr);
        println!(
            "== {vcpus} vCPUs, kernel {}, boot {attempt}\n{said}",
            if kernel.is_empty() { "default" } else { kernel }
        );
        // Before judging the run: a guest that never reached /init fails guest-qemu.sh.
        if !said.contains("CS-RESULT ") && attempt == 1 {
            println!("no result; the console's end:\n{}", console_tail(&out.path().join("console.log")));
            continue;
        }
        assert!(run.status.success(), "guest-qemu.sh failed");
        return results(&said, vcpus, modes);
    }
    unreachable!("the second boot returns or fails")
}

fn results(said: &str, vcpus: u32, modes: &str) -> Vec<(String, String, f64)> {
    let mut got = Vec::new();
    for line in said.lines().filter_map(|l| l.strip_prefix("CS-RESULT ")) {
        let field = |k: &str| {
            let at = line.find(&format!("{k}="))? + k.len() + 1;
            let v = &line[at..];
            Some(if let Some(q) = v.strip_prefix('"') { q.split('"').next()? } else { v.split(' ').next()? })
        };
        let num = |k: &str| field(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or_else(|| panic!("{k} in {line}"));
        assert_eq!(field("rc"), Some("0"), "{line}");
        assert_eq!(num("cpus") as u32, vcpus);
        let per_s = (num("runs") + num("timer_runs")) / num("secs");
        got.push((field("ticks").unwrap().to_string(), field("mode").unwrap().to_string(), per_s));
    }
    assert_eq!(got.len(), modes.split(',').count(), "every mode reported: {said}");
    got
}

#[test]
fn ebpf_ticks_follow_containers_not_cpus() {
    if !have("qemu-system-x86_64") || !Path::new("/bin/busybox").exists() {
        cachescope_testkit::skip("needs qemu-system-x86_64 and busybox-static (scripts/setup.sh installs them)");
        return;
    }
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    // This release's kernel (6.1: timers not pinned) at 2 and 16 vCPUs.
    let two = guest(2, "", "followed,every-cpu");
    let sixteen = guest(16, "", "followed");
    for (ticks, mode, _) in two.iter().chain(&sixteen) {
        let want = if ticks == "followed" { "ticks where followed containers run" } else { "ticks on every CPU" };
        assert_eq!(mode, want, "{ticks}");
    }
    let (f2, e2, f16) = (two[0].2, two[1].2, sixteen[0].2);
    println!("eBPF runs per second, one busy followed container: 2 vCPUs {f2:.0} (every-CPU ticks {e2:.0}), 16 vCPUs {f16:.0}");
    assert!(f16 <= 2.0 * f2, "16 vCPUs: {f16:.0} runs/s against {f2:.0} with 2");
    // The newest kernel (timers pinned to their CPU).
    let newest = guest(2, "unstable", "followed");
    assert_eq!(newest[0].1, "ticks where followed containers run");
}
