//! A cache-monitoring backend: attaches containers to RMIDs (or says why not), delivers raw
//! cumulative samples with their own timestamps, does its upkeep, restores what it changed.
//! Deltas are not its business: [`crate::derive`] makes them, once, for every backend.

use crate::containers::{Container, ContainerSource};
use crate::error::PartResult;
use crate::row::{ContainerMeta, MbmCounter, Status};
use cachescope_hw::mbm_cf::MbmCorrection;
use cachescope_hw::msr::Cumulative;
use std::sync::Arc;
use std::time::Duration;

/// How a backend's counters are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampling {
    /// From user space at every interval, at the time of the read (resctrl, msr).
    Tick,
    /// An emulated platform in virtual time: read at any instant, so intervals can be worked
    /// through in batches.
    Virtual,
    /// No cache monitoring: rows carry `unsupported` and the PMU and CPU columns.
    Unsupported,
    /// Sampled in the kernel (the kernel module): drained once per batch, each sample with its
    /// own timestamp.
    Kernel,
}

/// What a backend is and offers.
#[derive(Debug, Clone)]
pub struct BackendInfo {
    /// Its name and how it runs, for people (`resctrl (emulated ...)`).
    pub label: String,
    /// The CPUID summary for file metadata.
    pub cpuid: String,
    /// L3 domain ids.
    pub domains: Vec<u32>,
    /// Bytes per occupancy unit (the smallest change the hardware can show).
    pub upscale: u64,
    /// L3 size per domain, where known.
    pub l3_bytes: Option<u64>,
    /// Width of the MBM counters as delivered (64: they do not wrap) and bytes per count.
    pub mbm_width: u32,
    pub mbm_unit: u64,
    /// The MBM counts of some RMIDs need Linux's correction factor (Broadwell-X, Skylake-X):
    /// backends that read the MSRs themselves set it; resctrl and perf deliver corrected bytes.
    pub mbm_correction: Option<MbmCorrection>,
    pub sampling: Sampling,
    /// Why the values are emulated and what drives them; None when measured.
    pub emulated: Option<String>,
    /// How often [`CacheBackend::upkeep`] and the RMID policy run.
    pub upkeep_every: Duration,
    /// Its values can move while a container's tasks do not run (an emulated scenario's
    /// traffic, not its processes'): every container is read at every interval, never only
    /// those that ran ([`crate::quiet`]).
    pub moves_without_tasks: bool,
    /// Further file metadata.
    pub metadata: Vec<(String, String)>,
}

impl BackendInfo {
    /// A backend's description before it fills in what it knows: no domains yet, counters
    /// that do not wrap, counted in bytes, sampled in virtual time, upkeep every 100 ms.
    pub fn new(label: impl Into<String>, cpuid: String, l3_bytes: Option<u64>) -> BackendInfo {
        BackendInfo {
            label: label.into(),
            cpuid,
            domains: Vec::new(),
            upscale: 1,
            l3_bytes,
            mbm_width: 64,
            mbm_unit: 1,
            mbm_correction: None,
            sampling: Sampling::Virtual,
            emulated: None,
            upkeep_every: Duration::from_millis(100),
            moves_without_tasks: false,
            metadata: Vec::new(),
        }
    }

    /// Linux's MBM correction factor where this CPU needs it (for the backends that read the
    /// counters themselves), said in the file metadata.
    pub fn correct_mbm_for(&mut self, cpu: &cachescope_hw::CpuInfo) {
        self.mbm_correction = MbmCorrection::for_cpu(cpu);
        if let Some(c) = self.mbm_correction {
            self.metadata.push(("cachescope.mbm_correction".into(), c.describe()));
        }
    }
}

