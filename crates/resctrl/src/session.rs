//! Containers to MON groups: created on start, threads assigned, counters read, removed on
//! stop; RMID exhaustion and limbo handled as states, with a budget that gives scarce RMIDs to
//! the containers using the most CPU.

use crate::{Domain, GroupReader, GroupRef, Read, ReadError, Resctrl, ResctrlError, Value};
use cachescope_hw::msr::{cumulative_delta, Cumulative, Event};
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::time::Duration;

/// What the session needs to know about containers, from the cgroup tree (or a test).
pub trait Containers {
    /// Thread ids of the container now (empty when it is gone).
    fn threads(&self, id: &str) -> io::Result<Vec<u32>>;
    /// CPU time used so far in µs (cgroup `cpu.stat` usage_usec); None when unknown.
    fn cpu_usage_usec(&self, id: &str) -> Option<u64>;
    /// The CTRL_MON group the runtime put the container in ("" = the default group).
    fn ctrl_group(&self, _id: &str) -> String {
        String::new()
    }
}

/// Why a container has no group (its rows say `no_rmid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitReason {
    /// mkdir said ENOSPC: every RMID is held.
    NoRmid,
    /// mkdir said EBUSY: the free RMIDs are still in limbo.
    Limbo,
    /// Its group was removed to give the RMID to a busier container.
    Evicted,
    /// Its id cannot be a group name (refused, never sanitized into a path).
    BadId,
}

impl WaitReason {
    pub fn name(self) -> &'static str {
        match self {
            WaitReason::NoRmid => "rmids exhausted",
            WaitReason::Limbo => "rmids in limbo",
            WaitReason::Evicted => "evicted for a busier container",
            WaitReason::BadId => "id refused as a group name",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    pub reason: WaitReason,
    pub since: Duration,
}

/// Budget policy knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// A waiting container replaces a monitored one only when it uses this much more CPU
    /// (relative) ...
    pub margin: f64,
    /// ... and at least this many more cores (absolute), so idle noise never causes churn.
    pub min_cpu_gap: f64,
    /// A container keeps its group at least this long once it has one.
    pub min_hold: Duration,
    /// At most this many replacements per [`ContainerGroups::maintain`].
    pub max_swaps: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { margin: 0.5, min_cpu_gap: 0.05, min_hold: Duration::from_secs(5), max_swaps: 4 }
    }
}

/// Which monitored containers to evict for which waiting ones: the busiest waiting replace the
/// least busy monitored (that have held their group for `min_hold`), while the gap is worth
/// it. Inputs: (id, cores used) and, for monitored, how long each has held its group.
pub fn swaps(monitored: &[(String, f64, Duration)], waiting: &[(String, f64)], p: &Policy) -> Vec<(String, String)> {
    let mut m: Vec<&(String, f64, Duration)> = monitored.iter().filter(|x| x.2 >= p.min_hold).collect();
    m.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut w: Vec<&(String, f64)> = waiting.iter().collect();
    w.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    m.iter()
        .zip(w.iter())
        .take(p.max_swaps)
        .take_while(|(m, w)| w.1 > m.1 * (1.0 + p.margin) + p.min_cpu_gap)
        .map(|(m, w)| (m.0.clone(), w.0.clone()))
        .collect()
}

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
}

/// One container in one domain for one interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSample {
    pub container: String,
    pub domain: u32,
    /// `ok`, `error`, `unavailable`, `unassigned`, `no_rmid` (DESIGN.md §5.3).
    pub status: &'static str,
    pub occupancy_bytes: Option<u64>,
    /// Bytes during the interval; None without a baseline or a value.
    pub mbm_total_bytes: Option<u64>,
    pub mbm_local_bytes: Option<u64>,
}

struct Managed {
    group: GroupRef,
    generation: u64,
    reader: Option<GroupReader>,
    since: Duration,
    prev: HashMap<(u32, Event), Cumulative>,
}

