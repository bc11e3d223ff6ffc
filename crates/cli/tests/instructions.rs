//! The hot path's price, in instructions (issue 24): `record` of 1,000 emulated containers
//! for 1 s of virtual time at 1 ms (scripts/many-containers.sh: 1,000 intervals × 1,000
//! containers through the engine, the emulator, sparse rows and the Parquet encoder), counted
//! by valgrind's callgrind, which counts the same on a loaded machine as on an idle one. The
//! release build is measured against the count recorded in tests/data/instructions.txt: more
//! than 20 % over it fails. After a change that makes it cheaper, write the new count there
//! (the test prints it), so the next regression is caught from there.

#![allow(clippy::unwrap_used)] // tests: a panic is the report

mod common;

use common::{have, release_bin, release_tool, repo};
use std::process::Command;

#[test]
fn the_hot_path_costs_no_more_instructions_than_recorded() {
    if !have("valgrind") {
        cachescope_testkit::skip("needs valgrind (scripts/setup.sh installs it)");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let scenario = work.path().join("s.toml");
    let s = Command::new(repo().join("scripts/many-containers.sh")).arg("1000").output().unwrap();
    assert!(s.status.success());
    std::fs::write(&scenario, &s.stdout).unwrap();
    let bin = release_bin();
    let o = Command::new("valgrind")
        .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
        .arg(&bin)
        .args(["record", "--fast", "--interval", "1ms", "--duration", "1s", "--scenario"])
        .arg(&scenario)
        .arg("--output")
        .arg(work.path().join("rec"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // "==PID== Collected : N": instructions executed, every thread.
    let got: u64 = err
        .lines()
        .find_map(|l| l.split("Collected : ").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no instruction count: {err}"));
    let file = repo().join("crates/cli/tests/data/instructions.txt");
    let text = std::fs::read_to_string(&file).unwrap();
    let baseline: u64 = text
        .lines()
        .find(|l| !l.starts_with('#') && !l.trim().is_empty())
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no count in {}", file.display()));
    let ratio = got as f64 / baseline as f64;
    println!("1,000 containers × 1,000 intervals: {got} instructions, {ratio:.3} of the recorded {baseline}");
    assert!(
        ratio <= 1.2,
        "the hot path costs {got} instructions, {:.0} % over the recorded {baseline}",
        (ratio - 1.0) * 100.0
    );
}

/// Instructions of `cmd` under callgrind (every thread), and what it wrote to stderr.
fn callgrind(cmd: &mut Command) -> u64 {
    let o = cmd.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    // "==PID== Collected : N": instructions executed, every thread.
    err.lines()
        .find_map(|l| l.split("Collected : ").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no instruction count: {err}"))
}

/// Cost follows activity (issue 42): 1,000 followed containers for 1 s at 1 ms, once with
/// none of them running and once with all of them running (crates/interval-cost: the
/// engine, the live finder and the recorder on the `none` path, a stand-in for eBPF's
/// slots), each against its count in tests/data/interval-instructions.txt: more than 20 %
/// over it fails. The idle
/// case is what quiet intervals buy (each interval reads who ran and a keyframe share); the
/// busy case is the per-row path, which they must not make dearer.
#[test]
fn an_interval_costs_what_ran_in_it_no_more_instructions_than_recorded() {
    if !have("valgrind") {
        cachescope_testkit::skip("needs valgrind (scripts/setup.sh installs it)");
        return;
    }
    let bin = release_tool("cachescope-interval-cost", "interval_cost");
    let file = repo().join("crates/cli/tests/data/interval-instructions.txt");
    let text = std::fs::read_to_string(&file).unwrap();
    let recorded = |kind: &str| -> u64 {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| l.strip_prefix(kind).and_then(|n| n.trim().parse().ok()))
            .unwrap_or_else(|| panic!("no count for {kind} in {}", file.display()))
    };
    let mut over = Vec::new();
    for kind in ["idle", "busy"] {
        let got = callgrind(
            Command::new("valgrind")
                .args(["--tool=callgrind", "--callgrind-out-file=/dev/null"])
                .arg(&bin)
                .args([kind, "1000", "1"]),
        );
        let base = recorded(kind);
        let ratio = got as f64 / base as f64;
        println!("{kind}: 1,000 containers × 1,000 intervals: {got} instructions, {ratio:.3} of the recorded {base}");
        if ratio > 1.2 {
            over.push(format!("{kind}: {got} instructions, {:.0} % over the recorded {base}", (ratio - 1.0) * 100.0));
        }
    }
    assert!(over.is_empty(), "{}", over.join("; "));
}
