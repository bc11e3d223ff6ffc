//! The sampling commands (`monitor`, `record`, `serve`): validate the flags, choose and build
//! the engine's parts (backend, containers, PMU source, emulated world, sinks), run, and say
//! what was done. The loop itself is the engine's.

use crate::duration;
use crate::error::CliError;
use crate::terminal::{self, Jsonl, Live, Table};
use cachescope_bpf::columns::{Choice, PmuColumns};
use cachescope_cgroups::identity::Glob;
use cachescope_cgroups::source::HostContainers;
use cachescope_cgroups::Hierarchy;
use cachescope_cmt::{check_interval, parse_core_groups, rmid_config, Caps, CoreGroups, MsrBackend, TaskTagger};
use cachescope_detect::{detect, HostPaths, LiveProbe, Role};
use cachescope_emu::{DrivenWorld, EmuPlatform, Scenario, ScenarioContainers, ScenarioWorld};
use cachescope_emu_resctrl::play::Play;
use cachescope_emu_resctrl::{proc_resolver, Mounted, Options as FuseOptions};
use cachescope_engine::backend::{BackendInfo, Sampling, Unsupported};
use cachescope_engine::pmu::PmuSource;
use cachescope_engine::{
    CacheBackend, ContainerMeta, ContainerSource, PartError, PartResult, Parts, RunError, Sink, TickerError,
};
use cachescope_hw::cpuid::CpuidSnapshot;
use cachescope_hw::CpuInfo;
use cachescope_perf::cqm_backend::CqmBackend;
use cachescope_platform::{InstructionCpuid, Topology};
use cachescope_resctrl::tagger::Tagger;
use cachescope_resctrl::{ContainerGroups, CounterPolicy, Resctrl};
use cachescope_sinks::parquet::Provenance;
use cachescope_sinks::{RecordOptions, RecordSink, ServeSink};
use clap::ValueEnum;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

mod emulated;
mod hardware;
mod resctrl;

use emulated::emulate;
use hardware::{kmod, msr, perf_cqm, unsupported};
use resctrl::resctrl;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    Auto,
    /// The kernel module (kmod/): RMIDs at cgroup creation, sampled in the kernel.
    Kmod,
    Resctrl,
    Msr,
    PerfCqm,
    Emulated,
    /// No cache monitoring: containers, CPU time and PMU columns only.
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PmuArg {
    /// eBPF, or perf cgroup events where BPF cannot load.
    Auto,
    Bpf,
    /// perf cgroup events (per container × CPU).
    Perf,
    Off,
}

/// Flags every sampling command takes (docs/cli.md).
#[derive(clap::Args, Debug)]
pub struct Common {
    /// Cache-monitoring backend; `auto` says in `cachescope info` what it picks.
    #[arg(long, value_enum, default_value = "auto")]
    backend: Backend,
    /// Sampling interval, 100us to 10m (500us, 1ms, 2s, 1m); default 1ms (100ms with resctrl and
    /// perf-cqm; with kmod, the module's own).
    #[arg(long, value_parser = duration::interval)]
    interval: Option<Duration>,
    /// Stop after this long, up to 10 years (default: until SIGINT/SIGTERM).
    #[arg(long, value_parser = duration::run_length)]
    duration: Option<Duration>,
    /// Emulate this CPU (a vector name from testdata/cpuid or a vector file).
    #[arg(long, value_name = "MODEL|VECTOR.json")]
    emulate: Option<String>,
    /// Scenario driving the emulated platform (docs/scenario.md).
    #[arg(long, value_name = "FILE.toml")]
    scenario: Option<PathBuf>,
    /// Core-pinned groups (msr/emulated), e.g. "0-3,4-7".
    #[arg(long, value_name = "GROUPS")]
    cores: Option<String>,
    /// Containers to follow beyond the runtimes recognised by name: globs over cgroup paths
    /// (`*` within a component, `**` across).
    #[arg(long, value_name = "GLOB", num_args = 1..)]
    containers: Vec<String>,
    /// Where per-container PMU counts and CPU time come from: eBPF (1 ms slots), perf cgroup
    /// events (the fallback where BPF cannot load), or off. Real containers only.
    #[arg(long, value_enum, default_value = "auto")]
    pmu: PmuArg,
    /// Mount resctrl at /sys/fs/resctrl if it is not mounted: with --backend resctrl, and
    /// with auto where this CPU and kernel can monitor the L3 (the packaged unit's).
    #[arg(long)]
    mount_resctrl: bool,
    /// How often to print a table (and refresh the self-metrics), 10ms to 1h.
    #[arg(long, default_value = "500ms", value_parser = duration::print_every)]
    print_every: Duration,
    /// Run emulated time as fast as possible instead of with the wall clock.
    #[arg(long)]
    fast: bool,
    /// Peak memory bandwidth per L3 domain, GB/s: sets the longest safe MBM interval.
    #[arg(long, default_value_t = 500.0)]
    peak_bandwidth_gbps: f64,
    /// Where bandwidth needs an assigned counter (resctrl's mbm_event mode, AMD): how long each
    /// turn of the counters that rotate through containers lasts, 100ms to 1h.
    #[arg(long, default_value = "2s", value_parser = duration::mbm_rotate)]
    mbm_rotate: Duration,
    /// Containers that keep an assignable counter whenever there are enough: globs over
    /// container names, ids or cgroup paths.
    #[arg(long, value_name = "GLOB", num_args = 1..)]
    mbm_pin: Vec<String>,
    /// Say at start why each backend and PMU event that is not used is unavailable (as
    /// `cachescope info` does), not only what is null.
    #[arg(short, long)]
    verbose: bool,
    /// Write one JSON object per noisy-neighbour episode start and end to FILE (appended),
    /// or to stdout with `-` (record and serve; monitor's stdout is its view).
    #[arg(long, value_name = "FILE|-")]
    events: Option<PathBuf>,
}

