//! The RDT machine (tools/rdt-qemu, DESIGN.md tier 3b): QEMU with the `rdt` device, whose L3
//! model is driven by the guest's own memory accesses, boots Debian's kernel; the kernel's own
//! resctrl (a driver we did not write) must find L3 monitoring there and count what workloads
//! of known footprint (tools/rdt-qemu/guest/work.c) do, on an Intel and an AMD CPU model:
//! - CPUID: every vCPU shows cqm, cqm_llc, cqm_occup_llc, cqm_mbm_total, cqm_mbm_local; the L3
//!   size the kernel reads is the model's; num_rmids is the device's;
//! - occupancy: working sets of a quarter and a half of the LLC read W -10..+40 %; an idle program
//!   started before the flush next to nothing; the domain the workloads never ran on reads 0;
//! - bandwidth: a stream of known rate reads within ± 5 % of the bytes it moved, over exactly
//!   its window (it reads the kernel's counter itself just before and after);
//! - a noisy neighbour: a thrasher takes a victim's lines, and `cachescope report` on what
//!   `cachescope record` wrote (resctrl on the AMD model, kmod on the Intel one) names it;
//! - the device's U and E bits reach user space as "Unavailable" and "Error", never 0.
//!
//! Then cachescope's backends on the same machine (tools/rdt-qemu/guest/backends.sh):
//! - resctrl, on the kernel's driver (6.1, and 7.2's fs/resctrl): containers adopted at start and started later, settled so
//!   that their lines are their own, read W ± 10 % and within 5 % of the kernel's own mon_data
//!   files of the groups cachescope made; a stream's bandwidth over its window within 5 %;
//! - kmod, the module with emulate=0 (CPUID enumeration, PQR_ASSOC at every switch, EVTSEL and
//!   CTR in its 10 ms timer): the same containers and checks, but the kernel reference;
//! - msr, core groups through the guest's /dev/cpu/N/msr (the real EVTSEL/CTR/PQR_ASSOC path),
//!   on 6.1 and 7.2: the core that runs a W-byte working set reads W ± 10 %, its stream within 5 %;
//! - on the Intel model the MBM counters are 24 bits of 2 B and wrap every 32 MiB: every backend
//!   counts the streams across their wraps;
//! - Intel's pqos, in MSR mode (core 0) and in OS mode (a pid), on the same workloads as
//!   cachescope right after it (they take turns: two owners of PQR_ASSOC cannot share), on 6.1
//!   and 7.2: within 5 % of each other;
//! - limbo, the kernel's and ours (the module's; the resctrl backend meeting the kernel's): with
//!   three RMIDs for groups, a freed RMID whose lines are cached is not handed out until a
//!   writer has evicted them, and the next owner does not inherit them;
//! - every backend prints its MSR accesses per value read (the device counts them), and the
//!   device's U and E bits reach the rows as `unavailable` and `error` with no number.
#![allow(clippy::unwrap_used)]

mod common;

use common::rdt::{
    boot, boot_checks, device_machine, fields, judge, machine, near_bytes, num, on_host, stream_bytes, wanted, which,
    Check, Guest,
};
use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

fn check_resctrl(r: &HashMap<String, String>, vendor: &str, llc: i64, rmids: i64) {
    let cpus = num(r, "cpus");
    assert_eq!(r["vendor"], vendor);
    for f in ["cqm", "cqm_llc", "cqm_occup_llc", "cqm_mbm_total", "cqm_mbm_local"] {
        assert_eq!(num(r, &format!("flag_{f}")), cpus, "{f} on every vCPU");
    }
    assert_eq!(num(r, "llc_bytes"), llc, "the kernel reads the model's L3 size from CPUID");
    assert_eq!(num(r, "detected"), 1, "resctrl: L3 monitoring detected");
    assert_eq!(num(r, "mount"), 0);
    assert_eq!(num(r, "num_rmids"), rmids);
    assert_eq!(r["mon_features"], "llc_occupancy,mbm_total_bytes,mbm_local_bytes,");
    if on_host() {
        assert!(r["domains"].starts_with("mon_L3_00,"), "CPU 0's L3 domain: {}", r["domains"]);
    } else {
        assert_eq!(r["domains"], "mon_L3_00,mon_L3_01,", "one L3 domain per socket");
    }

    // Idle: started before the flush, it holds what it touched since (0-16 KiB seen; 64-224
    // KiB when it started after), and moved nothing while it sleeps.
    // Occupancy: W, 10 % below at most (the workloads' lines are all their own:
    // guest/resctrl.sh's settle), 40 % above: what else ran in their context (+0.6..+2.0 %
    // seen, +33 % once in a CI run, unexplained; docs/testing.md). A model that counted a line
    // twice reads +100 %.
    let idle = num(r, "idle_occ");
    assert!(idle < llc / 10, "the idle program holds {idle} B");
    let idle_moved = num(r, "idle_mbm") - num(r, "idle_mbm0");
    assert!(idle_moved <= llc / 64, "the idle program moved {idle_moved} B while asleep");
    for (k, w) in [("quarter_occ", llc / 4), ("half_occ", llc / 2)] {
        let got = num(r, k);
        let err = (got - w) as f64 / w as f64;
        println!("{vendor} {k}: {got} B for a {w} B working set ({:+.1} %)", 100.0 * err);
        let context = r.get("occ_context").map_or("", String::as_str);
        assert!((-0.10..=0.40).contains(&err), "{k}: {got} B for {w} B (the median of 9 reads; {context})");
    }
    if r["domains"].contains("mon_L3_01") {
        assert_eq!(num(r, "quarter_occ_d1"), 0, "nothing in the domain the workload never ran on");
    }

    // Bandwidth over the stream's own window.
    let s = fields(&r["stream"]);
    let moved: f64 = s["moved"].parse().unwrap();
    let counted: f64 = s["counter_delta"].parse().unwrap();
    println!(
        "{vendor} stream: moved {moved} B, mbm_total_bytes counted {counted} B ({:+.2} %)",
        100.0 * (counted - moved) / moved
    );
    assert!(moved > 0.0 && (counted - moved).abs() / moved <= 0.05, "stream: {counted} counted for {moved} moved");

    // The noisy neighbour.
    let (before, during) = (num(r, "victim_before"), num(r, "victim_during"));
    println!("{vendor} victim: {before} B before the thrasher, {during} B beside it");
    assert!((before - llc / 2).abs() <= llc / 20, "the victim held its half first: {before}");
    assert!(during < before * 3 / 4, "the thrasher took the victim's lines: {before} -> {during}");
    assert!(num(r, "thrash_occ") > llc / 2);
    assert_eq!(num(r, "thrash_mbm_ok"), 1);

    // CLFLUSH: the lines leave the group that filled them (written back, being dirty), and
    // the reader after the flush fills them under its own (the model before: 4 KiB of 1 MiB
    // to the reader, the rest left with the writer). Its bookkeeping (exec, stack, the tasks
    // file) is the slack.
    let w = llc / 4;
    let (a, b, a_mbm) = (num(r, "flush_a_occ"), num(r, "flush_b_occ"), num(r, "flush_a_mbm"));
    println!(
        "{vendor} flush: writer keeps {a} B, reader after the flush {b} B of {w} ({:+.1} %), writer moved {a_mbm} B \
         (fills and write-backs: 2 x {w} expected)",
        100.0 * (b - w) as f64 / w as f64
    );
    // What it keeps is its own bookkeeping after the flush (exec, stack, the tasks file: as
    // the idle program's, below llc / 10; 36-106 KiB seen), not the buffer (1,073,152 B kept
    // before flushes were modelled).
    assert!(a < llc / 10, "the flushed lines left their writer: {a} B kept");
    assert!((b - w).abs() <= w / 10, "the reader after the flush holds its {w} B: {b}");
    // Its fills (W) and the flush's write-back of its dirty lines (W): without the write-back
    // it would be W (measured 1,941,504-2,027,520 B with it, the cache flushed first).
    assert!(a_mbm >= w * 3 / 2, "the dirty lines were written back: {a_mbm} B moved for {w} written");
    // Non-temporal stores: bandwidth, no occupancy. Counted from before the flush of the
    // buffer its set-up dirtied: that write-back (half the LLC), the stores and its
    // bookkeeping (as above).
    let (occ, moved, stored) = (num(r, "nt_occ"), num(r, "nt_mbm"), num(r, "nt_stored"));
    println!(
        "{vendor} non-temporal: {stored} B stored, {moved} B counted ({:+.1} %), {occ} B held",
        100.0 * (moved - stored) as f64 / stored as f64
    );
    assert!(occ < llc / 10, "non-temporal stores do not allocate: {occ} B held");
    assert!(moved >= stored && moved <= stored + llc / 2 + llc / 10, "{moved} B counted for {stored} B stored");
    assert!(!r.contains_key("rmdir_failed"), "rmdir {}", r["rmdir_failed"]);
}

