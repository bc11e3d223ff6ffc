//! The msr backend (and the emulated one, which is the same code over the emulator): RMIDs
//! from the allocator for each attached container, valid in every domain it can run in;
//! its tasks tagged by a [`TaskTagger`] (the emulator playing the kernel) or, for core
//! groups, its cores' IA32_PQR_ASSOC written; raw counts read every interval; freed RMIDs
//! held in limbo until their occupancy has decayed.

use crate::{Caps, CorePinning, ReadError, Reader, Reading};
use cachescope_engine::backend::{Attach, BackendInfo, CacheBackend, RawSample, Read, Sampling, SlotCounts};
use cachescope_engine::containers::{Container, ContainerSource};
use cachescope_engine::{ContainerMeta, Status, WaitReason};
use cachescope_engine::{PartError, PartResult};
use cachescope_hw::msr::{Cumulative, Event, MsrDevice};
use cachescope_hw::CpuInfo;
use cachescope_platform::{DevMsr, Topology};
use cachescope_rmid::{AllocError, Allocator, Config};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// The msr backend's interval when none is given: the product's 1 ms.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(1);

/// RMIDs for `caps` on an L3 of `l3_bytes`: the allocator's default limbo threshold, limbo
/// checked every 10 ms.
pub fn rmid_config(caps: &Caps, l3_bytes: u64) -> Config {
    Config::with_default_threshold(caps.max_rmid, l3_bytes, Duration::from_millis(10))
}

/// Whoever moves a container's threads onto an RMID: a kernel module, or the emulator playing
/// the kernel.
pub trait TaskTagger {
    /// Its refusal is the container's own trouble ([`PartError::Container`]) or the tagger's.
    fn tag(&self, container: &str, rmid: Option<u32>) -> PartResult;
}

struct Attached<D: MsrDevice> {
    meta: Arc<ContainerMeta>,
    rmid: u32,
    /// Changes with every attach, so a re-used RMID never continues an old count.
    generation: u64,
    domains: Vec<u32>,
    /// Core groups: the associations written for its cores.
    pin: Option<CorePinning<D>>,
}

pub struct MsrBackend<D: MsrDevice + Clone> {
    info: BackendInfo,
    reader: Reader<D>,
    /// (domain, its CPUs).
    topology: Vec<(u32, Vec<u32>)>,
    alloc: Allocator<String>,
    tagger: Option<Box<dyn TaskTagger>>,
    attached: BTreeMap<String, Attached<D>>,
    generation: u64,
    restored: usize,
    left_alone: usize,
}

fn read_err(e: ReadError) -> PartError {
    PartError::failed(e)
}

impl<D: MsrDevice + Clone> MsrBackend<D> {
    /// `info`: what it says about itself (its domains are taken from `domains`); `tagger`:
    /// who tags a container's tasks (None: only core groups can be monitored).
    pub fn new(
        dev: D,
        caps: Caps,
        domains: &[(u32, Vec<u32>)],
        cfg: Config,
        tagger: Option<Box<dyn TaskTagger>>,
        mut info: BackendInfo,
    ) -> MsrBackend<D> {
        let reader = Reader::new(dev, caps, domains, crate::Retries::default());
        info.domains = reader.domain_ids();
        info.upscale = u64::from(reader.caps().upscale_factor);
        info.mbm_width = reader.caps().counter_width;
        info.mbm_unit = info.upscale;
        MsrBackend {
            alloc: Allocator::new(&info.domains, cfg),
            info,
            reader,
            topology: domains.to_vec(),
            tagger,
            attached: BTreeMap::new(),
            generation: 0,
            restored: 0,
            left_alone: 0,
        }
    }

    pub fn reader(&self) -> &Reader<D> {
        &self.reader
    }

    pub fn allocator(&self) -> &Allocator<String> {
        &self.alloc
    }

    pub fn rmid_of(&self, id: &str) -> Option<u32> {
        self.attached.get(id).map(|a| a.rmid)
    }