/// What the terminal shows (`monitor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Terminal {
    /// The live view on a terminal, plain tables otherwise.
    View,
    Plain,
    Jsonl,
}

/// Where rows go; one run may have several.
#[derive(Debug, Clone, Default)]
pub struct Outputs {
    pub terminal: Option<Terminal>,
    /// Parquet directory, rotation age and size.
    pub record: Option<(PathBuf, Duration, u64)>,
    pub listen: Option<SocketAddr>,
    /// Where finished files go (with `record`).
    pub upload: Option<cachescope_upload::Target>,
}

/// The parts of a run before its sinks, and what it says about itself.
struct Built {
    backend: Box<dyn CacheBackend>,
    containers: Box<dyn ContainerSource>,
    pmu: Option<Box<dyn PmuSource>>,
    world: Option<Box<dyn cachescope_engine::world::World>>,
    interval: Duration,
    virtual_time: bool,
    /// What the PMU columns are, for the file metadata.
    pmu_description: String,
}

fn host_cpu() -> Option<CpuInfo> {
    CpuidSnapshot::capture(&InstructionCpuid).ok().map(|s| CpuInfo::decode(&s))
}

fn topology() -> Result<Topology, CliError> {
    Topology::read(Path::new("/sys")).map_err(CliError::unavailable)
}

impl Common {
    fn globs(&self, h: &Hierarchy) -> Result<Vec<Glob>, CliError> {
        self.containers
            .iter()
            .filter(|g| *g != "auto")
            .map(|g| Glob::under(g, &h.root).map_err(|e| CliError::input(format!("--containers {g:?}: {e}"))))
            .collect()
    }

    /// Who keeps an assignable MBM counter, and the rotation's turn (`--mbm-pin`, `--mbm-rotate`).
    fn counter_policy(&self) -> Result<CounterPolicy, CliError> {
        let pins = self
            .mbm_pin
            .iter()
            .map(|g| Glob::new(g).map_err(|e| CliError::input(format!("--mbm-pin {g:?}: {e}"))))
            .collect::<Result<Vec<Glob>, CliError>>()?;
        let pinned = move |m: &ContainerMeta| {
            pins.iter().any(|g| m.name().is_some_and(|n| g.matches(n)) || g.matches(&m.id) || g.matches(&m.cgroup_path))
        };
        Ok(CounterPolicy { rotate_every: self.mbm_rotate, pinned: Box::new(pinned) })
    }

    fn msr_interval(&self) -> Duration {
        self.interval.unwrap_or(cachescope_cmt::DEFAULT_INTERVAL)
    }