#[test]
fn kernel_resctrl_on_the_rdt_machine() {
    let Some((qemu, dir, work)) = machine() else { return };
    if on_host() {
        let g = Guest { script: "resctrl.sh", kernel: "", machine: "", append: "", kmod: false };
        let r = boot(&qemu, &work, &g, &dir.path().join("host"));
        assert_eq!(num(&r, "mount"), 0, "resctrl does not mount here: this host has no L3 monitoring");
        let vendor = r["vendor"].clone();
        check_resctrl(&r, &vendor, num(&r, "llc_bytes"), num(&r, "num_rmids"));
        let append = "cs_mode=noisy cs_backend=resctrl";
        let g = Guest { script: "backends.sh", kernel: "", machine: "", append, kmod: false };
        let out = dir.path().join("noisy-resctrl");
        let r = boot(&qemu, &work, &g, &out);
        check_noisy("resctrl", "this host", &r, &out);
        return;
    }
    const LLC: i64 = 4 << 20;
    let device = "-device rdt,llc-size=4M,llc-ways=16,rmids=32";
    // Skylake-SP stepping 4 (QEMU's model) has the CMT erratum: the kernel turns monitoring off
    // unless told (rdt=cmt,...), as on real hardware.
    let intel = format!("-cpu Skylake-Server -smp 2,sockets=2 {device}");
    let amd = format!("-cpu EPYC-Rome -smp 2,sockets=2 {device}");
    let quirk = "rdt=cmt,mbmtotal,mbmlocal";

    // This release's kernel (6.1) and the newest Debian carries (unstable: 7.2, fs/resctrl).
    // On 6.1 the same boot meets a noisy neighbour with cachescope (`check_noisy`): the module's
    // real path on the Intel model, the kernel's resctrl on the AMD one. Each boot's checks are
    // judged apart (`judge`), and the noisy neighbour's run follows the kernel's own, as the
    // backends' checks share a boot (the guest undoes what each check left).
    for kernel in ["", "unstable"] {
        let name = if kernel.is_empty() { "release" } else { kernel };
        for (model, vendor, machine, append, backend) in
            [("intel", "GenuineIntel", &intel, quirk, "kmod"), ("amd", "AuthenticAMD", &amd, "", "resctrl")]
        {
            let out = dir.path().join(format!("{model}-{name}"));
            if !kernel.is_empty() {
                let g = Guest { script: "resctrl.sh", kernel, machine, append, kmod: false };
                check_resctrl(&boot(&qemu, &work, &g, &out), vendor, LLC, 32);
                continue;
            }
            let noisy = format!("cs_mode=noisy cs_backend={backend}");
            let checks = [
                Check { name: "kernel", script: "resctrl.sh", vars: "" },
                Check { name: "noisy", script: "backends.sh", vars: &noisy },
            ];
            let g = Guest { script: "resctrl.sh", kernel, machine, append, kmod: backend == "kmod" };
            let done = boot_checks(&qemu, &work, &g, &checks, &out);
            let cpu = machine.split_whitespace().nth(1).unwrap_or(model);
            let (kernel_r, (noisy_r, noisy_out)) = (&done[0].0, &done[1]);
            let judged: Vec<(String, Box<dyn FnOnce()>)> = vec![
                (format!("{model} 6.1 kernel"), Box::new(move || check_resctrl(kernel_r, vendor, LLC, 32))),
                (format!("{model} 6.1 noisy"), Box::new(move || check_noisy(backend, cpu, noisy_r, noisy_out))),
            ];
            judge(judged);
        }
    }

    // The device's U and E bits through the kernel: device_errors_reach_the_rows_never_as_numbers.
    // Without the quirk parameter the kernel keeps monitoring off on this stepping.
    let g = Guest { script: "resctrl.sh", kernel: "", machine: &intel, append: "cs_mode=read", kmod: false };
    let r = boot(&qemu, &work, &g, &dir.path().join("quirk"));
    assert_eq!(num(&r, "detected"), 0, "the kernel's Skylake-SP quirk turns CMT off");
    assert_eq!(num(&r, "flag_cqm"), num(&r, "cpus"), "while CPUID still enumerates it");
}

/// The recording a guest printed, by (container_id, domain), in time order.
fn recording(out: &Path) -> HashMap<(String, i64), Vec<Value>> {
    let text = std::fs::read_to_string(out.join("rows.jsonl")).unwrap();
    let mut by: HashMap<(String, i64), Vec<Value>> = HashMap::new();
    for line in text.lines() {
        let row: Value = serde_json::from_str(line).unwrap();
        let key = (row["container_id"].as_str().unwrap().to_string(), row["domain"].as_i64().unwrap());
        by.entry(key).or_default().push(row);
    }
    by
}

