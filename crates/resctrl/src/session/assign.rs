//! The I/O half of assignable counters (resctrl's `mbm_event` mode): taking them over at
//! start, applying [`crate::counters::Planner`]'s plan at each upkeep, saying how it goes.

use super::ContainerGroups;
use crate::counters::{Candidate, Planner};
use crate::{AssignInfo, Domain, GroupRef, MonInfo, Resctrl, ResctrlError};
use cachescope_engine::{ContainerMeta, MbmCounter};
use std::collections::BTreeMap;
use std::io;
use std::time::Duration;

/// Who keeps an assignable counter, and how often the rest rotate.
pub struct CounterPolicy {
    pub rotate_every: Duration,
    /// Containers that keep one whenever counters allow (the user's `--mbm-pin`).
    pub pinned: Box<dyn Fn(&ContainerMeta) -> bool + Send>,
}

impl Default for CounterPolicy {
    fn default() -> CounterPolicy {
        CounterPolicy { rotate_every: Duration::from_secs(2), pinned: Box::new(|_| false) }
    }
}

/// This run's assignable counters.
pub(super) struct Counters {
    pub(super) planner: Planner,
    pub(super) pinned: Box<dyn Fn(&ContainerMeta) -> bool + Send>,
    /// `mbm_assign_on_mkdir` as found (put back at shutdown).
    pub(super) on_mkdir_before: Option<bool>,
    /// Per container: how it holds its total counter, and whether it holds a local one.
    pub(super) held: BTreeMap<String, (MbmCounter, bool)>,
    /// Counters per domain (the fewest any domain has) and what this run may use of them.
    pub(super) total: u32,
    pub(super) usable: u32,
    /// An assignment the kernel refused for another reason than no free counter was said.
    pub(super) said_refusal: bool,
}

/// Where a run notes that it turned `mbm_assign_on_mkdir` off (tmpfs: gone at reboot, with
/// the kernel's setting).
pub(super) const ON_MKDIR_NOTE: &str = "/run/cachescope/mbm_assign_on_mkdir";

fn note_on_mkdir() -> io::Result<()> {
    std::fs::create_dir_all("/run/cachescope")?;
    std::fs::write(ON_MKDIR_NOTE, "1\n")
}

impl Counters {
    /// Counters this run holds per domain: one per holder, and one more where it holds local.
    pub(super) fn in_use(&self) -> usize {
        self.held.len() + self.held.values().filter(|(_, local)| *local).count()
    }

    /// Where the kernel is in `mbm_event` mode, this run takes the counters over: new groups
    /// get none from mkdir (`mbm_assign_on_mkdir` off, put back at shutdown).
    pub(super) fn start(rc: &Resctrl, mon: &MonInfo, domains: &[Domain]) -> Result<Option<Counters>, ResctrlError> {
        Ok(match mon.assign.as_ref().filter(|a| a.active()) {
            None => None,
            Some(a) => {
                // This run assigns counters itself: none to a group because mkdir made it. What
                // it found is noted under /run first, so that the run after a SIGKILLed one
                // still knows what to put back.
                let mut before = a.on_mkdir;
                if before == Some(false) && std::fs::read_to_string(ON_MKDIR_NOTE).is_ok_and(|t| t.trim() == "1") {
                    before = Some(true);
                }
                if a.on_mkdir == Some(true) {
                    if let Err(e) = note_on_mkdir() {
                        cachescope_platform::say!(
                            "{ON_MKDIR_NOTE}: {e}: a run killed before it ends leaves mbm_assign_on_mkdir off"
                        );
                    }
                    rc.set_assign_on_mkdir(false)?;
                }
                let total = domains.iter().map(|d| AssignInfo::of(&a.counters, d.id)).min().unwrap_or(0);
                let p = CounterPolicy::default();
                Some(Counters {
                    planner: Planner::new(p.rotate_every),
                    pinned: p.pinned,
                    on_mkdir_before: before,
                    held: BTreeMap::new(),
                    total,
                    usable: 0,
                    said_refusal: false,
                })
            }
        })
    }
}

impl ContainerGroups {
    /// Who keeps an assignable counter and how often the others rotate (where the kernel has
    /// them in `mbm_event` mode; elsewhere nothing changes).
    pub fn with_counter_policy(mut self, p: CounterPolicy) -> ContainerGroups {
        if let Some(c) = self.counters.as_mut() {
            c.planner = Planner::new(p.rotate_every);
            c.pinned = p.pinned;
        }
        self
    }

    /// Counters per domain and how many this run holds, where they are assignable.
    pub fn counters_in_use(&self) -> Option<(usize, u32)> {
        self.counters.as_ref().map(|c| (c.in_use(), c.total))
    }

