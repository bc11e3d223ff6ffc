//! Resctrl as today's kernels have it, on the RDT machine (tools/rdt-qemu, DESIGN.md tier 3b):
//! the device's AMD assignable bandwidth counters (`-device rdt,mbm-counters=N`: ABMC, CPUID
//! 0x80000020 and the L3_QOS_EXT_CFG / L3_QOS_ABMC_CFG MSRs as Linux drives them) and its Intel
//! sub-NUMA clusters (`-device rdt,snc=N`: RMID sharing mode through MSR 0xCA0), met by the
//! kernel's own fs/resctrl (Debian unstable's 7.2), a driver we did not write:
//! - ABMC: the kernel finds the counters (mbm_assign_mode `[mbm_event]`, num_mbm_cntrs), gives
//!   the default group and the first group two each, and the next group none ("Unassigned",
//!   while its occupancy still reads); a stream is counted within 5 % by an assigned counter,
//!   and again after the counter moves to another group; counters come back at rmdir; 6.1,
//!   which predates assignable counters, counts every group as before on the same device;
//! - SNC: the kernel detects 2 nodes per L3, halves the RMIDs, and shows mon_sub_L3_YY per
//!   node; what runs on a node's CPU is held in that node's sub-domain (W ± 10 %), the L3 file
//!   is the sum, and a stream is counted within 5 %.
//!
//! Nothing the kernel says here may be a splat (guest/modern.sh greps dmesg).
#![allow(clippy::unwrap_used)]

mod common;

use common::rdt::{boot, boot_checks, device_machine, fields, judge, near_bytes, num, stream_bytes, Check, Guest};
use std::collections::HashMap;
use std::path::Path;

const LLC: i64 = 4 << 20;
const DEVICE: &str = "-device rdt,llc-size=4M,llc-ways=16,rmids=32";

/// A stream's "moved=N ... counter_delta=N" within 5 %.
fn stream_counted(what: &str, r: &HashMap<String, String>, key: &str) {
    let s = fields(&r[key]);
    let moved: f64 = s["moved"].parse().unwrap();
    let counted: f64 = s["counter_delta"].parse().unwrap();
    println!("{what}: moved {moved} B, counted {counted} B ({:+.2} %)", 100.0 * (counted - moved) / moved);
    assert!(moved > 0.0 && (counted - moved).abs() / moved <= 0.05, "{what}: {counted} counted for {moved} moved");
}

#[test]
fn assignable_counters_on_the_kernels_resctrl() {
    let Some((qemu, dir, work)) = device_machine("the device's assignable counters") else { return };
    let amd = format!("-cpu EPYC-Rome -smp 2,sockets=2 {DEVICE},mbm-counters=4");
    let g = Guest { script: "modern.sh", kernel: "unstable", machine: &amd, append: "cs_mode=abmc", kmod: false };
    let r = boot(&qemu, &work, &g, &dir.path().join("abmc"));
    assert_eq!(num(&r, "mount"), 0);
    assert!(r["assign_mode"].starts_with("[mbm_event]"), "mbm_assign_mode: {}", r["assign_mode"]);
    assert_eq!(r["num_mbm_cntrs"], "0=4;1=4", "the device's counters, per L3");
    assert_eq!(r["on_mkdir"], "1");
    // The default group holds two counters (total, local) in each domain from the mount.
    assert_eq!(r["available_mount"], "0=2;1=2");
    assert_eq!(r["default_assign"], "mbm_total_bytes:0=e;1=e mbm_local_bytes:0=e;1=e");
    assert!(r["filter_total"].contains("dirty_victim_writes_all"), "{}", r["filter_total"]);
    assert_eq!(r["available_a"], "0=0;1=0");
    assert_eq!(r["a_assign"], "mbm_total_bytes:0=e;1=e mbm_local_bytes:0=e;1=e");
    // The next group is made, without counters: its bandwidth is "Unassigned", never a number.
    assert_eq!(num(&r, "mkdir_b"), 0);
    assert!(r["b_status"].contains("Failed to allocate counter"), "last_cmd_status: {}", r["b_status"]);
    assert_eq!(r["b_assign"], "mbm_total_bytes:0=_;1=_ mbm_local_bytes:0=_;1=_");
    assert_eq!(r["b_total"], "Unassigned");
    assert_eq!(num(&r, "b_occupancy_number"), 1, "occupancy needs no counter");
    stream_counted("a's assigned counter", &r, "stream_a");
    // The counter moves from a to b.
    assert_eq!((num(&r, "unassign_a"), num(&r, "assign_b")), (0, 0));
    assert_eq!(r["a_assign_after"], "mbm_total_bytes:0=_;1=e mbm_local_bytes:0=e;1=e");
    assert_eq!(r["b_assign_after"], "mbm_total_bytes:0=e;1=_ mbm_local_bytes:0=_;1=_");
    assert_eq!(r["a_total_after"], "Unassigned");
    stream_counted("the counter, now b's", &r, "stream_b");
    assert_eq!(r["available_end"], "0=2;1=2", "rmdir gives the counters back");
    assert_eq!(num(&r, "splats"), 0);

    // A kernel without assignable counters (6.1) on the same device: every group counts.
    let g = Guest { script: "modern.sh", kernel: "", machine: &amd, append: "cs_mode=abmc", kmod: false };
    let r = boot(&qemu, &work, &g, &dir.path().join("abmc-6.1"));
    assert_eq!(r["assign_mode"], "none");
    stream_counted("6.1 on the ABMC device", &r, "stream_s");
}

