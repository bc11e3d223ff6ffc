//! The Debian packages, as an administrator meets them: scripts/package.sh builds
//! cachescope_<version>_amd64.deb and cachescope-dkms_<version>_all.deb (here from the test's
//! binary), and scripts/package-check.sh installs them into a Debian root of this release
//! (lintian clean, dependencies resolved by apt, `cachescope info` runs, the unit installed and
//! not enabled, nothing left after a purge; DKMS builds the module for the guest's kernel,
//! which loads with emulate=1 under QEMU and unloads); and the packaged unit under a real
//! systemd (scripts/guest-systemd.sh): installed with dpkg, started, recording and serving a
//! container, stopped with its files finished, on a guest without resctrl and on the RDT
//! machine with it.

#![allow(clippy::unwrap_used)] // tests: a panic is the report

mod common;

use std::process::Command;

#[test]
fn packages_build_install_run_and_purge_cleanly() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return cachescope_testkit::skip("the package check needs root (chroot, mounts, QEMU's module)");
    }
    for tool in ["lintian", "dpkg-shlibdeps", "qemu-system-x86_64", "debootstrap"] {
        if !common::have(tool) {
            return cachescope_testkit::skip(format!("{tool} is missing (scripts/setup.sh installs it)"));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (deb, dkms) = common::packages(dir.path());
    let o = Command::new(common::repo().join("scripts/package-check.sh"))
        .args([&deb, &dkms])
        .arg(dir.path().join("check"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    println!("{said}");
    assert!(o.status.success(), "package-check.sh: {said}\n{err}");
    for line in [
        "CS-PKG lintian=clean",
        "CS-PKG installed=cachescope",
        "CS-PKG info=ran",
        "CS-PKG files=present unit=not-enabled",
        "CS-PKG purged=clean",
        "CS-PKG dkms=built",
        "CS-PKG dkms_purged=clean",
        "CS-PKG guest_load=0",
        "CS-PKG guest_device=1",
        "CS-PKG guest_unload=0",
        "CS-PKG guest_gone=1",
    ] {
        assert!(said.lines().any(|l| l.starts_with(line)), "{line} missing: {said}\n{err}");
    }
}

/// What one systemd guest said: its CS-RESULT keys, and the report of what the unit recorded.
fn systemd_guest(
    deb: &str,
    out: &std::path::Path,
    qemu: &str,
    machine: &str,
    append: &str,
) -> (String, serde_json::Value) {
    let o = Command::new(common::repo().join("scripts/guest-systemd.sh"))
        .arg(deb)
        .arg(out)
        .env("CACHESCOPE_QEMU", qemu)
        .env("CACHESCOPE_QEMU_MACHINE", machine)
        .env("CACHESCOPE_QEMU_APPEND", append)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr);
    println!("{said}");
    assert!(
        o.status.success(),
        "guest-systemd.sh ({machine}) failed: {}\n{said}\n{err}",
        common::guest_failure(&format!("{said}\n{err}"))
    );
    let report = std::fs::read_to_string(out.join("report.json")).unwrap_or_else(|e| panic!("report.json: {e}"));
    (said, serde_json::from_str(&report).unwrap())
}

/// The unit as an administrator starts it: `dpkg -i`, a Docker-style container, `systemctl
/// start cachescope`, /metrics, `systemctl stop`, the files it left (issue 43, item 7). Under
/// Debian's systemd as PID 1 in QEMU: this release's kernel without resctrl, and the RDT machine
/// (Skylake-Server, resctrl not mounted: the unit mounts it and must give the container an
/// RMID, which without CAP_DAC_OVERRIDE it could not).
#[test]
fn the_packaged_unit_starts_records_and_stops_under_systemd() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return cachescope_testkit::skip("the systemd guest needs root (debootstrap)");
    }
    for tool in ["dpkg-shlibdeps", "qemu-system-x86_64", "debootstrap"] {
        if !common::have(tool) {
            return cachescope_testkit::skip(format!("{tool} is missing (scripts/setup.sh installs it)"));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (deb, _) = common::packages_of(dir.path(), &common::release_bin());
    let rdt = common::rdt::rdt_qemu();
    let device = "-device rdt,llc-size=4M,llc-ways=16,rmids=32";
    let guests = [
        ("plain", "qemu-system-x86_64".to_string(), "-cpu max -smp 2".to_string(), ""),
        (
            "resctrl",
            rdt,
            format!("-cpu Skylake-Server -smp 2,sockets=2 {device}"),
            "rdt=cmt,mbmtotal,mbmlocal cs_resctrl=1",
        ),
    ];
    for (name, qemu, machine, append) in &guests {
        let (said, report) = systemd_guest(&deb, &dir.path().join(name), qemu, machine, append);
        let mut results = std::collections::BTreeMap::new();
        for kv in said.lines().filter_map(|l| l.strip_prefix("CS-RESULT ")).flat_map(|l| l.split(' ')) {
            if let Some((k, v)) = kv.split_once('=') {
                results.insert(k.to_string(), v.to_string());
            }
        }
        let r = |k: &str| results.get(k).map(String::as_str).unwrap_or_else(|| panic!("{name}: no {k}: {said}"));
        assert_eq!(r("installed"), "1");
        assert_eq!(r("enabled"), "disabled", "{name}: the package enables nothing");
        assert_eq!(r("documentation"), "present");
        assert_eq!((r("active"), r("serves"), r("container")), ("active", "1", "1"), "{name}");
        assert_eq!((r("result"), r("status")), ("success", "0"), "{name}: stopped by SIGTERM, exit 0");
        assert_eq!(r("partial"), "0", "{name}: every file finished");
        assert!(r("parquet").parse::<u32>().unwrap() >= 1, "{name}");
        assert_eq!(r("dir_mode"), "750");
        // The container the unit followed, in what it recorded: its busy loop's CPU, and on
        // the RDT machine its occupancy (from the RMID it got).
        let id = r("container_id");
        let c = report["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["container_id"] == id)
            .unwrap_or_else(|| panic!("{name}: {id} not in the report"));
        // Its CPU time counted (not null, not 0): how much of a CPU a TCG guest gave its busy
        // loop depends on the host's load, so no share is asserted.
        let cpu = c["cpu_mean"].as_f64();
        assert!(cpu.is_some_and(|c| c > 0.0), "{name}: the busy container's CPU by the rows: {cpu:?}");
        let occupancy = c["occupancy_p50_bytes"].as_u64();
        if *name == "resctrl" {
            assert_eq!(r("occupancy"), "1");
            assert!(occupancy.is_some_and(|b| b > 0), "{name}: occupancy {occupancy:?}");
        } else {
            assert_eq!(occupancy, None, "{name}: no cache monitoring, no occupancy");
        }
    }
}