/// The rows of the container whose id starts with `prefix`, in `domain`.
fn series<'a>(by: &'a HashMap<(String, i64), Vec<Value>>, prefix: &str, domain: i64) -> &'a [Value] {
    by.iter()
        .find(|((id, d), _)| id.starts_with(prefix) && *d == domain)
        .map(|(_, v)| v.as_slice())
        .unwrap_or_else(|| panic!("no rows for {prefix} in domain {domain}"))
}

/// Median occupancy of the rows that end in [from_ns, to_ns].
fn occupancy(rows: &[Value], from_ns: i64, to_ns: i64) -> i64 {
    let mut v: Vec<i64> = rows
        .iter()
        .filter(|r| (from_ns..=to_ns).contains(&r["time_ns"].as_i64().unwrap()))
        .filter_map(|r| r["llc_occupancy_bytes"].as_i64())
        .collect();
    assert!(!v.is_empty(), "no occupancy between {from_ns} and {to_ns}");
    v.sort_unstable();
    v[v.len() / 2]
}

/// The device's L3 domains are the ones the guest finds in CPUID (issue 40, item 6): QEMU's AMD
/// models share an L3 by their cache's share level, Intel's by the die, and a device that
/// modelled one L3 per die counted one L3's lines in another's domain. For each vCPU: the
/// guest's L3 id against the device's domain (the same partition of the CPUs), and a workload
/// pinned there read in the guest's domain of that L3 and nowhere else.
#[test]
fn the_device_follows_the_l3_sharing_the_guest_sees() {
    let Some((qemu, dir, work)) = device_machine("other CPU models and topologies") else { return };
    let device = "-device rdt,llc-size=4M,llc-ways=16,rmids=32";
    for (name, cpu, append) in [("amd", "EPYC-Rome", ""), ("intel", "Skylake-Server", "rdt=cmt,mbmtotal,mbmlocal")] {
        let machine = format!("-cpu {cpu} -smp 2,sockets=1 {device}");
        let g = Guest { script: "l3.sh", kernel: "", machine: &machine, append, kmod: false };
        let r = boot(&qemu, &work, &g, &dir.path().join(name));
        assert_eq!(num(&r, "mount"), 0, "{name}: resctrl mounts");
        let cpus = num(&r, "cpus");
        let stats = r.get("rdt_stats").expect("the device printed its domains at exit");
        let device_domain: Vec<i64> = stats
            .split(';')
            .map(|v| fields(v).get("domain").and_then(|d| d.parse().ok()).unwrap_or_else(|| panic!("{v}")))
            .collect();
        let l3: Vec<i64> = (0..cpus).map(|c| num(&r, &format!("cpu{c}"))).collect();
        println!("{name}: the guest's L3 ids {l3:?}, the device's domains {device_domain:?}, resctrl {}", r["domains"]);
        for a in 0..cpus as usize {
            for b in 0..cpus as usize {
                assert_eq!(
                    l3[a] == l3[b],
                    device_domain[a] == device_domain[b],
                    "{name}: CPUs {a} and {b}: L3 ids {} and {}, device domains {} and {}",
                    l3[a],
                    l3[b],
                    device_domain[a],
                    device_domain[b]
                );
            }
        }
        // The workload's 1 MiB, in its L3's domain only (as resctrl names it: mon_L3_<id>).
        for c in 0..cpus {
            let own = l3[c as usize];
            let mut ids: Vec<i64> = l3.clone();
            ids.sort();
            ids.dedup();
            for d in ids {
                let got = num(&r, &format!("w{c}_d{d}"));
                if d == own {
                    assert!(got >= 900_000, "{name}: the workload on CPU {c} holds {got} B in its L3 {d}");
                } else {
                    assert!(got < 100_000, "{name}: the workload on CPU {c} holds {got} B in L3 {d}, not its own");
                }
            }
        }
    }
}

/// The device's MSR access counts over the whole boot, summed over vCPUs: (EVTSEL writes, CTR
/// reads, PQR_ASSOC writes).
fn msr_accesses(r: &HashMap<String, String>) -> (i64, i64, i64) {
    let stats = r.get("rdt_stats").expect("the device printed its counts at exit");
    let mut sum = (0, 0, 0);
    for vcpu in stats.split(';') {
        let f = fields(vcpu);
        let n = |k: &str| f.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or_else(|| panic!("{k} in {vcpu}"));
        sum = (sum.0 + n("evtsel_writes"), sum.1 + n("ctr_reads"), sum.2 + n("pqr_writes"));
    }
    sum
}

/// The values a recording holds: one per non-null occupancy, MBM total and MBM local. Each
/// needs at least one EVTSEL write and one CTR read: the physical minimum of an MSR reader.
fn values(by: &HashMap<(String, i64), Vec<Value>>) -> (usize, i64) {
    let rows: Vec<&Value> = by.values().flatten().collect();
    let cols = ["llc_occupancy_bytes", "mbm_total_bytes", "mbm_local_bytes"];
    let n = rows.iter().map(|r| cols.iter().filter(|c| !r[**c].is_null()).count() as i64).sum();
    (rows.len(), n)
}

/// One line of the table of MSR accesses per value read.
fn account(what: &str, r: &HashMap<String, String>, by: &HashMap<(String, i64), Vec<Value>>) -> f64 {
    let (evtsel, ctr, pqr) = msr_accesses(r);
    let (rows, n) = values(by);
    let per = evtsel as f64 / n as f64;
    // Function-call interrupts matter for resctrl, whose reads run on a CPU of the domain.
    let cal = r
        .get("cal")
        .filter(|_| what.ends_with("resctrl"))
        .map(|c| format!(", {c} CAL interrupts ({:.2} per value)", c.parse::<f64>().unwrap_or(0.0) / n as f64));
    println!(
        "MSR accesses {what}: {rows} rows, {n} values; over the whole boot, EVTSEL writes {evtsel} ({per:.2} per value), CTR reads {ctr} ({:.2}), PQR_ASSOC writes {pqr}{}",
        ctr as f64 / n as f64,
        cal.unwrap_or_default()
    );
    assert!(evtsel >= n && ctr >= n, "{what}: {n} values from {evtsel} EVTSEL writes and {ctr} CTR reads");
    per
}

/// Kernel parameters for the guests whose core 0 is a core group (msr backend, pqos in MSR
/// mode): unbound workqueue workers stay on CPU 1 (guest-init.sh's quiet_cpu0 moves the rest).
const QUIET_CPU0: &str = "workqueue.unbound_cpus=1";

fn near(what: &str, got: f64, want: f64, tolerance: f64) {
    let err = (got - want) / want;
    println!("{what}: {got:.0} for {want:.0} ({:+.2} %)", 100.0 * err);
    assert!(err.abs() <= tolerance, "{what}: {got} for {want}, beyond {} %", tolerance * 100.0);
}

