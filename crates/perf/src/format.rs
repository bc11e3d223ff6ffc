//! Event encoding through a PMU's sysfs `format/` files, as perf does: each field name maps to
//! bit ranges of `config`, `config1` or `config2` (`config:0-7,32-35` is AMD's 12-bit event
//! select), and a raw event in perf's syntax (`event=0x2e,umask=0x41,cmask=1,inv,edge`) is
//! placed field by field. Parsing is pure; [`Pmu::load`] reads a sysfs tree (real or fake).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("{file}: cannot parse format {text:?} (want e.g. config:0-7 or config:0-7,32-35)")]
    BadFormat { file: String, text: String },
    #[error("PMU {pmu}: no field {field:?} (fields: {known})")]
    UnknownField { pmu: String, field: String, known: String },
    #[error("PMU {pmu}: {field}={value:#x} does not fit in its {bits} bits")]
    TooWide { pmu: String, field: String, value: u64, bits: u32 },
    #[error("bad event term {0:?} (want name=value or name)")]
    BadTerm(String),
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: String },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reg {
    Config,
    Config1,
    Config2,
}

/// Where one field's bits go: ranges (low, high) inclusive, low bits of the value first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub reg: Reg,
    pub ranges: Vec<(u32, u32)>,
}

impl Field {
    pub fn parse(file: &str, text: &str) -> Result<Field, FormatError> {
        let bad = || FormatError::BadFormat { file: file.to_string(), text: text.to_string() };
        let (reg, bits) = text.trim().split_once(':').ok_or_else(bad)?;
        let reg = match reg {
            "config" => Reg::Config,
            "config1" => Reg::Config1,
            "config2" => Reg::Config2,
            _ => return Err(bad()),
        };
        let mut ranges = Vec::new();
        for part in bits.split(',') {
            let (lo, hi) = match part.split_once('-') {
                Some((a, b)) => {
                    (a.trim().parse::<u32>().map_err(|_| bad())?, b.trim().parse::<u32>().map_err(|_| bad())?)
                }
                None => {
                    let b = part.trim().parse::<u32>().map_err(|_| bad())?;
                    (b, b)
                }
            };
            if lo > hi || hi > 63 {
                return Err(bad());
            }
            ranges.push((lo, hi));
        }
        Ok(Field { reg, ranges })
    }

    pub fn bits(&self) -> u32 {
        self.ranges.iter().map(|(l, h)| h - l + 1).sum()
    }

    /// Scatter `value` into the ranges; None when it does not fit.
    pub fn place(&self, value: u64) -> Option<u64> {
        let bits = self.bits();
        if bits < 64 && value >> bits != 0 {
            return None;
        }
        let mut out = 0u64;
        let mut v = value;
        for (lo, hi) in &self.ranges {
            let w = hi - lo + 1;
            let mask = if w == 64 { u64::MAX } else { (1u64 << w) - 1 };
            out |= (v & mask) << lo;
            v = if w == 64 { 0 } else { v >> w };
        }
        Some(out)
    }
}

/// An event ready for perf_event_open: the PMU's type and the three config words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Encoded {
    pub type_: u32,
    pub config: u64,
    pub config1: u64,
    pub config2: u64,
}

/// A PMU as sysfs describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pmu {
    pub name: String,
    pub type_: u32,
    pub fields: BTreeMap<String, Field>,
    /// Named events (`events/<name>`): their terms, e.g. `event=0x3c`.
    pub events: BTreeMap<String, String>,
}

fn parse_num(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => s.parse().ok(),
    }
}