    fn check_mbm_interval(&self, caps: &Caps) -> Result<(), CliError> {
        let gbps = self.peak_bandwidth_gbps;
        if !(gbps.is_finite() && gbps > 0.0 && gbps <= 1e6) {
            return Err(CliError::input(format!("--peak-bandwidth-gbps {gbps}: must be in (0, 1e6]")));
        }
        let peak = (gbps * 1e9) as u64;
        check_interval(caps, self.msr_interval(), peak).map_err(CliError::input)
    }

    /// The scenario, the model (`--emulate` or the scenario's) and the emulated platform.
    fn emulation(&self, no_scenario: &str) -> Result<(Scenario, String, Arc<EmuPlatform>), CliError> {
        let path = self.scenario.as_ref().ok_or_else(|| CliError::input(no_scenario))?;
        let scenario = Scenario::load(path).map_err(CliError::input)?;
        let model = self.emulate.clone().unwrap_or_else(|| scenario.platform.model.clone());
        let emu = Arc::new(EmuPlatform::with_model(&scenario, &model).map_err(CliError::input)?);
        Ok((scenario, model, emu))
    }

    /// The PMU source for real containers, or why there is none. `domain_of[cpu]`: the
    /// domain each CPU's counts are charged to (host L3 ids, or emulated domain indexes).
    fn pmu(&self, topo: &Topology, domain_of: impl Fn(u32) -> u32) -> Result<PmuColumns, NoPmu> {
        let choice = match self.pmu {
            PmuArg::Off => return Err(NoPmu::Off),
            PmuArg::Auto => Choice::Auto,
            PmuArg::Bpf => Choice::Bpf,
            PmuArg::Perf => Choice::Perf,
        };
        // Every online CPU: available_parallelism would stop at our own affinity or quota.
        let cpus: Vec<usize> = topo.online_cpus().map(|c| c as usize).collect();
        let max = cpus.iter().copied().max().unwrap_or(0);
        let map = (0..=max).map(|c| domain_of(c as u32)).collect();
        PmuColumns::start(host_cpu().as_ref(), &cpus, map, choice).map_err(|e| NoPmu::Failed(e.to_string()))
    }

    fn cgroup_v2(&self, what: &str) -> Result<Hierarchy, CliError> {
        let h = Hierarchy::find(Path::new("/proc")).map_err(CliError::unavailable)?;
        if !h.v2 {
            return Err(CliError::unavailable(format!(
                "{what} needs cgroup v2 to follow containers; found {}",
                h.description
            )));
        }
        Ok(h)
    }
}

/// Why a run has no PMU columns.
#[derive(Debug)]
enum NoPmu {
    /// `--pmu off`.
    Off,
    /// No source could start: why.
    Failed(String),
}

impl std::fmt::Display for NoPmu {
    /// As the file metadata (`cachescope.pmu`) and stderr say it: "off: " and the reason.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoPmu::Off => write!(f, "off: --pmu off"),
            NoPmu::Failed(why) => write!(f, "off: {why}"),
        }
    }
}

type HostPmu = (Option<Box<dyn PmuSource>>, String);

/// Host containers with their PMU source where one works (said on stderr where not). A
/// source the user named (`--pmu bpf`, `--pmu perf`) that cannot start is unavailable (exit
/// 3), as a named backend is; `auto` goes on without PMU columns.
fn host_pmu(args: &Common, topo: &Topology, domain_of: impl Fn(u32) -> u32) -> Result<HostPmu, CliError> {
    match args.pmu(topo, domain_of) {
        Ok(p) => {
            let d = p.describe();
            // Only CPU time is counted: say why the PMU columns stay null, each reason once;
            // -v adds where the counts would have come from.
            if !p.counted().pmu.iter().any(|&counted| counted) {
                match p.null_reason() {
                    Some(why) if !args.verbose => {
                        let src = p.source_name();
                        cachescope_platform::say!("PMU columns: {src}, null here ({why}); CPU time from cpu-clock")
                    }
                    _ => cachescope_platform::say!("PMU columns: {d}"),
                }
            } else if p.null_reason().is_some() {
                // Some count and some are null (left out where the PMU cannot hold them): which,
                // and why.
                cachescope_platform::say!("PMU columns: {d}");
            }
            if let Some(note) = p.start_note() {
                cachescope_platform::say!("{note}");
            }
            Ok((Some(Box::new(p)), d))
        }
        Err(NoPmu::Failed(why)) if matches!(args.pmu, PmuArg::Bpf | PmuArg::Perf) => {
            let named = if args.pmu == PmuArg::Bpf { "bpf" } else { "perf" };
            Err(CliError::unavailable(format!("--pmu {named}: {why}")))
        }
        Err(no) => {
            cachescope_platform::say!("PMU columns: {no}");
            Ok((None, no.to_string()))
        }
    }
}