/// The kernel's own files and cachescope's rows on one SNC boot (its checks judged apart).
#[test]
fn sub_numa_clusters_on_the_kernels_resctrl() {
    let Some((qemu, dir, work)) = device_machine("the device's sub-NUMA clusters") else { return };
    let m = snc_machine();
    let checks = [
        Check { name: "kernel", script: "modern.sh", vars: "cs_mode=snc" },
        Check { name: "cachescope", script: "modern.sh", vars: "cs_mode=snc_backend" },
    ];
    let g = Guest { script: "modern.sh", kernel: "unstable", machine: &m, append: "", kmod: false };
    let done = boot_checks(&qemu, &work, &g, &checks, &dir.path().join("snc"));
    let (kernel, (ours, out)) = (&done[0].0, &done[1]);
    judge(vec![
        ("the kernel's SNC files".into(), Box::new(move || check_snc_kernel(kernel))),
        ("cachescope's SNC domains".into(), Box::new(move || check_snc_backend(ours, out))),
    ]);
}

/// The kernel's SNC detection and its per-node files: each node's working set in its own node.
fn check_snc_kernel(r: &HashMap<String, String>) {
    assert_eq!(num(r, "mount"), 0);
    assert_eq!(num(r, "snc_detected"), 2, "the kernel's SNC detection");
    assert_eq!(num(r, "num_rmids"), 16, "RMIDs are shared out between the nodes of an L3");
    assert_eq!(r["domains"], "mon_L3_00,mon_L3_01,");
    assert_eq!(r["sub_00"], "mon_sub_L3_00,mon_sub_L3_01,");
    assert_eq!(r["sub_01"], "mon_sub_L3_02,mon_sub_L3_03,");
    for (g, own, other) in [("n0", "sub0", "sub1"), ("n1", "sub1", "sub0")] {
        let (mine, theirs, l3) =
            (num(r, &format!("{g}_{own}")), num(r, &format!("{g}_{other}")), num(r, &format!("{g}_l3")));
        let err = (mine - LLC / 4) as f64 / (LLC / 4) as f64;
        println!("{g}: its node {mine} B ({:+.1} % of W), the other node {theirs} B, the L3 {l3} B", 100.0 * err);
        assert!(err.abs() <= 0.10, "{g}: {mine} B in its own node for a {} B working set", LLC / 4);
        assert!(theirs <= LLC / 64, "{g}: {theirs} B in the node it never ran on");
        assert!((l3 - mine - theirs).abs() <= LLC / 64, "{g}: the L3 file {l3} is the nodes' sum {}", mine + theirs);
    }
    stream_counted("a stream on node 1, in the L3 file", r, "stream_s1");
    assert!(num(r, "s1_sub1_mbm") > 10 * num(r, "s1_sub0_mbm").max(1), "the stream's bytes are node 1's");
    assert_eq!(num(r, "splats"), 0);
}

