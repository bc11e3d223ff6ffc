//! The resctrl semantics, apart from FUSE: a tree of nodes, groups with RMIDs from the
//! allocator (limbo included), tasks, and counter reads through the emulated MSRs, the way
//! the kernel reads them (EVTSEL write, CTR read on a CPU of the domain, MBM accumulated
//! wrap-free in 64 bits). Errors are errnos, as the kernel's.

use cachescope_emu::EmuPlatform;
use cachescope_hw::cpulist;
use cachescope_hw::msr::{wrapping_delta, Event, EvtSel, MsrDevice, QmCtr, IA32_QM_CTR, IA32_QM_EVTSEL};
use cachescope_rmid::{AllocError, Allocator, Config};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod files;

pub type Ino = u64;
pub type Gid = u32;
pub const ROOT_INO: Ino = 1;
const DEFAULT_GROUP: Gid = 0;

/// Whether a thread id exists, and which emulated workload (scenario container) it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskLookup {
    Missing,
    Exists(Option<String>),
}

/// Maps a thread id to [`TaskLookup`] (real /proc lookups in production, a table in tests).
pub type TaskResolver = Box<dyn Fn(u32) -> TaskLookup + Send + Sync>;

/// How the emulated mount looks.
#[derive(Debug, Clone)]
pub struct Options {
    /// Cache ids of the emulated L3 domains, in order (gaps allowed); default 0, 1, ...
    pub domain_ids: Option<Vec<u32>>,
    /// Sub-NUMA clustering: nodes per L3 domain (1 = off). Adds `mon_sub_L3_YY` directories.
    pub snc: u32,
    /// Assignable MBM counters per domain (AMD ABMC, `mbm_assign_mode`); None = every group counts.
    pub mbm_counters: Option<u32>,
    /// Least time a freed RMID stays in limbo.
    pub min_limbo: Duration,
    /// Advance the emulated platform with the wall clock (false: the caller advances it).
    pub wall_clock: bool,
    /// CTRL_MON groups that may exist besides the default one (CLOSIDs - 1).
    pub max_ctrl_groups: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            domain_ids: None,
            snc: 1,
            mbm_counters: None,
            min_limbo: Duration::from_millis(100),
            wall_clock: true,
            max_ctrl_groups: 15,
        }
    }
}

/// A fault to inject into reads of one group's counters in one domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Error,
    Unavailable,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    /// The root: mkdir here makes a CTRL_MON group.
    Root,
    /// `mon_groups` of a CTRL_MON group: mkdir here makes a MON group.
    MonGroups(Gid),
    /// A group's directory (rmdir target).
    Group(Gid),
    Tasks(Gid),
    Cpus(Gid),
    CpusList(Gid),
    Mon {
        gid: Gid,
        dom: usize,
        sub: Option<u32>,
        event: Event,
    },
    LastCmdStatus,
    NumRmids,
    MonFeatures,
    Threshold,
    AssignMode,
    NumCntrs,
    AvailCntrs,
}

impl Kind {
    pub fn is_dir(self) -> bool {
        matches!(self, Kind::Dir | Kind::Root | Kind::MonGroups(_) | Kind::Group(_))
    }
}

struct Group {
    /// Relative path of its directory ("" for the default group).
    path: String,
    /// The CTRL_MON group it belongs to (itself for CTRL_MON groups).
    ctrl: Gid,
    rmid: u32,
    /// MBM state per (domain index, event): last raw count, accumulated counts.
    mbm: HashMap<(usize, Event), (Option<u64>, u64)>,
    counters: bool,
}