/// The checks of `backend` in the containers of guest/backends.sh (resctrl, kmod).
fn check_containers(what: &str, backend: &str, r: &HashMap<String, String>, out: &Path) {
    assert_eq!(num(r, "monitor_exit"), 0);
    if backend == "resctrl" {
        assert_eq!(num(r, "groups_left"), 0, "cachescope removed the groups it made");
    } else {
        assert_eq!(num(r, "insmod_kmod"), 0, "the module loads on the device's CPUID");
        assert_eq!(num(r, "rmmod"), 0);
    }
    let by = recording(out);
    assert!(by.values().flatten().all(|row| row["status"] == "ok"), "every row ok");
    let settled = num(r, "settled") * 1_000_000_000;
    let llc = num(r, "llc_bytes");
    for name in ["ctr_early", "ctr_late"] {
        let got = occupancy(series(&by, name, 0), settled - 2_000_000_000, settled);
        let what = format!("{what} {name} occupancy");
        near(&format!("{what} vs footprint"), got as f64, (llc / 4) as f64, 0.10);
        if backend == "resctrl" {
            // The kernel's mon_data of cachescope's group, read by the guest after `settled`.
            let kernel: i64 = r["ref"]
                .lines()
                .find(|l| l.contains(&format!("group=cachescope-{name}-")))
                .and_then(|l| fields(l).get("occ").and_then(|v| v.parse().ok()))
                .unwrap_or_else(|| panic!("no reference for {name}"));
            near(&format!("{what} vs the kernel's mon_data"), got as f64, kernel as f64, 0.05);
        }
        // Its tasks run on CPU 0 only (pinned before they joined the cgroup): nothing of
        // theirs in domain 1 beyond a few lines of kernel work.
        let d1 = by
            .iter()
            .filter(|((id, d), _)| id.starts_with(name) && *d == 1)
            .flat_map(|(_, rows)| rows.iter().filter_map(|row| row["llc_occupancy_bytes"].as_i64()))
            .max();
        assert!(d1.unwrap_or(0) <= llc / 64, "{what} holds up to {d1:?} B in domain 1");
    }
    let idle = occupancy(series(&by, "ctr_idle", 0), settled - 2_000_000_000, settled);
    assert!(idle <= llc / 20, "idle holds {idle}");
    // The stream's bytes over exactly the rows' intervals (a rate over the window against one
    // over the rows, its part, read +5.83 % once when the guest's CPU came unevenly).
    // kmod: 8 %: the module's 100 ms sampling runs on the stream's CPU, under its RMID.
    let stream: Vec<&Value> = series(&by, "ctr_stream", 0).iter().collect();
    let band = if backend == "kmod" { 0.08 } else { 0.05 };
    near_bytes(&format!("{what} stream bytes"), stream_bytes(&stream, &r["stream"]), band);
    account(what, r, &by);
}

/// The checks of the msr backend's core groups in guest/backends.sh: core 0 runs the workloads.
fn check_cores(what: &str, r: &HashMap<String, String>, out: &Path) {
    assert_eq!(num(r, "insmod_msr"), 0);
    assert_eq!(num(r, "monitor_exit"), 0);
    let by = recording(out);
    assert!(by.values().flatten().all(|row| row["status"] == "ok"), "every row ok");
    let settled = num(r, "settled") * 1_000_000_000;
    let llc = num(r, "llc_bytes");
    let core0 = series(&by, "cores 0", 0);
    assert!(core0.iter().all(|row| row["rmid"].as_i64().is_some_and(|m| m >= 1)), "core 0 has an RMID");
    let got = occupancy(core0, settled - 2_000_000_000, settled);
    near(&format!("{what} core 0 occupancy vs footprint"), got as f64, (llc / 4) as f64, 0.10);
    let rows: Vec<&Value> = core0.iter().collect();
    near_bytes(&format!("{what} core 0 stream bytes"), stream_bytes(&rows, &r["stream"]), 0.05);
    account(what, r, &by);
}

#[test]
fn backends_on_the_rdt_machine() {
    let Some((qemu, dir, work)) = machine() else { return };
    // The Intel model's MBM counters are 24 bits of 2 B: they wrap every 32 MiB, twice in each
    // stream's 64 MiB, and every backend must count across the wrap (cachescope is told the
    // guest's peak bandwidth, 0.1 GB/s, so that its 100 ms interval is safe for them). The AMD
    // model keeps its 44-bit counters.
    let device = "-device rdt,llc-size=4M,llc-ways=16,rmids=32";
    let models: &[(&str, &str, &str)] = if on_host() {
        &[("this-host", "", "")]
    } else {
        &[
            ("Skylake-Server", ",upscale=2,counter-width=24", "rdt=cmt,mbmtotal,mbmlocal cs_peak=0.1"),
            ("EPYC-Rome", "", ""),
        ]
    };
    // On a host the module would have to be built for its kernel: resctrl and msr only. The
    // resctrl and msr backends also meet the newest kernel Debian carries (7.2: fs/resctrl);
    // the module builds for this release's only (issue 29).
    let backends: &[(&str, &str)] = if on_host() {
        &[("resctrl", ""), ("msr", "")]
    } else {
        &[("resctrl", ""), ("resctrl", "unstable"), ("kmod", ""), ("msr", ""), ("msr", "unstable")]
    };
    // One boot per model and kernel runs every backend's check in turn (the guest undoes what
    // each left); msr last, as its quiet_cpu0 moves every task it can off CPU 0.
    for &(cpu, props, append) in models {
        let machine = format!("-cpu {cpu} -smp 2,sockets=2 {device}{props}");
        for kernel in ["", "unstable"] {
            let names: Vec<(String, String)> = backends
                .iter()
                .filter(|&&(b, k)| k == kernel && wanted(b))
                .map(|&(b, _)| (b.to_string(), format!("cs_backend={b}")))
                .collect();
            if names.is_empty() {
                continue;
            }
            let checks: Vec<Check> =
                names.iter().map(|(b, vars)| Check { name: b, script: "backends.sh", vars }).collect();
            // A core group holds whatever runs on its core: unbound workqueue workers, which
            // no taskset moves, charged core 0 ~200 KiB on 7.2 (+22..+28 % of W): they stay on
            // CPU 1 (6.6+; older kernels ignore the parameter), for every check of the boot.
            let quiet = if names.iter().any(|(b, _)| b == "msr") { QUIET_CPU0 } else { "" };
            let append = format!("{append} {quiet}");
            let kmod = names.iter().any(|(b, _)| b == "kmod");
            let g = Guest { script: "backends.sh", kernel, machine: &machine, append: &append, kmod };
            let out = dir.path().join(format!("backends-{cpu}-{kernel}"));
            let done = boot_checks(&qemu, &work, &g, &checks, &out);
            let judged = done.iter().zip(&names).map(|((r, out), (backend, _))| {
                let what = format!("{cpu} {kernel} {backend}");
                let check: Box<dyn FnOnce()> = if backend == "msr" {
                    // Core groups through /dev/cpu/N/msr.
                    Box::new(move || check_cores(&format!("{cpu} {kernel} msr"), r, out))
                } else {
                    // The kernel's driver, or the module's real path (emulate=0): containers are
                    // cgroups, adopted at start or started later.
                    Box::new(move || check_containers(&format!("{cpu} {kernel} {backend}"), backend, r, out))
                };
                (what, check)
            });
            judge(judged.collect());
        }
    }
}

