//! `cachescope monitor --backend resctrl`: containers from the cgroup v2 tree, one resctrl MON
//! group each, counters read every interval. On a host with RDT it uses the kernel's resctrl
//! mount; with `--emulate MODEL --scenario FILE` it mounts the emulated resctrl filesystem
//! (FUSE) and plays the scenario with real cgroups holding real (idle) processes, so the path
//! from cgroup events to mkdir/tasks/pread is the real one end to end.

use crate::monitor::{cpuid_summary, load_emulation, Clock, MonitorArgs};
use crate::output::{Header, Mode, Output, RunInfo};
use crate::pmu::PmuColumns;
use crate::CliError;
use cachescope_cgroups::identity::Glob;
use cachescope_cgroups::sandbox::Sandbox;
use cachescope_cgroups::watch::{Lifecycle, Watcher};
use cachescope_cgroups::{cpu_usage_usec, threads, Hierarchy};
use cachescope_emu::Scenario;
use cachescope_emu_resctrl::{proc_resolver, Mounted, Options};
use cachescope_engine::row::{ContainerMeta, Row, Status};
use cachescope_hw::cpuid::CpuidSnapshot;
use cachescope_hw::CpuInfo;
use cachescope_platform::InstructionCpuid;
use cachescope_resctrl::session::WaitReason;
use cachescope_resctrl::{ContainerGroups, Containers, Resctrl};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

/// How often RMID upkeep runs (CPU rates, retries, budget).
const MAINTAIN_EVERY: Duration = Duration::from_millis(500);

/// Containers known from the cgroup watcher: id → cgroup path.
struct HostContainers {
    root: PathBuf,
    by_id: BTreeMap<String, String>,
}

impl Containers for HostContainers {
    fn threads(&self, id: &str) -> std::io::Result<Vec<u32>> {
        let Some(rel) = self.by_id.get(id) else { return Ok(Vec::new()) };
        threads(&self.root, rel, true).map_err(std::io::Error::other)
    }

    fn cpu_usage_usec(&self, id: &str) -> Option<u64> {
        let rel = self.by_id.get(id)?;
        cpu_usage_usec(&self.root.join(rel))
    }

    fn ctrl_group(&self, id: &str) -> String {
        let first = self.threads(id).ok().and_then(|t| t.first().copied());
        first.and_then(|tid| cachescope_resctrl::ctrl_group_of(Path::new("/proc"), tid)).unwrap_or_default()
    }
}

/// Scenario containers played for real: a cgroup with one idle process each, created and
/// removed on the scenario's schedule, all under one sandbox cgroup removed at exit.
struct Play {
    sandbox: Sandbox,
    pending: Vec<(Duration, Option<Duration>, String)>,
    running: BTreeMap<String, Option<Duration>>,
}

impl Play {
    fn new(h: &Hierarchy, scenario: &Scenario) -> Result<Play, CliError> {
        let sandbox =
            Sandbox::create(h, &format!("cachescope-emu-{}", std::process::id())).map_err(CliError::unavailable)?;
        let pending = scenario
            .containers
            .iter()
            .map(|c| (Duration::from_millis(c.start_ms), c.stop_ms.map(Duration::from_millis), c.name.clone()))
            .collect();
        Ok(Play { sandbox, pending, running: BTreeMap::new() })
    }

    fn rel_prefix(&self) -> String {
        self.sandbox.rel()
    }

    /// Start and stop containers due at `t`.
    fn step(&mut self, t: Duration) -> Result<(), CliError> {
        let due: Vec<usize> = (0..self.pending.len()).filter(|&i| self.pending[i].0 <= t).collect();
        for i in due.into_iter().rev() {
            let (_, stop, name) = self.pending.remove(i);
            let mut idle = Command::new("sleep");
            idle.arg("infinity");
            self.sandbox.spawn(&name, idle).map_err(CliError::unavailable)?;
            self.running.insert(name, stop);
        }
        let ended: Vec<String> =
            self.running.iter().filter(|(_, s)| s.is_some_and(|s| s <= t)).map(|(k, _)| k.clone()).collect();
        for name in ended {
            self.running.remove(&name);
            self.sandbox.remove(&name);
        }
        Ok(())
    }
}

