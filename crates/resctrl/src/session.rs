//! The resctrl backend: one MON group per container, created as soon as the container is
//! known, its threads assigned, its counters read as raw cumulative bytes; removed when it
//! stops. Groups left by an earlier run are adopted when their container is attached, and the
//! rest removed at the first upkeep. Who gets an RMID when they run short is the engine's
//! policy; this says only whether mkdir worked and why not.
//!
//! Where the kernel counts bandwidth only through assignable counters (`mbm_event` mode), this
//! run owns them: new groups get none from mkdir (`mbm_assign_on_mkdir` off until shutdown),
//! and at each upkeep [`crate::counters::Planner`] decides who holds one; rows say how theirs
//! was counted ([`MbmCounter`]), and a group without one reads `unassigned`, never 0.

mod assign;

use crate::{Domain, GroupReader, GroupRef, Read, ReadError, Resctrl, ResctrlError, Value};
pub use assign::CounterPolicy;
use assign::{release, Counters};
use cachescope_engine::backend::{Attach, BackendInfo, CacheBackend, RawSample, Read as Which, Sampling, SlotCounts};
use cachescope_engine::containers::{Container, ContainerSource};
use cachescope_engine::{ContainerMeta, Status, WaitReason};
use cachescope_engine::{PartError, PartResult};
use cachescope_hw::msr::{Cumulative, Event};
use cachescope_hw::CpuInfo;
use cachescope_platform::Topology;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Counts of what happened, for the header and the closing report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionStats {
    pub created: u64,
    pub removed: u64,
    pub adopted: u64,
    pub leftovers_removed: u64,
    pub recreated: u64,
    pub groups_vanished: u64,
    pub threads_moved: u64,
    pub threads_vanished: u64,
    pub threads_refused: u64,
    pub exhausted: u64,
    pub limbo_busy: u64,
    pub evicted: u64,
    pub reads: u64,
    /// Assignable counters: assignments made, released, and refused (none free).
    pub counters_assigned: u64,
    pub counters_released: u64,
    pub counters_refused: u64,
    /// Containers whose MON group another owner made (runc, an NRI plugin): read, never
    /// changed or removed.
    pub foreign: u64,
    /// Of those, containers we had tagged first (the tagger or a hook won the race with the
    /// runtime's own group): our group removed once empty, the runtime's read instead.
    pub yielded: u64,
}

struct Managed {
    meta: Arc<ContainerMeta>,
    group: GroupRef,
    generation: u64,
    reader: Option<GroupReader>,
    /// Bytes it held in the LLC at the last read (all domains): the counter plan's measure.
    occupancy: u64,
    /// Counter assignments so far of mbm_total_bytes, and of mbm_local_bytes: a new one
    /// restarts that event's count (a new generation), not the other's (a local counter
    /// assigned beside a kept total counter left the total's next row null).
    epoch_total: u64,
    epoch_local: u64,
    /// Reads since its last counter assignment (two make a figure: a baseline and a delta).
    reads_since_assign: u32,
    /// Another owner's group (the runtime made it): read only; never removed, its tasks and
    /// counters left to its owner.
    foreign: bool,
}

/// resctrl's interval when none is given.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);
/// The shortest interval resctrl sustains: each read is a syscall that takes the kernel's
/// global resctrl mutex.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1);

pub struct ContainerGroups {
    info: BackendInfo,
    rc: Resctrl,
    domains: Vec<Domain>,
    events: Vec<Event>,
    groups: BTreeMap<String, Managed>,
    /// Our groups from an earlier run, by container id: adopted on attach, else removed.
    leftovers: Option<BTreeMap<String, GroupRef>>,
    stats: SessionStats,
    scratch: Vec<Read>,
    /// CLOCK_MONOTONIC at the run's t = 0, once the engine has said (see `collect`).
    origin: Option<Duration>,
    counters: Option<Counters>,
    /// Tags young containers at their first thread (see [`crate::tagger`]).
    tagger: Option<crate::tagger::Tagger>,
}