/// What every run over this host's containers shares, read once: the cgroup tree, the
/// `--containers` globs over it, and the CPU topology.
struct HostParts {
    cgroups: Hierarchy,
    globs: Vec<Glob>,
    topo: Topology,
}

impl HostParts {
    /// `what` needs cgroup v2 to follow containers (said when it is not there).
    fn read(args: &Common, what: &str) -> Result<HostParts, CliError> {
        let cgroups = args.cgroup_v2(what)?;
        let globs = args.globs(&cgroups)?;
        Ok(HostParts { cgroups, globs, topo: topology()? })
    }

    /// The run: `backend` sampling every `interval`, the host's containers (`early`: who
    /// sees a young container first) and their PMU source, its counts charged to the
    /// domain `domain_of` gives each CPU.
    fn finish(
        self,
        args: &Common,
        backend: Box<dyn CacheBackend>,
        interval: Duration,
        domain_of: impl Fn(&Topology, u32) -> u32,
        early: Option<cachescope_cgroups::watch::Early>,
    ) -> Result<Built, CliError> {
        let (pmu, pmu_description) = host_pmu(args, &self.topo, |c| domain_of(&self.topo, c))?;
        let containers = HostContainers::start_with(&self.cgroups, self.globs, early).map_err(CliError::unavailable)?;
        Ok(Built {
            backend,
            containers: Box::new(containers),
            pmu,
            world: None,
            interval,
            virtual_time: false,
            pmu_description,
        })
    }
}

fn build(args: &Common) -> Result<Built, CliError> {
    if args.containers.iter().any(|g| g == "auto") && args.containers.len() > 1 {
        return Err(CliError::input("--containers: `auto` cannot be combined with globs"));
    }
    let emulated = args.emulate.is_some() || args.scenario.is_some();
    match args.backend {
        Backend::Resctrl => return resctrl(args, emulated),
        Backend::Emulated => return emulate(args),
        Backend::Auto if emulated => return emulate(args),
        _ if emulated => return Err(CliError::input("--emulate and --scenario need --backend emulated (or auto)")),
        _ => {}
    }
    let host = host_cpu().ok_or_else(|| CliError::unavailable("CPUID is not executable here"))?;
    let d = detect(&HostPaths::default(), &host, &LiveProbe);
    let mut chosen = match args.backend {
        // Detection names backends as `--backend` does.
        Backend::Auto => {
            d.auto(Role::CacheMonitoring).and_then(|b| Backend::from_str(b.name, false).ok()).unwrap_or(Backend::None)
        }
        named => named,
    };
    // `auto --mount-resctrl` (the packaged unit's): a resctrl no one mounted yet is mounted
    // where it can monitor, rather than recording without occupancy on an RDT host.
    let mount_first = args.backend == Backend::Auto
        && chosen == Backend::None
        && args.mount_resctrl
        && cachescope_detect::resctrl_mountable(&HostPaths::default(), &host);
    if mount_first {
        chosen = Backend::Resctrl;
    } else {
        let name = chosen.to_possible_value().map_or_else(String::new, |v| v.get_name().to_string());
        let status = d.get(&name).ok_or_else(|| CliError::input(format!("unknown backend {name}")))?;
        if !status.available {
            return Err(CliError::unavailable(format!("backend {name} is unavailable: {}", status.reason)));
        }
    }
    match chosen {
        // What `auto` mounted cannot monitor after all (the kernel turned it off): as without.
        Backend::Resctrl if mount_first => match resctrl(args, false) {
            Err(CliError::Unavailable(e)) => {
                cachescope_platform::say!("resctrl: {e:#}; following containers without cache monitoring");
                unsupported(args, &host, &d)
            }
            r => r,
        },
        Backend::Resctrl => resctrl(args, false),
        Backend::Kmod => kmod(args, &host),
        Backend::Msr => msr(args, &host),
        Backend::PerfCqm => perf_cqm(args, &host),
        // `auto` was resolved above and `emulated` built before detection: only `none` is left.
        Backend::None | Backend::Auto | Backend::Emulated => unsupported(args, &host, &d),
    }
}

