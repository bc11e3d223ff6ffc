//! The files' contents: what a read returns and what a write does (tasks, the counters'
//! assignment files, mbm_assign_on_mkdir), with the kernel's errnos.

use super::*;

impl State {
    /// Contents of a file.
    pub fn read_file(&mut self, ino: Ino) -> Result<String, i32> {
        let (_, kind) = *self.nodes.get(&ino).ok_or(libc::ENOENT)?;
        let per_dom = |v: Vec<u32>| -> String {
            let parts: Vec<String> = self.domain_ids.iter().zip(v).map(|(d, n)| format!("{d}={n}")).collect();
            parts.join(";") + "\n"
        };
        Ok(match kind {
            Kind::LastCmdStatus => format!("{}\n", self.last_cmd),
            Kind::NumRmids => format!("{}\n", self.platform.l3().max_rmid + 1),
            Kind::MonFeatures => self.events.iter().map(|e| format!("{}\n", e.name())).collect(),
            Kind::Threshold => format!("{}\n", self.threshold),
            Kind::AssignMode => "[mbm_event]\ndefault\n".into(),
            Kind::NumCntrs => per_dom(vec![self.opts.mbm_counters.unwrap_or(0); self.domain_ids.len()]),
            Kind::AvailCntrs => per_dom(self.counters_free.clone()),
            Kind::Tasks(gid) => {
                // A CTRL_MON group lists its MON groups' tasks too (they carry its CLOSID), as
                // the kernel does; the default group lists only what was written to it (the
                // kernel would list every thread of the host).
                let ctrl = gid != DEFAULT_GROUP && self.groups.get(&gid).is_some_and(|g| g.ctrl == gid);
                let of = |g: Gid| g == gid || (ctrl && self.groups.get(&g).is_some_and(|x| x.ctrl == gid));
                let mut t: Vec<u32> = self.tasks.iter().filter(|(_, g)| of(**g)).map(|(t, _)| *t).collect();
                t.retain(|tid| (self.resolver)(*tid) != TaskLookup::Missing);
                t.sort_unstable();
                t.iter().map(|x| format!("{x}\n")).collect()
            }
            Kind::Cpus(gid) | Kind::CpusList(gid) => {
                // Every CPU belongs to the default group: no group here has been given CPUs.
                let cpus: Vec<u32> = if gid == DEFAULT_GROUP {
                    self.platform.domains().into_iter().flat_map(|d| d.1).collect()
                } else {
                    Vec::new()
                };
                if matches!(kind, Kind::CpusList(_)) {
                    format!("{}\n", cpulist::format(&cpus))
                } else {
                    let mask = cpus.iter().fold(0u128, |m, c| m | (1u128 << (c % 128)));
                    format!("{mask:x}\n")
                }
            }
            Kind::Mon { gid, dom, sub, event } => {
                self.reads += 1;
                let g = self.groups.get(&gid).ok_or(libc::ENOENT)?;
                // Injected faults are rare: skip building the lookup key on the common path.
                if !self.faults.is_empty() {
                    if let Some(f) = self.faults.get(&(g.path.clone(), self.domain_ids[dom])) {
                        return Ok(if *f == Fault::Error { "Error\n" } else { "Unavailable\n" }.into());
                    }
                }
                if event != Event::L3Occupancy && !g.counters {
                    return Ok("Unassigned\n".into());
                }
                let units = if event == Event::L3Occupancy {
                    match self.read_ctr(dom, g.rmid, event) {
                        QmCtr::Data { count, .. } => Ok(count),
                        other => Err(other),
                    }
                } else {
                    self.mbm_count(gid, dom, event)
                };
                match units {
                    Ok(u) => {
                        // SNC: the node shares of a domain's count sum exactly to it.
                        let u = match sub {
                            None => u,
                            Some(j) => {
                                let n = u128::from(self.opts.snc);
                                let share = |k: u128| (u128::from(u) * k / n) as u64;
                                share(u128::from(j) + 1) - share(u128::from(j))
                            }
                        };
                        format!("{}\n", u * u64::from(self.platform.l3().upscale_factor))
                    }
                    Err(QmCtr::Unavailable) => "Unavailable\n".into(),
                    Err(_) => "Error\n".into(),
                }
            }
            _ => return Err(libc::EISDIR),
        })
    }

    /// Assignable counters a group needs in each domain: one per MBM event offered.
    pub(super) fn mbm_counters_per_group(&self) -> u32 {
        self.events.iter().filter(|e| **e != Event::L3Occupancy).count() as u32
    }

    pub(super) fn fail(&mut self, errno: i32, msg: String) -> Result<(), i32> {
        self.last_cmd = msg;
        Err(errno)
    }

    /// write(2) on a file; `writer` is the writing process (pid 0 in `tasks` means it).
    pub fn write_file(&mut self, ino: Ino, data: &[u8], writer: u32) -> Result<(), i32> {
        self.last_cmd = "ok".into();
        let (_, kind) = *self.nodes.get(&ino).ok_or(libc::ENOENT)?;
        let text = String::from_utf8_lossy(data).to_string();
        match kind {
            Kind::Tasks(gid) => {
                for tok in text.split([',', '\n', ' ', '\t']).filter(|t| !t.is_empty()) {
                    let pid: i64 = match tok.parse() {
                        Ok(p) if p >= 0 && p <= i64::from(i32::MAX) => p,
                        _ => return self.fail(libc::EINVAL, format!("Task list parsing error pid {tok}")),
                    };
                    let tid = if pid == 0 { writer } else { pid as u32 };
                    self.move_task(gid, tid)?;
                }
                Ok(())
            }
            Kind::Threshold => match text.trim().parse::<u64>() {
                Ok(v) => {
                    self.threshold = v;
                    let cfg = Config { threshold_bytes: v, ..self.alloc.config().clone() };
                    self.alloc.set_config(cfg);
                    Ok(())
                }
                Err(_) => self.fail(libc::EINVAL, "invalid threshold".into()),
            },
            Kind::Cpus(_) | Kind::CpusList(_) => {
                self.fail(libc::EINVAL, "assigning CPUs to groups is not emulated".into())
            }
            _ => Err(libc::EACCES),
        }
    }

    pub(super) fn move_task(&mut self, gid: Gid, tid: u32) -> Result<(), i32> {
        let workload = match (self.resolver)(tid) {
            TaskLookup::Missing => return self.fail(libc::ESRCH, format!("No task {tid}")),
            TaskLookup::Exists(w) => w,
        };
        let target = self.groups.get(&gid).ok_or(libc::ENOENT)?;
        let cur = self.tasks.get(&tid).copied().unwrap_or(DEFAULT_GROUP);
        let cur_ctrl = self.groups.get(&cur).map_or(DEFAULT_GROUP, |g| g.ctrl);
        let is_mon = target.ctrl != gid;
        if is_mon && cur_ctrl != target.ctrl {
            return self.fail(libc::EINVAL, "Can't move task to different control group".into());
        }
        let rmid = target.rmid;
        if gid == DEFAULT_GROUP {
            self.tasks.remove(&tid);
        } else {
            self.tasks.insert(tid, gid);
        }
        if let Some(w) = workload {
            // The kernel's part: from now on this task's traffic carries the group's RMID.
            self.platform.tag_container(&w, (rmid != 0).then_some(rmid));
        }
        Ok(())
    }
}
