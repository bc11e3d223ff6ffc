//! The legacy `intel_cqm` perf PMU (Linux 4.1–4.13): CMT/MBM as perf events. sysfs has
//! `/sys/devices/intel_cqm/type` and `events/{llc_occupancy,local_bytes,total_bytes}` holding
//! terms such as `event=0x01`, each with `.scale` (bytes per count) and `.unit` companions.

use crate::format::Encoded;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CqmError {
    #[error("no intel_cqm PMU ({0} missing): it exists only on Linux 4.1 to 4.13 with CMT")]
    Absent(PathBuf),
    #[error("{path}: unexpected contents {text:?}")]
    Malformed { path: PathBuf, text: String },
    #[error("{0}: no CMT/MBM events listed")]
    NoEvents(PathBuf),
}

#[derive(Debug, Clone, PartialEq)]
pub struct CqmEvent {
    /// `llc_occupancy`, `local_bytes` or `total_bytes`.
    pub name: String,
    pub encoded: Encoded,
    /// Multiply counts by this to get `unit`s (bytes).
    pub scale: f64,
    pub unit: Option<String>,
}

impl CqmEvent {
    /// A raw count in bytes (rounded to whole bytes).
    pub fn bytes(&self, count: u64) -> u64 {
        (count as f64 * self.scale).round() as u64
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct CqmPmu {
    pub type_: u32,
    pub events: Vec<CqmEvent>,
}

const EVENTS: [&str; 3] = ["llc_occupancy", "local_bytes", "total_bytes"];

/// Discover the PMU under `<sysfs>/devices/intel_cqm`.
pub fn discover(sysfs: &Path) -> Result<CqmPmu, CqmError> {
    let dir = sysfs.join("devices/intel_cqm");
    let type_path = dir.join("type");
    let text = std::fs::read_to_string(&type_path).map_err(|_| CqmError::Absent(type_path.clone()))?;
    let malformed = |path: &Path, text: &str| CqmError::Malformed { path: path.to_path_buf(), text: text.to_string() };
    let type_: u32 = text.trim().parse().map_err(|_| malformed(&type_path, &text))?;
    let mut events = Vec::new();
    for name in EVENTS {
        let p = dir.join("events").join(name);
        let Ok(terms) = std::fs::read_to_string(&p) else { continue };
        // `event=0x01` (possibly with more terms): the value of `event` is `config`.
        let config = terms
            .trim()
            .split(',')
            .find_map(|t| t.trim().strip_prefix("event="))
            .and_then(|v| {
                let v = v.trim();
                v.strip_prefix("0x").map_or_else(|| v.parse().ok(), |h| u64::from_str_radix(h, 16).ok())
            })
            .ok_or_else(|| malformed(&p, &terms))?;
        let sp = dir.join("events").join(format!("{name}.scale"));
        let scale = match std::fs::read_to_string(&sp) {
            Ok(t) => {
                t.trim().parse::<f64>().ok().filter(|s| s.is_finite() && *s > 0.0).ok_or_else(|| malformed(&sp, &t))?
            }
            Err(_) => 1.0,
        };
        let unit =
            std::fs::read_to_string(dir.join("events").join(format!("{name}.unit"))).ok().map(|u| u.trim().to_string());
        events.push(CqmEvent {
            name: name.to_string(),
            encoded: Encoded { type_, config, ..Encoded::default() },
            scale,
            unit,
        });
    }
    if events.is_empty() {
        return Err(CqmError::NoEvents(dir.join("events")));
    }
    Ok(CqmPmu { type_, events })
}

/// A fake `intel_cqm` sysfs tree, as Linux 4.7 wrote it on a Broadwell-EP, for tests.
#[cfg(test)]
pub(crate) mod fixtures {
    pub const GOOD: &[(&str, &str)] = &[
        ("type", "9\n"),
        ("events/llc_occupancy", "event=0x01\n"),
        ("events/llc_occupancy.scale", "65536\n"),
        ("events/llc_occupancy.unit", "Bytes\n"),
        ("events/total_bytes", "event=0x02\n"),
        ("events/total_bytes.scale", "6.103515625e-5\n"),
        ("events/total_bytes.unit", "MB\n"),
        ("events/local_bytes", "event=0x03\n"),
        ("events/local_bytes.scale", "6.103515625e-5\n"),
        ("events/local_bytes.unit", "MB\n"),
    ];

    /// A sysfs root holding `devices/intel_cqm` with `files`.
    pub fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().expect("tempdir");
        for (p, t) in files {
            let p = d.path().join("devices/intel_cqm").join(p);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, t).expect("write");
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::fixtures::{tree, GOOD};

    #[test]
    fn discovers_events_with_scales() {
        let d = tree(GOOD);
        let p = discover(d.path()).unwrap();
        assert_eq!(p.type_, 9);
        let names: Vec<&str> = p.events.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, EVENTS);
        let occ = &p.events[0];
        assert_eq!(occ.encoded, Encoded { type_: 9, config: 1, config1: 0, config2: 0 });
        assert_eq!(occ.bytes(3), 196608);
        assert_eq!(occ.unit.as_deref(), Some("Bytes"));
        assert_eq!(p.events[2].encoded.config, 2);
    }

    #[test]
    fn malformed_and_absent() {
        assert!(matches!(discover(tempfile::tempdir().unwrap().path()), Err(CqmError::Absent(_))));
        let mut bad_type = GOOD.to_vec();
        bad_type[0] = ("type", "nine\n");
        assert!(matches!(discover(tree(&bad_type).path()), Err(CqmError::Malformed { .. })));
        let mut bad_event = GOOD.to_vec();
        bad_event[1] = ("events/llc_occupancy", "umask=0x01\n");
        let e = discover(tree(&bad_event).path()).unwrap_err().to_string();
        assert!(e.contains("llc_occupancy") && e.contains("umask"), "{e}");
        let mut bad_scale = GOOD.to_vec();
        bad_scale[2] = ("events/llc_occupancy.scale", "-1\n");
        assert!(matches!(discover(tree(&bad_scale).path()), Err(CqmError::Malformed { .. })));
        assert!(matches!(discover(tree(&[("type", "9\n")]).path()), Err(CqmError::NoEvents(_))));
        // A missing .scale means 1, as perf assumes.
        let p = discover(tree(&[("type", "9\n"), ("events/llc_occupancy", "event=1\n")]).path()).unwrap();
        assert_eq!(p.events[0].scale, 1.0);
    }
}