/// One container in one domain at one instant: cumulative counters as read.
#[derive(Debug, Clone)]
pub struct RawSample {
    pub container: Arc<ContainerMeta>,
    pub domain: u32,
    /// When it was read (time since the run's start).
    pub at: Duration,
    pub rmid: Option<u32>,
    pub status: Status,
    pub occupancy_bytes: Option<u64>,
    /// Cumulative MBM counts in the backend's width and unit; the generation changes when
    /// the counter's identity does (a re-created group, a re-assigned RMID).
    pub mbm_total: Option<Cumulative>,
    pub mbm_local: Option<Cumulative>,
    /// Where bandwidth needs an assigned counter: how this sample's was counted.
    pub mbm_counter: Option<MbmCounter>,
}

impl RawSample {
    /// A sample of `container` in `domain` at `at` with no values yet, status `ok`.
    pub fn new(container: Arc<ContainerMeta>, domain: u32, at: Duration) -> RawSample {
        RawSample {
            container,
            domain,
            at,
            rmid: None,
            status: Status::Ok,
            occupancy_bytes: None,
            mbm_total: None,
            mbm_local: None,
            mbm_counter: None,
        }
    }
}

/// Why a container has no RMID (its rows say `no_rmid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WaitReason {
    /// Every RMID is held.
    Exhausted,
    /// The free RMIDs are still in limbo (their old lines not yet evicted).
    Limbo,
    /// Its RMID was given to a busier container.
    Evicted,
    /// Its id cannot name a monitoring group (refused, never sanitized into a path).
    BadId,
    /// The backend cannot tag this kind of container (e.g. threads with the msr backend).
    CannotTag,
    /// Its monitoring group vanished and could not be re-created.
    Lost,
    /// The kernel module watches as many cgroups as it may (its max_cgroups).
    TableFull,
}

impl WaitReason {
    pub fn name(self) -> &'static str {
        match self {
            WaitReason::Exhausted => "rmids exhausted",
            WaitReason::Limbo => "rmids in limbo",
            WaitReason::Evicted => "evicted for a busier container",
            WaitReason::BadId => "id refused as a group name",
            WaitReason::CannotTag => "cannot be tagged by this backend",
            WaitReason::Lost => "group lost",
            WaitReason::TableFull => "the module's cgroup table is full",
        }
    }

    /// Worth retrying when RMIDs free up.
    pub(crate) fn retry(self) -> bool {
        !matches!(self, WaitReason::BadId | WaitReason::CannotTag)
    }
}

/// The outcome of attaching a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attach {
    /// Monitored from now on; the RMID where the backend knows it.
    Monitored { rmid: Option<u32> },
    /// Not monitored, and why; the RMID policy retries.
    Waiting(WaitReason),
}

/// RMID slots as the backend sees them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotCounts {
    pub in_use: u64,
    /// None where the backend cannot know (resctrl keeps limbo to itself): unknown, never 0.
    pub limbo: Option<u64>,
}

/// Which containers a [`CacheBackend::collect`] reads.
#[derive(Clone, Copy)]
pub enum Read<'a> {
    /// Every attached container.
    All,
    /// Those this wants (the read budget's share under overload, [`crate::budget`]).
    Wanted(&'a dyn Fn(&str) -> bool),
    /// These, looked up by id (ids not attached are passed over): the work is theirs alone,
    /// whatever the number attached. Each is the container's shared meta, so a backend that
    /// keeps that meta can find it by address.
    Only(&'a [crate::row::ById]),
}

impl Read<'_> {
    /// Each attached entry of `map` this names, in turn, with its id.
    pub fn each<K: std::borrow::Borrow<str> + Ord, V, E>(
        self,
        map: &std::collections::BTreeMap<K, V>,
        mut f: impl FnMut(&str, &V) -> Result<(), E>,
    ) -> Result<(), E> {
        match self {
            Read::All => map.iter().try_for_each(|(k, v)| f(k.borrow(), v)),
            Read::Wanted(w) => map.iter().filter(|(k, _)| w(k.borrow())).try_for_each(|(k, v)| f(k.borrow(), v)),
            Read::Only(ids) => {
                ids.iter().filter_map(|id| Some((id.id(), map.get(id.id())?))).try_for_each(|(k, v)| f(k, v))
            }
        }
    }

    /// [`Read::each`], with the entries mutable.
    pub fn each_mut<V, E>(
        self,
        map: &mut std::collections::BTreeMap<String, V>,
        mut f: impl FnMut(&str, &mut V) -> Result<(), E>,
    ) -> Result<(), E> {
        match self {
            Read::All => map.iter_mut().try_for_each(|(k, v)| f(k, v)),
            Read::Wanted(w) => map.iter_mut().filter(|(k, _)| w(k)).try_for_each(|(k, v)| f(k, v)),
            Read::Only(ids) => {
                for id in ids {
                    if let Some(v) = map.get_mut(id.id()) {
                        f(id.id(), v)?;
                    }
                }
                Ok(())
            }
        }
    }
}