pub struct ContainerGroups {
    rc: Resctrl,
    domains: Vec<Domain>,
    events: Vec<Event>,
    groups: BTreeMap<String, Managed>,
    waiting: BTreeMap<String, Waiting>,
    cpu_prev: HashMap<String, (u64, Duration)>,
    cpu_rate: HashMap<String, f64>,
    pub policy: Policy,
    stats: SessionStats,
    scratch: Vec<Read>,
}

/// Status severity: the row's status is its worst counter's.
fn rank(s: &str) -> u8 {
    match s {
        "error" => 4,
        "unavailable" => 3,
        "unassigned" => 2,
        _ => 1,
    }
}

impl ContainerGroups {
    /// A session on mount `rc`: reads its domains and events.
    pub fn new(rc: Resctrl) -> Result<ContainerGroups, ResctrlError> {
        let info = rc.info()?;
        let domains = rc.domains()?;
        Ok(ContainerGroups {
            rc,
            domains,
            events: info.events(),
            groups: BTreeMap::new(),
            waiting: BTreeMap::new(),
            cpu_prev: HashMap::new(),
            cpu_rate: HashMap::new(),
            policy: Policy::default(),
            stats: SessionStats::default(),
            scratch: Vec::new(),
        })
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

    /// Containers without a group and why: the ones that went without.
    pub fn waiting(&self) -> &BTreeMap<String, Waiting> {
        &self.waiting
    }

    /// Deal with our groups from an earlier run: adopt those whose container still runs
    /// (threads re-assigned, counters re-baselined), remove the rest so their RMIDs return.
    /// Other agents' groups are not touched. Returns (adopted, removed).
    pub fn adopt_leftovers(
        &mut self,
        running: &[String],
        src: &dyn Containers,
        now: Duration,
    ) -> Result<(usize, usize), ResctrlError> {
        let _lock = self.rc.lock()?;
        let (mut adopted, mut removed) = (0, 0);
        for (g, id) in self.rc.our_groups()? {
            if running.contains(&id) && !self.groups.contains_key(&id) {
                self.install(&id, g, src, now)?;
                adopted += 1;
            } else {
                self.rc.remove_group(&g)?;
                removed += 1;
            }
        }
        self.stats.adopted += adopted as u64;
        self.stats.leftovers_removed += removed as u64;
        Ok((adopted, removed))
    }

    /// A container started: give it a group, or put it in the waiting list with the reason.
    /// Returns whether it has a group now.
    pub fn start(&mut self, id: &str, src: &dyn Containers, now: Duration) -> Result<bool, ResctrlError> {
        if self.groups.contains_key(id) {
            return Ok(true);
        }
        let _lock = self.rc.lock()?;
        self.try_create(id, src, now)
    }

    fn try_create(&mut self, id: &str, src: &dyn Containers, now: Duration) -> Result<bool, ResctrlError> {
        let ctrl = src.ctrl_group(id);
        let wait = |s: &mut Self, reason| {
            let since = s.waiting.get(id).filter(|w| w.reason == reason).map_or(now, |w| w.since);
            s.waiting.insert(id.to_string(), Waiting { reason, since });
            Ok(false)
        };
        let g = match self.rc.create_group(&ctrl, id) {
            Ok(g) => g,
            Err(ResctrlError::BadId(_)) => return wait(self, WaitReason::BadId),
            Err(ResctrlError::Exhausted { .. }) => {
                self.stats.exhausted += 1;
                return wait(self, WaitReason::NoRmid);
            }
            Err(ResctrlError::OnlyLimbo { .. }) => {
                self.stats.limbo_busy += 1;
                return wait(self, WaitReason::Limbo);
            }
            // Ours already (a leftover we had not seen): adopt it.
            Err(ResctrlError::Mkdir { error, .. }) if error.kind() == io::ErrorKind::AlreadyExists => {
                GroupRef { ctrl, name: crate::group_name(id)? }
            }
            Err(e) => return Err(e),
        };
        self.stats.created += 1;
        self.install(id, g, src, now)?;
        Ok(true)
    }

    /// Assign threads and open the counters of a group that exists.
    fn install(&mut self, id: &str, g: GroupRef, src: &dyn Containers, now: Duration) -> Result<(), ResctrlError> {
        let mut list = || src.threads(id);
        match self.rc.assign_tasks(&g, &mut list) {
            Ok(a) => {
                self.stats.threads_moved += a.moved as u64;
                self.stats.threads_vanished += a.vanished as u64;
                self.stats.threads_refused += a.refused.len() as u64;
            }
            // The group vanished under us: maintain() re-creates it.
            Err(ResctrlError::Io { error, .. }) if error.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let reader = self.rc.reader(&g, &self.domains, &self.events).ok();
        let generation = self.rc.generation(&g).unwrap_or(0);
        self.waiting.remove(id);
        self.groups.insert(id.to_string(), Managed { group: g, generation, reader, since: now, prev: HashMap::new() });
        Ok(())
    }

    /// A container stopped: remove its group (its RMID goes to limbo in the kernel).
    pub fn stop(&mut self, id: &str) -> Result<(), ResctrlError> {
        self.waiting.remove(id);
        self.cpu_prev.remove(id);
        self.cpu_rate.remove(id);
        if let Some(m) = self.groups.remove(id) {
            let _lock = self.rc.lock()?;
            drop(m.reader);
            self.rc.remove_group(&m.group)?;
            self.stats.removed += 1;
        }
        Ok(())
    }

    /// Remove every group we hold (at exit).
    pub fn stop_all(&mut self) -> Result<(), ResctrlError> {
        let ids: Vec<String> = self.groups.keys().cloned().collect();
        for id in ids {
            self.stop(&id)?;
        }
        self.waiting.clear();
        Ok(())
    }

    /// Read every group's counters: one row per container and domain, including `no_rmid`
    /// rows for the containers waiting for a group.
    pub fn sample(&mut self) -> Vec<GroupSample> {
        let mut out = Vec::with_capacity((self.groups.len() + self.waiting.len()) * self.domains.len());
        let mut vanished = Vec::new();
        for (id, m) in &mut self.groups {
            let read = match &mut m.reader {
                Some(r) => r.read_all(&mut self.scratch),
                None => Err(ReadError::Gone),
            };
            self.stats.reads += self.scratch.len() as u64;
            if read.is_err() {
                // Gone (someone removed it) or unreadable: this interval has no data.
                vanished.push(id.clone());
                for d in &self.domains {
                    out.push(GroupSample {
                        container: id.clone(),
                        domain: d.id,
                        status: "error",
                        occupancy_bytes: None,
                        mbm_total_bytes: None,
                        mbm_local_bytes: None,
                    });
                }
                continue;
            }
            for d in &self.domains {
                let mut s = GroupSample {
                    container: id.clone(),
                    domain: d.id,
                    status: "ok",
                    occupancy_bytes: None,
                    mbm_total_bytes: None,
                    mbm_local_bytes: None,
                };
                for r in self.scratch.iter().filter(|r| r.domain == d.id) {
                    if rank(r.value.status()) > rank(s.status) {
                        s.status = r.value.status();
                    }
                    let Value::Bytes(b) = r.value else { continue };
                    match r.event {
                        Event::L3Occupancy => s.occupancy_bytes = Some(b),
                        ev => {
                            let cur = Cumulative { generation: m.generation, value: b };
                            let delta = cumulative_delta(m.prev.get(&(d.id, ev)).copied(), cur, 64);
                            m.prev.insert((d.id, ev), cur);
                            if ev == Event::MbmTotal {
                                s.mbm_total_bytes = delta;
                            } else {
                                s.mbm_local_bytes = delta;
                            }
                        }
                    }
                }
                out.push(s);
            }
        }
        for id in vanished {
            if let Some(m) = self.groups.get_mut(&id) {
                if m.reader.take().is_some() {
                    self.stats.groups_vanished += 1;
                }
            }
        }
        for id in self.waiting.keys() {
            for d in &self.domains {
                out.push(GroupSample {
                    container: id.clone(),
                    domain: d.id,
                    status: "no_rmid",
                    occupancy_bytes: None,
                    mbm_total_bytes: None,
                    mbm_local_bytes: None,
                });
            }
        }
        out
    }

    /// Periodic upkeep (every 100 ms to 1 s): measure CPU use, re-create groups that vanished,
    /// give free RMIDs to the busiest waiting containers, and replace idle monitored
    /// containers with busy waiting ones under [`Policy`].
    /// Threads that joined a container's cgroup from outside (`docker exec`, `nsenter`, a
    /// process manager moving pids) do not inherit its group the way forks do: move them in.
    fn resync_tasks(&mut self, src: &dyn Containers) {
        let live: Vec<(String, GroupRef)> =
            self.groups.iter().filter(|(_, m)| m.reader.is_some()).map(|(k, m)| (k.clone(), m.group.clone())).collect();
        let Ok(_lock) = self.rc.lock() else { return };
        for (id, g) in live {
            let Ok(have) = self.rc.group_tasks(&g) else { continue };
            let have: std::collections::HashSet<u32> = have.into_iter().collect();
            let mut missing = || src.threads(&id).map(|t| t.into_iter().filter(|x| !have.contains(x)).collect());
            if let Ok(a) = self.rc.assign_tasks(&g, &mut missing) {
                self.stats.threads_moved += a.moved as u64;
                self.stats.threads_vanished += a.vanished as u64;
                self.stats.threads_refused += a.refused.len() as u64;
            }
        }
    }

    pub fn maintain(&mut self, src: &dyn Containers, now: Duration) -> Result<(), ResctrlError> {
        let ids: Vec<String> = self.groups.keys().chain(self.waiting.keys()).cloned().collect();
        for id in &ids {
            if let Some(u) = src.cpu_usage_usec(id) {
                if let Some((pu, pt)) = self.cpu_prev.insert(id.clone(), (u, now)) {
                    let dt = now.saturating_sub(pt).as_secs_f64();
                    if dt > 0.0 {
                        self.cpu_rate.insert(id.clone(), u.saturating_sub(pu) as f64 / 1e6 / dt);
                    }
                }
            }
        }
        self.resync_tasks(src);
        let lost: Vec<String> =
            self.groups.iter().filter(|(_, m)| m.reader.is_none()).map(|(k, _)| k.clone()).collect();
        if lost.is_empty() && self.waiting.is_empty() {
            return Ok(());
        }
        let _lock = self.rc.lock()?;
        for id in lost {
            if let Some(m) = self.groups.remove(&id) {
                // Whatever is left of it is ours; start over with a fresh group.
                self.rc.remove_group(&m.group)?;
                if self.try_create(&id, src, now)? {
                    self.stats.recreated += 1;
                }
            }
        }
        let cpu = |s: &Self, id: &str| s.cpu_rate.get(id).copied().unwrap_or(0.0);
        let mut order: Vec<(String, f64)> = self
            .waiting
            .iter()
            .filter(|(_, w)| w.reason != WaitReason::BadId)
            .map(|(k, _)| (k.clone(), cpu(self, k)))
            .collect();
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut blocked = false;
        for (id, _) in &order {
            if !self.try_create(id, src, now)? {
                blocked = true;
                break;
            }
        }
        if !blocked {
            return Ok(());
        }
        // Free RMIDs are gone: should a busier waiting container replace an idle one?
        let monitored: Vec<(String, f64, Duration)> =
            self.groups.iter().map(|(k, m)| (k.clone(), cpu(self, k), now.saturating_sub(m.since))).collect();
        let waiting: Vec<(String, f64)> = self
            .waiting
            .iter()
            .filter(|(_, w)| matches!(w.reason, WaitReason::NoRmid | WaitReason::Evicted))
            .map(|(k, _)| (k.clone(), cpu(self, k)))
            .collect();
        for (evict, admit) in swaps(&monitored, &waiting, &self.policy) {
            if let Some(m) = self.groups.remove(&evict) {
                drop(m.reader);
                self.rc.remove_group(&m.group)?;
                self.stats.evicted += 1;
                self.waiting.insert(evict.clone(), Waiting { reason: WaitReason::Evicted, since: now });
            }
            // Usually EBUSY now (the freed RMID is dirty): it waits as Limbo and wins the
            // next retry, being the busiest.
            self.try_create(&admit, src, now)?;
        }
        Ok(())
    }
}