/// The CTRL_MON group the runtime put a container in ("" = the default group) and the MON
/// group, if any: its first thread's, as /proc tells, or, on kernels without
/// /proc/PID/resctrl (CONFIG_PROC_CPU_RESCTRL, off in Debian's), as the groups' tasks files
/// tell.
fn groups_of(rc: &Resctrl, src: &dyn ContainerSource, id: &str) -> (String, Option<String>) {
    let Some(tid) = src.threads(id).ok().and_then(|t| t.first().copied()) else { return (String::new(), None) };
    rc.groups_of_thread(tid)
}

impl ContainerGroups {
    /// The backend on mount `rc`: reads its domains and events; lists our leftovers.
    /// `info`: what it says about itself (domains, widths and sampling are set here).
    pub fn new(rc: Resctrl, mut info: BackendInfo) -> Result<ContainerGroups, ResctrlError> {
        let mon = rc.info()?;
        let domains = rc.domains()?;
        // With Sub-NUMA Clustering, each node (mon_sub_L3_YY) is a domain of its rows.
        info.domains = domains.iter().flat_map(|d| if d.sub.is_empty() { vec![d.id] } else { d.sub.clone() }).collect();
        info.domains.sort_unstable();
        info.domains.dedup();
        // The kernel keeps byte counts that do not wrap.
        info.mbm_width = 64;
        info.mbm_unit = 1;
        info.sampling = Sampling::Tick;
        // Limbo is the kernel's: upkeep re-creates lost groups and moves stray threads.
        info.upkeep_every = Duration::from_millis(500);
        let leftovers = rc.our_groups()?.into_iter().map(|(g, id)| (id, g)).collect();
        let counters = Counters::start(&rc, &mon, &domains)?;
        Ok(ContainerGroups {
            info,
            rc,
            domains,
            events: mon.events(),
            groups: BTreeMap::new(),
            leftovers: Some(leftovers),
            stats: SessionStats::default(),
            scratch: Vec::new(),
            origin: None,
            counters,
            tagger: None,
        })
    }

    /// The backend on the host's mount `rc`: occupancy in `cpu`'s units where CPUID is
    /// readable (`cpu`), L3 size from `topo`.
    pub fn on_host(rc: Resctrl, cpu: Option<&CpuInfo>, topo: &Topology) -> Result<ContainerGroups, ResctrlError> {
        let cpuid = cpu.map_or("CPUID unreadable".into(), CpuInfo::summary);
        let mut info = BackendInfo::new("resctrl", cpuid, topo.l3_bytes());
        info.upscale = cpu.and_then(|c| c.monitoring.l3.as_ref()).map_or(1, |l3| u64::from(l3.upscale_factor));
        ContainerGroups::new(rc, info)
    }

    /// Where a CPU's PMU counts go, as this backend's rows name domains: its NUMA node with
    /// Sub-NUMA Clustering (the rows' domains are nodes then), else its L3 (`topo`).
    pub fn pmu_domain_of(&self, topo: &Topology) -> impl Fn(u32) -> u32 + use<> {
        let snc = self.domains.iter().any(|d| !d.sub.is_empty());
        let node = |c: u32| cachescope_platform::topology::numa_node_of(Path::new("/sys"), c);
        let nodes: HashMap<u32, u32> =
            if snc { topo.cpus.iter().filter_map(|c| Some((c.cpu, node(c.cpu)?))).collect() } else { HashMap::new() };
        let l3: HashMap<u32, u32> = topo.online_cpus().map(|c| (c, topo.domain_id_of(c))).collect();
        move |c| nodes.get(&c).or_else(|| l3.get(&c)).copied().unwrap_or(0)
    }

    /// Young containers tagged at their first thread by `tagger` (its sender goes to the
    /// cgroup watcher); stopped at shutdown before the groups go.
    pub fn with_tagger(mut self, tagger: crate::tagger::Tagger) -> ContainerGroups {
        self.tagger = Some(tagger);
        self
    }

    pub fn resctrl(&self) -> &Resctrl {
        &self.rc
    }

    pub fn domains(&self) -> &[Domain] {
        &self.domains
    }

    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    pub fn monitored(&self) -> impl Iterator<Item = (&String, &GroupRef)> {
        self.groups.iter().map(|(k, m)| (k, &m.group))
    }