/// Open every output asked for (fails early: an unwritable directory or a port in use is
/// bad input, exit 2).
fn sinks(
    outs: &Outputs,
    opened: Opened,
    b: &Built,
    print_every: Duration,
    rotate: &Arc<AtomicBool>,
) -> Result<Vec<Box<dyn Sink>>, CliError> {
    let mut v: Vec<Box<dyn Sink>> = Vec::new();
    let host = terminal::hostname();
    // The live noisy-neighbour finder first: the outputs after it read what it found.
    let board = cachescope_sinks::noisy::Board::shared();
    v.push(Box::new(crate::noisy::FinderSink::new(board.clone())));
    if let Some((out, what)) = opened.events {
        v.push(Box::new(crate::noisy::EventsSink::new(board.clone(), out, what)));
    }
    match outs.terminal {
        Some(Terminal::Jsonl) => {
            let prov = Provenance::of(b.backend.info().emulated.is_some());
            v.push(Box::new(Jsonl::new(host.clone(), prov)));
        }
        Some(t) => {
            use std::io::IsTerminal;
            // A terminal that cannot place the cursor (TERM=dumb, or none named) gets the
            // plain tables.
            let capable = std::env::var("TERM").is_ok_and(|t| !t.is_empty() && t != "dumb");
            if t == Terminal::View && capable && std::io::stdout().is_terminal() && std::io::stdin().is_terminal() {
                let following = b.containers.describe();
                v.push(Box::new(Live::start(host.clone(), following, board.clone()).map_err(CliError::unavailable)?));
            } else {
                v.push(Box::new(Table::default()));
            }
        }
        None => {}
    }
    let mut record = None;
    if let (Some((dir, rotate_every, rotate_bytes)), Some(opened)) = (&outs.record, opened.dir) {
        let i = b.backend.info();
        let extra = [
            ("cachescope.pmu".to_string(), b.pmu_description.clone()),
            ("cachescope.containers".into(), b.containers.describe()),
        ];
        let o = RecordOptions::for_run(dir.clone(), host, i, &extra);
        let o = RecordOptions {
            rotate_every: *rotate_every,
            rotate_bytes: *rotate_bytes,
            rotate_now: Some(rotate.clone()),
            ..o
        };
        // The episodes the live finder reports, beside the rows: one small file per run, named
        // by its run id, made at its first episode (docs/data.md).
        let run_id = o.metadata.iter().find(|(k, _)| k == cachescope_sinks::read::RUN_ID).map(|(_, v)| v.clone());
        if let Some(id) = run_id {
            let path = opened.path().join(format!("{}{id}.jsonl", cachescope_sinks::noisy::EPISODES_PREFIX));
            let what = path.display().to_string();
            let file = Box::new(crate::noisy::LazyFile::new(path));
            v.push(Box::new(crate::noisy::EventsSink::beside_rows(board.clone(), file, what)));
        }
        let sink =
            RecordSink::start_in(o, opened).map_err(|e| CliError::input(format!("--output {}: {e}", dir.display())))?;
        for r in sink.recovered() {
            cachescope_platform::say!("{r}");
        }
        record = Some(sink);
    }
    // Without a terminal view (record, serve): progress lines on stderr.
    if outs.terminal.is_none() {
        v.push(Box::new(terminal::Progress::new(record, print_every)));
    } else if let Some(r) = record {
        v.push(Box::new(r));
    }
    if let Some(serve) = opened.serve {
        let serve = serve.with_board(board.clone());
        cachescope_platform::say!("serving Prometheus metrics at http://{}/metrics", serve.addr());
        v.push(Box::new(serve));
    }
    Ok(v)
}

/// The outputs a run opens before anything else: a directory it cannot write or a port in use
/// is said before any backend or eBPF set-up, and nothing of it is set up in vain.
#[derive(Default)]
struct Opened {
    dir: Option<cachescope_sinks::parquet::OutputDir>,
    serve: Option<ServeSink>,
    events: Option<(Box<dyn std::io::Write + Send>, String)>,
}