    fn domains_of(&self, id: &str, cpus: &[u32]) -> PartResult<Vec<u32>> {
        let mut out = Vec::new();
        for &cpu in cpus {
            let d = self
                .topology
                .iter()
                .find(|(_, c)| c.contains(&cpu))
                .map(|(d, _)| *d)
                .ok_or_else(|| PartError::container(id, format!("CPU {cpu} is not an online CPU with an L3")))?;
            if !out.contains(&d) {
                out.push(d);
            }
        }
        Ok(out)
    }

    /// Read the occupancy of every limbo RMID; clean ones return to the free pool.
    pub fn check_limbo(&mut self, now: Duration) -> PartResult<usize> {
        let mut freed = 0;
        for &d in &self.info.domains {
            for rmid in self.alloc.limbo(d) {
                // Unavailable means no lines were ever tagged here: as clean as it gets.
                let bytes = match self.reader.read(d, rmid, Event::L3Occupancy).map_err(read_err)? {
                    Reading::Count(c) => c.saturating_mul(self.info.upscale),
                    Reading::Unavailable => 0,
                    Reading::Error => continue,
                };
                if self.alloc.report_occupancy(d, rmid, bytes, now) {
                    freed += 1;
                }
            }
        }
        Ok(freed)
    }

    fn counter(&self, d: u32, rmid: u32, e: Event, generation: u64) -> PartResult<Option<Cumulative>> {
        if !self.reader.caps().events.contains(&e) {
            return Ok(None);
        }
        Ok(match self.reader.read(d, rmid, e).map_err(read_err)? {
            Reading::Count(value) => Some(Cumulative { generation, value }),
            _ => None,
        })
    }
}

impl MsrBackend<Arc<DevMsr>> {
    /// The backend on this host's `/dev/cpu/N/msr`, for core groups: RMIDs and counter width
    /// from `cpu`, domains from `topo`, Linux's MBM correction where `cpu` needs it, each core's
    /// association checked every second. None where `cpu` has no L3 monitoring.
    pub fn on_host(cpu: &CpuInfo, topo: &Topology) -> Option<Self> {
        let caps = Caps::of(cpu)?;
        let l3_bytes = topo.l3_bytes();
        let mut info = BackendInfo::new("msr", cpu.summary(), l3_bytes);
        info.correct_mbm_for(cpu);
        info.sampling = Sampling::Tick;
        info.upkeep_every = Duration::from_secs(1);
        let cfg = rmid_config(&caps, l3_bytes.unwrap_or(0));
        let dev = Arc::new(DevMsr::new(Path::new("/dev")));
        Some(MsrBackend::new(dev, caps, &topo.domain_cpus(), cfg, None, info))
    }
}

impl<D: MsrDevice + Clone> CacheBackend for MsrBackend<D> {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn attach(&mut self, c: &Container, _: &dyn ContainerSource, _: Duration) -> PartResult<Attach> {
        if self.attached.contains_key(c.id()) {
            return Ok(Attach::Monitored { rmid: self.rmid_of(c.id()) });
        }
        let domains = match &c.cpus {
            Some(cpus) => self.domains_of(c.id(), cpus)?,
            None if self.tagger.is_some() => self.info.domains.clone(),
            None => return Ok(Attach::Waiting(WaitReason::CannotTag)),
        };
        let rmid = match self.alloc.allocate(c.id().to_string(), &domains) {
            Ok(r) => r,
            Err(AllocError::Exhausted { .. }) => return Ok(Attach::Waiting(WaitReason::Exhausted)),
            Err(AllocError::OnlyLimbo { .. }) => return Ok(Attach::Waiting(WaitReason::Limbo)),
            Err(e) => return Err(PartError::failed(e)),
        };
        let pin = match (&c.cpus, &self.tagger) {
            (Some(cpus), _) => {
                let caps = self.reader.caps();
                let pinned = CorePinning::apply(
                    self.reader.device().clone(),
                    &[(cpus.clone(), rmid)],
                    caps.max_rmid,
                    caps.max_rmid_any,
                );
                match pinned {
                    Ok(p) => Some(p),
                    Err(e) => {
                        self.alloc.free(&c.id().to_string(), Duration::ZERO);
                        return Err(PartError::failed(e));
                    }
                }
            }
            (None, Some(t)) => {
                if let Err(why) = t.tag(c.id(), Some(rmid)) {
                    self.alloc.free(&c.id().to_string(), Duration::ZERO);
                    return Err(why.context("tagging its tasks"));
                }
                None
            }
            (None, None) => None,
        };
        self.generation += 1;
        self.attached.insert(
            c.id().to_string(),
            Attached { meta: c.meta.clone(), rmid, generation: self.generation, domains, pin },
        );
        Ok(Attach::Monitored { rmid: Some(rmid) })
    }