    /// Create the container's group (or adopt its leftover) and assign its threads; the
    /// reason when mkdir is refused.
    fn try_create(&mut self, c: &Container, src: &dyn ContainerSource) -> Result<Option<WaitReason>, ResctrlError> {
        let id = c.id();
        if let Some(g) = self.leftovers.as_mut().and_then(|l| l.remove(id)) {
            self.stats.adopted += 1;
            // Counters it held (an earlier run's, or mkdir's) go back to the plan.
            if self.counters.is_some() {
                let doms: Vec<u32> = self.domains.iter().map(|d| d.id).collect();
                for e in ["mbm_total_bytes", "mbm_local_bytes"] {
                    release(&self.rc, &g, e, &doms)?;
                }
            }
            self.install(c, g, src)?;
            return Ok(None);
        }
        let (ctrl, mon) = groups_of(&self.rc, src, id);
        // The runtime made the container a group of its own (runc's enableMonitoring, an NRI
        // plugin): read that one, leave it to its owner.
        if let Some(name) = mon.filter(|n| crate::id_of_group(n).is_none()) {
            self.stats.foreign += 1;
            // The tagger may have made ours before the runtime moved the container into its
            // own (crun does, after the cgroup is populated): ours goes once it is empty.
            if let Ok(g) = crate::group_name(id).map(|name| GroupRef { ctrl: String::new(), name }) {
                if self.rc.group_tasks(&g).is_ok_and(|t| t.is_empty()) {
                    self.rc.remove_group(&g)?;
                    self.stats.yielded += 1;
                }
            }
            self.track(c, GroupRef { ctrl, name }, true);
            return Ok(None);
        }
        let g = match self.rc.create_group(&ctrl, id) {
            Ok(g) => g,
            Err(ResctrlError::BadId(_)) => return Ok(Some(WaitReason::BadId)),
            Err(ResctrlError::Exhausted { .. }) => {
                self.stats.exhausted += 1;
                return Ok(Some(WaitReason::Exhausted));
            }
            Err(ResctrlError::OnlyLimbo { .. }) => {
                self.stats.limbo_busy += 1;
                return Ok(Some(WaitReason::Limbo));
            }
            // Ours already (a leftover we had not seen): adopt it.
            Err(ResctrlError::Mkdir { error, .. }) if error.kind() == io::ErrorKind::AlreadyExists => {
                GroupRef { ctrl, name: crate::group_name(id)? }
            }
            Err(e) => return Err(e),
        };
        self.stats.created += 1;
        self.install(c, g, src)?;
        Ok(None)
    }

