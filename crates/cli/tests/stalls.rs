//! A recorder that falls behind says what it missed: stopped (SIGSTOP) for 1, 5 and 30 s, or
//! starved of CPU by a cgroup quota, while a busy container keeps running. The eBPF slot map
//! holds about a second of slots; beyond that the kernel drops charges. Then the rows of that
//! time have null cpu_ns (never 0 over 1 ms), the loss is counted on stderr, in the files'
//! metadata and in `report`, and the CPU time the rows know plus the time they say they do
//! not know covers what the kernel says the container used.

#![allow(clippy::unwrap_used)] // tests: a panic is the report

mod common;

use common::{bin, parquet_files, sandbox, uncharged_ns};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// What the run and its files said.
struct Seen {
    err: String,
    /// The busy container's CPU time as the rows know it, and the intervals of its rows
    /// without it (ns).
    known_ns: i64,
    unknown_ns: i64,
    /// Its runs of rows with cpu_ns 0, back to back in time: rows and ns of each.
    zero_runs: Vec<(usize, i64)>,
    /// Of those rows, how many are next to a row of unknown CPU time.
    zero_next_to_null: usize,
    /// The cgroup's own count (cpu.stat), ns: over a window inside the recording (from its
    /// start line to the end of the stall), and over one holding it (from before the recorder
    /// started to after it ended).
    usage_inside_ns: i64,
    usage_ns: i64,
    /// Over the outer window: its length, the interrupt and stolen time of every CPU (which
    /// cpu-clock counts and cpu.stat does not), and how often the busy loop was switched out.
    wall_ns: i64,
    uncharged_ns: i64,
    busy_switches: u64,
    /// `cachescope.pmu_lost_charges` summed over the files.
    lost_in_files: u64,
    report: String,
}

