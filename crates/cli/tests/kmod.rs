//! The kernel module in real kernels: scripts/guest-qemu.sh builds it against each Debian
//! kernel's headers (scripts/kmod-build.sh: W=1, no warnings), boots that kernel under QEMU
//! (TCG: no RDT, so the module runs in emulation mode) with this cachescope binary, and
//! kmod/test/guest.sh runs the scenario: a container adopted at start, a busy one (its process in a nested cgroup), an
//! idle one, a third and a fifth on five emulated RMIDs.
//! Checked here: the load-time refusals, accounting from the first millisecond (emulated MBM
//! equals the cgroup's CPU time at 1 byte/ns), occupancy within the emulated L3, exhaustion
//! reported, a freed RMID reused only when clean, one session at a time, CPU 1 taken offline
//! and back while sampling (its domain unavailable meanwhile), unload, and a dmesg with no
//! WARNING, BUG, atomic-sleep report or kCFI trap. Kernels: see `kernels()`.
#![allow(clippy::unwrap_used)]

mod common;

use common::rdt::rdt_qemu;
use common::{guest_results, have, release_bin};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;

const L3: u64 = 4096 * 1024;

/// The kernels the module is tested on: this release's default, its PREEMPT_RT one, the
/// newest Debian carries (unstable: 7.2) and a debug kernel built from this release's source
/// with lockdep, KASAN, the atomic-sleep checker, timer debug objects and kmemleak
/// (scripts/debug-kernel.sh, cached; its first build takes a while); CACHESCOPE_KERNELS=all adds the rest of what Debian
/// carries for x86-64 (6.1 cloud, 6.12 generic, cloud and RT, 7.2 cloud and RT), and
/// CACHESCOPE_KERNELS="a b" names them (as scripts/debian-kernel.sh takes them; "default" is
/// this release's default).
fn kernels() -> Vec<String> {
    let all = ["default", "rt-amd64", "unstable", "debug", "cloud-amd64", "6.12-amd64", "6.12-cloud-amd64"];
    let all = all.iter().chain(&["6.12-rt-amd64", "unstable/cloud-amd64", "unstable/rt-amd64"]);
    match std::env::var("CACHESCOPE_KERNELS").ok().as_deref().map(str::trim) {
        None | Some("") => ["default", "rt-amd64", "unstable", "debug"].map(String::from).to_vec(),
        Some("all") => all.map(|k| k.to_string()).collect(),
        Some(list) => list.split_whitespace().map(String::from).collect(),
    }
}

/// The module on every kernel but the debug one, under QEMU's -icount (`common::rdt::icount`):
/// the guest's clock counts instructions, so what the checks compare (MBM emulated from the
/// time between switches, the cgroup's CPU time) is measured in a time the host's load cannot
/// stretch, and the guest runs beside the host's other tests.
#[test]
fn kernel_module_under_qemu() {
    modules_on(kernels().into_iter().filter(|k| k != "debug").collect());
}

/// The module on the debug kernel (lockdep, KASAN, kmemleak), with a host thread per vCPU:
/// under -icount its sessions took too long. scripts/test.sh runs it after the other tests,
/// alone (nextest profile `alone`).
#[test]
fn kernel_module_on_the_debug_kernel() {
    modules_on(kernels().into_iter().filter(|k| k == "debug").collect());
}

