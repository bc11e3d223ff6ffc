//! The fallback PMU collector for when BPF is unavailable: perf cgroup events, one group per
//! (container, CPU), read every interval. Cost grows as containers × CPUs × events file
//! descriptors and reads, so it suits ≥ 100 ms for tens of containers, not 1 ms for hundreds.

use crate::counter::{CounterGroup, GroupReading, Target};
use crate::format::Encoded;
use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::Path;
use std::time::Duration;

/// Below this interval the collector warns.
pub const COMFORTABLE_INTERVAL: Duration = Duration::from_millis(100);
/// The default interval of this collector.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

/// The warning to print for a configuration this collector will struggle with, if any.
pub fn warning(containers: usize, cpus: usize, interval: Duration) -> Option<String> {
    let reads_per_sec = (containers * cpus) as f64 / interval.as_secs_f64().max(1e-6);
    (interval < COMFORTABLE_INTERVAL || reads_per_sec > 10_000.0).then(|| {
        format!(
            "perf cgroup events (BPF unavailable): {containers} containers x {cpus} CPUs = {} group reads per interval ({reads_per_sec:.0}/s at {interval:?}); this does not scale to hundreds of containers at 1 ms, use >= {COMFORTABLE_INTERVAL:?} or make BPF available",
            containers * cpus
        )
    })
}

struct PerCpu {
    domain: u32,
    group: CounterGroup,
    prev: GroupReading,
}

/// Counts of one container over one interval, summed over the CPUs of one group (an L3
/// domain, see [`CgroupCollector::group_cpus`]; all CPUs are group 0 by default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupDelta {
    pub id: String,
    pub domain: u32,
    /// One per event, in the order given to [`CgroupCollector::new`].
    pub values: Vec<u64>,
    /// Some CPU's group was multiplexed during the interval: the values are estimates.
    pub multiplexed: bool,
}

pub struct CgroupCollector {
    events: Vec<Encoded>,
    cpus: Vec<usize>,
    /// CPU number → its group (domain); CPUs beyond the end are group 0.
    domain_of: Vec<u32>,
    groups: BTreeMap<String, Vec<PerCpu>>,
}

impl CgroupCollector {
    pub fn new(events: Vec<Encoded>, cpus: Vec<usize>) -> CgroupCollector {
        CgroupCollector { events, cpus, domain_of: Vec::new(), groups: BTreeMap::new() }
    }

    /// Sum counts per group of CPUs (e.g. L3 domain) instead of over all: `domain_of[cpu]`.
    /// Applies to containers added from then on.
    pub fn group_cpus(&mut self, domain_of: Vec<u32>) {
        self.domain_of = domain_of;
    }

    /// Start counting the cgroup v2 directory `dir` as container `id`.
    pub fn add(&mut self, id: &str, dir: &Path) -> io::Result<()> {
        let f = File::open(dir)?;
        let mut per_cpu = Vec::with_capacity(self.cpus.len());
        for &cpu in &self.cpus {
            let mut group = CounterGroup::open(&Target::Cgroup { dir: &f, cpu }, &self.events)?;
            let prev = group.read()?;
            let domain = self.domain_of.get(cpu).copied().unwrap_or(0);
            per_cpu.push(PerCpu { domain, group, prev });
        }
        self.groups.insert(id.to_string(), per_cpu);
        Ok(())
    }

    pub fn remove(&mut self, id: &str) {
        self.groups.remove(id);
    }

    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Counts since the previous call (or since `add`), per container and CPU group.
    pub fn sample(&mut self) -> io::Result<Vec<CgroupDelta>> {
        let mut out = Vec::with_capacity(self.groups.len());
        for (id, per_cpu) in &mut self.groups {
            let first = out.len();
            for pc in per_cpu.iter_mut() {
                let cur = pc.group.read()?;
                let i = match out[first..].iter().position(|d: &CgroupDelta| d.domain == pc.domain) {
                    Some(i) => first + i,
                    None => {
                        let n = self.events.len();
                        out.push(CgroupDelta {
                            id: id.clone(),
                            domain: pc.domain,
                            values: vec![0; n],
                            multiplexed: false,
                        });
                        out.len() - 1
                    }
                };
                for (k, s) in cur.delta_since(&pc.prev).into_iter().enumerate() {
                    out[i].values[k] += s.value;
                    out[i].multiplexed |= s.multiplexed;
                }
                pc.prev = cur;
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warns_when_it_will_not_scale() {
        assert!(warning(10, 2, Duration::from_millis(100)).is_none());
        let w = warning(300, 64, Duration::from_millis(1)).unwrap();
        assert!(w.contains("does not scale") && w.contains("300 containers"), "{w}");
        assert!(warning(1, 2, Duration::from_millis(1)).is_some(), "1 ms is below the comfortable interval");
    }
}