#[test]
fn device_errors_reach_the_rows_never_as_numbers() {
    if on_host() {
        cachescope_testkit::skip("the device's knobs (injected U/E, three RMIDs) exist on the RDT machine only");
        return;
    }
    let Some((qemu, dir, work)) = machine() else { return };
    // One boot per injected bit: the kernel's own files, then the resctrl and msr backends.
    for (inject, status, word) in [("unavailable", "unavailable", "Unavailable"), ("error", "error", "Error")] {
        let machine = format!(
            "-cpu Skylake-Server -smp 2,sockets=2 -device rdt,llc-size=4M,llc-ways=16,rmids=32,inject={inject}"
        );
        let checks = [
            Check { name: "kernel", script: "resctrl.sh", vars: "cs_mode=read" },
            Check { name: "resctrl", script: "backends.sh", vars: "cs_backend=resctrl cs_mode=inject" },
            Check { name: "msr", script: "backends.sh", vars: "cs_backend=msr cs_mode=inject" },
        ];
        let g = Guest {
            script: "backends.sh",
            kernel: "",
            machine: &machine,
            append: "rdt=cmt,mbmtotal,mbmlocal",
            kmod: false,
        };
        let done = boot_checks(&qemu, &work, &g, &checks, &dir.path().join(inject));
        let (r, _) = &done[0];
        for k in ["read_occupancy", "read_mbm_total", "read_mbm_local"] {
            assert_eq!(r[k], word, "the kernel's {k} with inject={inject}");
        }
        for (c, (r, out)) in checks.iter().zip(&done).skip(1) {
            let backend = c.name;
            assert_eq!(num(r, "monitor_exit"), 0);
            let by = recording(out);
            let rows: Vec<&Value> = by.values().flatten().collect();
            assert!(rows.len() >= 10, "{backend} {inject}: {} rows", rows.len());
            for row in rows {
                assert_eq!(row["status"], status, "{backend} with inject={inject}: {row}");
                for col in ["llc_occupancy_bytes", "mbm_total_bytes", "mbm_local_bytes"] {
                    assert!(row[col].is_null(), "{backend} with inject={inject}: {col} in {row}");
                }
            }
        }
    }
}

/// The kernel's own CMT selftest (tools/testing/selftests/resctrl of the guest kernel's source,
/// built unmodified: scripts/resctrl-selftests.sh) on the RDT machine, five runs in one boot,
/// Intel and AMD, on this release's 6.1 and 6.12 and unstable's 7.2: each fills a span of the
/// LLC (the ways its group may fill: 5 of 16 on 6.1; 1, 5, 8 and 15 or 16 on 6.12 and 7.2) in a
/// new group after
/// flushing its buffer, so every run after the first reads what the model did with CLFLUSH
/// (before flushes were modelled: -100 %, -100 %, -65 % ...). Asserted here within 15 % of the
/// span, as the selftest's own rule, without its 2 MB of slack that hides a reading of 0 below
/// 2 MB; each run's error printed. With the machine's PMU, the CAT selftests too (6.1's
/// `cat`, 6.12's and 7.2's `l3_cat` and `l3_noncont_cat`): on Intel, LLC misses counted by perf
/// must grow as the ways a group may fill shrink; on AMD (whose generic cache misses are the
/// L2's) the schemata must be taken and the runs complete. On Intel, the MBM selftest too, against the device's memory-controller PMU (imc=on): a group's
/// mbm_local_bytes and the CAS reads Linux's uncore driver counts, within 8 %.
#[test]
fn the_kernels_cmt_selftest_reads_its_span_run_after_run() {
    let Some((qemu, dir, work)) = device_machine("the kernel's CMT selftest (cache allocation)") else { return };
    let device = "-device rdt,llc-size=4M,llc-ways=16,rmids=32,closids=16";
    // Both models with their PMU, for the CAT selftests' perf counts of LLC misses. On AMD
    // those are Linux's generic cache misses, the L2's (0x0964 on Family 17h), which the L3's
    // ways do not change: the selftests know it and check there only that the schemata are
    // taken (non-contiguous masks among them) and the runs complete, not that misses grow.
    // On Intel with the memory controller's PMU too, for the MBM selftest: Linux's uncore driver
    // gives up where CPUID has the hypervisor bit, which silicon does not set.
    let intel = format!("-cpu Skylake-Server,hypervisor=off -smp 2,sockets=2 {device},pmu=on,imc=on");
    let amd = format!("-cpu EPYC-Rome -smp 2,sockets=2 {device},pmu=on");
    // No NMI watchdog: it would hold a counter and start the cache model at boot.
    let nmi = "nmi_watchdog=0";
    // Skylake-SP: monitoring and L3 allocation forced on, as docs/rdt-machine.md says.
    let quirk = format!("rdt=cmt,mbmtotal,mbmlocal,l3cat {nmi}");
    let runs = [
        // The MBM selftest: 6.1's and 6.12's with a 32 MB buffer (tools/rdt-qemu/guest/selftests.sh
        // says why), 7.2's with its own.
        ("", "GenuineIntel", &intel, format!("{quirk} cs_bits=5,5,5,5,5 cs_cat=cat cs_mbm=fill_buf,32,1,1,0,mba")),
        ("", "AuthenticAMD", &amd, format!("{nmi} cs_bits=5,5,5,5,5 cs_cat=cat")),
        // -n 16 leaves the other group an empty mask, which Intel refuses ("L3:1=0": EINVAL),
        // on silicon as here: 15 is the most an Intel L3 of 16 ways takes.
        (
            "unstable",
            "GenuineIntel",
            &intel,
            format!("{quirk} cs_bits=5,1,5,8,15 cs_cat=l3_cat,l3_noncont_cat cs_mbm=default"),
        ),
        ("unstable", "AuthenticAMD", &amd, format!("{nmi} cs_bits=5,1,5,8,16 cs_cat=l3_cat,l3_noncont_cat")),
        // This release's 6.12 (bookworm's security updates; its linux-source-6.12 for the
        // selftests): the tests' names and -n as 7.2's.
        (
            "6.12-amd64",
            "GenuineIntel",
            &intel,
            format!("{quirk} cs_bits=5,1,5,8,15 cs_cat=l3_cat,l3_noncont_cat cs_mbm=fill_buf,33554432,1,0,false"),
        ),
        ("6.12-amd64", "AuthenticAMD", &amd, format!("{nmi} cs_bits=5,1,5,8,16 cs_cat=l3_cat,l3_noncont_cat")),
    ];
    let mut failed = Vec::new();
    for (kernel, vendor, machine, append) in &runs {
        let g = Guest { script: "selftests.sh", kernel, machine, append, kmod: false };
        let r = boot(&qemu, &work, &g, &dir.path().join(format!("{vendor}-{kernel}")));
        assert_eq!(num(&r, "runs"), 5);
        assert_eq!(num(&r, "splats"), 0);
        for i in 1..=5 {
            // A run that failed early printed no figures: -1, judged below with the rest.
            let n = |k: &str| r.get(&format!("cmt{i}_{k}")).and_then(|v| v.parse::<i64>().ok()).unwrap_or(-1);
            let (avg, span, ok, bits) = (n("avg"), n("span"), n("ok"), n("bits"));
            let err = 100.0 * (avg - span) as f64 / span.max(1) as f64;
            println!(
                "{vendor} {} CMT selftest run {i} (-n {bits}): {avg} B read for a {span} B span ({err:+.1} %); the selftest: {}",
                r["kernel"],
                if ok == 1 { "ok" } else { "not ok" }
            );
            if ok != 1 || err.abs() > 15.0 || span <= 0 {
                failed.push(format!("{vendor} {} run {i}: {err:+.1} %, selftest ok={ok}", r["kernel"]));
            }
        }
        // The CAT selftests: each must say ok (its own pass/fail lines are above), but for
        // l3_cat's steps (6.12, 7.2) where the model's true LRU had already missed on every line of
        // the buffer (`lru_saturated`).
        let cat = append.split_whitespace().find_map(|w| w.strip_prefix("cs_cat=")).unwrap_or_default();
        for t in cat.split(',').filter(|t| !t.is_empty()) {
            let ok = r.get(&format!("{t}_ok")).map_or("missing", String::as_str);
            let saturated = if ok == "1" { None } else { lru_saturated(&r["selftest"], t) };
            println!(
                "{vendor} {} selftest {t}: {}",
                r["kernel"],
                match (ok, &saturated) {
                    ("1", _) => "ok".to_string(),
                    (_, Some(steps)) => format!("not ok, only at {steps}: every line of its buffer missed before and after (the model's true LRU; docs/rdt-machine.md)"),
                    _ => "not ok".to_string(),
                }
            );
            if ok != "1" && saturated.is_none() {
                failed.push(format!("{vendor} {} selftest {t} not ok ({ok})", r["kernel"]));
            }
        }
        // The MBM selftest: the group's mbm_local_bytes against the memory controller's CAS
        // reads (uncore_imc_0), both over the same seconds, MB/s averaged over four. Its own
        // bound is 8 % (7.2's 15 %); asserted here at 8 % on both, the error printed.
        if append.contains("cs_mbm=") {
            let n = |k: &str| r.get(k).and_then(|v| v.parse::<i64>().ok()).unwrap_or(-1);
            let (imc, resc, ok) = (n("mbm_imc"), n("mbm_resc"), n("mbm_ok"));
            let err = 100.0 * (resc - imc) as f64 / imc.max(1) as f64;
            println!(
                "{vendor} {} MBM selftest ({} iMC PMU): iMC {imc} MB/s, resctrl {resc} MB/s ({err:+.1} %); the selftest: {}",
                r["kernel"],
                n("mbm_pmu"),
                if ok == 1 { "ok" } else { "not ok" }
            );
            if ok != 1 || imc <= 0 || err.abs() > 8.0 {
                failed.push(format!("{vendor} {} MBM selftest: {err:+.1} %, ok={ok}", r["kernel"]));
            }
        }
    }
    assert!(failed.is_empty(), "{} (CS-SELFTEST lines above)", failed.join("; "));
}