/// Checks every kernel in `kernels`, whatever another did: each one's verdict is printed, and
/// the failure names every kernel that failed.
fn modules_on(kernels: Vec<String>) {
    let headers = Command::new("dpkg-query").args(["-W", "linux-headers-amd64"]).output();
    if !have("qemu-system-x86_64") || !headers.is_ok_and(|o| o.status.success()) || !Path::new("/bin/busybox").exists()
    {
        cachescope_testkit::skip(
            "needs qemu-system-x86_64, linux-headers-amd64 and busybox-static (scripts/setup.sh installs them)",
        );
        return;
    }
    if kernels.is_empty() {
        // Counted as skipped, not passed: CACHESCOPE_KERNELS named none of this test's kernels.
        cachescope_testkit::skip("CACHESCOPE_KERNELS names no kernel of this test");
        return;
    }
    common::rdt::judge(
        kernels
            .iter()
            .map(|kernel| {
                let check: Box<dyn FnOnce()> = Box::new(move || {
                    let started = std::time::Instant::now();
                    check_kernel(kernel);
                    println!(
                        "{kernel}: builds (W=1), loads, test passes, dmesg clean, in {:.0} s",
                        started.elapsed().as_secs_f64()
                    );
                });
                (kernel.clone(), check)
            })
            .collect(),
    );
}

