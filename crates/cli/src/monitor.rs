//! `cachescope monitor`: sample cache occupancy and memory bandwidth and print a table
//! periodically. Today: the emulated platform (scenario containers, or core groups) and the
//! msr backend with core groups. The live TUI, sinks and host containers come with the engine.

use crate::host_drive::{self, HostDrive};
use crate::output::{Header, Mode, Output, RunInfo};
use crate::pmu::PmuSource;
use crate::{duration, CliError};
use anyhow::anyhow;
use cachescope_cgroups::identity::Glob;
use cachescope_cmt::{
    parse_core_groups, sample_rmid, Caps, ContainerRmids, CorePinning, MbmTracker, Reader, Retries, TaskTagger,
};
use cachescope_detect::{detect, HostPaths, LiveProbe};
use cachescope_emu::{EmuPlatform, Scenario};
use cachescope_engine::row::{ContainerMeta, Pmu, Row, Status};
use cachescope_engine::{Ticker, TickerError};
use cachescope_hw::cpuid::CpuidSnapshot;
use cachescope_hw::msr::MsrDevice;
use cachescope_hw::{cpulist, CpuInfo};
use cachescope_platform::{DevMsr, InstructionCpuid, Topology};
use cachescope_rmid::Config;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Auto,
    Resctrl,
    Msr,
    PerfCqm,
    Emulated,
}

#[derive(clap::Args, Debug)]
pub struct MonitorArgs {
    /// Cache-monitoring backend.
    #[arg(long, value_enum, default_value = "auto")]
    backend: Backend,
    /// Sampling interval (500us, 1ms, 2s, 1m); default 1ms, 100ms with resctrl.
    #[arg(long, value_parser = duration::parse)]
    pub interval: Option<Duration>,
    /// Stop after this long (default: until SIGINT/SIGTERM).
    #[arg(long, value_parser = duration::parse)]
    pub duration: Option<Duration>,
    /// Emulate this CPU (a vector name from testdata/cpuid or a vector file).
    #[arg(long, value_name = "MODEL|VECTOR.json")]
    pub emulate: Option<String>,
    /// Scenario driving the emulated platform (DESIGN.md §5.5).
    #[arg(long, value_name = "FILE.toml")]
    pub scenario: Option<PathBuf>,
    /// Core-pinned groups (msr/emulated), e.g. "0-3,4-7".
    #[arg(long, value_name = "GROUPS")]
    pub cores: Option<String>,
    /// Containers to follow beyond the runtimes recognised by name: globs over cgroup paths
    /// (`*` within a component, `**` across).
    #[arg(long, value_name = "GLOB", num_args = 1..)]
    pub containers: Vec<String>,
    /// Where per-container PMU counts come from: eBPF (1 ms slots), perf cgroup events (the
    /// fallback where BPF cannot load), or off. Real containers only (not scenario containers).
    #[arg(long, value_enum, default_value = "auto")]
    pub pmu: PmuSource,
    /// Mount resctrl at /sys/fs/resctrl if it is not mounted (resctrl backend).
    #[arg(long)]
    pub mount_resctrl: bool,
    /// How often to print a table.
    #[arg(long, default_value = "500ms", value_parser = duration::parse)]
    pub print_every: Duration,
    /// Run emulated time as fast as possible instead of with the wall clock.
    #[arg(long)]
    pub fast: bool,
    /// Peak memory bandwidth per L3 domain, GB/s: sets the longest safe MBM interval.
    #[arg(long, default_value_t = 500)]
    peak_bandwidth_gbps: u64,
}

struct EmuTagger(Arc<EmuPlatform>);

impl TaskTagger for EmuTagger {
    fn tag(&self, container: &str, rmid: Option<u32>) -> Result<(), String> {
        if self.0.tag_container(container, rmid) {
            Ok(())
        } else {
            Err("no such scenario container".into())
        }
    }
}

impl MonitorArgs {
    /// The interval for the MSR-level paths (emulated, msr).
    fn msr_interval(&self) -> Duration {
        self.interval.unwrap_or(Duration::from_millis(1))
    }
}