/// Where the `test` selftest (6.12's `l3_cat`: `lines` are its CS-SELFTEST lines) failed only
/// at steps whose misses were already saturated: its average LLC misses, at that step's ways
/// and at the next (one way fewer), both at least the line count of its buffer (the first
/// step's span), so every line missed at both and the step could not grow by the percentage
/// asked. That is the cache model's true LRU on a cyclic sweep larger than the ways allowed
/// (all or nothing per set), which silicon's adaptive replacement does not show, not a count
/// the device got wrong: seen at 6 ways of 16 with a buffer of 8 ways' lines (32,773 and
/// 33,235 misses for 32,768 lines: +1.4 % where 4 % is asked; another run +0.5 %), in two of
/// about ten CI runs. Returns those steps ("6 ways (+1.4 %)"), or None where any failing
/// step was not saturated, or none was found.
fn lru_saturated(lines: &str, test: &str) -> Option<String> {
    let prefix = format!("{test} # ");
    let mut steps: Vec<(u64, u64, bool)> = Vec::new(); // (ways, average misses, failed)
    let mut buffer = None;
    for l in lines.lines().filter_map(|l| l.strip_prefix(&prefix)) {
        let num = |p: &str| l.strip_prefix(p).and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(bits) = num("Number of bits: ") {
            steps.push((bits, 0, false));
        } else if let (Some(avg), Some(s)) = (num("Average LLC val: "), steps.last_mut()) {
            s.1 = avg;
        } else if let Some(span) = num("Cache span (lines): ") {
            buffer.get_or_insert(span);
        } else if let (true, Some(s)) = (l.starts_with("Fail: Check cache miss rate changed"), steps.last_mut()) {
            s.2 = true;
        }
    }
    let buffer = buffer?;
    let mut said = Vec::new();
    for (i, &(bits, avg, _)) in steps.iter().enumerate().filter(|(_, s)| s.2) {
        let next = steps.get(i + 1).map(|s| s.1)?;
        if avg < buffer || next < buffer {
            return None;
        }
        said.push(format!("{bits} ways ({:+.1} %)", 100.0 * (next as f64 - avg as f64) / avg as f64));
    }
    (!said.is_empty()).then(|| said.join(", "))
}

#[test]
fn lru_saturation_is_told_from_a_failing_step() {
    let step = |bits: u64, avg: u64, span: u64, verdict: &str| {
        format!(
            "l3_cat # Number of bits: {bits}\nl3_cat # Average LLC val: {avg}\nl3_cat # Cache span (lines): {span}\nl3_cat # {verdict}: Check cache miss rate changed more than 4.0%\n"
        )
    };
    // CI9's 6.12 run: the 6-way step failed with both ends past the buffer's 32,768 lines.
    let ci9 = step(8, 7632, 32768, "Pass")
        + &step(7, 27179, 28672, "Pass")
        + &step(6, 32773, 24576, "Fail")
        + &step(5, 33235, 20480, "Pass");
    assert_eq!(lru_saturated(&ci9, "l3_cat").as_deref(), Some("6 ways (+1.4 %)"));
    // A failing step below the buffer's lines is a count to explain: not excused.
    let short = step(8, 7632, 32768, "Pass") + &step(7, 20000, 28672, "Fail") + &step(6, 20100, 24576, "Pass");
    assert_eq!(lru_saturated(&short, "l3_cat"), None);
    // Nothing failed, or the last step failed with no next: nothing to excuse.
    assert_eq!(lru_saturated(&(step(8, 7632, 32768, "Pass") + &step(7, 40000, 28672, "Pass")), "l3_cat"), None);
    assert_eq!(lru_saturated(&(step(8, 33000, 32768, "Pass") + &step(7, 40000, 28672, "Fail")), "l3_cat"), None);
}

