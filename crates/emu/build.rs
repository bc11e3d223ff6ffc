//! Embed every recorded CPUID vector of `testdata/cpuid/` so `--emulate NAME` works from any
//! directory; files added there are picked up on the next build.
use std::io::Write;
use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets this")).join("../../testdata/cpuid");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.extension().is_some_and(|x| x == "json")).collect()
        })
        .unwrap_or_default();
    entries.sort();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets this")).join("models.rs");
    let mut f = std::fs::File::create(out).expect("create models.rs");
    writeln!(f, "/// (name, JSON text) of every embedded CPUID vector.").expect("write");
    writeln!(f, "pub static MODELS: &[(&str, &str)] = &[").expect("write");
    for p in entries {
        let name = p.file_stem().expect("json file has a stem").to_string_lossy().to_string();
        let abs = p.canonicalize().expect("canonical path");
        writeln!(f, "    ({name:?}, include_str!({:?})),", abs.display().to_string()).expect("write");
        println!("cargo:rerun-if-changed={}", abs.display());
    }
    writeln!(f, "];").expect("write");
}
