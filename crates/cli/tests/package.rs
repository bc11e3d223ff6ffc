//! The Debian packages, as an administrator meets them: scripts/package.sh builds
//! cachescope_<version>_amd64.deb and cachescope-dkms_<version>_all.deb (here from the test's
//! binary), and scripts/package-check.sh installs them into a Debian root of this release
//! (lintian clean, dependencies resolved by apt, `cachescope info` runs, the unit installed and
//! not enabled, nothing left after a purge; DKMS builds the module for the guest's kernel,
//! which loads with emulate=1 under QEMU and unloads).

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