/// Builds the module for `kernel`, boots it with kmod/test/guest.sh and checks what it said.
fn check_kernel(kernel: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let churn = if kernel == "debug" { 50 } else { 200 };
    let out = tempfile::tempdir().unwrap();
    // The release build, as users run it: the debug one, under TCG, read the ring 5 times in
    // its 10 s session (missing 224 of its ticks), ran 23 s instead of 10 and lost 4419
    // records to a full ring on 6.1-rt; the release one kept every tick on the same kernel.
    let run = Command::new(root.join("scripts/guest-qemu.sh"))
        .arg(release_bin())
        .arg(out.path())
        .env("CACHESCOPE_GUEST_KERNEL", if kernel == "default" { "" } else { kernel })
        // The RDT machine's QEMU (10.2.2; its device is not asked for here), not Debian's 7.2:
        // the module's probes patch the kernel's text when they register and unregister, and
        // 7.2 with a thread per vCPU now and then leaves a vCPU trapping on a stale translation
        // of the patched site for good, and the guest freezes (kmod/test/patch-stress.sh
        // reproduces it; kmod/README.md has the figures). One TCG thread for both vCPUs avoids
        // it too, but made the debug kernel's guest too slow for its sessions.
        .env("CACHESCOPE_QEMU", rdt_qemu())
        // Virtual time but on the debug kernel (the tests above say why). Under -icount both
        // vCPUs share a host thread: 65-107 s a kernel alone, against about 40; the debug
        // kernel's guest, sampling every 10 ms, 354 s alone against 145 with a thread per vCPU.
        .env("CACHESCOPE_QEMU_ICOUNT", if kernel == "debug" { "off".into() } else { common::rdt::icount() })
        // KASAN and lockdep make every allocation and lock several times slower under TCG;
        // a guest under -icount beside the host's tests gets half a CPU at times.
        // Ceilings only a hang reaches: up to three times the longest boot seen.
        .env("CACHESCOPE_QEMU_TIMEOUT", if kernel == "debug" { "1800" } else { "1200" })
        // Fewer cgroups churned on the debug kernel, sampled every 10 ms instead of every
        // millisecond (kmod/test/guest.sh says why): what KASAN, lockdep and kmemleak check is
        // the same code on every path, whatever the interval.
        .env(
            "CACHESCOPE_QEMU_APPEND",
            if kernel == "debug" { format!("cs_churn={churn} cs_interval=10000") } else { format!("cs_churn={churn}") },
        )
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&run.stdout).to_string() + &String::from_utf8_lossy(&run.stderr);
    // Printed before the checks, without the 50 load cycles' repeated dmesg lines: a failing
    // check's message must still fit in what a CI log keeps.
    println!("== kernel {kernel}\n{}", without_repeats(&said));
    assert!(run.status.success(), "{kernel}: guest-qemu.sh failed: {}", common::guest_failure(&said));
    let results = guest_results(&said);
    let r = |k: &str| results.get(k).cloned().unwrap_or_else(|| panic!("the guest did not report {k}"));
    let num = |k: &str| r(k).parse::<u64>().unwrap_or_else(|_| panic!("{k}={}", r(k)));
    assert!(!results.contains_key("monitor_stuck"), "{kernel}: the monitor did not end (CS-STUCK lines above)");
    assert_eq!(r("done"), "1", "{kernel}: the guest ran to the end");
    // Nothing the kernel should never say: no WARNING, BUG, lockdep or atomic-sleep report, no
    // kCFI trap (the lines are in the output above, as CS-SPLAT).
    assert_eq!(r("splats"), "0", "{kernel}: the kernel complained");

    // Refusals at load: no RDT without emulate=1 (ENODEV, said why), bad parameters (EINVAL).
    assert_ne!(r("refuse_no_rdt"), "0");
    assert_eq!(r("refuse_no_rdt_said"), "1");
    assert_ne!(r("refuse_interval"), "0");
    assert_ne!(r("refuse_ring"), "0");
    assert_eq!(r("load"), "0");
    assert_ne!(r("second_open"), "0", "a second session is refused while one is open");
    assert_eq!(r("monitor_exit"), "0");
    assert_eq!(r("rmmod"), "0", "unloads after the session closed");
    assert!(said.contains("CS-INFO") && said.contains("loaded with EMULATED counters"), "info reports the module");
    assert!(said.contains("PQR_ASSOC written"), "the run's end says what the module did");
    assert!(said.contains("IA32_PQR_ASSOC restored"));
    // Loaded and unloaded 50 times; 200 cgroups churned while sampling (50 on the debug
    // kernel); rmmod refused while a reader holds the device and a container runs, accepted
    // once it closed.
    assert_eq!(r("load_cycles"), "50", "{kernel}: load/unload cycles");
    assert_eq!(num("churned"), churn, "{kernel}: cgroups churned");
    assert_eq!(r("churn_exit"), "0", "{kernel}: the session sampling the churn");
    println!("{kernel}: {} of {churn} churned cgroups recorded", r("churn_seen"));
    assert_ne!(r("rmmod_held"), "0", "{kernel}: rmmod while the device is open");
    assert_eq!((r("held_exit").as_str(), r("rmmod_released").as_str()), ("0", "0"), "{kernel}: then unloads");
    if kernel == "debug" {
        assert_eq!(r("kmemleak_leaks"), "0", "{kernel}: kmemleak found leaks (CS-LEAK lines above)");
    }

    let text = std::fs::read_to_string(out.path().join("rows.jsonl")).unwrap();
    let rows: Vec<Value> = text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            serde_json::from_str(l).unwrap_or_else(|e| {
                panic!(
                    "{kernel}: rows.jsonl line {} of {}: {e} (the recording cut short on the console?)",
                    i + 1,
                    text.lines().count()
                )
            })
        })
        .collect();
    assert!(rows.len() > 1000, "{} rows", rows.len());
    let mut by: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for row in &rows {
        let path = row["cgroup_path"].as_str().unwrap();
        let name = path.rsplit('/').next().unwrap().to_string();
        by.entry(name).or_default().push(row);
    }
    let u = |v: &Value| v.as_u64().unwrap_or(0);
    let sum = |name: &str, col: &str| by[name].iter().map(|r| u(&r[col])).sum::<u64>();

    // MBM counted from the container's first millisecond: the kernel tagged the cgroup at
    // mkdir, before user space knew it (and the nested cgroup with it); 1 byte per ns of CPU
    // time, from -2 % (a late tag loses the first milliseconds) to +10 %: each switch away
    // charges the task the scheduler's path from its last CPU-time update to the probe (with
    // a host thread per vCPU: +0.2 % on an idle host, +0.0 to +1.8 % with three busy loops
    // beside the guest; under -icount -0.1 to +0.3 % alone, up to +4.5 % (6.1-rt) with two
    // host busy loops beside it and +0.8 % with three, and +5.15 % on 6.1-rt among the tests
    // in one CI run: docs/testing.md says why). Up to +10 % under -icount: a doubled charge,
    // what this guards against, is still far outside it.
    // -5/+15 % on the debug kernel, whose instrumented path is longer: seen +0.8 to +3.1 %
    // with a debug build of cachescope in the guest, +2.7 to +8.1 % with the release build,
    // which reads the ring far more often (more switches on the busy CPU, each charging the
    // leaving task the path from its last CPU-time update to the probe).
    let within = if kernel == "debug" { 0.95..=1.15 } else { 0.98..=1.10 };
    for name in ["busy", "extra"] {
        let want = num(&format!("{name}_usage_usec")) * 1000;
        let got = sum(name, "mbm_total_bytes");
        let ratio = got as f64 / want as f64;
        println!("{name}: MBM {got} bytes for {want} ns of CPU: ratio {ratio:.4}");
        assert!(within.contains(&ratio), "{kernel}: {name}: MBM {got} vs CPU time {want} ns");
        let local = sum(name, "mbm_local_bytes") as f64 / got as f64;
        assert!((0.79..=0.81).contains(&local), "{name}: local share {local}");
    }
    // The idle container is charged its own CPU time and no one else's (on PREEMPT_RT too,
    // where interrupts run in threads): 1 byte per ns, 2 % and a millisecond of slack. More on the
    // debug kernel (below): the scheduler's path from a task's last CPU-time update to the
    // switch probe (pick_next_task under lockdep and KASAN, tens of microseconds per switch
    // under TCG) is charged to the task leaving, and the idle one's few milliseconds of
    // start-up are switched out often by the busy loops on its CPU (seen: +4.6 to +11.4 %).
    // The bug this catches (others' work under its RMID) charged twice its CPU time. With a
    // host thread per vCPU, 6.1-rt's idle container was charged 1.3 and 1.9 times its CPU
    // time beside the host's other tests, and 1.3 times alone (a host preempting the vCPU
    // inside that path stretches it by milliseconds); under -icount 0.92 to 1.02, with up to
    // three host busy loops beside it. The debug kernel's guest keeps its thread per vCPU, so
    // the host stretches that path there too: +26.7 % in one CI run on a slow day (its monitor
    // missed 516 ticks, its extra container ran 35 s). Its bound is 60 %: the doubled charge
    // stays outside it, and the kernels under -icount judge the charge at 2 %.
    let idle = sum("idle", "mbm_total_bytes");
    let idle_ns = num("idle_usage_usec") * 1000;
    let slack = if kernel == "debug" { 160 } else { 102 };
    println!(
        "{kernel}: idle MBM {idle} bytes for {idle_ns} ns of CPU: ratio {:.4}",
        idle as f64 / idle_ns.max(1) as f64
    );
    assert!(
        idle <= idle_ns * slack / 100 + 1_000_000,
        "{kernel}: the idle container was charged {idle} bytes for {idle_ns} ns"
    );

    // CPU hotplug while sampling: CPU 1, alone in emulated domain 1, went offline and came
    // back. The domain said it was unavailable (no number) and sampled again afterwards.
    assert_eq!((r("cpu1_off").as_str(), r("cpu1_on").as_str()), ("0", "0"), "{kernel}: CPU 1 off and on");
    let mut d1: Vec<&Value> = rows.iter().filter(|row| u(&row["domain"]) == 1).collect();
    d1.sort_by_key(|row| u(&row["time_ns"]));
    let gone = d1
        .iter()
        .position(|row| row["status"] == "unavailable")
        .unwrap_or_else(|| panic!("{kernel}: domain 1 never said it was unavailable"));
    assert!(d1[gone]["llc_occupancy_bytes"].is_null() && d1[gone]["mbm_total_bytes"].is_null());
    let back = d1[gone..].iter().filter(|row| row["status"] == "ok").count();
    println!("{kernel}: domain 1 unavailable while CPU 1 was offline, then {back} rows ok");
    assert!(back > 0, "{kernel}: domain 1 sampled again once CPU 1 was back");

    // Occupancy within the emulated L3, per row and per domain at each tick.
    let mut per_tick: HashMap<(u64, u64), u64> = HashMap::new();
    for row in &rows {
        let occ = u(&row["llc_occupancy_bytes"]);
        assert!(occ <= L3, "occupancy {occ} above the L3");
        *per_tick.entry((u(&row["domain"]), u(&row["time_ns"]))).or_default() += occ;
    }
    let max = per_tick.values().max().copied().unwrap_or(0);
    if max > L3 {
        // Seen once in a CI run (2026-11-27, the default kernel, 101 MB at one instant): the
        // samples the module took before the run's clock started were all stamped at its
        // first instant (fixed in the kmod backend). Should it happen again: what it was.
        let (&(dom, t), _) = per_tick.iter().max_by_key(|(_, v)| **v).unwrap();
        let same: Vec<String> = rows
            .iter()
            .filter(|r| u(&r["domain"]) == dom && u(&r["time_ns"]) == t)
            .map(|r| {
                format!("{} {} rmid={} occ={}", r["cgroup_path"], r["status"], r["rmid"], r["llc_occupancy_bytes"])
            })
            .collect();
        let keep = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tmp");
        let kept = std::fs::create_dir_all(&keep)
            .and_then(|()| std::fs::write(keep.join(format!("kmod-{kernel}.rows.jsonl")), &text));
        println!(
            "{} rows at domain {dom}, {t} ns (rows kept in {}: {kept:?}):\n{}",
            same.len(),
            keep.display(),
            same.join("\n")
        );
    }
    assert!(max <= L3, "a domain's containers hold {max} bytes of a {L3}-byte L3");
    assert!(max >= L3 / 2, "the busy container filled the L3 ({max})");

    // Adopted when the rules were set: it existed before cachescope started.
    assert!(by["pre"].iter().any(|r| r["status"] == "ok" && r["rmid"].is_u64()), "the earlier container was adopted");
    // Five RMIDs, four handed out: the fifth container waits, and says so.
    let over = &by["over"];
    assert_eq!(over[0]["status"], "no_rmid");
    let busy_rmid = by["busy"][0]["rmid"].as_u64().unwrap();
    let busy_end = by["busy"].iter().map(|r| u(&r["time_ns"])).max().unwrap();
    let first = over.iter().find(|r| r["status"] == "ok").expect("the waiting container got an RMID");
    assert_eq!(u(&first["rmid"]), busy_rmid, "the busy container's RMID, after limbo");
    assert!(u(&first["time_ns"]) > busy_end, "reused only after its container stopped");
    // Reused only when clean: what the new owner inherits is below limbo's threshold (L3 / 5).
    let inherited = over.iter().find_map(|r| r["llc_occupancy_bytes"].as_u64()).unwrap();
    assert!(inherited <= L3 / 5, "the RMID was reused holding {inherited} bytes");
    let mut last: HashMap<u64, u64> = HashMap::new();
    for r in by["busy"].iter().filter(|r| r["llc_occupancy_bytes"].is_u64()) {
        last.insert(u(&r["domain"]), u(&r["llc_occupancy_bytes"]));
    }
    let busy_last = last.values().max().copied().unwrap_or(0);
    assert!(busy_last > L3 / 5, "the busy container's RMID left holding {busy_last} bytes (limbo had work)");
}

/// `said` with each dmesg message (`CS-DMESG [  time] text`) kept at its first appearance
/// only, and a count of those left out.
fn without_repeats(said: &str) -> String {
    let mut seen = std::collections::HashSet::new();
    let mut left_out = 0;
    let mut kept: Vec<&str> = Vec::new();
    for line in said.lines() {
        let message = line.strip_prefix("CS-DMESG ").map(|m| m.split_once("] ").map_or(m, |(_, text)| text));
        match message {
            Some(m) if !seen.insert(m) => left_out += 1,
            _ => kept.push(line),
        }
    }
    format!("{}\n({left_out} repeated dmesg lines left out)", kept.join("\n"))
}