pub fn run(args: &MonitorArgs, mode: &Mode) -> Result<(), CliError> {
    if args.containers.iter().any(|g| g == "auto") && args.containers.len() > 1 {
        return Err(CliError::input("--containers: `auto` cannot be combined with globs"));
    }
    if args.backend == Backend::Resctrl {
        return crate::resctrl_run::run(args, mode, args.emulate.is_some() || args.scenario.is_some());
    }
    let emulated = match args.backend {
        Backend::Emulated => true,
        Backend::Auto => args.emulate.is_some() || args.scenario.is_some(),
        _ => false,
    };
    if emulated {
        return run_emulated(args, mode);
    }
    if args.emulate.is_some() || args.scenario.is_some() {
        return Err(CliError::input("--emulate and --scenario need --backend emulated (or auto)"));
    }
    let host = CpuInfo::decode(
        &CpuidSnapshot::capture(&InstructionCpuid).map_err(|e| CliError::Unavailable(anyhow!("CPUID: {e}")))?,
    );
    let d = detect(&HostPaths::default(), &host, &LiveProbe);
    let name = match args.backend {
        Backend::Resctrl => "resctrl",
        Backend::Msr => "msr",
        Backend::PerfCqm => "perf-cqm",
        _ => match d.auto(cachescope_detect::Role::CacheMonitoring).map(|b| b.name) {
            Some("emulated") | None => {
                let why: Vec<String> = d
                    .backends
                    .iter()
                    .filter(|b| !b.available && b.name != "bpf" && b.name != "perf")
                    .map(|b| format!("{}: {}", b.name, b.reason))
                    .collect();
                return Err(CliError::Unavailable(anyhow!(
                    "no hardware cache monitoring on this host ({}); try --emulate MODEL (emulated cache driven by this host's containers) or --emulate MODEL --scenario FILE",
                    why.join("; ")
                )));
            }
            Some(n) => n,
        },
    };
    let status = d.get(name).ok_or_else(|| CliError::input(format!("unknown backend {name}")))?;
    if !status.available {
        return Err(CliError::Unavailable(anyhow!("backend {name} is unavailable: {}", status.reason)));
    }
    if name == "resctrl" {
        return crate::resctrl_run::run(args, mode, false);
    }
    if name != "msr" {
        return Err(CliError::Unavailable(anyhow!(
            "backend {name} is available here but not built into this version yet"
        )));
    }
    let groups = args
        .cores
        .as_deref()
        .ok_or_else(|| CliError::input("the msr backend monitors core groups: give --cores, e.g. 0-3,4-7"))?;
    let l3 = host.monitoring.l3.clone().ok_or_else(|| CliError::Unavailable(anyhow!("no L3 monitoring")))?;
    let caps = Caps::from_l3(&l3, host.monitoring.max_rmid_any.unwrap_or(l3.max_rmid));
    let topo = Topology::read(std::path::Path::new("/sys")).map_err(|e| CliError::Unavailable(anyhow!(e)))?;
    let domains: Vec<(u32, Vec<u32>)> = topo.l3_domains.iter().map(|d| (d.id, d.cpus.clone())).collect();
    let dev = Arc::new(DevMsr::new(std::path::Path::new("/dev")));
    let domain_of = |cpu: u32| topo.domain_of(cpu).map(|d| d.id);
    run_cores(args, mode, &host, dev, caps, &domains, &domain_of, groups, None, "msr")
}

