//! Compiles the BPF program with clang and generates its Rust skeleton (libbpf-cargo).
//! clang comes from the system (scripts/setup.sh installs it).

use libbpf_cargo::SkeletonBuilder;
use std::path::PathBuf;

fn main() {
    let src = "src/bpf/attrib.bpf.c";
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("attrib.skel.rs");
    // <linux/bpf.h> includes <asm/types.h>, which Debian keeps under the multiarch directory
    // that clang does not search for the bpf target.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    let mut args = vec!["-Wall".to_string(), "-O2".to_string()];
    if std::path::Path::new(&multiarch).is_dir() {
        args.push(format!("-I{multiarch}"));
    }
    if let Err(e) = SkeletonBuilder::new().source(src).clang_args(args).build_and_generate(&out) {
        panic!("building {src} failed (is clang installed? scripts/setup.sh installs it): {e:#}");
    }
    println!("cargo:rerun-if-changed={src}");
}