/// One column of the pqos CSV lines a guest printed under `tag` (CS-PQOS-TAG), in order.
fn pqos_column(r: &HashMap<String, String>, tag: &str, column: &str) -> Vec<f64> {
    let prefix = format!("CS-PQOS-{tag} ");
    let mut lines = r["pqos"].lines().filter_map(|l| l.strip_prefix(&prefix));
    let header: Vec<&str> = lines.next().unwrap_or_else(|| panic!("no pqos output {tag}")).split(',').collect();
    let at = header.iter().position(|h| *h == column).unwrap_or_else(|| panic!("no {column} in {header:?}"));
    lines.map(|l| l.split(',').nth(at).and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{tag}: {l}"))).collect()
}

/// The median of the last `n` values.
fn last_median(v: &[f64], n: usize) -> f64 {
    assert!(v.len() >= n, "{} values, {n} wanted", v.len());
    let mut tail = v[v.len() - n..].to_vec();
    tail.sort_by(f64::total_cmp);
    tail[n / 2]
}

#[test]
fn cachescope_and_pqos_read_the_same() {
    let Some((qemu, dir, work)) = machine() else { return };
    which("pqos");
    let machine = "-cpu Skylake-Server -smp 2,sockets=2 -device rdt,llc-size=4M,llc-ways=16,rmids=32";
    // This release's kernel and 7.2 (its msr driver and fs/resctrl under both tools).
    let kernels: &[&str] = if on_host() { &[""] } else { &["", "unstable"] };
    for &kernel in kernels {
        let out = dir.path().join(format!("pqos-{kernel}"));
        let append = format!("rdt=cmt,mbmtotal,mbmlocal {QUIET_CPU0}");
        let g = Guest { script: "pqos.sh", kernel, machine, append: &append, kmod: false };
        let r = boot(&qemu, &work, &g, &out);
        compare_with_pqos(kernel, &r, &out);
    }
}

fn compare_with_pqos(kernel: &str, r: &HashMap<String, String>, out: &Path) {
    for k in [
        "insmod_msr",
        "msr_occ_exit",
        "pqos_msr_occ_exit",
        "msr_bw_exit",
        "pqos_msr_bw_exit",
        "mount",
        "os_occ_exit",
        "pqos_os_exit",
    ] {
        assert_eq!(num(r, k), 0, "{kernel} {k}");
    }
    let by = recording(out);
    let core0 = series(&by, "cores 0", 0);
    let os = series(&by, "ctr_os", 0);
    let llc = num(r, "llc_bytes") as f64;

    // MSR mode, core 0 holding a quarter of the LLC (pqos: KiB).
    let end = num(r, "msr_occ_end") * 1_000_000_000;
    let ours = occupancy(core0, end - 2_000_000_000, end) as f64;
    let theirs = last_median(&pqos_column(r, "MSR-OCC", "LLC[KB]"), 20) * 1024.0;
    near(&format!("{kernel} MSR mode, 1 MiB working set: pqos vs footprint"), theirs, llc / 4.0, 0.10);
    near(&format!("{kernel} MSR mode, 1 MiB working set: cachescope vs pqos"), ours, theirs, 0.05);

    // MSR mode, a 16 MiB/s stream (pqos: MiB/s). cachescope reads about 4 s of the stream's
    // 12, pqos the next 4: cachescope is held to the bytes the stream moved over its rows'
    // own intervals; pqos prints only rates, so it is held to the stream's paced rate (the
    // stream reads 256 KiB at a time and catches up after a stall, so a second's rate is
    // off by a chunk at most: 1.6 % of 16 MiB).
    let rows: Vec<&Value> = core0.iter().collect();
    let bytes = stream_bytes(&rows, &r["stream"]);
    near_bytes(&format!("{kernel} MSR mode, stream: cachescope vs the bytes read"), bytes, 0.05);
    let f = fields(&r["stream"]);
    let paced = f["moved"].parse::<f64>().unwrap() * 1e9
        / (f["end_ns"].parse::<f64>().unwrap() - f["start_ns"].parse::<f64>().unwrap());
    let theirs = last_median(&pqos_column(r, "MSR-BW", "MBL[MB/s]"), 4) * (1 << 20) as f64;
    near(&format!("{kernel} MSR mode, stream: pqos vs the stream's rate"), theirs, paced, 0.05);

    // OS mode: cachescope's group for the container, then pqos's for its pid.
    let end = num(r, "os_occ_end") * 1_000_000_000;
    let ours = occupancy(os, end - 2_000_000_000, end) as f64;
    let theirs = last_median(&pqos_column(r, "OS", "LLC[KB]"), 20) * 1024.0;
    near(&format!("{kernel} OS mode, 1 MiB working set: pqos vs footprint"), theirs, llc / 4.0, 0.10);
    near(&format!("{kernel} OS mode, 1 MiB working set: cachescope vs pqos"), ours, theirs, 0.05);
}

#[test]
fn a_freed_rmid_waits_in_limbo_until_its_lines_are_gone() {
    if on_host() {
        cachescope_testkit::skip("the device's knobs (injected U/E, three RMIDs) exist on the RDT machine only");
        return;
    }
    let Some((qemu, dir, work)) = machine() else { return };
    // Three RMIDs for groups (RMID 0 is the default's); the limbo threshold is 4 MiB / 4.
    let machine = "-cpu Skylake-Server -smp 2,sockets=2 -device rdt,llc-size=4M,rmids=4";
    let quirk = "rdt=cmt,mbmtotal,mbmlocal";

    // The kernel's limbo, through resctrl's files.
    let append = format!("{quirk} cs_mode=limbo");
    let g = Guest { script: "resctrl.sh", kernel: "", machine, append: &append, kmod: false };
    let r = boot(&qemu, &work, &g, &dir.path().join("kernel"));
    assert_eq!(num(&r, "three_groups"), 0);
    assert!(num(&r, "a_occ") > num(&r, "threshold"), "a holds more than the threshold");
    assert_eq!(num(&r, "rmdir_a"), 0);
    assert_ne!(num(&r, "mkdir_dirty"), 0, "no RMID while a's lines are cached");
    assert_eq!(r["last_cmd_status"], "Out of RMIDs");
    assert_eq!(num(&r, "mkdir_clean"), 0, "the RMID is free once they are evicted");
    assert!(num(&r, "d_occ") < num(&r, "threshold"), "d does not inherit a's lines");

    // Ours: the module's limbo (kmod), and the resctrl backend waiting on the kernel's.
    for backend in ["kmod", "resctrl"] {
        let out = dir.path().join(backend);
        let append = format!("{quirk} cs_mode=limbo cs_backend={backend}");
        let g = Guest { script: "backends.sh", kernel: "", machine, append: &append, kmod: backend == "kmod" };
        let r = boot(&qemu, &work, &g, &out);
        assert_eq!(num(&r, "monitor_exit"), 0);
        assert_eq!(num(&r, "rmdir_a"), 0);
        let by = recording(&out);
        let d = series(&by, "ctr_d", 0);
        let thrash = num(&r, "thrash_start");
        let first_ok = d
            .iter()
            .find(|row| row["status"] == "ok")
            .and_then(|row| row["time_ns"].as_i64())
            .unwrap_or_else(|| panic!("{backend}: d never got an RMID"));
        let waited =
            d.iter().filter(|row| row["status"] == "no_rmid" && row["time_ns"].as_i64() < Some(thrash)).count();
        println!(
            "{backend}: d waited {waited} rows without an RMID, got one {:.1} s after the writer started",
            (first_ok - thrash) as f64 / 1e9
        );
        assert!(waited > 0, "{backend}: d waited while a's RMID was in limbo");
        assert!(first_ok >= thrash, "{backend}: d got an RMID before a's lines were evicted");
        let inherited = d.iter().filter_map(|row| row["llc_occupancy_bytes"].as_i64()).max().unwrap_or(0);
        assert!(inherited < (1 << 20), "{backend}: d holds {inherited} B, not a's lines");
    }
}

/// A noisy neighbour as a user meets one: `cachescope record` on the kernel's resctrl (the
/// AMD model) and on the module's real path (the Intel model) while a thrasher takes a
/// victim's lines; `cachescope report --json` on that recording must name the thrasher, in
/// domain 0, between its start and its first pass over its buffer, with the victim holding
/// most of its half of the LLC before and losing most of it; and blame no one else (the
/// victim refilling its lines between the thrasher's turns is not an aggressor).
/// Runs in a boot of `kernel_resctrl_on_the_rdt_machine` on this release's kernel.
fn check_noisy(backend: &str, cpu: &str, r: &HashMap<String, String>, out: &Path) {
    assert_eq!(num(r, "record_exit"), 0, "{backend}: record");
    assert_eq!(num(r, "report_exit"), 0, "{backend}: report");
    let text = std::fs::read_to_string(out.join("report.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{backend}: report.json: {e}: {text}"));
    let llc = num(r, "llc_bytes") as f64;
    assert_eq!(v["run"]["l3_bytes"].as_f64(), Some(llc), "{backend}: the L3 the report judges by");
    let eps = v["episodes"].as_array().unwrap();
    let start = num(r, "thrash_start") as f64 / 1e9;
    let named: Vec<&Value> = eps
        .iter()
        .filter(|e| e["container_name"].as_str().is_some_and(|n| n.contains("thrash")) && e["domain"] == 0)
        .collect();
    println!("{backend} on {cpu}: {} episode(s): {:#}", eps.len(), v["episodes"]);
    let e = *named.first().unwrap_or_else(|| panic!("{backend}: no episode names the thrasher: {eps:#?}"));
    let at = e["start_ns"].as_f64().unwrap() / 1e9;
    // Between the thrasher's start and its first pass over its buffer, give or take the
    // report's buckets.
    let ready = num(r, "thrash_ready") as f64 / 1e9;
    assert!((start - 0.5..=ready + 2.0).contains(&at), "{backend}: episode at {at}, thrasher at {start}..{ready}");
    let victim = |e: &Value| -> Option<(f64, f64)> {
        let v = e["victims"]
            .as_array()?
            .iter()
            .find(|v| v["container_name"].as_str().is_some_and(|n| n.contains("victim")))?;
        Some((v["occupancy_before_bytes"].as_f64()?, v["occupancy_lost_bytes"].as_f64()?))
    };
    let (before, _) = victim(e).unwrap_or_else(|| panic!("{backend}: the victim is not named: {e:#}"));
    // The thrasher takes turns with the victim on CPU 0: each of its turns is an episode,
    // and over them the victim loses most of what it held.
    let lost = named.iter().filter_map(|e| victim(e)).map(|(_, lost)| lost).fold(0.0, f64::max);
    println!("{backend}: the victim held {before:.0} B and lost up to {lost:.0} B");
    // What the victim held before the thrasher's rise: its W = LLC/2 (the guest tags the
    // thrasher's container before its first instruction; LRU gives the victim a little
    // less than its W beside the guest's own lines). With kmod, kernel work done on CPU 0
    // while the victim is current (timer interrupts, the module's own 10 ms reads) fills
    // lines under its RMID too: a CI run saw 2,490,368 B (1.19 W) on a loaded host.
    let most = if backend == "kmod" { 1.25 } else { 1.1 };
    assert!(before > llc / 4.0 && before < llc / 2.0 * most, "{backend}: the victim held {before} B before");
    assert!(lost > before / 2.0, "{backend}: the victim lost at most {lost} of {before} B");
    // Nothing but the thrasher is blamed.
    for e in eps {
        let name = e["container_name"].as_str().unwrap_or("");
        assert!(name.contains("thrash"), "{backend}: an episode blames {name}: {e:#}");
    }
    // The recorder's live finder (issue 44) saw it too, as it happened: the thrasher in
    // domain 0 taking the victim's lines, in the same window, blaming no one else.
    let live = v["live_episodes"].as_array().unwrap();
    println!("{backend}: seen live: {live:#?}");
    let first = live
        .iter()
        .find(|l| l["container_name"].as_str().is_some_and(|n| n.contains("thrash")) && l["domain"] == 0)
        .unwrap_or_else(|| panic!("{backend}: the live finder did not name the thrasher: {live:#?}"));
    assert!(victim(first).is_some(), "{backend}: the live finder did not name the victim: {first:#}");
    let at = first["start_ns"].as_f64().unwrap() / 1e9;
    assert!((start - 0.5..=ready + 2.0).contains(&at), "{backend}: seen live at {at}, thrasher at {start}..{ready}");
    let latency = (first["detected_ns"].as_f64().unwrap() / 1e9) - at;
    println!("{backend}: the live finder reported it {latency:.3} s after its start");
    for l in live {
        let name = l["container_name"].as_str().unwrap_or("");
        assert!(name.contains("thrash"), "{backend}: the live finder blames {name}: {l:#}");
    }
}