    /// Assign threads and open the counters of a group that exists.
    fn install(&mut self, c: &Container, g: GroupRef, src: &dyn ContainerSource) -> Result<(), ResctrlError> {
        let mut list = || src.threads(c.id());
        match self.rc.assign_tasks(&g, &mut list) {
            Ok(a) => {
                self.stats.threads_moved += a.moved as u64;
                self.stats.threads_vanished += a.vanished as u64;
                self.stats.threads_refused += a.refused.len() as u64;
            }
            // The group vanished under us: upkeep re-creates it.
            Err(ResctrlError::Io { error, .. }) if error.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        self.track(c, g, false);
        Ok(())
    }

    /// Open the counters of group `g` and follow it as container `c`'s (`foreign`: another
    /// owner's, read only).
    fn track(&mut self, c: &Container, g: GroupRef, foreign: bool) {
        let reader = self.rc.reader(&g, &self.domains, &self.events).ok();
        let generation = self.rc.generation(&g).unwrap_or(0);
        let m = Managed {
            meta: c.meta.clone(),
            group: g,
            generation,
            reader,
            occupancy: 0,
            epoch_total: 0,
            epoch_local: 0,
            reads_since_assign: 0,
            foreign,
        };
        self.groups.insert(c.id().to_string(), m);
    }

    /// Remove leftovers no running container claimed (once, at the first upkeep).
    fn remove_leftovers(&mut self) -> Result<(), ResctrlError> {
        let Some(left) = self.leftovers.take() else { return Ok(()) };
        if left.is_empty() {
            return Ok(());
        }
        let _lock = self.rc.lock()?;
        for g in left.values() {
            self.rc.remove_group(g)?;
            self.stats.leftovers_removed += 1;
        }
        Ok(())
    }

    /// Remove a container's group (its RMID goes to limbo in the kernel).
    fn remove(&mut self, id: &str) -> Result<(), ResctrlError> {
        // Its counters go back to the kernel with the group.
        if let Some(c) = self.counters.as_mut() {
            c.held.remove(id);
        }
        if let Some(m) = self.groups.remove(id) {
            if m.foreign {
                return Ok(());
            }
            let _lock = self.rc.lock()?;
            drop(m.reader);
            self.rc.remove_group(&m.group)?;
            self.stats.removed += 1;
        }
        Ok(())
    }

    /// Container `id`, tracked in our group `ours`, now empty, is read from `theirs` from now
    /// on; ours is removed. Call under the lock.
    fn yield_to_owner(&mut self, id: &str, ours: &GroupRef, theirs: GroupRef) {
        let Some(meta) = self.groups.get(id).map(|m| m.meta.clone()) else { return };
        if self.rc.remove_group(ours).is_err() {
            return;
        }
        if let Some(c) = self.counters.as_mut() {
            c.held.remove(id);
        }
        self.stats.yielded += 1;
        self.stats.foreign += 1;
        self.track(&Container { meta, ..Default::default() }, theirs, true);
    }

    /// Threads that joined a container's cgroup from outside (`docker exec`, `nsenter`, a
    /// process manager moving pids) do not inherit its group the way forks do: move them in.
    fn resync_tasks(&mut self, src: &dyn ContainerSource) {
        let live: Vec<(String, GroupRef)> = self
            .groups
            .iter()
            .filter(|(_, m)| m.reader.is_some() && !m.foreign)
            .map(|(k, m)| (k.clone(), m.group.clone()))
            .collect();
        let Ok(_lock) = self.rc.lock() else { return };
        for (id, g) in live {
            let (Ok(have), Ok(threads)) = (self.rc.group_tasks(&g), src.threads(&id)) else { continue };
            // A set: containers with thousands of threads are checked at every upkeep.
            let have: std::collections::HashSet<u32> = have.into_iter().collect();
            let Some(&stray) = threads.iter().find(|t| !have.contains(t)) else { continue };
            // A runtime that put the container in a MON group of its own after we made ours
            // (crun's enableMonitoring after the tagger, an NRI plugin): moving the threads back
            // would fight it. Its group wins once ours is empty (forks inherit theirs).
            if let (ctrl, Some(name)) = self.rc.groups_of_thread(stray) {
                if crate::id_of_group(&name).is_none() {
                    if have.is_empty() {
                        self.yield_to_owner(&id, &g, GroupRef { ctrl, name });
                    }
                    continue;
                }
            }
            let mut list = || src.threads(&id);
            if let Ok(a) = self.rc.assign_missing(&g, &mut list) {
                self.stats.threads_moved += a.moved as u64;
                self.stats.threads_vanished += a.vanished as u64;
                self.stats.threads_refused += a.refused.len() as u64;
            }
        }
    }
}

impl ContainerGroups {
    /// `e` as the engine judges it: a mount gone under the run (its info/ directory vanished)
    /// ends the run as unavailable; what resctrl refused while making container `id`'s group
    /// is that container's trouble; the rest failed.
    fn judge(&self, e: ResctrlError, id: Option<&str>) -> PartError {
        if !self.rc.root().join("info").is_dir() {
            return PartError::gone(format!("resctrl is no longer mounted at {}: {e}", self.rc.root().display()));
        }
        match (e, id) {
            (e @ (ResctrlError::Mkdir { .. } | ResctrlError::BadId(_) | ResctrlError::NotOurs(_)), Some(id)) => {
                PartError::container(id, e)
            }
            (e, _) => e.into(),
        }
    }

    fn attach_group(&mut self, c: &Container, src: &dyn ContainerSource) -> Result<Attach, ResctrlError> {
        let _lock = self.rc.lock()?;
        // resctrl does not say which RMID a group holds (only the debug mount does).
        Ok(match self.try_create(c, src)? {
            None => Attach::Monitored { rmid: None },
            Some(why) => Attach::Waiting(why),
        })
    }