/// Record a busy and an idle container with eBPF CPU time, `stall(pid)` 2.5 s in (it returns
/// when the stall is over), for `secs` in all.
/// One stall at a time: four busy loops side by side on a 2-CPU host leave each whole 1 ms
/// intervals without CPU, where its rows say 0 (a CI run saw 4 such rows). Those the check
/// allows as far as the kernel's count of the loop's waits explains them.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn stalled(name: &str, secs: u32, stall: impl FnOnce(u32)) -> Option<Seen> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut sb = sandbox(&format!("cachescope-stall-{name}"))?;
    let mut busy = Command::new("sh");
    busy.args(["-c", "while :; do :; done"]);
    let busy_pid = sb.spawn("busy", busy).unwrap();
    let mut idle = Command::new("sleep");
    idle.arg(format!("{}", secs + 30));
    sb.spawn("idle", idle).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("rec");
    let usage = || cachescope_cgroups::cpu_usage_usec(&sb.dir().join("busy")).unwrap() as i64 * 1000;
    let (t0, usage0, uncharged0, switches0) =
        (Instant::now(), usage(), uncharged_ns(), cachescope_testkit::ctxt_switches(busy_pid));
    let run = common::Started::spawn(
        bin()
            .args(["record", "--emulate", "intel-xeon-platinum-8160", "--containers", &format!("{}/*", sb.rel())])
            .args(["--pmu", "bpf", "--duration", &format!("{secs}s"), "--output"])
            .arg(&out),
        "EMULATED",
    );
    let before = run.seen.then(usage);
    // Margins only: the stall comes 2.5 s in and ends at least 1.5 s before the run does.
    std::thread::sleep(Duration::from_millis(2500));
    stall(run.child.id());
    let stalled_to = usage();
    let (status, err) = run.finish();
    let (usage_ns, wall_ns) = (usage() - usage0, t0.elapsed().as_nanos() as i64);
    let (uncharged_ns, busy_switches) =
        (uncharged_ns() - uncharged0, cachescope_testkit::ctxt_switches(busy_pid) - switches0);
    let usage_inside_ns = stalled_to - before.unwrap_or_else(|| panic!("no start line: {err}"));
    assert!(status.success(), "{err}");
    let files = parquet_files(&out);
    let (mut known_ns, mut unknown_ns, mut lost_in_files) = (0, 0, 0);
    // The busy container's rows: domain, end time, interval, CPU time.
    let mut rows: Vec<(i32, i64, i64, Option<i64>)> = Vec::new();
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
            let (cpu, iv, t) = (i64c("cpu_ns"), i64c("interval_ns"), i64c("time_ns"));
            let id = batch.column_by_name("container_id").unwrap().as_string::<i32>().clone();
            let st = batch.column_by_name("status").unwrap().as_string::<i32>().clone();
            let dom = batch.column_by_name("domain").unwrap().as_primitive::<arrow_array::types::Int32Type>().clone();
            for i in 0..batch.num_rows() {
                if !id.value(i).contains("busy") || st.value(i) == "stopped" {
                    continue;
                }
                match cpu.is_valid(i) {
                    true => known_ns += cpu.value(i),
                    false => unknown_ns += iv.value(i),
                }
                rows.push((dom.value(i), t.value(i), iv.value(i), cpu.is_valid(i).then(|| cpu.value(i))));
            }
        }
    }
    // Per domain in time order, the runs of rows of 0 back to back: each spans from the row
    // before it (what the recorder joined to its rows is slots ending after that row) to its
    // last row.
    rows.sort_unstable();
    let mut zero_runs: Vec<(usize, i64)> = Vec::new();
    let mut zero_next_to_null = 0;
    for (i, &(dom, t, iv, cpu)) in rows.iter().enumerate() {
        if cpu != Some(0) {
            continue;
        }
        let prev = i.checked_sub(1).map(|j| rows[j]).filter(|r| r.0 == dom);
        let next = rows.get(i + 1).filter(|r| r.0 == dom);
        zero_next_to_null += usize::from(prev.is_some_and(|r| r.3.is_none()) || next.is_some_and(|r| r.3.is_none()));
        let from = prev.map_or(t - iv, |r| r.1);
        match (zero_runs.last_mut(), prev) {
            (Some(run), Some(p)) if p.3 == Some(0) => *run = (run.0 + 1, run.1 + t - p.1),
            _ => zero_runs.push((1, t - from)),
        }
    }
    let report = bin().arg("report").arg(&out).output().unwrap();
    drop(sb);
    Some(Seen {
        err,
        known_ns,
        unknown_ns,
        zero_runs,
        zero_next_to_null,
        usage_inside_ns,
        usage_ns,
        wall_ns,
        uncharged_ns,
        busy_switches,
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
    let (known, unknown) = (s.known_ns as f64, s.unknown_ns as f64);
    let (used, used_inside) = (s.usage_ns as f64, s.usage_inside_ns as f64);
    // The loop is always runnable: what of the outer window it was not on a CPU it waited.
    let waited_ms = (s.wall_ns - s.usage_ns) / 1_000_000;
    let zero_rows: usize = s.zero_runs.iter().map(|r| r.0).sum();
    // A row says 0 where no slot charged the loop ended in its interval. Under 1 ms, maybe
    // none did (the recorder sampled late, then on time). Each whole ms of a run of such rows
    // holds a slot's start the loop was not on a CPU at, with no switch away from it between
    // them: one wait, as long as the slot starts it spans (less one ms).
    let runs_over_1ms = s.zero_runs.iter().filter(|r| r.1 >= 1_000_000).count() as u64;
    let zero_wait_ms: i64 = s.zero_runs.iter().map(|r| (r.1 / 1_000_000 - 1).max(0)).sum();
    println!(
        "{what}: busy used {:.2} s ({:.2} s within the recording), waited {waited_ms} ms, switched out {} times; rows \
         know {:.2} s and say {:.2} s unknown; {zero_rows} rows of 0 in {} runs ({runs_over_1ms} of 1 ms or more, \
         needing {zero_wait_ms} ms of waits; {} next to an unknown row); {:.3} s of interrupts and steal; {} charges \
         lost in the files",
        used / 1e9,
        used_inside / 1e9,
        s.busy_switches,
        known / 1e9,
        unknown / 1e9,
        s.zero_runs.len(),
        s.zero_next_to_null,
        s.uncharged_ns as f64 / 1e9,
        s.lost_in_files
    );
    // eBPF cpu-clock also counts the interrupt and stolen time the scheduler leaves out.
    assert!(known <= used * 1.1 + 1e8 + s.uncharged_ns as f64, "{what}: rows know more than was used: {}", s.err);
    assert!(known + unknown >= used_inside * 0.9, "{what}: CPU time vanished without a null row: {}", s.err);
    // Rows of 0 are waits the kernel counted, not lost charges (those rows are null).
    assert!(
        runs_over_1ms <= s.busy_switches && zero_wait_ms <= waited_ms,
        "{what}: {zero_rows} rows say 0 CPU ({runs_over_1ms} runs of 1 ms or more, {zero_wait_ms} ms of waits), \
         the loop was switched out {} times and waited {waited_ms} ms",
        s.busy_switches
    );
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

/// What to write where in a cgroup, in order.
type Writes = &'static [(&'static str, &'static str)];

/// A CPU controller to starve a process with: cgroup v2's cpu.max where the hierarchy offers
/// the controller, else v1's CFS quota. (The directory to make, what starves, what frees.)
/// Starved: 1 ms of CPU a second, the least either takes. At 1 % (1 ms in 100) a fast host's
/// recorder could keep up and drop nothing; at 0.1 % it would have to work through each 1 ms
/// interval in 1 us of CPU time.
fn starving_cgroup(name: &str) -> Option<(PathBuf, Writes, Writes)> {
    let v2 = cachescope_cgroups::Hierarchy::find(Path::new("/proc")).ok().filter(|h| h.v2)?;
    let offers = std::fs::read_to_string(v2.root.join("cgroup.subtree_control")).unwrap_or_default();
    if offers.split_whitespace().any(|c| c == "cpu") {
        return Some((v2.root.join(name), &[("cpu.max", "1000 1000000")], &[("cpu.max", "max 100000")]));
    }
    ["/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"]
        .iter()
        .map(Path::new)
        .find(|p| p.join("cpu.cfs_quota_us").exists())
        .map(|p| {
            let starve: Writes = &[("cpu.cfs_period_us", "1000000"), ("cpu.cfs_quota_us", "1000")];
            (p.join(name), starve, &[("cpu.cfs_quota_us", "-1")] as Writes)
        })
}

#[test]
fn a_recorder_starved_by_a_cpu_quota_leaves_null_rows_and_says_so() {
    let name = format!("cachescope-starve-{}", std::process::id());
    let Some((cg, starve, free)) = starving_cgroup(&name) else {
        return cachescope_testkit::skip("no cpu controller (cgroup v2 cpu.max or v1 cpu.cfs_quota_us) to starve with");
    };
    if std::fs::create_dir(&cg).is_err() {
        return cachescope_testkit::skip(format!("cannot create {}", cg.display()));
    }
    let seen = stalled("quota", 12, |pid| {
        for (file, value) in starve {
            std::fs::write(cg.join(file), value).unwrap();
        }
        std::fs::write(cg.join("cgroup.procs"), pid.to_string()).unwrap();
        std::thread::sleep(Duration::from_secs(6));
        for (file, value) in free {
            std::fs::write(cg.join(file), value).unwrap();
        }
    });
    // Its processes leave with it; the directory then goes (a ceiling only a hang reaches).
    let t0 = Instant::now();
    while std::fs::remove_dir(&cg).is_err() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let Some(s) = seen else { return };
    check(&s, "0.1 % of a CPU for 6 s", true);
}