impl Opened {
    fn open(outs: &Outputs, args: &Common) -> Result<Opened, CliError> {
        let mut o = Opened::default();
        if let Some(path) = &args.events {
            if path.as_os_str() == "-" {
                if outs.terminal.is_some() {
                    return Err(CliError::input("--events -: monitor's stdout is its view; name a file"));
                }
                o.events = Some((Box::new(std::io::stdout()), "stdout".into()));
            } else {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| CliError::input(format!("--events {}: {e}", path.display())))?;
                o.events = Some((Box::new(f), path.display().to_string()));
            }
        }
        if let Some((dir, ..)) = &outs.record {
            let d = cachescope_sinks::parquet::OutputDir::open(dir)
                .map_err(|e| CliError::input(format!("--output {}: {e}", dir.display())))?;
            o.dir = Some(d);
        }
        if let Some(addr) = outs.listen {
            o.serve = Some(ServeSink::start(addr).map_err(CliError::input)?);
        }
        Ok(o)
    }
}

/// How long the end of a run waits for its last files' uploads.
const UPLOAD_DRAIN: Duration = Duration::from_secs(10);

/// `CACHESCOPE_READ` (docs/cli.md, a diagnostic for comparing costs): `quiet`, the default
/// (an interval reads who ran and a keyframe share), or `every-interval` (every container at
/// every interval, as before 2026-11-29).
fn every_interval() -> Result<bool, CliError> {
    match std::env::var("CACHESCOPE_READ") {
        Err(_) => Ok(false),
        Ok(v) if v == "quiet" => Ok(false),
        Ok(v) if v == "every-interval" => Ok(true),
        Ok(v) => Err(CliError::input(format!("CACHESCOPE_READ: {v:?} is neither \"quiet\" nor \"every-interval\""))),
    }
}

/// How long batched backends sleep between wake-ups.
const BATCH: Duration = Duration::from_millis(50);
/// The kernel module's ring holds seconds of records: draining every 100 ms costs each wake-up
/// (~30 us) half as often as 50 ms would (scripts/bench-kmod.sh).
const KERNEL_BATCH: Duration = Duration::from_millis(100);