/// What the device cannot model stops QEMU with one line that names it.
#[test]
fn the_device_refuses_what_it_cannot_model() {
    let Some((qemu, _dir, _work)) = device_machine("the device's properties") else { return };
    for (args, says) in [
        (
            "-cpu Skylake-Server -device rdt,mbm-counters=4",
            "mbm-counters (assignable counters, ABMC) needs an AMD -cpu",
        ),
        ("-cpu EPYC-Rome -device rdt,mbm-counters=33", "mbm-counters 33 is not in 0..32"),
        ("-cpu EPYC-Rome -device rdt,snc=2", "snc (sub-NUMA clustering) needs an Intel -cpu"),
        ("-cpu Skylake-Server -smp 2 -device rdt,snc=2", "snc=2 needs NUMA nodes"),
        ("-cpu Skylake-Server -device rdt,snc=5", "snc 5 is not in 1..6 or does not divide rmids"),
        ("-cpu EPYC-Rome -device rdt,closids=17", "closids 17 is not in 0..16"),
        ("-cpu Skylake-Server -device rdt,closids=4,llc-ways=64,llc-size=4M", "llc-ways 64 is over 32"),
    ] {
        let out = std::process::Command::new(&qemu)
            .args(["-accel", "tcg", "-nographic", "-nodefaults", "-monitor", "none", "-S"])
            .args(args.split_whitespace())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        // TCG's warnings about the CPU model's features aside, one line.
        let said: Vec<&str> = err.lines().filter(|l| !l.contains("warning: TCG doesn't support")).collect();
        assert!(!out.status.success(), "{args}: QEMU started");
        assert!(said.len() == 1 && said[0].contains(says), "{args}: {err}");
    }
}