    /// Give counters to the containers the plan names and take them from the others.
    pub(super) fn plan_counters(&mut self, now: Duration) -> Result<(), ResctrlError> {
        let Some(c) = self.counters.as_mut() else { return Ok(()) };
        let cands: Vec<Candidate> = self
            .groups
            .iter()
            .filter(|(_, m)| m.reader.is_some() && !m.foreign)
            .map(|(id, m)| Candidate { id: id.clone(), pinned: (c.pinned)(&m.meta), occupancy: m.occupancy })
            .collect();
        let avail = self.rc.counters_file("available_mbm_cntrs")?;
        let ours = c.in_use() as u32;
        c.usable = self.domains.iter().map(|d| AssignInfo::of(&avail, d.id) + ours).min().unwrap_or(0);
        // Every rotating holder read twice since its counter came (a baseline and a figure).
        let measured = c
            .held
            .iter()
            .filter(|(_, (h, _))| *h == MbmCounter::Rotating)
            .all(|(id, _)| self.groups.get(id).is_none_or(|m| m.reads_since_assign >= 2));
        let plan = c.planner.plan(now, c.usable, &cands, measured).clone();
        let doms: Vec<u32> = self.domains.iter().map(|d| d.id).collect();
        let _lock = self.rc.lock()?;
        // Releases first, so that what they free is there for the assignments.
        for (id, (_, local)) in c.held.clone() {
            let keep = plan.holders.contains_key(&id);
            let Some(m) = self.groups.get(&id) else {
                c.held.remove(&id);
                continue;
            };
            if !keep || (local && !plan.local) {
                let mut events = if keep { vec!["mbm_local_bytes"] } else { vec!["mbm_total_bytes"] };
                if local && !keep {
                    events.push("mbm_local_bytes");
                }
                for e in events {
                    release(&self.rc, &m.group, e, &doms)?;
                    self.stats.counters_released += 1;
                }
                if keep {
                    c.held.insert(id.clone(), (c.held[&id].0, false));
                } else {
                    c.held.remove(&id);
                }
            }
        }
        for (id, how) in &plan.holders {
            let Some(m) = self.groups.get_mut(id) else { continue };
            let (had_total, had_local) = c.held.get(id).map_or((false, false), |(_, l)| (true, *l));
            let mut events = Vec::new();
            if !had_total {
                events.push("mbm_total_bytes");
            }
            if plan.local && !had_local {
                events.push("mbm_local_bytes");
            }
            let mut got = (had_total, had_local);
            for e in events {
                match self.rc.assign(&m.group, e, &doms, true) {
                    Ok(()) => {
                        self.stats.counters_assigned += 1;
                        m.reads_since_assign = 0;
                        if e == "mbm_total_bytes" {
                            m.epoch_total += 1;
                            got.0 = true;
                        } else {
                            m.epoch_local += 1;
                            got.1 = true;
                        }
                    }
                    // Another owner took the free ones: this one waits for the next turn (the
                    // domains the kernel did assign are released, not left half-held).
                    Err(ResctrlError::NoCounter { .. }) => {
                        self.stats.counters_refused += 1;
                        release(&self.rc, &m.group, e, &doms)?;
                    }
                    Err(ResctrlError::Io { error, .. }) if error.kind() == io::ErrorKind::NotFound => {}
                    // Anything else the kernel refuses costs this group its turn, not the run.
                    Err(err) => {
                        self.stats.counters_refused += 1;
                        if !c.said_refusal {
                            c.said_refusal = true;
                            cachescope_platform::say!(
                                "MBM counter for {id}: {err} (said once; counted in the summary)"
                            );
                        }
                    }
                }
            }
            if got.0 {
                c.held.insert(id.clone(), (*how, got.1));
            }
        }
        Ok(())
    }

    /// The header line about counters, where they are assignable.
    pub(super) fn counters_header(&self) -> Option<String> {
        let c = self.counters.as_ref()?;
        let plan = c.planner.last();
        let rotating = c.held.values().filter(|(h, _)| *h == MbmCounter::Rotating).count();
        let mut line = format!(
            "MBM counters {}/{} per L3 ({} usable): {} kept, {} rotating",
            self.counters_in_use().map_or(0, |u| u.0),
            c.total,
            c.usable,
            c.held.len() - rotating,
            rotating
        );
        if plan.rotating > 0 {
            let every = c.planner.rotate_every();
            line += &format!(
                " through {} containers, {:?} turns: each measured one turn in {} ({:?})",
                plan.pool,
                every,
                plan.cycle(),
                every * plan.cycle() as u32
            );
        }
        Some(line)
    }
}

/// Release `event`'s counters of group `g` in `domains` (one that holds none is fine).
pub(super) fn release(rc: &Resctrl, g: &GroupRef, event: &str, domains: &[u32]) -> Result<(), ResctrlError> {
    match rc.assign(g, event, domains, false) {
        Err(ResctrlError::Io { error, .. }) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}