impl Pmu {
    /// Read `<sysfs>/bus/event_source/devices/<name>/{type,format/*,events/*}`.
    pub fn load(sysfs: &Path, name: &str) -> Result<Pmu, FormatError> {
        let dir = sysfs.join("bus/event_source/devices").join(name);
        let io = |path: &Path, e: std::io::Error| FormatError::Io { path: path.to_path_buf(), error: e.to_string() };
        let tp = dir.join("type");
        let t = std::fs::read_to_string(&tp).map_err(|e| io(&tp, e))?;
        let type_ =
            t.trim().parse().map_err(|_| FormatError::BadFormat { file: tp.display().to_string(), text: t.clone() })?;
        let mut fields = BTreeMap::new();
        let fdir = dir.join("format");
        if let Ok(entries) = std::fs::read_dir(&fdir) {
            for e in entries.filter_map(Result::ok) {
                let n = e.file_name().to_string_lossy().into_owned();
                let text = std::fs::read_to_string(e.path()).map_err(|err| io(&e.path(), err))?;
                fields.insert(n.clone(), Field::parse(&e.path().display().to_string(), &text)?);
            }
        }
        let mut events = BTreeMap::new();
        if let Ok(entries) = std::fs::read_dir(dir.join("events")) {
            for e in entries.filter_map(Result::ok) {
                let n = e.file_name().to_string_lossy().into_owned();
                if n.contains('.') {
                    continue; // .scale / .unit companions
                }
                if let Ok(text) = std::fs::read_to_string(e.path()) {
                    events.insert(n, text.trim().to_string());
                }
            }
        }
        Ok(Pmu { name: name.to_string(), type_, fields, events })
    }

