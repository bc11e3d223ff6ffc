//! Recorded CPUID vectors: the JSON format of `shared/testdata/cpuid/` (see its README).
//!
//! Only the raw registers are read here (`vendor`, `leaves`, `extra_leaves`); `derived` is
//! what a decoder must produce and belongs to the tests. Every malformed piece is reported
//! with the file and the field that holds it.

use cachescope_hw::cpuid::{vendor_id, CpuidError, CpuidSnapshot, CpuidSource, Regs, Vendor, LEAF_VENDOR};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Upper bound on a vector file: real ones are a few KiB.
const MAX_VECTOR_BYTES: u64 = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum VectorError {
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path}: {why}")]
    Invalid { path: PathBuf, why: String },
}

/// A recorded CPUID vector, usable as a [`CpuidSource`].
#[derive(Debug, Clone)]
pub struct RecordedVector {
    pub path: PathBuf,
    pub name: Option<String>,
    leaves: BTreeMap<(u32, u32), Regs>,
}

impl RecordedVector {
    pub fn load(path: &Path) -> Result<Self, VectorError> {
        let io = |error| VectorError::Io { path: path.to_path_buf(), error };
        let meta = std::fs::metadata(path).map_err(io)?;
        if !meta.is_file() {
            return Err(VectorError::Invalid { path: path.to_path_buf(), why: "not a regular file".into() });
        }
        if meta.len() > MAX_VECTOR_BYTES {
            return Err(VectorError::Invalid {
                path: path.to_path_buf(),
                why: format!("{} bytes is too large for a CPUID vector (limit {MAX_VECTOR_BYTES})", meta.len()),
            });
        }
        let text = std::fs::read_to_string(path).map_err(io)?;
        Self::parse(&text, path)
    }

    /// Parse the JSON text of a vector; `path` only names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, VectorError> {
        let invalid = |why: String| VectorError::Invalid { path: path.to_path_buf(), why };
        let root: Value = serde_json::from_str(text).map_err(|e| invalid(format!("not valid JSON: {e}")))?;
        let obj = root.as_object().ok_or_else(|| invalid("top level is not a JSON object".into()))?;

        let mut leaves = BTreeMap::new();
        let basic = obj.get("leaves").ok_or_else(|| invalid("missing field \"leaves\"".into()))?;
        read_leaf_list(basic, "leaves", &mut leaves).map_err(invalid)?;
        let max_basic = leaves
            .get(&(LEAF_VENDOR, 0))
            .ok_or_else(|| invalid("leaves: no entry for leaf 0x0 (vendor and max basic leaf)".into()))?
            .eax;
        // A basic leaf above the max basic leaf cannot have been returned by a real CPUID
        // (the format lists only in-range leaves); the file is corrupt or hand-edited.
        for &(leaf, sub) in leaves.keys() {
            if leaf < 0x8000_0000 && leaf > max_basic {
                return Err(invalid(format!(
                    "leaves: leaf {leaf:#x} subleaf {sub:#x} is above the max basic leaf {max_basic:#x} (leaf 0 EAX)"
                )));
            }
        }
        if let Some(extra) = obj.get("extra_leaves") {
            read_leaf_list(extra, "extra_leaves", &mut leaves).map_err(invalid)?;
        }

        let id = vendor_id(leaves[&(LEAF_VENDOR, 0)]);
        if let Vendor::Other(_) = Vendor::from_id(&id) {
            return Err(invalid(format!("leaves: leaf 0x0 names an unknown vendor {id:?}")));
        }
        match obj.get("vendor") {
            None => {}
            Some(Value::String(v)) if *v == id => {}
            Some(Value::String(v)) => {
                return Err(invalid(format!("vendor: {v:?} disagrees with leaf 0x0, which says {id:?}")));
            }
            Some(_) => return Err(invalid("vendor: not a string".into())),
        }
        let name = match obj.get("name") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err(invalid("name: not a string".into())),
        };
        Ok(RecordedVector { path: path.to_path_buf(), name, leaves })
    }

    pub fn snapshot(&self) -> CpuidSnapshot {
        CpuidSnapshot::from_leaves(self.leaves.iter().map(|(k, v)| (*k, *v)))
    }
}

impl CpuidSource for RecordedVector {
    fn describe(&self) -> String {
        format!("recorded vector {}", self.path.display())
    }

    /// Leaves absent from the file read as zeros, as on hardware.
    fn cpuid(&self, leaf: u32, subleaf: u32) -> Result<Regs, CpuidError> {
        Ok(self.leaves.get(&(leaf, subleaf)).copied().unwrap_or(Regs::ZERO))
    }
}