pub trait CacheBackend {
    fn info(&self) -> &BackendInfo;
    /// Start monitoring a container (tag its tasks, create its group). Called as soon as
    /// the container is known, before its first interval is sampled.
    fn attach(&mut self, c: &Container, src: &dyn ContainerSource, now: Duration) -> PartResult<Attach>;
    /// Stop monitoring a container (it stopped, or its RMID goes to a busier one).
    fn detach(&mut self, id: &str, now: Duration) -> PartResult;
    /// Read the attached containers `read` names (all of them, those the read budget wants
    /// under overload, or the few an interval must read: [`crate::quiet`]) in every domain
    /// they can have data in.
    fn collect(&mut self, now: Duration, read: Read<'_>, out: &mut Vec<RawSample>) -> PartResult;
    /// Periodic upkeep: limbo, task resync, groups that vanished. Returns the containers it
    /// could no longer monitor (detached), with the reason.
    fn upkeep(&mut self, _now: Duration, _src: &dyn ContainerSource) -> PartResult<Vec<(String, WaitReason)>> {
        Ok(Vec::new())
    }
    fn slots(&self) -> SlotCounts;
    /// CLOCK_MONOTONIC at the run's t = 0, for backends whose samples carry the kernel's time.
    fn origin(&mut self, _monotonic: Duration) {}
    /// These containers stopped: their last samples are read next (a backend that samples in
    /// the kernel waits here, briefly, for them).
    fn stopping(&mut self, _ids: &[String]) {}
    /// Extra header lines (the backend's own counts).
    fn header(&self) -> Vec<String> {
        Vec::new()
    }
    /// Restore what was changed (associations, groups); what was done, in words.
    fn shutdown(&mut self) -> PartResult<Vec<String>>;
}

/// The backend of hosts without cache monitoring: containers are followed and their PMU and
/// CPU columns recorded; occupancy and bandwidth are null with status `unsupported`.
pub struct Unsupported {
    info: BackendInfo,
    /// Keyed by the container's meta (its id not copied), in id order for a read of all.
    attached: std::collections::BTreeMap<crate::row::ById, Arc<ContainerMeta>>,
    /// The same by the meta's address, for a quiet interval's few: a tree's search compares a
    /// dozen ids, half of what a keyframe row of an idle container cost here, and hashing the
    /// id reads it, a cache miss of its own.
    by_addr: crate::IntMap<usize, Arc<ContainerMeta>>,
}

impl Unsupported {
    /// `why`: the reason there is no cache monitoring here (said in the header and metadata).
    pub fn new(domains: Vec<u32>, l3_bytes: Option<u64>, cpuid: String, why: &str) -> Unsupported {
        let mut info = BackendInfo::new("none (no cache monitoring here)", cpuid, l3_bytes);
        (info.domains, info.sampling, info.upkeep_every) = (domains, Sampling::Unsupported, Duration::from_secs(1));
        info.metadata.push(("cachescope.unsupported".into(), why.to_string()));
        Unsupported { info, attached: Default::default(), by_addr: Default::default() }
    }
}

impl CacheBackend for Unsupported {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn attach(&mut self, c: &Container, _: &dyn ContainerSource, _: Duration) -> PartResult<Attach> {
        if let Some(was) = self.attached.insert(crate::row::ById(c.meta.clone()), c.meta.clone()) {
            self.by_addr.remove(&crate::row::addr(&was));
        }
        self.by_addr.insert(crate::row::addr(&c.meta), c.meta.clone());
        Ok(Attach::Monitored { rmid: None })
    }