    fn detach(&mut self, id: &str, now: Duration) -> PartResult {
        let Some(mut a) = self.attached.remove(id) else { return Ok(()) };
        if let Some(mut pin) = a.pin.take() {
            let r = pin.restore().map_err(PartError::failed)?;
            self.restored += r.restored;
            self.left_alone += r.left_alone.len();
        } else if let Some(t) = &self.tagger {
            // The container is gone; a failed untag only means its tasks are gone too.
            let _ = t.tag(id, None);
        }
        self.alloc.free(&id.to_string(), now);
        Ok(())
    }

    fn collect(&mut self, now: Duration, read: Read<'_>, out: &mut Vec<RawSample>) -> PartResult {
        let has_occ = self.reader.caps().events.contains(&Event::L3Occupancy);
        let attached = std::mem::take(&mut self.attached);
        let done = read.each(&attached, |_, a| {
            for &d in &a.domains {
                let occ = if has_occ {
                    Some(self.reader.read(d, a.rmid, Event::L3Occupancy).map_err(read_err)?)
                } else {
                    None
                };
                let (status, occupancy_bytes) = match occ {
                    Some(Reading::Count(c)) => (Status::Ok, Some(c.saturating_mul(self.info.upscale))),
                    Some(Reading::Unavailable) => (Status::Unavailable, None),
                    Some(Reading::Error) => (Status::Error, None),
                    None => (Status::Ok, None),
                };
                out.push(RawSample {
                    container: a.meta.clone(),
                    domain: d,
                    at: now,
                    rmid: Some(a.rmid),
                    status,
                    occupancy_bytes,
                    mbm_total: self.counter(d, a.rmid, Event::MbmTotal, a.generation)?,
                    mbm_local: self.counter(d, a.rmid, Event::MbmLocal, a.generation)?,
                    mbm_counter: None,
                });
            }
            Ok(())
        });
        self.attached = attached;
        done
    }

    fn upkeep(&mut self, now: Duration, _: &dyn ContainerSource) -> PartResult<Vec<(String, WaitReason)>> {
        self.check_limbo(now)?;
        for a in self.attached.values() {
            if let Some(pin) = &a.pin {
                for x in pin.verify().map_err(PartError::failed)? {
                    cachescope_platform::say!(
                        "CPU {} PQR_ASSOC changed behind our back: {:#x}, expected {:#x}",
                        x.cpu,
                        x.found,
                        x.expected
                    );
                }
            }
        }
        Ok(Vec::new())
    }

    fn slots(&self) -> SlotCounts {
        let mut limbo: Vec<u32> = self.alloc.domains().flat_map(|d| self.alloc.limbo(d)).collect();
        limbo.sort_unstable();
        limbo.dedup();
        SlotCounts { in_use: self.attached.len() as u64, limbo: Some(limbo.len() as u64) }
    }

    fn header(&self) -> Vec<String> {
        let groups = self.attached.values().filter(|a| a.pin.is_some()).count();
        if groups > 0 {
            vec![format!("core groups={groups}")]
        } else {
            Vec::new()
        }
    }

    fn shutdown(&mut self) -> PartResult<Vec<String>> {
        let ids: Vec<String> = self.attached.keys().cloned().collect();
        for id in ids {
            self.detach(&id, Duration::ZERO)?;
        }
        if self.restored + self.left_alone == 0 {
            return Ok(Vec::new());
        }
        Ok(vec![format!(
            "restored IA32_PQR_ASSOC on {} CPUs{}",
            self.restored,
            if self.left_alone == 0 {
                String::new()
            } else {
                format!(", left {} changed by others alone", self.left_alone)
            }
        )])
    }
}
