//! The RDT machine (tools/rdt-qemu, DESIGN.md tier 3b): QEMU with the `rdt` device, whose L3
//! model is driven by the guest's own memory accesses, boots Debian's kernel; the kernel's own
//! resctrl (a driver we did not write) must find L3 monitoring there and count what workloads
//! of known footprint (tools/rdt-qemu/guest/work.c) do, on an Intel and an AMD CPU model:
//! - CPUID: every vCPU shows cqm, cqm_llc, cqm_occup_llc, cqm_mbm_total, cqm_mbm_local; the L3
//!   size the kernel reads is the model's; num_rmids is the device's;
//! - occupancy: working sets of a quarter and a half of the LLC read W ± 10 %; an idle program
//!   little (its exec and stack); the domain the workloads never ran on reads 0;
//! - bandwidth: a stream of known rate reads within ± 5 % of the bytes it moved, over exactly
//!   its window (it reads the kernel's counter itself just before and after);
//! - a noisy neighbour: a thrasher takes a victim's lines;
//! - the device's U and E bits reach user space as "Unavailable" and "Error", never 0.
#![allow(clippy::unwrap_used)]

mod common;

use common::{guest_results, have};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The RDT machine's QEMU: tools/rdt-qemu/build.sh builds it once per machine (minutes) and
/// prints its path.
fn rdt_qemu() -> String {
    let out = Command::new(root().join("tools/rdt-qemu/build.sh")).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tools/rdt-qemu/build.sh failed:\n{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout.lines().last().unwrap_or_default().trim().to_string()
}

/// The workloads, a static binary for the busybox guest.
fn workloads(dir: &Path) -> PathBuf {
    let bin = dir.join("rdt-work");
    let cc = Command::new("gcc")
        .args(["-O2", "-static", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&bin)
        .arg(root().join("tools/rdt-qemu/guest/work.c"))
        .output()
        .unwrap();
    assert!(cc.status.success(), "gcc: {}", String::from_utf8_lossy(&cc.stderr));
    bin
}

/// Boots `kernel` ("": this release's; else a Debian suite's newest) with `machine` (CPU,
/// topology, -device rdt) and returns the guest's CS-RESULT lines.
fn boot(qemu: &str, work: &Path, kernel: &str, machine: &str, append: &str, out: &Path) -> HashMap<String, String> {
    let run = Command::new(root().join("scripts/guest-qemu.sh"))
        .arg(env!("CARGO_BIN_EXE_cachescope"))
        .arg(out)
        .arg(root().join("tools/rdt-qemu/guest/resctrl.sh"))
        .env("CACHESCOPE_QEMU", qemu)
        .env("CACHESCOPE_QEMU_MACHINE", machine)
        .env("CACHESCOPE_QEMU_APPEND", append)
        .env("CACHESCOPE_QEMU_EXTRA", work)
        .env("CACHESCOPE_GUEST_KMOD", "0")
        .env("CACHESCOPE_GUEST_KERNEL", kernel)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&run.stdout).to_string() + &String::from_utf8_lossy(&run.stderr);
    println!("== kernel {kernel:?}: {machine} {append}\n{said}");
    assert!(run.status.success(), "guest-qemu.sh failed");
    let r = guest_results(&said);
    if r.get("done").map(String::as_str) != Some("1") {
        let console = std::fs::read_to_string(out.join("console.log")).unwrap_or_default();
        let tail: Vec<&str> = console.lines().rev().take(40).collect();
        panic!(
            "the guest did not run to the end; console ends:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    r
}

fn num(r: &HashMap<String, String>, k: &str) -> i64 {
    let v = r.get(k).unwrap_or_else(|| panic!("the guest did not report {k}"));
    v.parse().unwrap_or_else(|_| panic!("{k}={v} is not a number"))
}

/// A "k=v k=v" value, by key.
fn fields(v: &str) -> HashMap<&str, &str> {
    v.split_whitespace().filter_map(|kv| kv.split_once('=')).collect()
}

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
    assert_eq!(r["domains"], "mon_L3_00,mon_L3_01,", "one L3 domain per socket");

    // Occupancy: W within 10 % (the workloads' lines are all their own: guest/resctrl.sh's
    // settle), and the idle program holds little more than its stack and exec.
    let idle = num(r, "idle_occ");
    assert!(idle < llc / 20, "the idle program holds {idle} B");
    for (k, w) in [("quarter_occ", llc / 4), ("half_occ", llc / 2)] {
        let got = num(r, k);
        let err = (got - w) as f64 / w as f64;
        println!("{vendor} {k}: {got} B for a {w} B working set ({:+.1} %)", 100.0 * err);
        assert!(err.abs() <= 0.10, "{k}: {got} B for {w} B");
    }
    assert_eq!(num(r, "quarter_occ_d1"), 0, "nothing in the domain the workload never ran on");
    assert!(num(r, "idle_mbm") < llc / 10, "the idle program moved {} B", num(r, "idle_mbm"));

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
    assert!(!r.contains_key("rmdir_failed"), "rmdir {}", r["rmdir_failed"]);
}

#[test]
fn kernel_resctrl_on_the_rdt_machine() {
    let headers = Command::new("dpkg-query").args(["-W", "linux-headers-amd64"]).output();
    if !have("gcc") || !headers.is_ok_and(|o| o.status.success()) || !Path::new("/bin/busybox").exists() {
        println!("skip: needs gcc, linux-headers-amd64 and busybox-static (scripts/setup.sh installs them)");
        return;
    }
    let qemu = rdt_qemu();
    let dir = tempfile::tempdir().unwrap();
    let work = workloads(dir.path());
    const LLC: i64 = 4 << 20;
    let device = "-device rdt,llc-size=4M,llc-ways=16,rmids=32";
    // Skylake-SP stepping 4 (QEMU's model) has the CMT erratum: the kernel turns monitoring off
    // unless told (rdt=cmt,...), as on real hardware.
    let intel = format!("-cpu Skylake-Server -smp 2,sockets=2 {device}");
    let amd = format!("-cpu EPYC-Rome -smp 2,sockets=2 {device}");
    let quirk = "rdt=cmt,mbmtotal,mbmlocal";

    // This release's kernel (6.1) and the newest Debian carries (unstable: 7.2, fs/resctrl).
    for kernel in ["", "unstable"] {
        let name = if kernel.is_empty() { "release" } else { kernel };
        let r = boot(&qemu, &work, kernel, &intel, quirk, &dir.path().join(format!("intel-{name}")));
        check_resctrl(&r, "GenuineIntel", LLC, 32);
        let r = boot(&qemu, &work, kernel, &amd, "", &dir.path().join(format!("amd-{name}")));
        check_resctrl(&r, "AuthenticAMD", LLC, 32);
    }

    // The device's U and E bits, through the kernel: never a number.
    for (inject, word) in [("unavailable", "Unavailable"), ("error", "Error")] {
        let m = format!("-cpu Skylake-Server -smp 2,sockets=2 {device},inject={inject}");
        let r = boot(&qemu, &work, "", &m, &format!("{quirk} cs_mode=read"), &dir.path().join(inject));
        for k in ["read_occupancy", "read_mbm_total", "read_mbm_local"] {
            assert_eq!(r[k], word, "{k} with inject={inject}");
        }
    }
    // Without the quirk parameter the kernel keeps monitoring off on this stepping.
    let r = boot(&qemu, &work, "", &intel, "cs_mode=read", &dir.path().join("quirk"));
    assert_eq!(num(&r, "detected"), 0, "the kernel's Skylake-SP quirk turns CMT off");
    assert_eq!(num(&r, "flag_cqm"), num(&r, "cpus"), "while CPUID still enumerates it");
}
