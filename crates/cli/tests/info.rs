//! `cachescope info` end to end: the real binary on this host, on every recorded vector, on
//! fake sysfs trees, and on bad input.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

mod common;

use common::{bin, files_with_ext};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Output;

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("spawn cachescope")
}

fn json(args: &[&str]) -> Value {
    let out = run(args);
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("valid JSON")
}

fn vectors() -> Vec<PathBuf> {
    files_with_ext(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/cpuid"), "json")
}

/// The keys and types of docs/cli.md, checked exactly (extra keys are allowed).
fn check_contract_shape(j: &Value) {
    assert!(j["vendor"].is_string());
    for k in ["family", "model", "stepping", "max_basic_leaf"] {
        assert!(j[k].is_u64(), "{k}");
    }
    let m = &j["monitoring"];
    assert!(m["supported"].is_boolean());
    assert!(m["max_rmid"].is_u64() || m["max_rmid"].is_null());
    if !m["l3"].is_null() {
        for k in ["max_rmid", "upscale_factor", "counter_width"] {
            assert!(m["l3"][k].is_u64(), "l3.{k}");
        }
        for k in ["overflow_bit", "occupancy", "mbm_total", "mbm_local", "non_cpu_agent_cmt", "non_cpu_agent_mbm"] {
            assert!(m["l3"][k].is_boolean(), "l3.{k}");
        }
    }
    let a = &j["allocation"];
    for k in ["supported", "l3_cat", "l2_cat", "mba", "l3_cdp"] {
        assert!(a[k].is_boolean(), "allocation.{k}");
    }
    for k in ["l3_cbm_length", "l3_max_cos"] {
        assert!(a[k].is_u64() || a[k].is_null(), "allocation.{k}");
    }
    assert!(j["topology"]["cpus"].is_u64());
    for d in j["topology"]["l3_domains"].as_array().unwrap() {
        assert!(d["id"].is_u64() && d["cpus"].is_array());
    }
    let backends = j["backends"].as_array().unwrap();
    assert!(!backends.is_empty());
    for b in backends {
        assert!(b["name"].is_string() && b["available"].is_boolean() && b["reason"].is_string(), "{b}");
    }
}

#[test]
fn this_host_table_and_json() {
    let out = run(&["info"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    println!("{text}");
    assert!(text.contains("Cache monitoring (CMT/MBM)") && text.contains("What cachescope will use"));

    let j = json(&["info", "--json"]);
    check_contract_shape(&j);
    assert_eq!(j["cpuid"]["source"], "instruction");
    // On a host without CMT the table says so, names the CPUID check, and names the fallback.
    if j["monitoring"]["supported"] == false {
        let reason = j["monitoring"]["reason"].as_str().unwrap();
        assert!(reason.contains("CPUID"), "{reason}");
        assert!(text.contains("CMT/MBM cannot be used on this host"), "{text}");
        assert!(text.contains("emulated"), "{text}");
    }
    let names: Vec<&str> = j["backends"].as_array().unwrap().iter().map(|b| b["name"].as_str().unwrap()).collect();
    for want in ["resctrl", "msr", "perf-cqm", "emulated", "bpf", "perf", "cgroup-v2"] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    assert!(j["auto"]["cache_monitoring"].as_str().is_some());
}

#[test]
fn every_vector_through_the_cli() {
    for v in vectors() {
        let p = v.to_str().unwrap();
        let j = json(&["info", "--json", "--cpuid-dump", p]);
        check_contract_shape(&j);
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&v).unwrap()).unwrap();
        let d = &doc["derived"];
        assert_eq!(j["vendor"], doc["vendor"], "{p}");
        assert_eq!(
            (&j["family"], &j["model"], &j["stepping"]),
            (&doc["family"], &doc["model"], &doc["stepping"]),
            "{p}"
        );
        assert_eq!(j["monitoring"]["max_rmid"], d["max_rmid_any"], "{p}");
        assert_eq!(j["monitoring"]["supported"], d["l3_monitoring"], "{p}");
        if d["l3_monitoring"] == true {
            let l3 = &j["monitoring"]["l3"];
            assert_eq!(l3["max_rmid"], d["l3_max_rmid"], "{p}");
            assert_eq!(l3["upscale_factor"], d["upscale_factor"], "{p}");
            assert_eq!(l3["counter_width"], d["counter_width_linux"], "{p}: effective width");
            assert_eq!(l3["mbm_total"], d["l3_total_bandwidth"], "{p}");
        } else {
            assert!(j["monitoring"]["l3"].is_null(), "{p}");
        }
        assert_eq!(j["allocation"]["l3_cat"], d["l3_cat"], "{p}");
        assert_eq!(j["allocation"]["l3_cbm_length"], d["l3_cat_cbm_length"], "{p}");
        assert_eq!(j["allocation"]["l3_max_cos"], d["l3_cat_max_cos"], "{p}");
        assert_eq!(j["allocation"]["l3_cdp"], d["l3_cat_cdp"], "{p}");
        // The table renders too.
        let out = run(&["info", "--cpuid-dump", p]);
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).contains("recorded dump"));
    }
}

