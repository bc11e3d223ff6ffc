//! CPU and L3 topology from sysfs, with an injectable root so tests use fake trees.
//!
//! RMIDs are scoped per L3 domain, so this is the map every reader needs: which online CPUs
//! exist, which package each sits in, and which L3 (id and size) each shares. The L3 is the
//! `cache/indexN` whose `level` is 3; its `id` is the domain id that resctrl uses in
//! `mon_L3_XX`.

use cachescope_hw::cpulist;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: io::Error },
    #[error("{path}: {why}")]
    Invalid { path: PathBuf, why: String },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct L3Cache {
    pub id: u32,
    pub size_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CpuTopology {
    pub cpu: u32,
    /// `topology/physical_package_id`; `None` when absent or -1 (some hypervisors).
    pub package: Option<u32>,
    pub l3: Option<L3Cache>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct L3Domain {
    pub id: u32,
    pub cpus: Vec<u32>,
    pub size_bytes: Option<u64>,
    /// Packages whose CPUs share this L3 (one, on every real machine).
    pub packages: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Topology {
    pub cpus: Vec<CpuTopology>,
    pub l3_domains: Vec<L3Domain>,
    /// Online CPUs for which sysfs shows no L3 (monitoring cannot cover them).
    pub cpus_without_l3: Vec<u32>,
}

impl Topology {
    /// Read the topology under `sys_root` (normally `/sys`).
    pub fn read(sys_root: &Path) -> Result<Topology, TopologyError> {
        let cpu_dir = sys_root.join("devices/system/cpu");
        let online_path = cpu_dir.join("online");
        let online = read_trimmed(&online_path)?;
        let online = cpulist::parse(&online)
            .map_err(|e| TopologyError::Invalid { path: online_path.clone(), why: e.to_string() })?;

        let mut cpus = Vec::with_capacity(online.len());
        for cpu in online {
            let dir = cpu_dir.join(format!("cpu{cpu}"));
            let package = match read_optional(&dir.join("topology/physical_package_id"))? {
                Some(s) => parse_package(&s, &dir.join("topology/physical_package_id"))?,
                None => None,
            };
            let l3 = read_l3(&dir.join("cache"), cpu)?;
            cpus.push(CpuTopology { cpu, package, l3 });
        }
        Ok(Topology::from_cpus(cpus))
    }

    /// Group CPUs into L3 domains, ordered by domain id.
    pub fn from_cpus(cpus: Vec<CpuTopology>) -> Topology {
        let mut domains: BTreeMap<u32, L3Domain> = BTreeMap::new();
        let mut cpus_without_l3 = Vec::new();
        for c in &cpus {
            let Some(l3) = &c.l3 else {
                cpus_without_l3.push(c.cpu);
                continue;
            };
            let d = domains.entry(l3.id).or_insert_with(|| L3Domain {
                id: l3.id,
                cpus: Vec::new(),
                size_bytes: l3.size_bytes,
                packages: Vec::new(),
            });
            d.cpus.push(c.cpu);
            if let Some(p) = c.package {
                if !d.packages.contains(&p) {
                    d.packages.push(p);
                }
            }
        }
        let l3_domains = domains
            .into_values()
            .map(|mut d| {
                d.cpus.sort_unstable();
                d.packages.sort_unstable();
                d
            })
            .collect();
        Topology { cpus, l3_domains, cpus_without_l3 }
    }

    pub fn online_cpus(&self) -> impl Iterator<Item = u32> + '_ {
        self.cpus.iter().map(|c| c.cpu)
    }

    pub fn domain_of(&self, cpu: u32) -> Option<&L3Domain> {
        self.l3_domains.iter().find(|d| d.cpus.contains(&cpu))
    }

    /// The id of `cpu`'s L3 domain; 0 for a CPU without one (its counts must go somewhere).
    pub fn domain_id_of(&self, cpu: u32) -> u32 {
        self.domain_of(cpu).map_or(0, |d| d.id)
    }

    /// Each L3 domain's id with its CPUs, as the backends that read per domain take them.
    pub fn domain_cpus(&self) -> Vec<(u32, Vec<u32>)> {
        self.l3_domains.iter().map(|d| (d.id, d.cpus.clone())).collect()
    }

    /// The size of the largest L3, where sysfs says it.
    pub fn l3_bytes(&self) -> Option<u64> {
        self.l3_domains.iter().filter_map(|d| d.size_bytes).max()
    }
}

/// The NUMA node of `cpu` (its `nodeN` link under `<sys_root>/devices/system/cpu/cpuC`), None
/// where sysfs shows none (no NUMA).
pub fn numa_node_of(sys_root: &Path, cpu: u32) -> Option<u32> {
    let dir = sys_root.join(format!("devices/system/cpu/cpu{cpu}"));
    std::fs::read_dir(dir).ok()?.filter_map(Result::ok).find_map(|e| {
        let name = e.file_name();
        let n = name.to_str()?.strip_prefix("node")?;
        (!n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())).then(|| n.parse().ok()).flatten()
    })
}

fn parse_package(s: &str, path: &Path) -> Result<Option<u32>, TopologyError> {
    let v: i64 =
        s.parse().map_err(|_| TopologyError::Invalid { path: path.into(), why: format!("{s:?} is not a number") })?;
    Ok(u32::try_from(v).ok())
}

/// The L3 of one CPU: the `cache/indexN` with `level` 3 and a data/unified type.
fn read_l3(cache_dir: &Path, cpu: u32) -> Result<Option<L3Cache>, TopologyError> {
    let entries = match std::fs::read_dir(cache_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(TopologyError::Io { path: cache_dir.into(), error }),
    };
    let mut indexes: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .map(|e| e.path())
        .collect();
    indexes.sort();
    for idx in indexes {
        if read_optional(&idx.join("level"))?.as_deref() != Some("3") {
            continue;
        }
        if read_optional(&idx.join("type"))?.as_deref() == Some("Instruction") {
            continue;
        }
        let id = match read_optional(&idx.join("id"))? {
            Some(s) => s.parse::<u32>().map_err(|_| TopologyError::Invalid {
                path: idx.join("id"),
                why: format!("{s:?} is not a cache id"),
            })?,
            // Kernels before 4.11 lack `id`: the lowest CPU sharing the cache names it.
            None => match read_optional(&idx.join("shared_cpu_list"))? {
                Some(list) => cpulist::parse(&list)
                    .map_err(|e| TopologyError::Invalid { path: idx.join("shared_cpu_list"), why: e.to_string() })?
                    .first()
                    .copied()
                    .unwrap_or(cpu),
                None => cpu,
            },
        };
        let size_bytes = match read_optional(&idx.join("size"))? {
            Some(s) => Some(parse_size(&s).ok_or_else(|| TopologyError::Invalid {
                path: idx.join("size"),
                why: format!("{s:?} is not a cache size"),
            })?),
            None => None,
        };
        return Ok(Some(L3Cache { id, size_bytes }));
    }
    Ok(None)
}

/// sysfs cache sizes: `32768K`, `32M`, or plain bytes.
pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mult) = match s.chars().last()? {
        'K' | 'k' => (&s[..s.len() - 1], 1u64 << 10),
        'M' | 'm' => (&s[..s.len() - 1], 1 << 20),
        'G' | 'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok()?.checked_mul(mult)
}

