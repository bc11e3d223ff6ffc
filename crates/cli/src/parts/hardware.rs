//! The builders that read the hardware from user space or through the kernel: none (CPU time
//! and PMU columns only), perf's CQM events, the kernel module, and the MSRs.

use super::*;

/// No cache monitoring here: follow the host's containers with CPU time and PMU columns.
pub(super) fn unsupported(args: &Common, host: &CpuInfo, d: &cachescope_detect::Detection) -> Result<Built, CliError> {
    if args.cores.is_some() {
        return Err(CliError::input("--cores is for the msr backend (core groups need RDT)"));
    }
    let h = args.cgroup_v2("without cache monitoring, cachescope")?;
    let topo = topology()?;
    let why: Vec<String> = d
        .backends
        .iter()
        .filter(|b| b.role == Role::CacheMonitoring && !b.available)
        .map(|b| format!("{}: {}", b.name, b.reason))
        .collect();
    let why = format!("no cache monitoring on this host ({})", why.join("; "));
    cachescope_platform::say!("{why}; {}; --emulate MODEL emulates them", cachescope_detect::NONE_DOES);
    let domains: Vec<u32> = topo.l3_domains.iter().map(|d| d.id).collect();
    let domains = if domains.is_empty() { vec![0] } else { domains };
    let l3 = topo.l3_domains.iter().filter_map(|d| d.size_bytes).max();
    let (pmu, desc) = host_pmu(args, &topo, |c| topo.domain_of(c).map_or(0, |d| d.id))?;
    let containers = HostContainers::start(&h, args.globs(&h)?).map_err(CliError::unavailable)?;
    Ok(Built {
        backend: Box::new(Unsupported::new(domains, l3, host.summary(), &why)),
        containers: Box::new(containers),
        pmu,
        world: None,
        interval: args.msr_interval(),
        virtual_time: false,
        pmu_description: desc,
    })
}

/// perf-cqm: cgroup events on the `intel_cqm` PMU (Linux 4.1–4.13) for the host's containers.
pub(super) fn perf_cqm(args: &Common, host: &CpuInfo) -> Result<Built, CliError> {
    let pmu = cachescope_perf::cqm::discover(Path::new("/sys")).map_err(CliError::unavailable)?;
    let h = args.cgroup_v2("the perf-cqm backend")?;
    let topo = topology()?;
    let domains: Vec<(u32, Vec<u32>)> = topo.l3_domains.iter().map(|d| (d.id, d.cpus.clone())).collect();
    let l3 = topo.l3_domains.iter().filter_map(|d| d.size_bytes).max();
    let i = info("perf-cqm (intel_cqm PMU)".into(), host.summary(), None, l3);
    let (pmu_src, desc) = host_pmu(args, &topo, |c| topo.domain_of(c).map_or(0, |d| d.id))?;
    Ok(Built {
        backend: Box::new(CqmBackend::new(pmu, PerfOpener, &domains, i)),
        containers: Box::new(HostContainers::start(&h, args.globs(&h)?).map_err(CliError::unavailable)?),
        pmu: pmu_src,
        world: None,
        interval: args.interval.unwrap_or(Duration::from_millis(100)),
        virtual_time: false,
        pmu_description: desc,
    })
}

/// The kernel module: the host's containers, tagged by the kernel from their cgroup's creation
/// (the runtimes' cgroups and `--containers` are its watch rules) and sampled there.
pub(super) fn kmod(args: &Common, host: &CpuInfo) -> Result<Built, CliError> {
    if args.cores.is_some() {
        return Err(CliError::input("--cores is for the msr backend; the kernel module monitors containers"));
    }
    let h = args.cgroup_v2("the kmod backend")?;
    let topo = topology()?;
    let globs = args.globs(&h)?;
    let extra: Vec<String> = globs.iter().map(|g| g.as_str().to_string()).collect();
    let dev = cachescope_kmod::Device::open(Path::new(cachescope_kmod::device::DEFAULT_PATH))
        .map_err(CliError::unavailable)?;
    let mut backend = cachescope_kmod::KmodBackend::new(Box::new(dev), &cachescope_kmod::rules(&extra), host.summary())
        .map_err(|e| match e {
            cachescope_kmod::KmodError::Rule { .. } => CliError::input(format!("--containers: {e}")),
            e => CliError::unavailable(e),
        })?;
    let k = *backend.kernel_info();
    let period = Duration::from_nanos(k.interval_ns);
    if let Some(i) = args.interval.filter(|i| *i != period) {
        return Err(CliError::input(format!(
            "--interval {i:?}: the module samples every {period:?} (its interval_us parameter); leave --interval out or reload it"
        )));
    }
    if k.emulate != 0 {
        cachescope_platform::say!(
            "LLC occupancy and memory bandwidth are EMULATED by the kernel module (loaded with emulate=1)"
        );
    } else {
        mbm_correction(backend.info_mut(), host);
    }
    // PMU counts are charged to the module's domains: emulated ones deal CPUs round robin.
    let params = cachescope_kmod::device::parameters(Path::new(cachescope_kmod::device::SYSFS)).unwrap_or_default();
    let emu_domains: u32 =
        params.iter().find(|(n, _)| n == "emu_domains").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let dealt = k.emulate != 0 && emu_domains > 0;
    let (pmu, desc) =
        host_pmu(args, &topo, |c| if dealt { c % emu_domains } else { topo.domain_of(c).map_or(0, |d| d.id) })?;
    Ok(Built {
        backend: Box::new(backend),
        containers: Box::new(HostContainers::start(&h, globs).map_err(CliError::unavailable)?),
        pmu,
        world: None,
        interval: period,
        virtual_time: false,
        pmu_description: desc,
    })
}

/// The msr backend on this host's `/dev/cpu/N/msr`: core groups only.
pub(super) fn msr(args: &Common, host: &CpuInfo) -> Result<Built, CliError> {
    let groups = args
        .cores
        .as_deref()
        .ok_or_else(|| CliError::input("the msr backend monitors core groups: give --cores, e.g. 0-3,4-7"))?;
    let groups = parse_core_groups(groups).map_err(CliError::input)?;
    let l3 = host.monitoring.l3.clone().ok_or_else(|| CliError::unavailable("no L3 monitoring"))?;
    let caps = Caps::from_l3(&l3, host.monitoring.max_rmid_any.unwrap_or(l3.max_rmid));
    args.check_mbm_interval(&caps)?;
    let topo = topology()?;
    let domains: Vec<(u32, Vec<u32>)> = topo.l3_domains.iter().map(|d| (d.id, d.cpus.clone())).collect();
    let l3_bytes = topo.l3_domains.iter().filter_map(|d| d.size_bytes).max();
    let mut i = info("msr".into(), host.summary(), None, l3_bytes);
    mbm_correction(&mut i, host);
    i.sampling = Sampling::Tick;
    i.upkeep_every = Duration::from_secs(1);
    let cfg = rmid_config(&caps, l3_bytes.unwrap_or(0));
    let dev = Arc::new(DevMsr::new(Path::new("/dev")));
    Ok(Built {
        backend: Box::new(MsrBackend::new(dev, caps, &domains, cfg, None, i)),
        containers: Box::new(CoreGroups::new(groups)),
        pmu: None,
        world: None,
        interval: args.msr_interval(),
        virtual_time: false,
        pmu_description: "off: core groups are not containers".into(),
    })
}