#[test]
fn fake_two_socket_topology() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("devices/system/cpu");
    std::fs::create_dir_all(&base).unwrap();
    std::fs::write(base.join("online"), "0-1,4-5\n").unwrap();
    for (cpu, id) in [(0, 0), (1, 0), (4, 1), (5, 1)] {
        let idx = base.join(format!("cpu{cpu}/cache/index3"));
        std::fs::create_dir_all(&idx).unwrap();
        std::fs::create_dir_all(base.join(format!("cpu{cpu}/topology"))).unwrap();
        std::fs::write(base.join(format!("cpu{cpu}/topology/physical_package_id")), format!("{id}\n")).unwrap();
        std::fs::write(idx.join("level"), "3\n").unwrap();
        std::fs::write(idx.join("type"), "Unified\n").unwrap();
        std::fs::write(idx.join("id"), format!("{id}\n")).unwrap();
        std::fs::write(idx.join("size"), "16384K\n").unwrap();
    }
    let root = dir.path().to_str().unwrap();
    let j = json(&["info", "--json", "--sys-root", root]);
    assert_eq!(j["topology"]["cpus"], 4);
    let doms = j["topology"]["l3_domains"].as_array().unwrap();
    assert_eq!(doms.len(), 2);
    assert_eq!(doms[1]["id"], 1);
    assert_eq!(doms[1]["cpus"], serde_json::json!([4, 5]));
    assert_eq!(doms[1]["size_bytes"], 16 << 20);
}

fn assert_one_line_error(args: &[&str], code: i32, needle: &str) {
    let out = run(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: not one line: {err}");
    assert!(err.starts_with("cachescope: ") && err.contains(needle), "{args:?}: {err}");
    assert!(!err.contains("panicked") && !err.contains("RUST_BACKTRACE"), "{err}");
}

#[test]
fn bad_input_gives_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let w = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let good = std::fs::read_to_string(&vectors()[0]).unwrap();
    let cases = [
        (w("notjson.json", "hello"), "not valid JSON"),
        (w("trunc.json", &good[..good.len() / 2]), "not valid JSON"),
        (w("array.json", "[1,2]"), "not a JSON object"),
        (w("nohex.json", &good.replacen("\"eax\": \"0x", "\"eax\": \"0xg", 1)), "leaves[0].eax"),
        (
            w("range.json", &good.replacen("\"leaf\": \"0x00000001\"", "\"leaf\": \"0x00000099\"", 1)),
            "above the max basic leaf",
        ),
        (w("vendor.json", &good.replacen("\"ebx\": \"0x68747541\"", "\"ebx\": \"0x58585858\"", 1)), "unknown vendor"),
    ];
    for (path, needle) in &cases {
        assert_one_line_error(&["info", "--cpuid-dump", path], 2, needle);
    }
    assert_one_line_error(&["info", "--cpuid-dump", "/nonexistent/x.json"], 2, "/nonexistent/x.json");
    assert_one_line_error(&["info", "--frobnicate"], 2, "--frobnicate");
    assert_one_line_error(&["nosuchcommand"], 2, "nosuchcommand");
}

#[test]
fn required_per_cpu_check_without_driver_is_exit_3() {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().to_str().unwrap();
    assert_one_line_error(&["info", "--check-cpus", "--dev-root", dev], 3, "cpu/0/cpuid");
    // Without --check-cpus the same host still reports, and says why the check was skipped.
    let j = json(&["info", "--json", "--dev-root", dev]);
    assert_eq!(j["cpuid"]["per_cpu"]["checked"], false);
    assert!(j["cpuid"]["per_cpu"]["reason"].as_str().unwrap().contains("modprobe cpuid"));
}

/// `manpage --dir` writes cachescope.1 and a page for every `cachescope-SUB(1)` its SUBCOMMANDS
/// section refers to (the package ships them all; before 2026-11-28 only cachescope.1 was, and
/// `man cachescope` named pages no one could open), each naming its command line.
#[test]
fn every_manual_page_the_main_one_names_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(&["manpage", "--dir", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let main = std::fs::read_to_string(dir.path().join("cachescope.1")).unwrap();
    let named: Vec<String> = main
        .lines()
        .filter_map(|l| l.strip_prefix("cachescope\\-")?.strip_suffix("(1)").map(|s| s.to_string()))
        .collect();
    assert!(named.len() >= 7 && named.iter().any(|n| n == "monitor"), "{named:?}");
    for sub in &named {
        let page = std::fs::read_to_string(dir.path().join(format!("cachescope-{sub}.1")))
            .unwrap_or_else(|e| panic!("cachescope-{sub}.1: {e}"));
        assert!(
            page.contains(&format!(".TH cachescope-{sub} 1")),
            "cachescope-{sub}.1: {}",
            &page[..200.min(page.len())]
        );
        assert!(
            page.contains(&format!("cachescope {sub}")),
            "cachescope-{sub}.1 has no synopsis of `cachescope {sub}`"
        );
    }
    let stray = run(&["manpage", "--dir", "/nonexistent/dir"]);
    assert!(!stray.status.success());
    assert_eq!(String::from_utf8_lossy(&stray.stderr).trim().lines().count(), 1, "one line naming the culprit");
}