fn read_trimmed(path: &Path) -> Result<String, TopologyError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|error| TopologyError::Io { path: path.into(), error })
}

fn read_optional(path: &Path) -> Result<Option<String>, TopologyError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s.trim().to_string())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(TopologyError::Io { path: path.into(), error }),
    }
}

/// Builders for fake sysfs trees, for this module's tests.
#[cfg(test)]
mod fake {
    use std::path::Path;

    /// One CPU of a fake tree: number, package, and its L3 as (id, size string).
    pub struct FakeCpu<'a> {
        pub cpu: u32,
        pub package: i64,
        pub l3: Option<(u32, &'a str)>,
    }

    /// Write a fake `devices/system/cpu` tree under `root`. Each CPU gets L1d, L1i and L2
    /// entries too, so the level-3 search is exercised.
    pub fn write_tree(root: &Path, online: &str, cpus: &[FakeCpu<'_>]) -> std::io::Result<()> {
        let base = root.join("devices/system/cpu");
        std::fs::create_dir_all(&base)?;
        std::fs::write(base.join("online"), format!("{online}\n"))?;
        for c in cpus {
            let dir = base.join(format!("cpu{}", c.cpu));
            std::fs::create_dir_all(dir.join("topology"))?;
            std::fs::write(dir.join("topology/physical_package_id"), format!("{}\n", c.package))?;
            let caches: Vec<(u32, &str, String, &str)> = [
                Some((1, "Data", c.cpu.to_string(), "32K")),
                Some((1, "Instruction", c.cpu.to_string(), "32K")),
                Some((2, "Unified", c.cpu.to_string(), "1024K")),
                c.l3.map(|(id, size)| (3, "Unified", id.to_string(), size)),
            ]
            .into_iter()
            .flatten()
            .collect();
            for (i, (level, ty, id, size)) in caches.iter().enumerate() {
                let idx = dir.join(format!("cache/index{i}"));
                std::fs::create_dir_all(&idx)?;
                std::fs::write(idx.join("level"), format!("{level}\n"))?;
                std::fs::write(idx.join("type"), format!("{ty}\n"))?;
                std::fs::write(idx.join("id"), format!("{id}\n"))?;
                std::fs::write(idx.join("size"), format!("{size}\n"))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{write_tree, FakeCpu};
    use super::*;

    #[test]
    fn two_sockets_with_offline_and_sparse_ids() {
        let dir = tempfile::tempdir().unwrap();
        // 8 possible CPUs, CPU 3 offline; socket 0 has L3 id 0, socket 1 has L3 id 8 (gap).
        let mut cpus = Vec::new();
        for cpu in [0u32, 1, 2, 4, 5, 6, 7] {
            let (package, l3) = if cpu < 4 { (0, (0, "33792K")) } else { (1, (8, "33792K")) };
            cpus.push(FakeCpu { cpu, package, l3: Some(l3) });
        }
        write_tree(dir.path(), "0-2,4-7", &cpus).unwrap();
        // A stale directory for the offline CPU must be ignored.
        std::fs::create_dir_all(dir.path().join("devices/system/cpu/cpu3")).unwrap();

        let t = Topology::read(dir.path()).unwrap();
        assert_eq!(t.online_cpus().collect::<Vec<_>>(), vec![0, 1, 2, 4, 5, 6, 7]);
        assert_eq!(t.l3_domains.len(), 2);
        assert_eq!(
            t.l3_domains[0],
            L3Domain { id: 0, cpus: vec![0, 1, 2], size_bytes: Some(33792 << 10), packages: vec![0] }
        );
        assert_eq!(t.l3_domains[1].id, 8);
        assert_eq!(t.l3_domains[1].cpus, vec![4, 5, 6, 7]);
        assert_eq!(t.l3_domains[1].packages, vec![1]);
        assert_eq!(t.domain_of(5).map(|d| d.id), Some(8));
        assert_eq!(t.domain_of(3), None);
        assert!(t.cpus_without_l3.is_empty());
    }

    #[test]
    fn several_l3_per_package_and_missing_l3() {
        // Zen-style: two CCX L3s in one package; CPU 4 has no L3 listed; package id -1.
        let dir = tempfile::tempdir().unwrap();
        let cpus = [
            FakeCpu { cpu: 0, package: 0, l3: Some((0, "16M")) },
            FakeCpu { cpu: 1, package: 0, l3: Some((0, "16M")) },
            FakeCpu { cpu: 2, package: 0, l3: Some((1, "16M")) },
            FakeCpu { cpu: 3, package: 0, l3: Some((1, "16M")) },
            FakeCpu { cpu: 4, package: -1, l3: None },
        ];
        write_tree(dir.path(), "0-4", &cpus).unwrap();
        let t = Topology::read(dir.path()).unwrap();
        assert_eq!(
            t.l3_domains.iter().map(|d| (d.id, d.cpus.clone())).collect::<Vec<_>>(),
            vec![(0, vec![0, 1]), (1, vec![2, 3])]
        );
        assert_eq!(t.l3_domains[0].size_bytes, Some(16 << 20));
        assert_eq!(t.cpus_without_l3, vec![4]);
        assert_eq!(t.cpus[4].package, None);
    }

    #[test]
    fn old_kernel_without_cache_id_uses_shared_list() {
        let dir = tempfile::tempdir().unwrap();
        let cpus =
            [FakeCpu { cpu: 2, package: 0, l3: Some((0, "8M")) }, FakeCpu { cpu: 3, package: 0, l3: Some((0, "8M")) }];
        write_tree(dir.path(), "2-3", &cpus).unwrap();
        for cpu in [2, 3] {
            let idx = dir.path().join(format!("devices/system/cpu/cpu{cpu}/cache/index3"));
            std::fs::remove_file(idx.join("id")).unwrap();
            std::fs::write(idx.join("shared_cpu_list"), "2-3\n").unwrap();
        }
        let t = Topology::read(dir.path()).unwrap();
        assert_eq!(t.l3_domains.len(), 1);
        assert_eq!((t.l3_domains[0].id, t.l3_domains[0].cpus.clone()), (2, vec![2, 3]));
    }

    #[test]
    fn malformed_files_name_the_path() {
        let dir = tempfile::tempdir().unwrap();
        write_tree(dir.path(), "0", &[FakeCpu { cpu: 0, package: 0, l3: Some((0, "lots")) }]).unwrap();
        let e = Topology::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("index3/size") && e.contains("not a cache size"), "{e}");
        std::fs::write(dir.path().join("devices/system/cpu/online"), "0-x\n").unwrap();
        let e = Topology::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains("online") && e.contains("invalid CPU list"), "{e}");
        let e = Topology::read(&dir.path().join("nope")).unwrap_err().to_string();
        assert!(e.contains("nope/devices/system/cpu/online"), "{e}");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("32768K"), Some(32 << 20));
        assert_eq!(parse_size("2M"), Some(2 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size("99999999999999999999K"), None);
    }

    #[test]
    fn reads_this_host() {
        let t = Topology::read(Path::new("/sys")).unwrap();
        assert!(!t.cpus.is_empty());
    }
}