    /// Leftovers removed, threads resynced, vanished groups re-created; those that cannot be
    /// are handed back to the RMID policy.
    fn upkeep_groups(
        &mut self,
        now: Duration,
        src: &dyn ContainerSource,
    ) -> Result<Vec<(String, WaitReason)>, ResctrlError> {
        self.remove_leftovers()?;
        self.resync_tasks(src);
        self.plan_counters(now)?;
        let lost: Vec<String> =
            self.groups.iter().filter(|(_, m)| m.reader.is_none()).map(|(k, _)| k.clone()).collect();
        let mut out = Vec::new();
        if lost.is_empty() {
            return Ok(out);
        }
        let _lock = self.rc.lock()?;
        for id in lost {
            let Some(m) = self.groups.remove(&id) else { continue };
            // Whatever is left of it is ours (another owner's is theirs); start over.
            if !m.foreign {
                self.rc.remove_group(&m.group)?;
            }
            let c = Container { meta: m.meta.clone(), ..Default::default() };
            match self.try_create(&c, src)? {
                None => self.stats.recreated += 1,
                Some(why) => out.push((id, why)),
            }
        }
        Ok(out)
    }

    /// Our groups removed, and the kernel's mbm_assign_on_mkdir as it was before the run.
    fn remove_all(&mut self) -> Result<(), ResctrlError> {
        let ids: Vec<String> = self.groups.keys().cloned().collect();
        for id in ids {
            self.remove(&id)?;
        }
        self.remove_leftovers()?;
        if let Some(c) = &self.counters {
            if c.on_mkdir_before == Some(true) {
                self.rc.set_assign_on_mkdir(true)?;
                // Absent where noting it failed (said at start).
                std::fs::remove_file(assign::ON_MKDIR_NOTE).ok();
            }
        }
        Ok(())
    }
}

impl CacheBackend for ContainerGroups {
    fn info(&self) -> &BackendInfo {
        &self.info
    }

    fn origin(&mut self, monotonic: Duration) {
        self.origin = Some(monotonic);
    }

    fn attach(&mut self, c: &Container, src: &dyn ContainerSource, _: Duration) -> PartResult<Attach> {
        if self.groups.contains_key(c.id()) {
            return Ok(Attach::Monitored { rmid: None });
        }
        self.attach_group(c, src).map_err(|e| self.judge(e, Some(c.id())))
    }

    fn detach(&mut self, id: &str, _: Duration) -> PartResult {
        self.remove(id).map_err(|e| self.judge(e, None))
    }