fn run_emulated(args: &MonitorArgs, mode: &Mode) -> Result<(), CliError> {
    if args.scenario.is_none() && args.cores.is_none() {
        let model =
            args.emulate.as_deref().ok_or_else(|| CliError::input("--backend emulated needs --emulate MODEL"))?;
        if args.fast {
            return Err(CliError::input(
                "--fast needs --scenario: without one the host's containers drive the emulated cache in real time",
            ));
        }
        let (emu, host) = host_drive::start(model, container_globs(args)?, args.msr_interval(), args.pmu)?;
        let label = format!("emulated ({model}) driven by host containers");
        eprintln!(
            "cachescope: LLC occupancy and memory bandwidth are EMULATED ({model}, this host's L3 shape), driven by {}",
            host.driver
        );
        return run_containers(args, mode, emu, Drive::Host(Box::new(host)), &label);
    }
    let (_, model, emu) = load_emulation(args, "--emulate with --cores needs --scenario FILE")?;
    let label = format!("emulated ({model})");
    if let Some(groups) = &args.cores {
        let (caps, domains) = emu_caps(&emu);
        let e2 = emu.clone();
        let domain_of = move |cpu: u32| Some(e2.domain_of_cpu(cpu));
        return run_cores(
            args,
            mode,
            &emu.cpu_info().clone(),
            emu.clone(),
            caps,
            &domains,
            &domain_of,
            groups,
            Some(emu),
            &label,
        );
    }
    run_containers(args, mode, emu, Drive::Scenario(BTreeMap::new()), &label)
}

/// The emulated platform's monitoring capabilities and L3 domains.
fn emu_caps(emu: &EmuPlatform) -> (Caps, Vec<(u32, Vec<u32>)>) {
    let mut l3 = emu.l3().clone();
    l3.counter_width_linux = emu.counter_width();
    (Caps::from_l3(&l3, emu.cpu_info().monitoring.max_rmid_any.unwrap_or(l3.max_rmid)), emu.domains())
}

/// `--containers`: globs over cgroup paths beyond the runtimes recognised by name (`auto`).
pub(crate) fn container_globs(args: &MonitorArgs) -> Result<Vec<Glob>, CliError> {
    args.containers
        .iter()
        .filter(|g| *g != "auto")
        .map(|g| Glob::new(g).map_err(|e| CliError::input(format!("--containers {g:?}: {e}"))))
        .collect()
}

/// The scenario, the model (`--emulate` or the scenario's) and the emulated platform;
/// `no_scenario` is the refusal when no scenario is given.
pub(crate) fn load_emulation(
    args: &MonitorArgs,
    no_scenario: &str,
) -> Result<(Scenario, String, Arc<EmuPlatform>), CliError> {
    let path = args.scenario.as_ref().ok_or_else(|| CliError::input(no_scenario))?;
    let scenario = Scenario::load(path).map_err(CliError::input)?;
    let model = args.emulate.clone().unwrap_or_else(|| scenario.platform.model.clone());
    let emu = Arc::new(EmuPlatform::with_model(&scenario, &model).map_err(CliError::input)?);
    Ok((scenario, model, emu))
}

/// Drives ticks: an absolute timerfd (engine::Ticker) on the wall clock, or virtual time with
/// `--fast`.
pub(crate) struct Clock {
    ticker: Option<Ticker>,
    interval: Duration,
    tick: u64,
    stop: Arc<AtomicBool>,
    until: Option<Duration>,
}

impl Clock {
    pub fn new(interval: Duration, until: Option<Duration>, fast: bool) -> Result<Clock, CliError> {
        let stop = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(sig, stop.clone())
                .map_err(|e| CliError::Unavailable(anyhow!("signal handler: {e}")))?;
        }
        let ticker = if fast {
            None
        } else {
            Some(Ticker::new(interval).map_err(|e| match e {
                TickerError::Interval(_) => CliError::input(format!("--interval: {e}")),
                TickerError::Io(_) => CliError::Unavailable(anyhow!("{e}")),
            })?)
        };
        Ok(Clock { ticker, interval, tick: 0, stop, until })
    }

    /// Wait for the next tick; returns its time since start, its lateness and the ticks
    /// missed before it, or None to stop.
    pub fn next(&mut self) -> Option<(Duration, Duration, u64)> {
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let Some(ticker) = self.ticker.as_mut() else {
            self.tick += 1;
            let due = self.interval * self.tick as u32;
            return self.until.is_none_or(|u| due <= u).then_some((due, Duration::ZERO, 0));
        };
        let tick = ticker.wait().ok()?;
        if self.until.is_some_and(|u| tick.due > u) || self.stop.load(Ordering::Relaxed) {
            return None;
        }
        Some((ticker.elapsed(), tick.late, tick.missed))
    }
}

