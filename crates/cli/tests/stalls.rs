//! A recorder that falls behind says what it missed: stopped (SIGSTOP) for 1, 5 and 30 s, or
//! starved of CPU by a cgroup quota, while a busy container keeps running. The eBPF slot map
//! holds about a second of slots; beyond that the kernel drops charges. Then the rows of that
//! time have null cpu_ns (never 0 over 1 ms), the loss is counted on stderr, in the files'
//! metadata and in `report`, and the CPU time the rows know plus the time they say they do
//! not know covers what the kernel says the container used.

#![allow(clippy::unwrap_used)] // tests: a panic is the report

mod common;

use common::{bin, parquet_files, sandbox};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// What the run and its files said.
struct Seen {
    err: String,
    /// The busy container's CPU time as the rows know it, and the intervals of its rows
    /// without it (ns); its rows with cpu_ns 0.
    known_ns: i64,
    unknown_ns: i64,
    zero_rows: usize,
    /// The cgroup's own count over the run (cpu.stat), ns.
    usage_ns: i64,
    /// `cachescope.pmu_lost_charges` summed over the files.
    lost_in_files: u64,
    report: String,
}

/// Record a busy and an idle container with eBPF CPU time, `stall(pid)` 2.5 s in (it returns
/// when the stall is over), for `secs` in all.
/// One stall at a time: each test's busy container must have a CPU to itself (on a 2-CPU
/// host four of them side by side left a busy loop whole 1 ms intervals without CPU, and its
/// rows said 0 where it had waited: a CI run saw 4 such rows).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn stalled(name: &str, secs: u32, stall: impl FnOnce(u32)) -> Option<Seen> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut sb = sandbox(&format!("cachescope-stall-{name}"))?;
    let mut busy = Command::new("sh");
    busy.args(["-c", "while :; do :; done"]);
    sb.spawn("busy", busy).unwrap();
    let mut idle = Command::new("sleep");
    idle.arg(format!("{}", secs + 30));
    sb.spawn("idle", idle).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rec");
    let usage = || cachescope_cgroups::cpu_usage_usec(&sb.dir().join("busy")).unwrap() as i64 * 1000;
    let run = common::Started::spawn(
        bin()
            .args(["record", "--emulate", "intel-xeon-platinum-8160", "--containers", &format!("{}/*", sb.rel())])
            .args(["--pmu", "bpf", "--duration", &format!("{secs}s"), "--output"])
            .arg(&out),
        "EMULATED",
    );
    let before = run.seen.then(usage);
    std::thread::sleep(Duration::from_millis(2500));
    stall(run.child.id());
    let (status, err) = run.finish();
    let usage_ns = usage() - before.unwrap_or_else(|| panic!("no start line: {err}"));
    assert!(status.success(), "{err}");
    let files = parquet_files(&out);
    let (mut known_ns, mut unknown_ns, mut zero_rows, mut lost_in_files) = (0, 0, 0, 0);
    for f in &files {
        let b = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(f).unwrap())
            .unwrap();
        for kv in b.metadata().file_metadata().key_value_metadata().unwrap() {
            if kv.key == "cachescope.pmu_lost_charges" {
                lost_in_files += kv.value.as_deref().unwrap().parse::<u64>().unwrap();
            }
        }
        for batch in b.build().unwrap() {
            use arrow_array::cast::AsArray;
            use arrow_array::Array;
            let batch = batch.unwrap();
            let i64c =
                |n: &str| batch.column_by_name(n).unwrap().as_primitive::<arrow_array::types::Int64Type>().clone();
            let (cpu, iv) = (i64c("cpu_ns"), i64c("interval_ns"));
            let id = batch.column_by_name("container_id").unwrap().as_string::<i32>().clone();
            let st = batch.column_by_name("status").unwrap().as_string::<i32>().clone();
            for i in 0..batch.num_rows() {
                if !id.value(i).contains("busy") || st.value(i) == "stopped" {
                    continue;
                }
                match cpu.is_valid(i) {
                    true if cpu.value(i) == 0 => zero_rows += 1,
                    true => known_ns += cpu.value(i),
                    false => unknown_ns += iv.value(i),
                }
            }
        }
    }
    let report = bin().arg("report").arg(&out).output().unwrap();
    drop(sb);
    Some(Seen {
        err,
        known_ns,
        unknown_ns,
        zero_rows,
        usage_ns,
        lost_in_files,
        report: String::from_utf8_lossy(&report.stdout).into_owned(),
    })
}

