//! Test helpers shared by every crate's tests (a dev-dependency only).
//!
//! A test that cannot run here (not root, no Docker, no QEMU) calls [`skip`] and returns. The
//! test harness still counts it as passed, so [`skip`] also appends a line to the file named by
//! `CACHESCOPE_SKIPS` (scripts/test.sh sets it, counts the lines and reports them as skipped),
//! and where `CACHESCOPE_REQUIRE_ALL=1` (CI, on machines where every tier can run) it fails the
//! test instead: a tier that silently stopped running is a failure there.

use std::fmt::Display;
use std::io::Write;

/// The environment variable that makes every skip a failure.
pub const REQUIRE_ALL: &str = "CACHESCOPE_REQUIRE_ALL";
/// The environment variable naming the file skips are appended to.
pub const SKIPS: &str = "CACHESCOPE_SKIPS";

/// Whether skips fail (`CACHESCOPE_REQUIRE_ALL=1`).
pub fn required() -> bool {
    std::env::var_os(REQUIRE_ALL).is_some_and(|v| v == "1")
}

/// Say why the calling test does not run, and count it as skipped; panics where every tier is
/// required. The caller returns right after.
#[track_caller]
pub fn skip(why: impl Display) {
    let test = std::thread::current().name().unwrap_or("?").to_string();
    let at = std::panic::Location::caller();
    if required() {
        panic!("{REQUIRE_ALL}=1 and this test cannot run here: {why}");
    }
    println!("skip: {why}");
    if let Some(path) = std::env::var_os(SKIPS) {
        // One write per line with O_APPEND: test threads and test binaries may skip at once.
        let line = format!("{test}\t{at}\t{}\n", why.to_string().replace(['\n', '\t'], " "));
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
        if let Err(e) = appended {
            panic!("cannot count the skip in {}: {e}", std::path::Path::new(&path).display());
        }
    }
}

/// How often `pid` (one thread) was switched out so far, voluntarily or not (its
/// /proc/PID/status): its stints on a CPU number one more.
pub fn ctxt_switches(pid: u32) -> u64 {
    let path = format!("/proc/{pid}/status");
    let s = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    s.lines()
        .filter(|l| l.starts_with("voluntary_ctxt_switches:") || l.starts_with("nonvoluntary_ctxt_switches:"))
        .map(|l| {
            l.split_whitespace().nth(1).and_then(|n| n.parse::<u64>().ok()).unwrap_or_else(|| panic!("{path}: {l}"))
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_is_counted_in_the_file() {
        let dir = std::env::temp_dir().join(format!("cachescope-testkit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("skips");
        // Only this test touches the process environment in this crate.
        std::env::set_var(SKIPS, &file);
        std::env::remove_var(REQUIRE_ALL);
        skip("no widget\there");
        let text = std::fs::read_to_string(&file).expect("the skip file");
        std::env::set_var(REQUIRE_ALL, "1");
        let failed = std::panic::catch_unwind(|| skip("still no widget"));
        std::env::remove_var(REQUIRE_ALL);
        std::env::remove_var(SKIPS);
        std::fs::remove_dir_all(&dir).expect("clean up");
        let fields: Vec<&str> = text.trim_end().split('\t').collect();
        assert_eq!(fields.len(), 3, "{text:?}");
        assert!(fields[0].ends_with("a_skip_is_counted_in_the_file"), "{text:?}");
        assert!(fields[1].contains("lib.rs"), "{text:?}");
        assert_eq!(fields[2], "no widget here");
        assert!(failed.is_err(), "a required skip fails");
    }
}