fn check_interval(args: &MonitorArgs, caps: &Caps) -> Result<MbmTracker, CliError> {
    let peak = args.peak_bandwidth_gbps.saturating_mul(1_000_000_000);
    let tracker = MbmTracker::new(caps, peak);
    tracker.check_interval(args.msr_interval(), peak).map_err(CliError::input)?;
    Ok(tracker)
}

/// Where the containers of an emulated run come from.
enum Drive {
    /// The scenario's, on its schedule: id → metadata of those running.
    Scenario(BTreeMap<String, Arc<ContainerMeta>>),
    /// This host's, driving the emulated cache with their measured traffic.
    Host(Box<HostDrive>),
}

impl Drive {
    /// Containers started and stopped by `t`. Scenario containers follow the scenario's
    /// schedule in the platform's time, so the platform advances to `t` first.
    fn changes(&mut self, emu: &EmuPlatform, t: Duration) -> (Vec<String>, Vec<String>) {
        match self {
            Drive::Scenario(known) => {
                emu.advance_to(t);
                let running = emu.running_containers();
                let stopped: Vec<String> = known.keys().filter(|c| !running.contains(c)).cloned().collect();
                for c in &stopped {
                    known.remove(c);
                }
                let started: Vec<String> = running.into_iter().filter(|c| !known.contains_key(c)).collect();
                for c in &started {
                    known.insert(c.clone(), ContainerMeta::named(c));
                }
                (started, stopped)
            }
            Drive::Host(h) => h.lifecycle(emu),
        }
    }

    /// Host containers: after their RMIDs are assigned (so that the traffic of the interval
    /// is tagged with them), feed what was measured over (prev, t] and advance to `t`.
    fn advance(&mut self, emu: &EmuPlatform, t: Duration, prev: Duration) {
        if let Drive::Host(h) = self {
            h.feed(emu, t.saturating_sub(prev));
            emu.advance_to(t);
        }
    }

    fn meta(&self, id: &str) -> Arc<ContainerMeta> {
        let known = match self {
            Drive::Scenario(k) => k.get(id).cloned(),
            Drive::Host(h) => h.containers.get(id).map(|f| f.meta.clone()),
        };
        known.unwrap_or_else(|| ContainerMeta::named(id))
    }

    fn count(&self) -> usize {
        match self {
            Drive::Scenario(k) => k.len(),
            Drive::Host(h) => h.containers.len(),
        }
    }

    fn pmu(&self, id: &str, domain: u32) -> Pmu {
        match self {
            Drive::Scenario(_) => Pmu::default(),
            Drive::Host(h) => h.pmu_values(id, domain),
        }
    }
}