    /// Encode perf-syntax terms: `event=0x2e,umask=0x41,cmask=1,inv,edge,any` (a bare name is 1).
    pub fn encode(&self, terms: &str) -> Result<Encoded, FormatError> {
        let mut e = Encoded { type_: self.type_, ..Encoded::default() };
        for term in terms.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (name, value) = match term.split_once('=') {
                Some((n, v)) => (n.trim(), parse_num(v).ok_or_else(|| FormatError::BadTerm(term.to_string()))?),
                None => (term, 1),
            };
            if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
                return Err(FormatError::BadTerm(term.to_string()));
            }
            let f = self.fields.get(name).ok_or_else(|| FormatError::UnknownField {
                pmu: self.name.clone(),
                field: name.to_string(),
                known: self.fields.keys().cloned().collect::<Vec<_>>().join(", "),
            })?;
            let bits = f.place(value).ok_or_else(|| FormatError::TooWide {
                pmu: self.name.clone(),
                field: name.to_string(),
                value,
                bits: f.bits(),
            })?;
            match f.reg {
                Reg::Config => e.config |= bits,
                Reg::Config1 => e.config1 |= bits,
                Reg::Config2 => e.config2 |= bits,
            }
        }
        Ok(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The Intel core PMU's format directory, as the kernel writes it.
    pub(crate) const INTEL_CPU: &[(&str, &str)] = &[
        ("event", "config:0-7"),
        ("umask", "config:8-15"),
        ("edge", "config:18"),
        ("pc", "config:19"),
        ("any", "config:21"),
        ("inv", "config:23"),
        ("cmask", "config:24-31"),
        ("in_tx", "config:32"),
        ("ldlat", "config1:0-15"),
    ];
    /// AMD's: the event select is split (bits 7:0 and 35:32).
    pub(crate) const AMD_CPU: &[(&str, &str)] = &[
        ("event", "config:0-7,32-35"),
        ("umask", "config:8-15"),
        ("edge", "config:18"),
        ("inv", "config:23"),
        ("cmask", "config:24-31"),
    ];

    pub(crate) fn pmu(name: &str, type_: u32, fields: &[(&str, &str)]) -> Pmu {
        Pmu {
            name: name.into(),
            type_,
            fields: fields.iter().map(|(n, t)| (n.to_string(), Field::parse(n, t).unwrap())).collect(),
            events: BTreeMap::new(),
        }
    }

    #[test]
    fn perfevtsel_fields_land_where_the_sdm_says() {
        let p = pmu("cpu", 4, INTEL_CPU);
        // SDM: event 7:0, umask 15:8, edge 18, pc 19, any 21, inv 23, cmask 31:24.
        let e = p.encode("event=0x2e,umask=0x41,cmask=1,inv,edge,any").unwrap();
        assert_eq!(e.config, 0x2e | 0x41 << 8 | 1 << 18 | 1 << 21 | 1 << 23 | 1 << 24);
        assert_eq!(e.type_, 4);
        assert_eq!(p.encode("event=0x2e,umask=0x4f").unwrap().config, 0x4f2e);
        assert_eq!(p.encode("ldlat=3").unwrap().config1, 3);
        assert_eq!(p.encode("pc").unwrap().config, 1 << 19);
    }

    #[test]
    fn amd_split_event_select() {
        let p = pmu("cpu", 4, AMD_CPU);
        // Event 0x1C0 (retired x87... any 12-bit event): low byte in 7:0, high nibble in 35:32.
        assert_eq!(p.encode("event=0x1c0,umask=0x1").unwrap().config, 0xc0 | 0x100 | (1u64 << 32));
        assert_eq!(p.encode("event=0x43,umask=0x48").unwrap().config, 0x4843);
        assert!(matches!(p.encode("event=0x1000"), Err(FormatError::TooWide { bits: 12, .. })));
    }

    #[test]
    fn bad_terms_and_formats_are_named() {
        let p = pmu("cpu", 4, INTEL_CPU);
        assert!(matches!(p.encode("umask=0x100"), Err(FormatError::TooWide { .. })));
        let e = p.encode("bogus=1").unwrap_err().to_string();
        assert!(e.contains("bogus") && e.contains("cmask"), "{e}");
        assert!(matches!(p.encode("event=zz"), Err(FormatError::BadTerm(_))));
        assert!(matches!(p.encode("=3"), Err(FormatError::BadTerm(_))));
        for bad in ["config", "config:", "config:8-7", "config:0-64", "conf:1", "config:a-b"] {
            assert!(Field::parse("f", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn loads_a_fake_sysfs_tree() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("bus/event_source/devices/cpu");
        std::fs::create_dir_all(dir.join("format")).unwrap();
        std::fs::create_dir_all(dir.join("events")).unwrap();
        std::fs::write(dir.join("type"), "4\n").unwrap();
        for (n, t) in INTEL_CPU {
            std::fs::write(dir.join("format").join(n), format!("{t}\n")).unwrap();
        }
        std::fs::write(dir.join("events/cache-misses"), "event=0x2e,umask=0x41\n").unwrap();
        std::fs::write(dir.join("events/cache-misses.scale"), "1\n").unwrap();
        let p = Pmu::load(d.path(), "cpu").unwrap();
        assert_eq!(p, pmu("cpu", 4, INTEL_CPU).with_events(&[("cache-misses", "event=0x2e,umask=0x41")]));
        std::fs::write(dir.join("format/umask"), "config:lots\n").unwrap();
        assert!(matches!(Pmu::load(d.path(), "cpu"), Err(FormatError::BadFormat { .. })));
        assert!(matches!(Pmu::load(d.path(), "nope"), Err(FormatError::Io { .. })));
    }

    impl Pmu {
        fn with_events(mut self, ev: &[(&str, &str)]) -> Pmu {
            self.events = ev.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
            self
        }
    }

    proptest! {
        /// Placing then gathering the bits of any split field gives the value back.
        #[test]
        fn place_round_trips(lo in 0u32..40, w1 in 1u32..12, gap in 1u32..8, w2 in 1u32..8, v: u64) {
            let hi1 = lo + w1 - 1;
            let lo2 = hi1 + gap + 1;
            let f = Field { reg: Reg::Config, ranges: vec![(lo, hi1), (lo2, lo2 + w2 - 1)] };
            let v = v & ((1u64 << (w1 + w2)) - 1);
            let placed = f.place(v).unwrap();
            let back = ((placed >> lo) & ((1 << w1) - 1)) | (((placed >> lo2) & ((1 << w2) - 1)) << w1);
            prop_assert_eq!(back, v);
            prop_assert!(f.place(1u64 << (w1 + w2)).is_none());
        }
    }
}