pub struct State {
    platform: Arc<EmuPlatform>,
    opts: Options,
    resolver: TaskResolver,
    domain_ids: Vec<u32>,
    domain_cpu: Vec<u32>,
    events: Vec<Event>,
    groups: BTreeMap<Gid, Group>,
    next_gid: Gid,
    alloc: Allocator<Gid>,
    tasks: HashMap<u32, Gid>,
    nodes: HashMap<Ino, (String, Kind)>,
    paths: BTreeMap<String, Ino>,
    next_ino: Ino,
    last_cmd: String,
    faults: HashMap<(String, u32), Fault>,
    threshold: u64,
    counters_free: Vec<u32>,
    start: Instant,
    last_upkeep: Duration,
    /// Every mon_data read (for benchmarks).
    pub reads: u64,
}

fn errno_of(e: &AllocError) -> i32 {
    match e {
        AllocError::Exhausted { .. } => libc::ENOSPC,
        AllocError::OnlyLimbo { .. } => libc::EBUSY,
        _ => libc::EINVAL,
    }
}

impl State {
    pub fn new(platform: Arc<EmuPlatform>, opts: Options, resolver: TaskResolver) -> Result<State, String> {
        let doms = platform.domains();
        let domain_ids = match &opts.domain_ids {
            Some(ids) if ids.len() != doms.len() => {
                return Err(format!("{} domain ids given for {} emulated domains", ids.len(), doms.len()))
            }
            Some(ids) => ids.clone(),
            None => doms.iter().map(|d| d.0).collect(),
        };
        if opts.snc == 0 {
            return Err("snc must be at least 1".into());
        }
        let domain_cpu = doms.iter().map(|d| d.1.first().copied().unwrap_or(0)).collect();
        let l3 = platform.l3().clone();
        let events: Vec<Event> =
            [(Event::L3Occupancy, l3.occupancy), (Event::MbmTotal, l3.mbm_total), (Event::MbmLocal, l3.mbm_local)]
                .into_iter()
                .filter(|x| x.1)
                .map(|x| x.0)
                .collect();
        // Linux: L3 size / number of RMIDs, rounded down to the upscale unit.
        let up = u64::from(l3.upscale_factor.max(1));
        let threshold = Config::default_threshold(platform.l3_bytes(), l3.max_rmid) / up * up;
        let cfg = Config { max_rmid: l3.max_rmid, threshold_bytes: threshold, min_limbo: opts.min_limbo };
        let alloc = Allocator::new(&(0..doms.len() as u32).collect::<Vec<_>>(), cfg);
        let counters_free = vec![opts.mbm_counters.unwrap_or(0); doms.len()];
        let mut st = State {
            platform,
            opts,
            resolver,
            domain_ids,
            domain_cpu,
            events,
            groups: BTreeMap::new(),
            next_gid: 1,
            alloc,
            tasks: HashMap::new(),
            nodes: HashMap::new(),
            paths: BTreeMap::new(),
            next_ino: ROOT_INO + 1,
            last_cmd: "ok".into(),
            faults: HashMap::new(),
            threshold,
            counters_free,
            start: Instant::now(),
            last_upkeep: Duration::ZERO,
            reads: 0,
        };
        st.nodes.insert(ROOT_INO, (String::new(), Kind::Root));
        st.paths.insert(String::new(), ROOT_INO);
        for (p, k) in [
            ("info", Kind::Dir),
            ("info/last_cmd_status", Kind::LastCmdStatus),
            ("info/L3_MON", Kind::Dir),
            ("info/L3_MON/num_rmids", Kind::NumRmids),
            ("info/L3_MON/mon_features", Kind::MonFeatures),
            ("info/L3_MON/max_threshold_occupancy", Kind::Threshold),
        ] {
            st.add(p, k);
        }
        if st.opts.mbm_counters.is_some() {
            st.add("info/L3_MON/mbm_assign_mode", Kind::AssignMode);
            st.add("info/L3_MON/num_mbm_cntrs", Kind::NumCntrs);
            st.add("info/L3_MON/available_mbm_cntrs", Kind::AvailCntrs);
        }
        st.groups.insert(
            DEFAULT_GROUP,
            Group { path: String::new(), ctrl: DEFAULT_GROUP, rmid: 0, mbm: HashMap::new(), counters: true },
        );
        st.add_group_nodes(DEFAULT_GROUP, true);
        Ok(st)
    }