pub fn run(args: &MonitorArgs, mode: &Mode, emulate: bool) -> Result<(), CliError> {
    let interval = args.interval.unwrap_or(Duration::from_millis(100));
    if interval < Duration::from_millis(1) {
        return Err(CliError::input(format!(
            "--interval {interval:?} is shorter than resctrl can sustain (each read is a syscall that takes the kernel's global mutex): use 1ms or more"
        )));
    }
    if args.fast {
        return Err(CliError::input(
            "--fast is not available with the resctrl backend: the emulated filesystem follows the wall clock",
        ));
    }
    if args.cores.is_some() {
        return Err(CliError::input("--cores is for the msr backend; resctrl monitors containers"));
    }
    let h = Hierarchy::find(Path::new("/proc")).map_err(CliError::unavailable)?;
    if !h.v2 {
        return Err(CliError::unavailable(format!(
            "the resctrl backend needs cgroup v2 to follow containers; found {}",
            h.description
        )));
    }
    let mut globs = crate::monitor::container_globs(args)?;
    let mut play = None;
    let mut label = "resctrl".to_string();
    let mut l3_bytes = None;
    let mut cpu = None;
    // The emulated mount, held to the end of this function (dropping it unmounts); declared
    // before the session so it drops after it.
    let _mount: Option<Mounted>;
    let rc = if emulate {
        let (scenario, model, platform) = load_emulation(
            args,
            "--backend resctrl --emulate needs --scenario FILE; without --backend resctrl, --emulate MODEL follows this host's containers",
        )?;
        l3_bytes = Some(platform.l3_bytes());
        cpu = Some(platform.cpu_info().clone());
        let p = Play::new(&h, &scenario)?;
        let prefix = format!("{}/", p.rel_prefix());
        globs = vec![Glob::new(&format!("{}*", prefix)).map_err(CliError::input)?];
        let workload = move |cg: &str| cg.strip_prefix(&prefix).map(|n| n.split('/').next().unwrap_or(n).to_string());
        let m = Mounted::start(platform, Options::default(), proc_resolver("/proc".into(), workload))
            .map_err(CliError::unavailable)?;
        let root = m.root().to_path_buf();
        _mount = Some(m);
        play = Some(p);
        label = format!("resctrl (emulated {model}, FUSE at {})", root.display());
        Resctrl::at(root)
    } else {
        _mount = None;
        match Resctrl::find(Path::new("/proc")) {
            Ok(rc) => rc,
            Err(_) if args.mount_resctrl => Resctrl::mount(Path::new("/sys/fs/resctrl"))
                .map_err(|e| CliError::unavailable(format!("--mount-resctrl: {e}")))?,
            Err(e) => return Err(CliError::unavailable(e)),
        }
    };
    let cpu = match cpu {
        Some(c) => Some(c),
        None => CpuidSnapshot::capture(&InstructionCpuid).ok().map(|s| CpuInfo::decode(&s)),
    };
    let cpuid = cpu.as_ref().map_or("CPUID unreadable".into(), cpuid_summary);
    let upscale = cpu.as_ref().and_then(|c| c.monitoring.l3.as_ref()).map_or(1, |l3| u64::from(l3.upscale_factor));
    let mut session = ContainerGroups::new(rc.clone()).map_err(CliError::unavailable)?;
    let sandbox_rel = play.as_ref().map(|p| p.rel_prefix());
    let mut src = HostContainers { root: h.root.clone(), by_id: BTreeMap::new() };
    if let Some(p) = play.as_mut() {
        p.step(Duration::ZERO)?;
    }
    let (watcher, events) = Watcher::start(&h.root, globs, Duration::from_secs(2)).map_err(CliError::unavailable)?;
    let mut clock = Clock::new(interval, args.duration, false)?;
    let mut last_maintain = Duration::ZERO;
    let mut pmu = PmuColumns::start(interval, args.pmu);
    if !pmu.is_on() || pmu.description.starts_with("no PMU") {
        eprintln!("cachescope: PMU columns: {}", pmu.description);
    }
    let mut metas: BTreeMap<String, Arc<ContainerMeta>> = BTreeMap::new();
    let info = RunInfo {
        backend: label.clone(),
        cpuid: cpuid.clone(),
        upscale,
        l3_bytes,
        extra: vec![("cachescope.pmu".into(), pmu.description.clone())],
    };
    let mut first = true;
    let result = (|| -> Result<(), CliError> {
        let mut out = Output::new(mode, args.print_every, info)?;
        while let Some((t, late, missed)) = clock.next() {
            if let Some(p) = play.as_mut() {
                p.step(t)?;
            }
            let mut started = Vec::new();
            while let Ok(ev) = events.try_recv() {
                let c = ev.container;
                // Scenario containers are known by their scenario name (DESIGN.md §5.5).
                let (id, name) = match &sandbox_rel {
                    Some(pre) => {
                        let n = c.cgroup_path.strip_prefix(&format!("{pre}/")).unwrap_or(&c.identity.id).to_string();
                        (n.clone(), Some(n))
                    }
                    None => (c.identity.id.clone(), c.name.clone()),
                };
                match ev.kind {
                    Lifecycle::Started => {
                        pmu.follow(&id, c.cgroup_id, &h.root.join(&c.cgroup_path));
                        src.by_id.insert(id.clone(), c.cgroup_path.clone());
                        metas.insert(
                            id.clone(),
                            Arc::new(ContainerMeta {
                                id: id.clone(),
                                name,
                                pod_uid: c.identity.pod_uid.clone(),
                                cgroup_path: c.cgroup_path.clone(),
                                ..Default::default()
                            }),
                        );
                        started.push(id);
                    }
                    Lifecycle::Stopped => {
                        session.stop(&id).map_err(CliError::unavailable)?;
                        src.by_id.remove(&id);
                        metas.remove(&id);
                        pmu.unfollow(&id);
                        out.forget(&id);
                    }
                }
            }
            if first {
                first = false;
                let (adopted, removed) = session.adopt_leftovers(&started, &src, t).map_err(CliError::unavailable)?;
                if adopted + removed > 0 {
                    eprintln!("cachescope: groups left by an earlier run: {adopted} adopted, {removed} removed");
                }
            }
            for id in started {
                session.start(&id, &src, t).map_err(CliError::unavailable)?;
            }
            pmu.drain();
            let rows: Vec<Row> = session
                .sample()
                .into_iter()
                .map(|s| Row {
                    time_ns: 0,
                    interval_ns: 0,
                    container: metas.get(&s.container).cloned().unwrap_or_else(|| ContainerMeta::named(&s.container)),
                    domain: s.domain,
                    // resctrl does not say which RMID a group holds (only the debug mount does).
                    rmid: None,
                    llc_occupancy_bytes: s.occupancy_bytes,
                    mbm_total_bytes: s.mbm_total_bytes,
                    mbm_local_bytes: s.mbm_local_bytes,
                    pmu: pmu.take(&s.container, s.domain).0,
                    status: Status::parse(s.status).unwrap_or(Status::Error),
                })
                .collect();
            if t.saturating_sub(last_maintain) >= MAINTAIN_EVERY {
                last_maintain = t;
                session.maintain(&src, t).map_err(CliError::unavailable)?;
            }
            let mut header = |period: Duration| {
                let st = session.stats();
                let mut extra = vec![format!("groups={} reads={}", session.monitored().count(), st.reads)];
                // The CPU line covers the period the table does.
                extra.extend(pmu.cpu_line(period));
                if !session.waiting().is_empty() {
                    let w: Vec<String> =
                        session.waiting().iter().map(|(k, w)| format!("{k} ({})", w.reason.name())).collect();
                    extra.push(format!("without RMID: {}", w.join(", ")));
                }
                Header {
                    backend: label.clone(),
                    interval,
                    rmids_in_use: session.monitored().count() as u64,
                    rmids_limbo: session.waiting().values().filter(|w| w.reason == WaitReason::Limbo).count() as u64,
                    unmonitored: session.waiting().len() as u64,
                    extra,
                }
            };
            if !out.tick(t, late, missed, rows, &mut header) {
                break;
            }
        }
        out.finish()
    })();
    let cleanup = session.stop_all().map_err(CliError::unavailable);
    let _ = watcher.stop();
    drop(play);
    result.and(cleanup)
}
