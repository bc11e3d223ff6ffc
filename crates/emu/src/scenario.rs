//! Emulation scenarios (docs/scenario.md): a platform and the containers that run on it.

use serde::Deserialize;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path}: {why}")]
    Invalid { path: PathBuf, why: String },
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PlatformSpec {
    /// A vector name from testdata/cpuid, or a path to a vector file.
    pub model: String,
    /// L3 size per domain, MiB.
    pub l3_mib: f64,
    pub domains: u32,
    pub cpus_per_domain: u32,
    /// Override the MBM counter width (bits), e.g. to force wraps in tests.
    #[serde(default)]
    pub counter_width: Option<u32>,
    /// Seed for the model's jitter (deterministic for a given seed).
    #[serde(default)]
    pub seed: u64,
    /// Relative jitter of each container's line-fill rate per step, 0..=0.5 (default 0).
    #[serde(default)]
    pub jitter: f64,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ContainerSpec {
    pub name: String,
    pub cpus: Vec<u32>,
    pub footprint_mib: f64,
    /// Memory traffic, MB/s (10^6 bytes per second).
    pub bandwidth_mbps: f64,
    #[serde(default = "one")]
    pub local_fraction: f64,
    #[serde(default)]
    pub start_ms: u64,
    #[serde(default)]
    pub stop_ms: Option<u64>,
}

fn one() -> f64 {
    1.0
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub platform: PlatformSpec,
    #[serde(default, rename = "container")]
    pub containers: Vec<ContainerSpec>,
}

/// Limits that keep a scenario physical and the model cheap.
const MAX_DOMAINS: u32 = 64;
const MAX_CPUS: u32 = 4096;
const MAX_CONTAINERS: usize = 10_000;
/// A scenario is a hand-written TOML file: anything larger is not one.
const MAX_SCENARIO_BYTES: u64 = 4 << 20;

impl Scenario {
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        let io = |error| ScenarioError::Io { path: path.into(), error };
        let invalid = |why: String| ScenarioError::Invalid { path: path.into(), why };
        // stat first: opening a FIFO would wait for a writer, and /dev/zero never ends.
        let meta = std::fs::metadata(path).map_err(io)?;
        if !meta.is_file() {
            return Err(invalid("not a regular file".into()));
        }
        if meta.len() > MAX_SCENARIO_BYTES {
            return Err(invalid(format!("{} bytes is more than a scenario may be ({MAX_SCENARIO_BYTES})", meta.len())));
        }
        let mut text = String::new();
        let f = std::fs::File::open(path).map_err(io)?;
        std::io::Read::read_to_string(&mut std::io::Read::take(f, MAX_SCENARIO_BYTES + 1), &mut text).map_err(io)?;
        if text.len() as u64 > MAX_SCENARIO_BYTES {
            return Err(invalid(format!("more than {MAX_SCENARIO_BYTES} bytes")));
        }
        Scenario::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
        let invalid = |why: String| ScenarioError::Invalid { path: path.into(), why };
        let s: Scenario = toml::from_str(text).map_err(|e| invalid(one_line(&e.to_string())))?;
        s.validate().map_err(invalid)?;
        Ok(s)
    }

    /// A scenario with a platform and no containers (they are added while running, e.g.
    /// driven by the host's containers); validated as a file would be.
    pub fn platform_only(platform: PlatformSpec) -> Result<Scenario, ScenarioError> {
        let s = Scenario { platform, containers: Vec::new() };
        s.validate().map_err(|why| ScenarioError::Invalid { path: PathBuf::from("(host platform)"), why })?;
        Ok(s)
    }

    pub fn total_cpus(&self) -> u32 {
        // Validated: at most MAX_CPUS, so no overflow.
        self.platform.domains.saturating_mul(self.platform.cpus_per_domain)
    }

    fn validate(&self) -> Result<(), String> {
        let p = &self.platform;
        if p.domains == 0 || p.domains > MAX_DOMAINS {
            return Err(format!("platform.domains: {} is outside 1..={MAX_DOMAINS}", p.domains));
        }
        if p.cpus_per_domain == 0 || u64::from(p.domains) * u64::from(p.cpus_per_domain) > u64::from(MAX_CPUS) {
            return Err(format!(
                "platform.cpus_per_domain: {} gives no CPUs or more than {MAX_CPUS}",
                p.cpus_per_domain
            ));
        }
        if !(p.l3_mib.is_finite() && p.l3_mib > 0.0 && p.l3_mib <= 65536.0) {
            return Err(format!("platform.l3_mib: {} is not a size in (0, 65536]", p.l3_mib));
        }
        if let Some(w) = p.counter_width {
            if !(8..=62).contains(&w) {
                return Err(format!("platform.counter_width: {w} is outside 8..=62"));
            }
        }
        if !(0.0..=0.5).contains(&p.jitter) {
            return Err(format!("platform.jitter: {} is outside 0..=0.5", p.jitter));
        }
        if self.containers.len() > MAX_CONTAINERS {
            return Err(format!("{} containers is more than {MAX_CONTAINERS}", self.containers.len()));
        }
        let ncpu = self.total_cpus();
        let mut names = std::collections::BTreeSet::new();
        for (i, c) in self.containers.iter().enumerate() {
            let at = format!("container[{i}] ({:?})", c.name);
            if c.name.is_empty() || c.name.len() > 128 || c.name.chars().any(|ch| ch.is_control()) {
                return Err(format!("{at}.name: must be 1-128 printable characters"));
            }
            if !names.insert(c.name.as_str()) {
                return Err(format!("{at}.name: duplicate"));
            }
            if c.cpus.is_empty() {
                return Err(format!("{at}.cpus: empty"));
            }
            if let Some(bad) = c.cpus.iter().find(|&&cpu| cpu >= ncpu) {
                return Err(format!("{at}.cpus: CPU {bad} does not exist (the platform has {ncpu})"));
            }
            if !(c.footprint_mib.is_finite() && c.footprint_mib > 0.0) {
                return Err(format!("{at}.footprint_mib: {} is not a positive size", c.footprint_mib));
            }
            if !(c.bandwidth_mbps.is_finite() && c.bandwidth_mbps >= 0.0 && c.bandwidth_mbps <= 1e7) {
                return Err(format!("{at}.bandwidth_mbps: {} is outside 0..=1e7", c.bandwidth_mbps));
            }
            if !(0.0..=1.0).contains(&c.local_fraction) {
                return Err(format!("{at}.local_fraction: {} is outside 0..=1", c.local_fraction));
            }
            if let Some(stop) = c.stop_ms {
                if stop <= c.start_ms {
                    return Err(format!("{at}.stop_ms: {stop} is not after start_ms {}", c.start_ms));
                }
            }
        }
        Ok(())
    }
}