fn sigstop(secs: u64) -> impl FnOnce(u32) {
    move |pid| {
        // SAFETY: kill(2) on the child we spawned and have not waited for.
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_secs(secs));
        // SAFETY: as above.
        unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    }
}

/// The checks every stall shares; `dropped`: whether the map must have overflowed.
fn check(s: &Seen, what: &str, dropped: bool) {
    let (known, unknown, used) = (s.known_ns as f64, s.unknown_ns as f64, s.usage_ns as f64);
    println!(
        "{what}: busy used {:.2} s; rows know {:.2} s and say {:.2} s unknown; {} rows of 0; {} charges lost in the files",
        used / 1e9,
        known / 1e9,
        unknown / 1e9,
        s.zero_rows,
        s.lost_in_files
    );
    // eBPF cpu-clock also counts interrupt time the scheduler leaves out.
    assert!(known <= used * 1.1 + 1e8, "{what}: rows know more than was used: {}", s.err);
    assert!(known + unknown >= used * 0.9, "{what}: CPU time vanished without a null row: {}", s.err);
    // A busy loop is never at 0 for long: a few rows at the run's edges at most.
    assert!(s.zero_rows <= 3, "{what}: {} rows say 0 CPU", s.zero_rows);
    if dropped {
        let said = s.err.lines().find(|l| l.contains("PMU counts incomplete: ")).unwrap_or_else(|| panic!("{}", s.err));
        let n: u64 = said.split("incomplete: ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
        assert!(n > 0 && unknown > 0.0, "{said}");
        assert!(
            s.err.contains("the collector fell behind and the kernel dropped PMU charges"),
            "said when it happened: {}",
            s.err
        );
        assert_eq!(s.lost_in_files, n, "the files' metadata counts every dropped charge: {}", s.err);
        assert!(s.report.contains(&format!("PMU lost: {n} charges dropped")), "{}", s.report);
    }
}

#[test]
fn a_one_second_stop_loses_nothing_silently() {
    let Some(s) = stalled("1s", 6, sigstop(1)) else { return };
    check(&s, "SIGSTOP 1 s", false);
}

#[test]
fn a_five_second_stop_leaves_null_rows_and_says_so() {
    let Some(s) = stalled("5s", 9, sigstop(5)) else { return };
    check(&s, "SIGSTOP 5 s", true);
}

#[test]
fn a_thirty_second_stop_leaves_null_rows_and_says_so() {
    let Some(s) = stalled("30s", 34, sigstop(30)) else { return };
    check(&s, "SIGSTOP 30 s", true);
}

/// A CPU controller to starve a process with: cgroup v2's cpu.max where the hierarchy offers
/// the controller, else v1's CFS quota. (The directory made, the file to write the quota to,
/// and the quota that starves.)
fn starving_cgroup(name: &str) -> Option<(PathBuf, &'static str, &'static str, &'static str)> {
    let v2 = cachescope_cgroups::Hierarchy::find(Path::new("/proc")).ok().filter(|h| h.v2)?;
    let offers = std::fs::read_to_string(v2.root.join("cgroup.subtree_control")).unwrap_or_default();
    if offers.split_whitespace().any(|c| c == "cpu") {
        return Some((v2.root.join(name), "cpu.max", "1000 100000", "max 100000"));
    }
    ["/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"]
        .iter()
        .map(Path::new)
        .find(|p| p.join("cpu.cfs_quota_us").exists())
        .map(|p| (p.join(name), "cpu.cfs_quota_us", "1000", "-1"))
}

#[test]
fn a_recorder_starved_by_a_cpu_quota_leaves_null_rows_and_says_so() {
    let name = format!("cachescope-starve-{}", std::process::id());
    let Some((cg, quota, starve, free)) = starving_cgroup(&name) else {
        return cachescope_testkit::skip("no cpu controller (cgroup v2 cpu.max or v1 cpu.cfs_quota_us) to starve with");
    };
    if std::fs::create_dir(&cg).is_err() {
        return cachescope_testkit::skip(format!("cannot create {}", cg.display()));
    }
    let seen = stalled("quota", 12, |pid| {
        std::fs::write(cg.join(quota), starve).unwrap();
        std::fs::write(cg.join("cgroup.procs"), pid.to_string()).unwrap();
        std::thread::sleep(Duration::from_secs(6));
        std::fs::write(cg.join(quota), free).unwrap();
    });
    // Its processes leave with it; the directory then goes.
    for _ in 0..50 {
        if std::fs::remove_dir(&cg).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let Some(s) = seen else { return };
    check(&s, "1 % of a CPU for 6 s", true);
}