pub fn run(args: &Common, outs: &Outputs) -> Result<(), CliError> {
    let stop = Arc::new(AtomicBool::new(false));
    let handler = |e: std::io::Error| CliError::unavailable(format!("signal handler: {e}"));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(handler)?;
    }
    // SIGHUP: where a terminal shows the run (monitor), the terminal hung up, and the run ends
    // as on SIGTERM; a recorder in the background finishes the file being filled and goes on
    // (logrotate's convention). SIGUSR1 and SIGUSR2, whose default is to end the process, are
    // taken and ignored: no stray signal costs a recording.
    let rotate = Arc::new(AtomicBool::new(false));
    let on_hup = if outs.terminal.is_some() { stop.clone() } else { rotate.clone() };
    signal_hook::flag::register(signal_hook::consts::SIGHUP, on_hup).map_err(handler)?;
    // Signals whose default would end the process without finishing its files: the ones
    // that ask it to end (a quit, a soft CPU limit) end the run cleanly; the others (stray
    // timers, I/O readiness, a power event, a file size limit, whose writes then fail and
    // are handled as any failed write) are taken and ignored. SIGPIPE is ignored by Rust's
    // runtime: a closed pipe is a failed write.
    use signal_hook::consts::signal as s;
    for sig in [s::SIGQUIT, s::SIGXCPU] {
        signal_hook::flag::register(sig, stop.clone()).map_err(handler)?;
    }
    let ignored = Arc::new(AtomicBool::new(false));
    for sig in [s::SIGUSR1, s::SIGUSR2, s::SIGALRM, s::SIGVTALRM, s::SIGPROF, s::SIGIO, libc::SIGPWR, s::SIGXFSZ] {
        signal_hook::flag::register(sig, ignored.clone()).map_err(handler)?;
    }
    let opened = Opened::open(outs, args)?;
    let b = build(args)?;
    if let Some(d) = args.duration.filter(|d| *d < b.interval) {
        return Err(CliError::input(format!(
            "--duration {d:?} is shorter than one interval ({:?}): nothing would be sampled",
            b.interval
        )));
    }
    let sinks = sinks(outs, opened, &b, args.print_every, &rotate)?;
    let opts = cachescope_engine::Options {
        interval: b.interval,
        batch: if b.backend.info().sampling == Sampling::Kernel { KERNEL_BATCH } else { BATCH },
        duration: args.duration,
        virtual_time: b.virtual_time,
        status_every: args.print_every,
        every_interval: every_interval()?,
        stop,
    };
    let parts = Parts { backend: b.backend, containers: b.containers, pmu: b.pmu, world: b.world, sinks };
    let uploader = outs
        .record
        .as_ref()
        .zip(outs.upload.clone())
        .map(|((dir, ..), t)| cachescope_upload::Uploader::start(dir.clone(), terminal::hostname(), t));
    let result = cachescope_engine::run(parts, &opts);
    // The files the run closed last go too: 10 s at most, or until a second SIGINT/SIGTERM
    // (the first ended the run); the rest waits for the next run.
    let again = Arc::new(AtomicBool::new(false));
    if uploader.is_some() {
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            signal_hook::flag::register(sig, again.clone()).map_err(handler)?;
        }
    }
    let uploaded = uploader.map(|u| u.finish(UPLOAD_DRAIN, &again));
    match result {
        Ok(sum) => {
            cachescope_platform::say!("{}", terminal::summary_line(sum.wakes, &sum.lateness, sum.missed));
            for m in sum.messages.into_iter().chain(uploaded) {
                cachescope_platform::say!("{m}");
            }
            match sum.losses.is_empty() {
                true => Ok(()),
                false => Err(CliError::Losses(anyhow::anyhow!("finished with losses: {}", sum.losses.join("; ")))),
            }
        }
        Err(RunError::Clock(e @ TickerError::Interval(_))) => Err(CliError::input(format!("--interval: {e}"))),
        Err(RunError::Output { why, summary }) => {
            // What the run measured is still said; the exit says an output failed.
            cachescope_platform::say!("{}", terminal::summary_line(summary.wakes, &summary.lateness, summary.missed));
            for m in summary.messages.iter().chain(&summary.losses).chain(&uploaded) {
                cachescope_platform::say!("{m}");
            }
            Err(CliError::output(why))
        }
        // What the part reads went away: unavailable, as it would be at the start.
        Err(e @ RunError::Part { why: PartError::Gone(_), .. }) => Err(CliError::unavailable(e)),
        Err(e @ RunError::Part { .. }) => Err(CliError::Failed(anyhow::anyhow!("{e}"))),
        Err(e @ RunError::Clock(_)) => Err(CliError::unavailable(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::Common;
    use crate::duration::{short, INTERVALS};
    use clap::{Args, ValueEnum};

    /// Where the docs state the interval's defaults and range, they say what the code does:
    /// the defaults are the backends' own constants, the range the flag's parser; and they
    /// list the backends `--backend` takes.
    #[test]
    fn the_docs_state_the_interval_and_backends_the_code_has() {
        let msr = short(cachescope_cmt::DEFAULT_INTERVAL);
        let resctrl = short(cachescope_resctrl::DEFAULT_INTERVAL);
        assert_eq!(resctrl, short(cachescope_perf::cqm_backend::DEFAULT_INTERVAL), "one phrase covers both");
        let range = format!("{}..{}", short(INTERVALS.0), short(INTERVALS.1));
        let stated = [
            format!("default {msr}"),
            format!("{resctrl} with resctrl and perf-cqm"),
            "with kmod, the module's own".to_string(),
        ];
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for doc in ["README.md", "docs/cli.md"] {
            let text = std::fs::read_to_string(root.join(doc)).unwrap();
            let line = text.lines().find(|l| l.contains("--interval") && l.contains("default")).unwrap();
            for s in stated.iter().chain([&range]) {
                assert!(line.contains(s.as_str()), "{doc}: {line:?} does not say {s:?}");
            }
        }
        // And the backends `--backend` takes, in its order.
        let names: Vec<String> = super::Backend::value_variants()
            .iter()
            .filter_map(|b| b.to_possible_value().map(|v| v.get_name().to_string()))
            .collect();
        let list = format!("--backend {}", names.join("|"));
        for doc in ["README.md", "docs/cli.md"] {
            let text = std::fs::read_to_string(root.join(doc)).unwrap().replace('`', "");
            assert!(text.contains(&list), "{doc} does not list {list:?}");
        }
        let cmd = Common::augment_args(clap::Command::new("t"));
        let help = cmd.get_arguments().find(|a| a.get_id() == "interval").and_then(|a| a.get_help()).unwrap();
        let help = help.to_string().replace('\n', " ");
        let range = format!("{} to {}", short(INTERVALS.0), short(INTERVALS.1));
        for s in stated.iter().chain([&range]) {
            assert!(help.contains(s.as_str()), "--help: {help:?} does not say {s:?}");
        }
    }
}