    fn detach(&mut self, id: &str, _: Duration) -> PartResult {
        if let Some(was) = self.attached.remove(id) {
            self.by_addr.remove(&crate::row::addr(&was));
        }
        Ok(())
    }

    fn collect(&mut self, now: Duration, read: Read<'_>, out: &mut Vec<RawSample>) -> PartResult {
        let domains = &self.info.domains;
        let mut push = |meta: &Arc<ContainerMeta>| {
            for &domain in domains {
                out.push(RawSample { status: Status::Unsupported, ..RawSample::new(meta.clone(), domain, now) });
            }
        };
        if let Read::Only(ids) = read {
            // By address; a meta that is another copy of an attached container's, by id.
            let attached = &self.attached;
            ids.iter()
                .filter_map(|id| self.by_addr.get(&id.addr()).or_else(|| attached.get(id.id())))
                .for_each(&mut push);
            return Ok(());
        }
        read.each(&self.attached, |_, meta| {
            push(meta);
            Ok::<_, crate::PartError>(())
        })
    }

    fn slots(&self) -> SlotCounts {
        SlotCounts::default()
    }

    fn header(&self) -> Vec<String> {
        // What a newcomer who just typed `scripts/run.sh` sees first: why the cache columns
        // are empty, and the one flag that fills them with the emulated demo.
        vec![format!(
            "no cache monitoring on this host: occupancy and bandwidth are null (`cachescope info` says why); \
             --emulate {DEMO_MODEL} emulates them"
        )]
    }

    fn shutdown(&mut self) -> PartResult<Vec<String>> {
        Ok(Vec::new())
    }
}

/// The processor model the header of a host without cache monitoring suggests for the
/// emulated demo.
pub const DEMO_MODEL: &str = "intel-xeon-platinum-8160";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::containers::Container;
    use crate::row::ById;

    struct NoSource;
    impl ContainerSource for NoSource {
        fn poll(&mut self, _: Duration, _: &mut Vec<crate::containers::Change>) -> PartResult {
            Ok(())
        }
        fn describe(&self) -> String {
            String::new()
        }
    }

    #[test]
    fn a_quiet_read_finds_containers_by_their_meta_or_a_copy_and_passes_over_the_rest() {
        let mut b = Unsupported::new(vec![0, 1], None, String::new(), "none here");
        let (a, c) = (ContainerMeta::named("a"), ContainerMeta::named("c"));
        for m in [&a, &c] {
            b.attach(&Container { meta: m.clone(), ..Default::default() }, &NoSource, Duration::ZERO).unwrap();
        }
        let ids = [ById(a.clone()), ById(ContainerMeta::named("c")), ById(ContainerMeta::named("gone"))];
        let mut out = Vec::new();
        b.collect(Duration::ZERO, Read::Only(&ids), &mut out).unwrap();
        let got: Vec<(&str, u32)> = out.iter().map(|s| (s.container.id.as_str(), s.domain)).collect();
        assert_eq!(got, [("a", 0), ("a", 1), ("c", 0), ("c", 1)]);
        assert!(Arc::ptr_eq(&out[2].container, &c), "the attached meta, not the copy asked with");
        b.detach("a", Duration::ZERO).unwrap();
        out.clear();
        b.collect(Duration::ZERO, Read::Only(&ids), &mut out).unwrap();
        assert_eq!(out.len(), 2);
    }
}
