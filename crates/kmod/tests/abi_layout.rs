//! The Rust mirror of kmod/cachescope_abi.h, checked against what a C compiler makes of the
//! header: every size, every offset, every ioctl number.
#![allow(clippy::unwrap_used)]

use cachescope_kmod::abi::{self, Info, Rules, Stats};
use std::collections::HashMap;
use std::mem::{offset_of, size_of};
use std::path::Path;
use std::process::Command;

#[test]
fn the_header_and_the_mirror_agree() {
    let kmod = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../kmod");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("layout.c");
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include \"cachescope_abi.h\"\n#define P(n, v) printf(\"%s %lu\\n\", n, (unsigned long)(v))\nint main(void) {\n",
    );
    let fields: &[(&str, &[&str])] = &[
        (
            "cachescope_record",
            &["time_ns", "cgroup_id", "occupancy", "mbm_total", "mbm_local", "rmid", "domain", "kind", "flags"],
        ),
        (
            "cachescope_info",
            &[
                "abi_version",
                "record_size",
                "emulate",
                "num_rmids",
                "nr_domains",
                "ctr_width",
                "upscale",
                "interval_ns",
                "l3_bytes",
                "limbo_bytes",
                "domain_ids",
                "ring_records",
                "local_pct",
                "has_total",
                "has_local",
            ],
        ),
        ("cachescope_rules", &["count", "pad", "rule"]),
        (
            "cachescope_stats",
            &[
                "rmids_in_use",
                "rmids_limbo",
                "rmids_free",
                "cgroups",
                "waiting",
                "overruns",
                "switches",
                "pqr_writes",
                "ticks",
                "tick_ns",
                "tick_ns_max",
                "misplaced",
            ],
        ),
    ];
    for (s, fs) in fields {
        c.push_str(&format!("P(\"{s}\", sizeof(struct {s}));\n"));
        for f in *fs {
            c.push_str(&format!("P(\"{s}.{f}\", offsetof(struct {s}, {f}));\n"));
        }
    }
    for i in ["CS_IOC_INFO", "CS_IOC_RULES", "CS_IOC_ATTACH", "CS_IOC_DETACH", "CS_IOC_STATS"] {
        c.push_str(&format!("P(\"{i}\", {i});\n"));
    }
    c.push_str("return 0; }\n");
    std::fs::write(&src, c).unwrap();
    let exe = dir.path().join("layout");
    let cc = Command::new("cc").arg("-I").arg(&kmod).arg(&src).arg("-o").arg(&exe).output();
    let Ok(cc) = cc else {
        cachescope_testkit::skip("no C compiler (cc)");
        return;
    };
    assert!(cc.status.success(), "{}", String::from_utf8_lossy(&cc.stderr));
    let out = Command::new(&exe).output().unwrap();
    let c: HashMap<String, u64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect();
    let want: Vec<(&str, usize)> = vec![
        ("cachescope_record", abi::RECORD_SIZE),
        ("cachescope_record.time_ns", 0),
        ("cachescope_record.cgroup_id", 8),
        ("cachescope_record.occupancy", 16),
        ("cachescope_record.mbm_total", 24),
        ("cachescope_record.mbm_local", 32),
        ("cachescope_record.rmid", 40),
        ("cachescope_record.domain", 44),
        ("cachescope_record.kind", 46),
        ("cachescope_record.flags", 47),
        ("cachescope_info", size_of::<Info>()),
        ("cachescope_info.upscale", offset_of!(Info, upscale)),
        ("cachescope_info.limbo_bytes", offset_of!(Info, limbo_bytes)),
        ("cachescope_info.domain_ids", offset_of!(Info, domain_ids)),
        ("cachescope_info.ring_records", offset_of!(Info, ring_records)),
        ("cachescope_info.has_local", offset_of!(Info, has_local)),
        ("cachescope_rules", size_of::<Rules>()),
        ("cachescope_rules.rule", offset_of!(Rules, rule)),
        ("cachescope_stats", size_of::<Stats>()),
        ("cachescope_stats.misplaced", offset_of!(Stats, misplaced)),
        ("CS_IOC_INFO", abi::IOC_INFO as usize),
        ("CS_IOC_RULES", abi::IOC_RULES as usize),
        ("CS_IOC_ATTACH", abi::IOC_ATTACH as usize),
        ("CS_IOC_DETACH", abi::IOC_DETACH as usize),
        ("CS_IOC_STATS", abi::IOC_STATS as usize),
    ];
    for (k, v) in want {
        assert_eq!(c.get(k).copied(), Some(v as u64), "{k}");
    }
}