    fn add(&mut self, path: &str, kind: Kind) -> Ino {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(ino, (path.to_string(), kind));
        self.paths.insert(path.to_string(), ino);
        ino
    }

    fn join(a: &str, b: &str) -> String {
        if a.is_empty() {
            b.to_string()
        } else {
            format!("{a}/{b}")
        }
    }

    fn add_group_nodes(&mut self, gid: Gid, ctrl_mon: bool) {
        let base = self.groups[&gid].path.clone();
        if !base.is_empty() {
            self.add(&base, Kind::Group(gid));
        }
        self.add(&Self::join(&base, "tasks"), Kind::Tasks(gid));
        self.add(&Self::join(&base, "cpus"), Kind::Cpus(gid));
        self.add(&Self::join(&base, "cpus_list"), Kind::CpusList(gid));
        if ctrl_mon {
            self.add(&Self::join(&base, "mon_groups"), Kind::MonGroups(gid));
        }
        let md = Self::join(&base, "mon_data");
        self.add(&md, Kind::Dir);
        for dom in 0..self.domain_ids.len() {
            let dd = format!("{md}/mon_L3_{:02}", self.domain_ids[dom]);
            self.add(&dd, Kind::Dir);
            for &event in &self.events.clone() {
                self.add(&format!("{dd}/{}", event.name()), Kind::Mon { gid, dom, sub: None, event });
            }
            if self.opts.snc > 1 {
                for j in 0..self.opts.snc {
                    let sd = format!("{dd}/mon_sub_L3_{:02}", dom as u32 * self.opts.snc + j);
                    self.add(&sd, Kind::Dir);
                    for &event in &self.events.clone() {
                        self.add(&format!("{sd}/{}", event.name()), Kind::Mon { gid, dom, sub: Some(j), event });
                    }
                }
            }
        }
    }

    fn remove_tree(&mut self, path: &str) {
        let prefix = format!("{path}/");
        let doomed: Vec<String> = self
            .paths
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
            .map(|(p, _)| p.clone())
            .collect();
        for p in doomed.iter().chain(std::iter::once(&path.to_string())) {
            if let Some(ino) = self.paths.remove(p) {
                self.nodes.remove(&ino);
            }
        }
    }

    pub fn node(&self, ino: Ino) -> Option<(&str, Kind)> {
        self.nodes.get(&ino).map(|(p, k)| (p.as_str(), *k))
    }

    pub fn lookup(&self, parent: Ino, name: &str) -> Option<(Ino, Kind)> {
        let (p, _) = self.nodes.get(&parent)?;
        let ino = *self.paths.get(&Self::join(p, name))?;
        Some((ino, self.nodes.get(&ino)?.1))
    }

    /// Children of a directory: (ino, kind, name).
    pub fn children(&self, dir: Ino) -> Vec<(Ino, Kind, String)> {
        let Some((p, _)) = self.nodes.get(&dir) else { return Vec::new() };
        let prefix = if p.is_empty() { String::new() } else { format!("{p}/") };
        self.paths
            .range(prefix.clone()..)
            .take_while(|(q, _)| q.starts_with(&prefix))
            .filter(|(q, _)| !q.is_empty() && !q[prefix.len()..].contains('/'))
            .filter_map(|(q, ino)| Some((*ino, self.nodes.get(ino)?.1, q[prefix.len()..].to_string())))
            .collect()
    }

    /// From now on follow the wall clock, continuing from the platform's present time (a
    /// platform held still until its containers' groups exist).
    pub fn follow_wall_clock(&mut self) {
        self.opts.wall_clock = true;
        let now = self.platform.now();
        self.start = Instant::now().checked_sub(now).unwrap_or_else(Instant::now);
    }