fn run_containers(
    args: &MonitorArgs,
    mode: &Mode,
    emu: Arc<EmuPlatform>,
    mut drive: Drive,
    label: &str,
) -> Result<(), CliError> {
    let (caps, domains) = emu_caps(&emu);
    let tracker = check_interval(args, &caps)?;
    let reader = Reader::new(emu.clone(), caps.clone(), &domains, Retries::default());
    let cfg = Config {
        max_rmid: caps.max_rmid,
        threshold_bytes: Config::default_threshold(emu.l3_bytes(), caps.max_rmid),
        min_limbo: Duration::from_millis(10),
    };
    let mut session = ContainerRmids::new(reader.domain_ids(), cfg, tracker);
    let tagger = EmuTagger(emu.clone());
    let mut clock = Clock::new(args.msr_interval(), args.duration, args.fast)?;
    let mut extra = Vec::new();
    if let Drive::Host(h) = &drive {
        extra.push(("cachescope.pmu".to_string(), h.pmu.description.clone()));
        extra.push((
            "cachescope.emulated".to_string(),
            format!("llc_occupancy_bytes and mbm_* are emulated, driven by {}", h.driver),
        ));
    }
    let info = run_info(label, emu.cpu_info(), &caps, Some(emu.l3_bytes()), &extra);
    let mut out = Output::new(mode, args.print_every, info)?;
    let fail = |e: cachescope_cmt::SessionError| CliError::Unavailable(anyhow!(e));
    let mut prev = Duration::ZERO;
    let result = (|| -> Result<(), CliError> {
        while let Some((t, late, missed)) = clock.next() {
            let (started, stopped) = drive.changes(&emu, t);
            for c in stopped {
                session.stop(&c, &tagger, t).map_err(fail)?;
                out.forget(&c);
            }
            for c in started {
                session.start(&c, &tagger).map_err(fail)?;
            }
            drive.advance(&emu, t, prev);
            prev = t;
            let rows: Vec<Row> = session
                .sample(&reader, &tagger, t)
                .map_err(fail)?
                .into_iter()
                .map(|s| Row {
                    time_ns: 0,
                    interval_ns: 0,
                    container: drive.meta(&s.container),
                    domain: s.domain,
                    rmid: s.rmid,
                    llc_occupancy_bytes: s.occupancy_bytes,
                    mbm_total_bytes: s.mbm_total_bytes,
                    mbm_local_bytes: s.mbm_local_bytes,
                    pmu: drive.pmu(&s.container, s.domain),
                    status: Status::parse(s.status).unwrap_or(Status::Error),
                })
                .collect();
            let mut header = |period: Duration| {
                let alloc = session.allocator();
                let mut limbo: Vec<u32> = alloc.domains().flat_map(|d| alloc.limbo(d)).collect();
                limbo.sort_unstable();
                limbo.dedup();
                let mut extra = Vec::new();
                if let Drive::Host(h) = &mut drive {
                    extra.push(format!("EMULATED occupancy and bandwidth, driven by {}", h.driver));
                    extra.extend(h.pmu.cpu_line(period));
                }
                let waiting: Vec<String> =
                    session.unmonitored().iter().map(|(c, why)| format!("{c} ({why})")).collect();
                if !waiting.is_empty() {
                    extra.push(format!("without RMID: {}", waiting.join(", ")));
                }
                Header {
                    backend: label.to_string(),
                    interval: args.msr_interval(),
                    rmids_in_use: (drive.count() - session.unmonitored().len()) as u64,
                    rmids_limbo: limbo.len() as u64,
                    unmonitored: session.unmonitored().len() as u64,
                    extra,
                }
            };
            if !out.tick(t, late, missed, rows, &mut header) {
                break;
            }
        }
        Ok(())
    })();
    if let Drive::Host(h) = drive {
        h.stop();
    }
    let fin = out.finish();
    result.and(fin)
}

/// The run's facts for file metadata.
pub(crate) fn run_info(
    backend: &str,
    cpu: &CpuInfo,
    caps: &Caps,
    l3_bytes: Option<u64>,
    extra: &[(String, String)],
) -> RunInfo {
    RunInfo {
        backend: backend.to_string(),
        cpuid: cpuid_summary(cpu),
        upscale: u64::from(caps.upscale_factor),
        l3_bytes,
        extra: extra.to_vec(),
    }
}

/// One line: vendor, family/model/stepping, and what L3 monitoring offers.
pub(crate) fn cpuid_summary(cpu: &CpuInfo) -> String {
    let mut s = format!(
        "{} family {} model {} stepping {}",
        cpu.vendor, cpu.signature.family, cpu.signature.model, cpu.signature.stepping
    );
    match &cpu.monitoring.l3 {
        Some(l3) => s.push_str(&format!(
            "; L3 monitoring: max_rmid {} upscale {} counter_width {} occupancy {} mbm_total {} mbm_local {}",
            l3.max_rmid, l3.upscale_factor, l3.counter_width_linux, l3.occupancy, l3.mbm_total, l3.mbm_local
        )),
        None => s.push_str("; no L3 monitoring"),
    }
    s
}