fn one_line(s: &str) -> String {
    s.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('|')).collect::<Vec<_>>().join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[platform]
model = "intel-xeon-platinum-8160"
l3_mib = 32
domains = 2
cpus_per_domain = 4

[[container]]
name = "thrash"
cpus = [0, 1]
footprint_mib = 24
bandwidth_mbps = 4000
local_fraction = 0.9
start_ms = 0
stop_ms = 2000
"#;

    fn err(text: &str) -> String {
        Scenario::parse(text, Path::new("s.toml")).unwrap_err().to_string()
    }

    #[test]
    fn design_example_parses() {
        let s = Scenario::parse(GOOD, Path::new("s.toml")).unwrap();
        assert_eq!(s.total_cpus(), 8);
        assert_eq!(s.containers[0].stop_ms, Some(2000));
        assert_eq!(s.containers[0].local_fraction, 0.9);
    }

    #[test]
    fn bad_scenarios_name_the_field() {
        assert!(err("[platform").starts_with("s.toml: "));
        assert!(err(&GOOD.replace("l3_mib = 32", "l3_mib = -1")).contains("platform.l3_mib"));
        assert!(err(&GOOD.replace("cpus = [0, 1]", "cpus = [0, 9]")).contains("CPU 9 does not exist"));
        assert!(err(&GOOD.replace("stop_ms = 2000", "stop_ms = 0")).contains("stop_ms"));
        assert!(err(&GOOD.replace("local_fraction = 0.9", "local_fraction = 1.5")).contains("local_fraction"));
        assert!(err(&GOOD.replace("footprint_mib", "footprint_gib")).contains("footprint_gib"));
        assert!(err(&format!(
            "{GOOD}\n[[container]]\nname = \"thrash\"\ncpus=[0]\nfootprint_mib=1\nbandwidth_mbps=1\n"
        ))
        .contains("duplicate"));
        assert!(err(&GOOD.replace("domains = 2", "domains = 0")).contains("platform.domains"));
        let e = err("[platform]\nmodel = 3\n");
        assert_eq!(e.lines().count(), 1, "{e}");
    }
}
