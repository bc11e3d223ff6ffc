//! Every recorded CPUID vector must decode to exactly its `derived` values.
//!
//! The vectors are read from the repository's `testdata/cpuid/` and, when present, from the
//! shared folder beside the checkout (`../shared/testdata/cpuid/`), so files dropped into
//! either are picked up without code changes. `CACHESCOPE_CPUID_VECTORS` adds another folder.

#![allow(clippy::unwrap_used)] // test code: a panic is the failure report

use cachescope_hw::cpuid::{CpuInfo, CpuidSnapshot};
use cachescope_platform::RecordedVector;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

fn vector_dirs() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut dirs = vec![root.join("testdata/cpuid")];
    let shared = root.join("../shared/testdata/cpuid");
    if shared.is_dir() {
        dirs.push(shared);
    } else {
        println!("note: {} absent; testing the repository's copy only", shared.display());
    }
    if let Some(extra) = std::env::var_os("CACHESCOPE_CPUID_VECTORS") {
        dirs.push(PathBuf::from(extra));
    }
    dirs
}

fn vector_files() -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in vector_dirs() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for e in entries {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "json") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

fn hex(v: u32) -> Value {
    Value::String(format!("{v:#x}"))
}

/// The decoder's answers under the names of the vectors' `derived` table.
fn derived_of(i: &CpuInfo) -> Map<String, Value> {
    let m = &i.monitoring;
    let l3 = m.l3.as_ref();
    let a = &i.allocation;
    let cat = a.l3_cat.as_ref();
    let v = json!({
        "max_basic_leaf": hex(i.max_basic_leaf),
        "has_monitoring": m.pqm,
        "leaf_0xf_in_range": m.leaf_0xf_in_range,
        "max_rmid_any": m.max_rmid_any,
        "l3_monitoring": l3.is_some(),
        "l3_max_rmid": l3.map(|l| l.max_rmid),
        "upscale_factor": l3.map(|l| l.upscale_factor),
        "counter_width": l3.map(|l| l.counter_width),
        "overflow_bit": l3.is_some_and(|l| l.overflow_bit),
        "l3_occupancy": l3.is_some_and(|l| l.occupancy),
        "l3_total_bandwidth": l3.is_some_and(|l| l.mbm_total),
        "l3_local_bandwidth": l3.is_some_and(|l| l.mbm_local),
        "counter_width_linux": l3.map(|l| l.counter_width_linux),
        "f1_eax_bits_above_8": l3.map(|l| hex(l.eax_flags)),
        "non_cpu_agent_cmt": l3.is_some_and(|l| l.non_cpu_agent_cmt),
        "non_cpu_agent_mbm": l3.is_some_and(|l| l.non_cpu_agent_mbm),
        "has_allocation": a.pqe,
        "leaf_0x10_in_range": a.leaf_0x10_in_range,
        "alloc_resid_bitmap": a.resid_bitmap.map(hex),
        "l3_cat": cat.is_some(),
        "l2_cat": a.l2_cat.is_some(),
        "mba": a.mba.is_some(),
        "l3_cat_cbm_length": cat.map(|c| c.cbm_length),
        "l3_cat_shareable_bits": cat.map(|c| hex(c.shareable_bits)),
        "l3_cat_non_cpu_agent": cat.is_some_and(|c| c.non_cpu_agent),
        "l3_cat_cdp": cat.is_some_and(|c| c.cdp),
        "l3_cat_noncontiguous_cbm": cat.is_some_and(|c| c.noncontiguous_cbm),
        "l3_cat_max_cos": cat.map(|c| c.max_cos),
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}

/// Hex strings compare by value ("0x0a" == "0xa").
fn normalize(v: &Value) -> Value {
    match v {
        Value::String(s) if s.starts_with("0x") => match u64::from_str_radix(&s[2..], 16) {
            Ok(n) => json!(n),
            Err(_) => v.clone(),
        },
        _ => v.clone(),
    }
}

#[test]
fn every_vector_decodes_to_its_derived_values() {
    let files = vector_files();
    assert!(files.len() >= 8, "expected the recorded vectors, found {files:?}");
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let doc: Value = serde_json::from_str(&text).unwrap();
        let vector = RecordedVector::load(path).unwrap_or_else(|e| panic!("{e}"));
        // Decoding through the CpuidSource path (what the CLI does) and from the file's
        // snapshot must agree.
        let via_source = CpuInfo::decode(&CpuidSnapshot::capture(&vector).unwrap());
        let info = CpuInfo::decode(&vector.snapshot());
        assert_eq!(via_source.monitoring, info.monitoring, "{}", path.display());
        assert_eq!(via_source.allocation, info.allocation, "{}", path.display());

        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let want = doc["derived"].as_object().unwrap_or_else(|| panic!("{name}: no derived"));
        let got = derived_of(&info);
        for (k, w) in want {
            match got.get(k) {
                None => failures.push(format!("{name}: derived.{k} is not computed by the decoder")),
                Some(g) if normalize(g) != normalize(w) => {
                    failures.push(format!("{name}: derived.{k}: want {w}, decoded {g}"))
                }
                _ => {}
            }
        }
        for (k, want) in
            [("family", info.signature.family), ("model", info.signature.model), ("stepping", info.signature.stepping)]
        {
            if doc[k] != json!(want) {
                failures.push(format!("{name}: {k}: file says {}, decoded {want}", doc[k]));
            }
        }
        if doc["vendor"] != json!(info.vendor.to_string()) {
            failures.push(format!("{name}: vendor: file says {}, decoded {}", doc["vendor"], info.vendor));
        }
        println!("{name}: {} derived fields match", want.len());
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn intel_upscale_factor_relation_holds() {
    // README: every Intel vector satisfies upscale = (l3_max_rmid + 1) * k, k in {256,512,1024}.
    for path in vector_files() {
        let info = CpuInfo::decode(&RecordedVector::load(&path).unwrap().snapshot());
        if let (cachescope_hw::Vendor::Intel, Some(l3)) = (&info.vendor, &info.monitoring.l3) {
            let n = u64::from(l3.max_rmid) + 1;
            let k = u64::from(l3.upscale_factor) / n;
            assert!(u64::from(l3.upscale_factor) % n == 0 && [256, 512, 1024].contains(&k), "{}", path.display());
        }
    }
}