#[allow(clippy::too_many_arguments)]
fn run_cores<D: MsrDevice + Clone>(
    args: &MonitorArgs,
    mode: &Mode,
    cpu: &CpuInfo,
    dev: D,
    caps: Caps,
    domains: &[(u32, Vec<u32>)],
    domain_of: &dyn Fn(u32) -> Option<u32>,
    groups: &str,
    emu: Option<Arc<EmuPlatform>>,
    label: &str,
) -> Result<(), CliError> {
    let mut tracker = check_interval(args, &caps)?;
    let groups = parse_core_groups(groups).map_err(CliError::input)?;
    // Each group gets RMID index+1 in the domain(s) its cores belong to.
    let mut plan = Vec::new();
    for (i, g) in groups.iter().enumerate() {
        let rmid = i as u32 + 1;
        if rmid > caps.max_rmid {
            return Err(CliError::input(format!("{} core groups but only {} RMIDs", groups.len(), caps.max_rmid)));
        }
        let mut doms: Vec<u32> = Vec::new();
        for &cpu in g {
            let d = domain_of(cpu)
                .ok_or_else(|| CliError::input(format!("--cores: CPU {cpu} is not an online CPU with an L3")))?;
            if !doms.contains(&d) {
                doms.push(d);
            }
        }
        plan.push((format!("cores {}", cpulist::format(g)), rmid, doms));
    }
    let assoc: Vec<(Vec<u32>, u32)> = groups.iter().cloned().zip(plan.iter().map(|p| p.1)).collect();
    let mut pin = CorePinning::apply(dev.clone(), &assoc, caps.max_rmid, caps.max_rmid_any)
        .map_err(|e| CliError::Unavailable(anyhow!(e)))?;
    let reader = Reader::new(dev, caps.clone(), domains, Retries::default());
    let mut clock = Clock::new(args.msr_interval(), args.duration, args.fast)?;
    let l3_bytes = emu.as_ref().map(|e| e.l3_bytes());
    let metas: Vec<Arc<ContainerMeta>> = plan.iter().map(|p| ContainerMeta::named(&p.0)).collect();
    let result = (|| -> Result<(), CliError> {
        let mut out = Output::new(mode, args.print_every, run_info(label, cpu, &caps, l3_bytes, &[]))?;
        let mut last_verify = Duration::ZERO;
        while let Some((t, late, missed)) = clock.next() {
            if let Some(e) = &emu {
                e.advance_to(t);
            }
            let mut rows = Vec::new();
            for ((_, rmid, doms), meta) in plan.iter().zip(&metas) {
                for &d in doms {
                    let x = sample_rmid(&reader, &mut tracker, d, *rmid, t)
                        .map_err(|e| CliError::Unavailable(anyhow!(e)))?;
                    rows.push(Row {
                        time_ns: 0,
                        interval_ns: 0,
                        container: meta.clone(),
                        domain: d,
                        rmid: Some(*rmid),
                        llc_occupancy_bytes: x.occupancy_bytes,
                        mbm_total_bytes: x.mbm_total_bytes,
                        mbm_local_bytes: x.mbm_local_bytes,
                        pmu: Pmu::default(),
                        status: Status::parse(x.status).unwrap_or(Status::Error),
                    });
                }
            }
            if t.saturating_sub(last_verify) >= Duration::from_secs(1) {
                last_verify = t;
                for x in pin.verify().map_err(|e| CliError::Unavailable(anyhow!(e)))? {
                    eprintln!(
                        "cachescope: CPU {} PQR_ASSOC changed behind our back: {:#x}, expected {:#x}",
                        x.cpu, x.found, x.expected
                    );
                }
            }
            let mut header = |_: Duration| Header {
                backend: label.to_string(),
                interval: args.msr_interval(),
                rmids_in_use: plan.len() as u64,
                extra: vec![format!("core groups={}", plan.len())],
                ..Header::default()
            };
            if !out.tick(t, late, missed, rows, &mut header) {
                break;
            }
        }
        out.finish()
    })();
    let report = pin.restore().map_err(|e| CliError::Unavailable(anyhow!(e)))?;
    eprintln!(
        "cachescope: restored IA32_PQR_ASSOC on {} CPUs{}",
        report.restored,
        if report.left_alone.is_empty() {
            String::new()
        } else {
            format!(", left {} changed by others alone", report.left_alone.len())
        }
    );
    result
}