/// cachescope's resctrl backend owning the kernel's assignable counters: 100 containers on 32
/// counters per L3 (the default group keeps 2, another owner's group 2: 28 usable), one pinned. Every
/// container gets bandwidth figures within the run (turns of 3 s, each rotating container
/// measured one turn in 7, docs/counters.md; 50 s), the pinned one continuously and within 5 %
/// of what its stream moved; rows without a counter are `unassigned` with no bandwidth, never
/// 0; the other owner's counters stay; mbm_assign_on_mkdir is off while cachescope runs and
/// back on after, with every counter returned, also after a run killed with SIGKILL (by the
/// next run).
#[test]
fn cachescope_assigns_the_counters_on_the_kernels_resctrl() {
    let Some((qemu, dir, work)) = device_machine("the device's assignable counters") else { return };
    let amd = "-cpu EPYC-Rome -smp 2,sockets=2 -device rdt,llc-size=4M,llc-ways=16,rmids=128,mbm-counters=32";
    let g = Guest { script: "modern.sh", kernel: "unstable", machine: amd, append: "cs_mode=assign", kmod: false };
    let out = dir.path().join("assign");
    let r = boot(&qemu, &work, &g, &out);
    assert_eq!(num(&r, "monitor_exit"), 0, "{}", r.get("ref").map_or("", String::as_str));
    assert_eq!((r["on_mkdir_before"].as_str(), r["on_mkdir_during"].as_str()), ("1", "0"));
    assert_eq!(r["on_mkdir_after"], "1", "put back at exit");
    assert_eq!(r["available_after"], r["available_before"], "every counter returned");
    assert_eq!(num(&r, "groups_left"), 0);
    assert_eq!(r["available_before"], "0=28;1=28", "the default group's and the other owner's counters");
    assert_eq!(r["other_assign"], "mbm_total_bytes:0=e;1=e mbm_local_bytes:0=e;1=e", "another owner's counters stay");
    assert_eq!(num(&r, "splats"), 0);
    // SIGKILLed, a run leaves it off; the next run puts it back, and removes the orphans.
    assert_eq!((r["on_mkdir_killed"].as_str(), r["on_mkdir_next"].as_str()), ("0", "1"));
    assert_eq!(num(&r, "groups_left_next"), 0);

    let text = std::fs::read_to_string(out.join("rows.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut measured: HashMap<String, usize> = HashMap::new();
    let (mut unassigned, mut rotating) = (0, 0);
    for row in &rows {
        let cg = row["cgroup_path"].as_str().unwrap_or_default().to_string();
        let mbm = &row["mbm_total_bytes"];
        match row["status"].as_str() {
            Some("unassigned") => {
                unassigned += 1;
                assert!(mbm.is_null() && row["mbm_counter"].is_null(), "an unassigned row: {row}");
                assert!(row["llc_occupancy_bytes"].is_u64(), "occupancy needs no counter: {row}");
            }
            Some("ok") if !mbm.is_null() => {
                *measured.entry(cg).or_default() += 1;
                rotating += usize::from(row["mbm_counter"] == "rotating");
                assert!(row["mbm_counter"].is_string(), "a measured row says how: {row}");
            }
            _ => {}
        }
    }
    println!(
        "{} rows: {unassigned} unassigned, {rotating} measured by a rotating counter; {} of 100 containers measured",
        rows.len(),
        measured.len()
    );
    assert_eq!(measured.len(), 100, "every container has bandwidth figures");
    assert!(unassigned > 0 && rotating > 0);

    // The pinned stream: a counter kept throughout, its bytes over its window within 5 %.
    let s = fields(&r["stream_pin"]);
    let (moved, t0, t1): (f64, i64, i64) =
        (s["moved"].parse().unwrap(), s["start_ns"].parse().unwrap(), s["end_ns"].parse().unwrap());
    let pin: Vec<&serde_json::Value> =
        rows.iter().filter(|r| r["cgroup_path"] == "ctr/pin" && r["domain"] == 0).collect();
    let inside: Vec<&&serde_json::Value> = pin
        .iter()
        .filter(|r| {
            let end = r["time_ns"].as_i64().unwrap();
            end - r["interval_ns"].as_i64().unwrap() >= t0 && end <= t1
        })
        .collect();
    assert!(inside.len() >= 5, "the pinned container's rows in its stream's window: {}", inside.len());
    for row in &inside {
        assert_eq!(row["mbm_counter"], "kept", "the pinned container keeps its counter: {row}");
        assert!(row["mbm_total_bytes"].is_u64(), "continuous: {row}");
    }
    // Its bytes over exactly the rows' intervals (work.c's marks), whenever the guest's CPU came.
    println!("pinned stream: {moved} B over {} ns", t1 - t0);
    let inside: Vec<&serde_json::Value> = inside.into_iter().copied().collect();
    near_bytes("pinned stream", stream_bytes(&inside, &r["stream_pin"]), 0.05);
}

/// The SNC machine: Sapphire Rapids' model number (the kernel reads SNC only there and on its
/// kin), two sockets of two CPUs, one NUMA node per CPU: two nodes per L3.
fn snc_machine() -> String {
    let mut m = String::from("-cpu Skylake-Server,model=143 -smp 4,sockets=2,cores=2");
    for n in 0..4 {
        m += &format!(" -object memory-backend-ram,id=m{n},size=256M -numa node,nodeid={n},cpus={n},memdev=m{n}");
    }
    m + &format!(" {DEVICE},snc=2")
}

/// cachescope's resctrl backend with Sub-NUMA Clustering: every node is a domain of the rows
/// (its mon_sub_L3_YY); a container on node 0's CPU holds its working set in domain 0 and none
/// in node 1's, and the other way round; a container's nodes add up to the kernel's L3 file of
/// its group; `cachescope info` says SNC is on with 2 nodes per L3.
/// (A check of `sub_numa_clusters_on_the_kernels_resctrl`'s boot.)
fn check_snc_backend(r: &HashMap<String, String>, out: &Path) {
    assert_eq!(num(r, "monitor_exit"), 0);
    assert_eq!(r["info_snc"], "SNC on: 2 nodes per L3");
    assert_eq!(num(r, "splats"), 0);
    let settled = num(r, "settled") * 1_000_000_000;
    let text = std::fs::read_to_string(out.join("rows.jsonl")).unwrap();
    let rows: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let domains: std::collections::BTreeSet<i64> = rows.iter().filter_map(|r| r["domain"].as_i64()).collect();
    assert_eq!(domains.into_iter().collect::<Vec<_>>(), [0, 1, 2, 3], "a domain per node");
    // The last occupancy each container's rows show per domain, once settled.
    let last = |cg: &str, d: i64| -> i64 {
        rows.iter()
            .filter(|x| x["cgroup_path"] == cg && x["domain"] == d && x["time_ns"].as_i64().unwrap() >= settled)
            .filter_map(|x| x["llc_occupancy_bytes"].as_i64())
            .next_back()
            .unwrap_or_else(|| panic!("no settled occupancy for {cg} in domain {d}"))
    };
    for (n, own, other) in [("n0", 0, 1), ("n1", 1, 0)] {
        let cg = format!("ctr/{n}");
        let (mine, theirs) = (last(&cg, own), last(&cg, other));
        let err = (mine - LLC / 4) as f64 / (LLC / 4) as f64;
        let ref_l3 = num(r, &format!("{n}_ref_l3"));
        println!(
            "{n}: node {own} {mine} B ({:+.1} % of W), node {other} {theirs} B; the kernel's L3 file {ref_l3} B",
            100.0 * err
        );
        assert!(err.abs() <= 0.10, "{n}: {mine} B in its node for {} B", LLC / 4);
        assert!(theirs <= LLC / 64, "{n}: {theirs} B in the node it never ran on");
        assert!(((mine + theirs) - ref_l3).abs() <= LLC / 50, "{n}: nodes {mine} + {theirs} against the L3's {ref_l3}");
        assert_eq!((last(&cg, 2), last(&cg, 3)), (0, 0), "{n}: nothing in the other L3's nodes");
    }
}

/// Sharing resctrl with other owners, on 7.2 and 6.1: a container whose first process the
/// runtime put in a MON group of its own (as runc's enableMonitoring and NRI plugins do) is
/// read from that group (W ± 10 %, within 2 % of the group's own file), whose task and
/// directory stay as found; a crashed run's orphan group is removed at start; `cachescope
/// info` lists the other owner's group; nothing of cachescope's is left.
fn share_check(kernel: &str, r: &HashMap<String, String>, out: &std::path::Path) {
    println!("/proc/PID/resctrl: {}", r["proc_resctrl"]);
    assert_eq!(num(r, "monitor_exit"), 0);
    assert!(r["info_others"].contains("mon_groups/runc-owned"), "info: {}", r["info_others"]);
    assert_eq!(num(r, "orphan_gone"), 1, "a crashed run's group is removed at start");
    assert_eq!((num(r, "runc_group_kept"), num(r, "runc_task_kept")), (1, 1), "the owner's group as found");
    assert_eq!(num(r, "ours_left"), 0);
    println!("{kernel:?}:");
    reads_its_owners_group(r, out, "ctr/owned", "ref_owned");
}

/// The last settled row of `cgroup` (domain 0) holds W = a quarter of the LLC (± 10 %), within
/// 2 % of the LLC of what its owner's group file said (`reference`, a CS-RESULT key).
fn reads_its_owners_group(r: &HashMap<String, String>, out: &std::path::Path, cgroup: &str, reference: &str) {
    let settled = num(r, "settled") * 1_000_000_000;
    let text = std::fs::read_to_string(out.join("rows.jsonl")).unwrap();
    let occ: Vec<i64> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|x| x["cgroup_path"] == cgroup && x["domain"] == 0 && x["time_ns"].as_i64().unwrap() >= settled)
        .filter_map(|x| x["llc_occupancy_bytes"].as_i64())
        .collect();
    let got = *occ.last().unwrap_or_else(|| panic!("settled rows of {cgroup}"));
    let reference = num(r, reference);
    println!("{cgroup} reads {got} B; its owner's group {reference} B; W {}", LLC / 4);
    assert!(((got - LLC / 4) as f64 / (LLC / 4) as f64).abs() <= 0.10, "{got} B for {} B", LLC / 4);
    assert!((got - reference).abs() <= LLC / 50, "{got} B against the group's own {reference} B");
}

/// Cache allocation on the device, then a runtime's own groups: `-device rdt,closids=4` on 7.2.
/// The kernel finds CAT (4 classes, 16-bit masks); a CTRL_MON group allowed 2 of 16 ways, running
/// a workload of half the LLC, holds an eighth of it (± 10 %), as the kernel reads it. Then a
/// container run by Debian unstable's crun with the OCI spec's `linux.intelRdt.enableMonitoring`
/// (Debian's runc, this release's and unstable's, does not have it): crun makes a CTRL_MON group
/// and a MON group in it, named after the container, before the container runs. cachescope's
/// resctrl backend, already running, reads that group (W ± 10 %, within 2 % of the group's own
/// file), lists it as another owner's in `info`, leaves it as found, and makes none of its own
/// for that container; crun removes it when the container goes.
#[test]
fn a_group_crun_made_is_read_and_left_to_crun() {
    let Some((qemu, dir, work)) = device_machine("crun's groups on the device's cache allocation") else { return };
    let amd = format!("-cpu EPYC-Rome -smp 2,sockets=2 {DEVICE},closids=4");
    let g = Guest { script: "modern.sh", kernel: "unstable", machine: &amd, append: "cs_mode=crun", kmod: false };
    let out = dir.path().join("crun");
    let r = boot(&qemu, &work, &g, &out);
    assert_eq!((r["num_closids"].as_str(), r["cbm_mask"].as_str()), ("4", "ffff"), "the kernel finds the device's CAT");
    assert_eq!((num(&r, "mkdir_small"), num(&r, "schemata_small")), (0, 0));
    // The kernel prints the masks as written ("3"; on Intel padded, "0003").
    let masks: Vec<u64> = r["small_schemata"]
        .trim_start_matches("L3:")
        .split(';')
        .map(|d| u64::from_str_radix(d.split_once('=').map_or("", |x| x.1), 16).unwrap_or(0))
        .collect();
    assert_eq!(masks, [3, 3], "schemata: {}", r["small_schemata"]);
    let small = num(&r, "small_occ");
    println!("2 of 16 ways, a workload of {} B: the kernel reads {small} B (an eighth: {} B)", LLC / 2, LLC / 8);
    assert!(((small - LLC / 8) as f64 / (LLC / 8) as f64).abs() <= 0.10, "{small} B in 2 of 16 ways");

    println!("{}: the container's group {}; groups {}", r["crun_version"], r["crun_group"], r["groups"]);
    assert!(r["crun_version"].starts_with("crun version"), "{}", r["crun_version"]);
    assert_eq!(r["crun_affinity"], "1", "the container on CPU 0 (it pins itself)");
    assert!(r["crun_group"].contains("mon_groups/") && !r["crun_group"].contains("cachescope-"), "{}", r["crun_group"]);
    assert_eq!(num(&r, "monitor_exit"), 0);
    assert!(r["info_others"].contains(&r["crun_group"]), "info: {}", r["info_others"]);
    assert_eq!((num(&r, "crun_group_kept"), num(&r, "crun_task_kept")), (1, 1), "crun's group as found");
    assert_eq!(num(&r, "ours_for_crun"), 0, "no group of cachescope's for crun's container");
    assert_eq!(num(&r, "ours_left"), 0);
    assert_eq!(num(&r, "crun_group_gone"), 1, "crun removes its group with the container");
    reads_its_owners_group(&r, &out, "ctr/crunned", "ref_crun");
    assert_eq!(num(&r, "splats"), 0);
}

/// Other owners' groups and the first instruction, on 7.2 and on this release's 6.1: one boot of
/// the AMD model per kernel (CPU 0 left to the containers: unbound workqueues on CPU 1) runs
/// modern.sh's three checks in turn, each judged apart:
/// - share: a container whose first process the runtime put in a MON group of its own (as
///   runc's enableMonitoring and NRI plugins do) is read from that group (W ± 10 %, within 2 %
///   of the group's own file), whose task and directory stay as found; a crashed run's orphan
///   group is removed at start; `cachescope info` lists the other owner's group; nothing of
///   cachescope's is left.
/// - hook: from the first instruction without the module: a container (Debian's runc) that fills
///   a quarter of the LLC in its first 50 ms, with cachescope's resctrl backend running (2 s
///   intervals: the engine attaches it later than its program starts), and reads it on until the
///   group is read (lines other work evicts come back as its group's; those a late tag left with
///   another RMID stay there). Tagged by the backend's
///   tagger the moment its cgroup holds a thread (`cgroup.events`), and tagged by
///   `cachescope hook oci` as runc's createRuntime hook: either way its group holds ≥ 95 % of W
///   per the kernel, in a group the backend then adopts.
/// - nri: `cachescope hook nri` registered on the NRI socket of Debian unstable's containerd 2.1
///   in the guest, a pod made through containerd's CRI as a kubelet makes it
///   (examples/cri_pod.rs), its container filling a quarter of the LLC in its first 50 ms. The
///   plugin puts the container's first process in its group at StartContainer, before the
///   program runs: the group holds at least 95 % of W, per the kernel's resctrl.
#[test]
fn runtimes_groups_and_first_instructions_on_the_kernels_resctrl() {
    let Some((qemu, dir, work)) = device_machine("runtimes' groups and containers in the guest") else { return };
    let amd = format!("-cpu EPYC-Rome -smp 2,sockets=2 {DEVICE}");
    let checks = [
        Check { name: "share", script: "modern.sh", vars: "cs_mode=share" },
        Check { name: "hook", script: "modern.sh", vars: "cs_mode=hook" },
        Check { name: "nri", script: "modern.sh", vars: "cs_mode=nri" },
    ];
    for kernel in ["unstable", ""] {
        let g = Guest { script: "modern.sh", kernel, machine: &amd, append: "workqueue.unbound_cpus=1", kmod: false };
        let done = boot_checks(&qemu, &work, &g, &checks, &dir.path().join(format!("runtimes-{kernel}")));
        let [(share, share_out), (hook, _), (nri, _)] = &done[..] else {
            panic!("three checks, {} results", done.len())
        };
        judge(vec![
            (format!("{kernel:?} share"), Box::new(|| share_check(kernel, share, share_out))),
            (format!("{kernel:?} hook"), Box::new(|| hook_check(hook))),
            (format!("{kernel:?} nri"), Box::new(|| nri_check(nri))),
        ]);
    }
}

fn hook_check(r: &HashMap<String, String>) {
    assert_eq!((num(r, "watched_exit"), num(r, "hooked_exit"), num(r, "monitor_exit")), (0, 0, 0));
    assert_eq!(num(r, "splats"), 0);
    let w = num(r, "w");
    let watched = r["watched_occ"].parse::<i64>().unwrap_or(0);
    let hooked = num(r, "hooked_occ");
    println!(
        "{}: W = {w} B, filled in the container's first 50 ms, in its group: hook {hooked} B ({:.1} %), tagger {watched} B ({:.1} %)",
        r["kernel"],
        100.0 * hooked as f64 / w as f64,
        100.0 * watched as f64 / w as f64
    );
    for n in ["hooked", "watched"] {
        let group = &r[&format!("{n}_group")];
        assert!(group.starts_with(&format!("cachescope-ctr_{n}-")), "{group}");
    }
    assert!(hooked as f64 >= 0.95 * w as f64, "the hook: {hooked} B of {w}");
    assert!(watched as f64 >= 0.95 * w as f64, "the tagger: {watched} B of {w}");
}

fn nri_check(r: &HashMap<String, String>) {
    assert_eq!(num(r, "splats"), 0);
    assert_eq!(num(r, "images"), 2, "both images imported");
    assert_eq!(num(r, "cri_exit"), 0, "the pod and its container started through the CRI");
    let (w, occ) = (num(r, "w"), num(r, "nri_occ"));
    println!(
        "{}: W = {w} B, filled in the container's first 50 ms, in its group: NRI plugin (containerd {}) {occ} B ({:.1} %)",
        r["kernel"],
        r["containerd"],
        100.0 * occ as f64 / w as f64
    );
    assert_eq!(num(r, "nri_groups"), 1, "one group, the plugin's (its words are above, CS-STDERR plugin)");
    assert!(r["nri_group"].starts_with("cachescope-"), "{}", r["nri_group"]);
    assert!(occ as f64 >= 0.95 * w as f64, "the NRI plugin: {occ} B of {w}");
}
