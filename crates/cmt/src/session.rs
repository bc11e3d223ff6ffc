//! Containers to RMIDs: allocate on start, tag the container's tasks, sample every L3 domain,
//! free into limbo on stop, and give limbo RMIDs back only once their occupancy has decayed.

use crate::{MbmTracker, ReadError, Reader, Reading};
use cachescope_hw::msr::{Event, MsrDevice};
use cachescope_rmid::{AllocError, Allocator, Config};
use std::collections::BTreeMap;
use std::time::Duration;

/// Whoever moves a container's threads onto an RMID: resctrl's `tasks`, a kernel module, or
/// the emulator playing the kernel.
pub trait TaskTagger {
    fn tag(&self, container: &str, rmid: Option<u32>) -> Result<(), String>;
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("tagging container {container:?}: {why}")]
    Tag { container: String, why: String },
    #[error(transparent)]
    Read(#[from] ReadError),
}

/// One (container, domain) sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSample {
    pub container: String,
    pub domain: u32,
    pub rmid: Option<u32>,
    pub occupancy_bytes: Option<u64>,
    /// Bytes since the previous sample (None on the first one, or after a gap in data).
    pub mbm_total_bytes: Option<u64>,
    pub mbm_local_bytes: Option<u64>,
    /// `ok`, `unavailable`, `error` or `no_rmid` (DESIGN.md §5.3).
    pub status: &'static str,
}

/// What one RMID shows in one domain at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RmidSample {
    /// `ok`, `unavailable` or `error`, from the occupancy read.
    pub status: &'static str,
    pub occupancy_bytes: Option<u64>,
    /// Bytes since the previous sample of this counter (None for the first, or after a gap).
    pub mbm_total_bytes: Option<u64>,
    pub mbm_local_bytes: Option<u64>,
}

/// Read every event the hardware offers for `rmid` in `domain`; MBM through `mbm`.
pub fn sample_rmid<D: MsrDevice>(
    reader: &Reader<D>,
    mbm: &mut MbmTracker,
    domain: u32,
    rmid: u32,
    now: Duration,
) -> Result<RmidSample, ReadError> {
    let has = |e: Event| reader.caps().events.contains(&e);
    let occ = if has(Event::L3Occupancy) { Some(reader.read(domain, rmid, Event::L3Occupancy)?) } else { None };
    let mut delta = |e: Event| -> Result<Option<u64>, ReadError> {
        if !has(e) {
            return Ok(None);
        }
        let r = reader.read(domain, rmid, e)?;
        Ok(mbm.update(domain, rmid, e, r, now).map(|x| x.bytes))
    };
    let (mbm_total_bytes, mbm_local_bytes) = (delta(Event::MbmTotal)?, delta(Event::MbmLocal)?);
    let (status, occupancy_bytes) = match occ {
        Some(Reading::Count(c)) => ("ok", Some(c * u64::from(reader.caps().upscale_factor))),
        Some(Reading::Unavailable) => ("unavailable", None),
        Some(Reading::Error) => ("error", None),
        None => ("ok", None),
    };
    Ok(RmidSample { status, occupancy_bytes, mbm_total_bytes, mbm_local_bytes })
}

pub struct ContainerRmids {
    alloc: Allocator<String>,
    domains: Vec<u32>,
    assigned: BTreeMap<String, u32>,
    /// Containers waiting for an RMID, in arrival order, with the last reason.
    pending: Vec<(String, AllocError)>,
    mbm: MbmTracker,
}

impl ContainerRmids {
    pub fn new(domains: Vec<u32>, cfg: Config, mbm: MbmTracker) -> Self {
        ContainerRmids {
            alloc: Allocator::new(&domains, cfg),
            domains,
            assigned: BTreeMap::new(),
            pending: Vec::new(),
            mbm,
        }
    }

    pub fn allocator(&self) -> &Allocator<String> {
        &self.alloc
    }