    /// Keep time and the kernel's background work: follow the wall clock (when asked), refresh
    /// limbo and fold MBM counts once per emulated second (the kernel's overflow handler).
    pub fn tick(&mut self) {
        if self.opts.wall_clock {
            self.platform.advance_to(self.start.elapsed());
        }
        let now = self.platform.now();
        if now.saturating_sub(self.last_upkeep) >= Duration::from_secs(1) {
            self.last_upkeep = now;
            self.check_limbo();
            let gids: Vec<Gid> = self.groups.keys().copied().collect();
            for gid in gids {
                for dom in 0..self.domain_ids.len() {
                    for ev in [Event::MbmTotal, Event::MbmLocal] {
                        if self.events.contains(&ev) {
                            let _ = self.mbm_count(gid, dom, ev);
                        }
                    }
                }
            }
        }
    }

    fn read_ctr(&self, dom: usize, rmid: u32, event: Event) -> QmCtr {
        let cpu = self.domain_cpu[dom];
        let max = self.platform.cpu_info().monitoring.max_rmid_any.unwrap_or(0);
        let Ok(sel) = EvtSel::new(event, rmid, max) else { return QmCtr::Error };
        if self.platform.write(cpu, IA32_QM_EVTSEL, sel.encode()).is_err() {
            return QmCtr::Error;
        }
        match self.platform.read(cpu, IA32_QM_CTR) {
            Ok(raw) => QmCtr::decode(raw, self.platform.l3().overflow_bit),
            Err(_) => QmCtr::Error,
        }
    }

    fn check_limbo(&mut self) {
        let now = self.platform.now();
        let up = u64::from(self.platform.l3().upscale_factor);
        for dom in 0..self.domain_ids.len() as u32 {
            for rmid in self.alloc.limbo(dom) {
                let bytes = match self.read_ctr(dom as usize, rmid, Event::L3Occupancy) {
                    QmCtr::Data { count, .. } => count * up,
                    _ => 0,
                };
                self.alloc.report_occupancy(dom, rmid, bytes, now);
            }
        }
    }

    /// Accumulated MBM counts of a group in a domain, as the kernel keeps them (64-bit).
    fn mbm_count(&mut self, gid: Gid, dom: usize, event: Event) -> Result<u64, QmCtr> {
        let width = self.platform.counter_width();
        let rmid = self.groups.get(&gid).map_or(0, |g| g.rmid);
        let ctr = self.read_ctr(dom, rmid, event);
        let Some(g) = self.groups.get_mut(&gid) else { return Err(QmCtr::Error) };
        let e = g.mbm.entry((dom, event)).or_insert((None, 0));
        match ctr {
            QmCtr::Data { count, .. } => {
                e.1 += wrapping_delta(e.0.unwrap_or(0), count, width);
                e.0 = Some(count);
                Ok(e.1)
            }
            other => Err(other),
        }
    }

