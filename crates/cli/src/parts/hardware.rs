//! The builders that read the hardware from user space or through the kernel: none (CPU time
//! and PMU columns only), perf's CQM events, the kernel module, and the MSRs. Each backend is
//! built by its own crate (`on_host`); here are the flags' checks and the shared host parts.

use super::*;

/// No cache monitoring here: follow the host's containers with CPU time and PMU columns.
pub(super) fn unsupported(args: &Common, host: &CpuInfo, d: &cachescope_detect::Detection) -> Result<Built, CliError> {
    if args.cores.is_some() {
        return Err(CliError::input("--cores is for the msr backend (core groups need RDT)"));
    }
    let parts = HostParts::read(args, "without cache monitoring, cachescope")?;
    let why: Vec<String> = d
        .backends
        .iter()
        .filter(|b| b.role == Role::CacheMonitoring && !b.available)
        .map(|b| format!("{}: {}", b.name, b.reason))
        .collect();
    let why = format!("no cache monitoring on this host ({})", why.join("; "));
    // One short line unless asked (-v): each backend's reason is `cachescope info`'s to say.
    if args.verbose {
        cachescope_platform::say!("{why}; {}; --emulate MODEL emulates them", cachescope_detect::NONE_DOES);
    } else {
        cachescope_platform::say!(
            "no cache monitoring on this host: following its containers with CPU time and PMU columns, \
             occupancy and bandwidth null (status unsupported; why: `cachescope info`, or -v); \
             --emulate {} shows the demo",
            cachescope_engine::backend::DEMO_MODEL
        );
    }
    let domains: Vec<u32> = parts.topo.l3_domains.iter().map(|d| d.id).collect();
    let domains = if domains.is_empty() { vec![0] } else { domains };
    let backend = Unsupported::new(domains, parts.topo.l3_bytes(), host.summary(), &why);
    parts.finish(args, Box::new(backend), args.msr_interval(), Topology::domain_id_of, None)
}

/// perf-cqm: cgroup events on the `intel_cqm` PMU (Linux 4.1–4.13) for the host's containers.
pub(super) fn perf_cqm(args: &Common, host: &CpuInfo) -> Result<Built, CliError> {
    let parts = HostParts::read(args, "the perf-cqm backend")?;
    let backend = CqmBackend::on_host(Path::new("/sys"), &parts.topo, host.summary()).map_err(CliError::unavailable)?;
    let interval = args.interval.unwrap_or(cachescope_perf::cqm_backend::DEFAULT_INTERVAL);
    parts.finish(args, Box::new(backend), interval, Topology::domain_id_of, None)
}

/// The kernel module: the host's containers, tagged by the kernel from their cgroup's creation
/// (the runtimes' cgroups and `--containers` are its watch rules) and sampled there.
pub(super) fn kmod(args: &Common, host: &CpuInfo) -> Result<Built, CliError> {
    if args.cores.is_some() {
        return Err(CliError::input("--cores is for the msr backend; the kernel module monitors containers"));
    }
    let parts = HostParts::read(args, "the kmod backend")?;
    let extra: Vec<String> = parts.globs.iter().map(|g| g.as_str().to_string()).collect();
    let backend =
        cachescope_kmod::KmodBackend::on_host(&cachescope_kmod::rules(&extra), host).map_err(|e| match e {
            cachescope_kmod::KmodError::Rule { .. } => CliError::input(format!("--containers: {e}")),
            e => CliError::unavailable(e),
        })?;
    let interval = backend.interval(args.interval).map_err(|e| CliError::input(format!("--interval {e}")))?;
    if backend.kernel_info().emulate != 0 {
        cachescope_platform::say!(
            "LLC occupancy and memory bandwidth are EMULATED by the kernel module (loaded with emulate=1)"
        );
    }
    // PMU counts are charged to the module's domains: emulated ones deal CPUs round robin.
    let dealt = backend.emulated_domains();
    let domain_of = move |topo: &Topology, c: u32| dealt.map_or_else(|| topo.domain_id_of(c), |n| c % n);
    parts.finish(args, Box::new(backend), interval, domain_of, None)
}

/// The msr backend on this host's `/dev/cpu/N/msr`: core groups only.
pub(super) fn msr(args: &Common, host: &CpuInfo) -> Result<Built, CliError> {
    let groups = args
        .cores
        .as_deref()
        .ok_or_else(|| CliError::input("the msr backend monitors core groups: give --cores, e.g. 0-3,4-7"))?;
    let groups = parse_core_groups(groups).map_err(CliError::input)?;
    let backend = MsrBackend::on_host(host, &topology()?).ok_or_else(|| CliError::unavailable("no L3 monitoring"))?;
    args.check_mbm_interval(backend.reader().caps())?;
    Ok(Built {
        backend: Box::new(backend),
        containers: Box::new(CoreGroups::new(groups)),
        pmu: None,
        world: None,
        interval: args.msr_interval(),
        virtual_time: false,
        pmu_description: "off: core groups are not containers".into(),
    })
}