    pub fn rmid_of(&self, container: &str) -> Option<u32> {
        self.assigned.get(container).copied()
    }

    /// Containers without an RMID, with the reason.
    pub fn unmonitored(&self) -> &[(String, AllocError)] {
        &self.pending
    }

    /// A container started: give it an RMID (valid in every domain) and tag its tasks, or
    /// queue it as `no_rmid` when none is free.
    pub fn start(&mut self, container: &str, tagger: &dyn TaskTagger) -> Result<Option<u32>, SessionError> {
        if let Some(r) = self.assigned.get(container) {
            return Ok(Some(*r));
        }
        match self.alloc.allocate(container.to_string(), &self.domains) {
            Ok(rmid) => {
                tagger
                    .tag(container, Some(rmid))
                    .map_err(|why| SessionError::Tag { container: container.into(), why })?;
                for d in &self.domains {
                    self.mbm.forget_rmid(*d, rmid);
                }
                self.assigned.insert(container.to_string(), rmid);
                self.pending.retain(|(c, _)| c != container);
                Ok(Some(rmid))
            }
            Err(e) => {
                match self.pending.iter_mut().find(|(c, _)| c == container) {
                    Some(p) => p.1 = e,
                    None => self.pending.push((container.to_string(), e)),
                }
                Ok(None)
            }
        }
    }

    /// A container stopped: untag it and put its RMID into limbo.
    pub fn stop(&mut self, container: &str, tagger: &dyn TaskTagger, now: Duration) -> Result<(), SessionError> {
        self.pending.retain(|(c, _)| c != container);
        if self.assigned.remove(container).is_some() {
            // The container is gone; a failed untag only means its tasks are gone too.
            let _ = tagger.tag(container, None);
            self.alloc.free(&container.to_string(), now);
        }
        Ok(())
    }

    /// Sample every assigned container in every domain, list the unmonitored ones, then check
    /// limbo RMIDs and hand freed ones to waiting containers.
    pub fn sample<D: MsrDevice>(
        &mut self,
        reader: &Reader<D>,
        tagger: &dyn TaskTagger,
        now: Duration,
    ) -> Result<Vec<ContainerSample>, SessionError> {
        let mut out = Vec::with_capacity(self.assigned.len() * self.domains.len() + self.pending.len());
        for (name, &rmid) in &self.assigned {
            for &d in &self.domains {
                let x = sample_rmid(reader, &mut self.mbm, d, rmid, now)?;
                out.push(ContainerSample {
                    container: name.clone(),
                    domain: d,
                    rmid: Some(rmid),
                    occupancy_bytes: x.occupancy_bytes,
                    mbm_total_bytes: x.mbm_total_bytes,
                    mbm_local_bytes: x.mbm_local_bytes,
                    status: x.status,
                });
            }
        }
        for (name, _) in &self.pending {
            for &d in &self.domains {
                out.push(ContainerSample {
                    container: name.clone(),
                    domain: d,
                    rmid: None,
                    occupancy_bytes: None,
                    mbm_total_bytes: None,
                    mbm_local_bytes: None,
                    status: "no_rmid",
                });
            }
        }
        self.check_limbo(reader, now)?;
        let waiting: Vec<String> = self.pending.iter().map(|(c, _)| c.clone()).collect();
        for c in waiting {
            if self.start(&c, tagger)?.is_none() {
                break; // still nothing free: the rest wait too
            }
        }
        Ok(out)
    }

    /// Read the occupancy of every limbo RMID; clean ones return to the free pool.
    pub fn check_limbo<D: MsrDevice>(&mut self, reader: &Reader<D>, now: Duration) -> Result<usize, ReadError> {
        let mut freed = 0;
        for &d in &self.domains {
            for rmid in self.alloc.limbo(d) {
                // Unavailable means no lines were ever tagged here: as clean as it gets.
                let bytes = match reader.read(d, rmid, Event::L3Occupancy)? {
                    Reading::Count(c) => c * u64::from(reader.caps().upscale_factor),
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
}