    /// Every group's counters: one sample per container and domain; a group that cannot be
    /// read (someone removed it) gives `error` samples and is re-created at the next upkeep.
    /// Each sample carries the time its MBM total was read (else its first value): the kernel
    /// reads a counter when asked, and on a loaded host the reads of many groups (or a late
    /// wake-up) take milliseconds that `now` alone would move into the next interval.
    fn collect(&mut self, now: Duration, want: Which<'_>, out: &mut Vec<RawSample>) -> PartResult {
        let mut vanished = Vec::new();
        let origin = self.origin;
        let held = self.counters.as_ref().map(|c| &c.held);
        let (scratch, stats, domains) = (&mut self.scratch, &mut self.stats, &self.info.domains);
        let read_all = want.each_mut(&mut self.groups, |id, m| -> Result<(), std::convert::Infallible> {
            let read = match &mut m.reader {
                Some(r) => r.read_all(scratch),
                None => Err(ReadError::Gone),
            };
            stats.reads += scratch.len() as u64;
            if read.is_err() {
                vanished.push(id.to_string());
                for &d in domains {
                    out.push(RawSample { status: Status::Error, ..RawSample::new(m.meta.clone(), d, now) });
                }
                return Ok(());
            }
            m.reads_since_assign = m.reads_since_assign.saturating_add(1);
            m.occupancy = scratch
                .iter()
                .filter(|r| r.event == Event::L3Occupancy)
                .filter_map(|r| if let Value::Bytes(b) = r.value { Some(b) } else { None })
                .sum();
            let counter = held.map(|h| h.get(id).map(|(how, _)| *how));
            let generation = |epoch: u64| m.generation ^ (epoch << 40);
            for &d in domains {
                let mut s = RawSample::new(m.meta.clone(), d, now);
                s.mbm_counter = counter.flatten();
                let reads = scratch.iter().filter(|r| r.domain == d);
                let when = reads.clone().find(|r| r.event == Event::MbmTotal).or_else(|| reads.clone().next());
                if let (Some(r), Some(o)) = (when, origin) {
                    s.at = now.max(r.at.saturating_sub(o));
                }
                // With assignable counters, local may have none while total has one (the plan
                // gives local counters only when everyone can have both): that row's status
                // is total's, and its local bandwidth null.
                let total_counted =
                    reads.clone().any(|r| r.event == Event::MbmTotal && matches!(r.value, Value::Bytes(_)));
                for r in reads {
                    let st = r.value.status();
                    let local_only = r.event == Event::MbmLocal && st == Status::Unassigned && total_counted;
                    if rank(st) > rank(s.status) && !local_only {
                        s.status = st;
                    }
                    let Value::Bytes(b) = r.value else { continue };
                    let cum = |epoch| Some(Cumulative { generation: generation(epoch), value: b });
                    match r.event {
                        Event::L3Occupancy => s.occupancy_bytes = Some(b),
                        Event::MbmTotal => s.mbm_total = cum(m.epoch_total),
                        Event::MbmLocal => s.mbm_local = cum(m.epoch_local),
                    }
                }
                out.push(s);
            }
            Ok(())
        });
        read_all.unwrap_or_else(|e| match e {});
        for id in vanished {
            if let Some(m) = self.groups.get_mut(&id) {
                if m.reader.take().is_some() {
                    self.stats.groups_vanished += 1;
                }
            }
        }
        Ok(())
    }

    fn upkeep(&mut self, now: Duration, src: &dyn ContainerSource) -> PartResult<Vec<(String, WaitReason)>> {
        self.upkeep_groups(now, src).map_err(|e| self.judge(e, None))
    }

    fn slots(&self) -> SlotCounts {
        // The kernel holds freed RMIDs in limbo without saying how many (only a refused
        // mkdir tells that some are).
        SlotCounts { in_use: self.groups.len() as u64, limbo: None }
    }

    fn header(&self) -> Vec<String> {
        let mut out = vec![format!("groups={} reads={}", self.groups.len(), self.stats.reads)];
        out.extend(self.counters_header());
        out
    }

    fn shutdown(&mut self) -> PartResult<Vec<String>> {
        // First, so that it makes no group once ours are gone.
        let tagger = self.tagger.take();
        let tagged = tagger.as_ref().map(|t| {
            let s = t.stats();
            let n = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
            (n(&s.tagged), n(&s.threads_moved), n(&s.left))
        });
        drop(tagger);
        self.remove_all().map_err(|e| self.judge(e, None))?;
        let st = &self.stats;
        let mut out = Vec::new();
        if self.counters.is_some() {
            out.push(format!(
                "MBM counters: {} assigned, {} released, {} refused (none free)",
                st.counters_assigned, st.counters_released, st.counters_refused
            ));
        }
        if let Some((tagged, threads, left)) = tagged {
            out.push(format!(
                "young containers tagged at their first thread: {tagged} ({threads} threads moved; {left} left to their owner or the RMID policy)"
            ));
        }
        if st.foreign > 0 {
            out.push(format!(
                "containers in another owner's group (read, left as found): {} ({} after we had tagged them: ours removed)",
                st.foreign, st.yielded
            ));
        }
        if st.adopted + st.leftovers_removed > 0 {
            out.push(format!(
                "groups left by an earlier run: {} adopted, {} removed",
                st.adopted, st.leftovers_removed
            ));
        }
        Ok(out)
    }
}

/// Status severity: the row's status is its worst counter's.
fn rank(s: Status) -> u8 {
    match s {
        Status::Error => 4,
        Status::Unavailable => 3,
        Status::Unassigned => 2,
        _ => 1,
    }
}