    /// mkdir: a CTRL_MON group in the root, a MON group in `mon_groups`.
    pub fn mkdir(&mut self, parent: Ino, name: &str) -> Result<Ino, i32> {
        self.last_cmd = "ok".into();
        let (ppath, pkind) = self.nodes.get(&parent).cloned().ok_or(libc::ENOENT)?;
        let ctrl = match pkind {
            Kind::Root => None,
            Kind::MonGroups(c) => Some(c),
            _ => return Err(libc::EPERM),
        };
        if name.contains('\n') {
            self.fail(libc::EINVAL, "Group name may not contain newline".into())?;
        }
        let path = Self::join(&ppath, name);
        if self.paths.contains_key(&path) {
            return Err(libc::EEXIST);
        }
        if ctrl.is_none() {
            let n = self.groups.values().filter(|g| g.ctrl != DEFAULT_GROUP && g.path.split('/').count() == 1).count();
            if n as u32 >= self.opts.max_ctrl_groups {
                self.fail(libc::ENOSPC, "Out of CLOSIDs".into())?;
            }
        }
        self.check_limbo();
        let gid = self.next_gid;
        let domains: Vec<u32> = (0..self.domain_ids.len() as u32).collect();
        let rmid = match self.alloc.allocate(gid, &domains) {
            Ok(r) => r,
            Err(e) => return self.fail(errno_of(&e), format!("Out of RMIDs: {e}")).map(|_| 0),
        };
        self.next_gid += 1;
        let need = self.mbm_counters_per_group();
        let counters = match self.opts.mbm_counters {
            None => true,
            Some(_) if self.counters_free.iter().all(|f| *f >= need) => {
                self.counters_free.iter_mut().for_each(|f| *f -= need);
                true
            }
            Some(_) => false,
        };
        let mut g = Group { path: path.clone(), ctrl: ctrl.unwrap_or(gid), rmid, mbm: HashMap::new(), counters };
        // The kernel resets an RMID's MBM state when it is allocated: counts start at 0.
        for dom in 0..self.domain_ids.len() {
            for ev in [Event::MbmTotal, Event::MbmLocal] {
                if let QmCtr::Data { count, .. } = self.read_ctr(dom, rmid, ev) {
                    g.mbm.insert((dom, ev), (Some(count), 0));
                }
            }
        }
        self.groups.insert(gid, g);
        self.add_group_nodes(gid, ctrl.is_none());
        Ok(self.paths[&path])
    }

    /// rmdir of a group: its tasks go to the parent (CTRL_MON: to the default group), its
    /// RMID to limbo.
    pub fn rmdir(&mut self, parent: Ino, name: &str) -> Result<(), i32> {
        self.last_cmd = "ok".into();
        let (_, kind) = self.lookup(parent, name).ok_or(libc::ENOENT)?;
        let Kind::Group(gid) = kind else { return Err(libc::EPERM) };
        let mut doomed = vec![gid];
        if self.groups.get(&gid).is_some_and(|g| g.ctrl == gid) {
            doomed.extend(self.groups.iter().filter(|(k, g)| g.ctrl == gid && **k != gid).map(|(k, _)| *k));
        }
        let now = self.platform.now();
        for d in doomed.iter().rev() {
            let Some(g) = self.groups.remove(d) else { continue };
            let to = if g.ctrl == *d { DEFAULT_GROUP } else { g.ctrl };
            let to_rmid = self.groups.get(&to).map_or(0, |x| x.rmid);
            let moved: Vec<u32> = self.tasks.iter().filter(|(_, x)| **x == *d).map(|(t, _)| *t).collect();
            for tid in moved {
                if to == DEFAULT_GROUP {
                    self.tasks.remove(&tid);
                } else {
                    self.tasks.insert(tid, to);
                }
                if let TaskLookup::Exists(Some(w)) = (self.resolver)(tid) {
                    self.platform.tag_container(&w, (to_rmid != 0).then_some(to_rmid));
                }
            }
            self.alloc.free(d, now);
            if self.opts.mbm_counters.is_some() && g.counters {
                let need = self.mbm_counters_per_group();
                self.counters_free.iter_mut().for_each(|f| *f += need);
            }
            self.faults.retain(|(p, _), _| *p != g.path);
            self.remove_tree(&g.path);
        }
        Ok(())
    }

    pub fn inject(&mut self, group_path: &str, domain_id: u32, fault: Option<Fault>) {
        match fault {
            Some(f) => self.faults.insert((group_path.to_string(), domain_id), f),
            None => self.faults.remove(&(group_path.to_string(), domain_id)),
        };
    }

    /// RMIDs (held, in limbo) over all domains.
    pub fn rmid_counts(&self) -> (usize, usize) {
        let mut limbo: Vec<u32> = self.alloc.domains().flat_map(|d| self.alloc.limbo(d)).collect();
        limbo.sort_unstable();
        limbo.dedup();
        (self.groups.len() - 1, limbo.len())
    }

    /// The RMID of the group at `path`.
    pub fn rmid_of(&self, path: &str) -> Option<u32> {
        self.groups.values().find(|g| g.path == path).map(|g| g.rmid)
    }
}