fn read_leaf_list(v: &Value, field: &str, out: &mut BTreeMap<(u32, u32), Regs>) -> Result<(), String> {
    let list = v.as_array().ok_or_else(|| format!("{field}: not an array"))?;
    for (i, entry) in list.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let e = entry.as_object().ok_or_else(|| format!("{at}: not an object"))?;
        let reg = |name: &str| -> Result<u32, String> {
            let v = e.get(name).ok_or_else(|| format!("{at}.{name}: missing"))?;
            parse_hex32(v).map_err(|why| format!("{at}.{name}: {why}"))
        };
        let key = (reg("leaf")?, reg("subleaf")?);
        let regs = Regs::new(reg("eax")?, reg("ebx")?, reg("ecx")?, reg("edx")?);
        if out.insert(key, regs).is_some() {
            return Err(format!("{at}: leaf {:#x} subleaf {:#x} is listed twice", key.0, key.1));
        }
    }
    Ok(())
}

/// A register value: a string "0x" followed by 1–8 hex digits.
fn parse_hex32(v: &Value) -> Result<u32, String> {
    let s = v.as_str().ok_or_else(|| format!("expected a hex string like \"0x0000000f\", found {v}"))?;
    let digits = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .ok_or_else(|| format!("{s:?} is not hex (expected a 0x prefix)"))?;
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(format!("{s:?} is not hex"));
    }
    if digits.trim_start_matches('0').len() > 8 {
        return Err(format!("{s:?} does not fit in 32 bits"));
    }
    u32::from_str_radix(digits, 16).map_err(|e| format!("{s:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"vendor":"GenuineIntel","leaves":[
        {"leaf":"0x00000000","subleaf":"0x00000000","eax":"0x0000000d","ebx":"0x756e6547","ecx":"0x6c65746e","edx":"0x49656e69"},
        {"leaf":"0x00000007","subleaf":"0x00000000","eax":"0x00000000","ebx":"0x00001000","ecx":"0x00000000","edx":"0x00000000"}]}"#;

    fn err(text: &str) -> String {
        RecordedVector::parse(text, Path::new("v.json")).unwrap_err().to_string()
    }

    #[test]
    fn absent_leaves_read_zero() {
        let v = RecordedVector::parse(GOOD, Path::new("v.json")).unwrap();
        assert_eq!(v.cpuid(7, 0).unwrap().ebx, 0x1000);
        assert_eq!(v.cpuid(0xF, 1).unwrap(), Regs::ZERO);
    }

    #[test]
    fn errors_name_file_and_field() {
        assert!(err("{").starts_with("v.json: not valid JSON"));
        assert_eq!(err("[]"), "v.json: top level is not a JSON object");
        assert_eq!(err("{}"), "v.json: missing field \"leaves\"");
        assert_eq!(err(&GOOD.replace("0x0000000d", "0xzz")), "v.json: leaves[0].eax: \"0xzz\" is not hex");
        assert_eq!(
            err(&GOOD.replace("0x0000000d", "13")),
            "v.json: leaves[0].eax: \"13\" is not hex (expected a 0x prefix)"
        );
        assert_eq!(
            err(&GOOD.replace("\"0x0000000d\"", "13")),
            "v.json: leaves[0].eax: expected a hex string like \"0x0000000f\", found 13"
        );
        assert_eq!(
            err(&GOOD.replace("0x0000000d", "0x100000000")),
            "v.json: leaves[0].eax: \"0x100000000\" does not fit in 32 bits"
        );
        assert_eq!(err(&GOOD.replace(",\"edx\":\"0x00000000\"}]", "}]")), "v.json: leaves[1].edx: missing");
        assert_eq!(
            err(&GOOD.replace("0x00000007", "0x00000010")),
            "v.json: leaves: leaf 0x10 subleaf 0x0 is above the max basic leaf 0xd (leaf 0 EAX)"
        );
        assert!(err(&GOOD.replace("0x756e6547", "0x756e6548")).contains("unknown vendor \"HenuineIntel\""));
        assert_eq!(
            err(&GOOD.replace("\"GenuineIntel\"", "\"AuthenticAMD\"")),
            "v.json: vendor: \"AuthenticAMD\" disagrees with leaf 0x0, which says \"GenuineIntel\""
        );
        assert!(err(&GOOD.replace("0x00000007", "0x00000000")).contains("listed twice"));
        assert!(err(r#"{"leaves":[]}"#).contains("no entry for leaf 0x0"));
    }

    #[test]
    fn truncated_file_is_an_error() {
        for cut in [1, GOOD.len() / 3, GOOD.len() / 2, GOOD.len() - 2] {
            assert!(err(&GOOD[..cut]).starts_with("v.json: not valid JSON"), "cut at {cut}");
        }
    }
}
