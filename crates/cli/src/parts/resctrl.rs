//! The resctrl backend's builder: the kernel's mount (with the tagger for young containers),
//! or the emulated filesystem over FUSE.

use super::*;

/// resctrl: the kernel's mount, or (with `--emulate`) the emulated one over FUSE with the
/// scenario played as real cgroups and processes.
pub(super) fn resctrl(args: &Common, emulate: bool) -> Result<Built, CliError> {
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
    let h = args.cgroup_v2("the resctrl backend")?;
    let topo = topology()?;
    if emulate {
        let (scenario, model, platform) = args.emulation(
            "--backend resctrl --emulate needs --scenario FILE; without --backend resctrl, --emulate MODEL follows this host's containers",
        )?;
        if let Some(said) = cachescope_emu_resctrl::play::clean_leftovers(&h).said() {
            cachescope_platform::say!("{said}");
        }
        // A lead well beyond one interval, so a late wake-up cannot let a container start first.
        let lead = (interval * 2).max(Duration::from_millis(100));
        let mut play = Play::new(&h, &scenario, lead).map_err(CliError::unavailable)?;
        let prefix = format!("{}/", play.rel_prefix());
        let workload = move |cg: &str| cg.strip_prefix(&prefix).map(|n| n.split('/').next().unwrap_or(n).to_string());
        // The platform's clock starts once the first containers are attached.
        let opts = FuseOptions { wall_clock: false, ..FuseOptions::default() };
        let m = Mounted::start(platform.clone(), opts, proc_resolver("/proc".into(), workload))
            .map_err(CliError::unavailable)?;
        let root = m.root().to_path_buf();
        let label = format!("resctrl (emulated {model}, FUSE at {})", root.display());
        let emulated = Some(format!("the scenario {}", args.scenario.as_deref().unwrap_or(Path::new("")).display()));
        let i = info(label, platform.cpu_info().summary(), emulated, Some(platform.l3_bytes()));
        let groups = ContainerGroups::new(Resctrl::at(root), resctrl_info(i, platform.l3().upscale_factor))
            .map_err(CliError::unavailable)?;
        play.hold(m);
        let (pmu, desc) = host_pmu(args, &topo, |c| topo.domain_of(c).map_or(0, |d| d.id))?;
        return Ok(Built {
            backend: Box::new(groups),
            containers: Box::new(play),
            pmu,
            world: None,
            interval,
            virtual_time: false,
            pmu_description: desc,
        });
    }
    let rc = match Resctrl::find(Path::new("/proc")) {
        Ok(rc) => rc,
        Err(_) if args.mount_resctrl => Resctrl::mount(Path::new("/sys/fs/resctrl"))
            .map_err(|e| CliError::unavailable(format!("--mount-resctrl: {e}")))?,
        // Not mounted because the kernel has no resctrl at all: mounting will not help.
        // (Unreadable /proc/filesystems: assumed there, so that the mount error speaks.)
        Err(_) if !cachescope_detect::resctrl_in_kernel(&HostPaths::default()).unwrap_or(true) => {
            return Err(CliError::unavailable(format!(
                "{}: see `cachescope info` for what this host can use",
                cachescope_detect::NO_RESCTRL
            )))
        }
        Err(e) => return Err(CliError::unavailable(e)),
    };
    let cpu = host_cpu();
    let upscale = cpu.as_ref().and_then(|c| c.monitoring.l3.as_ref()).map_or(1, |l3| l3.upscale_factor);
    let l3_bytes = topo.l3_domains.iter().filter_map(|d| d.size_bytes).max();
    let cpuid = cpu.as_ref().map_or("CPUID unreadable".into(), CpuInfo::summary);
    let i = info("resctrl".into(), cpuid, None, l3_bytes);
    // Checked before the backend turns the kernel's mbm_assign_on_mkdir off.
    let policy = args.counter_policy()?;
    // Young containers tagged at their first thread, before the engine attaches them.
    let (tagger, young) = Tagger::start(rc.clone(), |dir| {
        cachescope_cgroups::threads(dir, "", true).map_err(|e| std::io::Error::other(e.to_string()))
    })
    .map_err(|e| CliError::unavailable(format!("resctrl's tagger: {e}")))?;
    let groups = ContainerGroups::new(rc, resctrl_info(i, upscale))
        .map_err(CliError::unavailable)?
        .with_counter_policy(policy)
        .with_tagger(tagger);
    // With Sub-NUMA Clustering the rows' domains are nodes: the PMU columns follow them.
    let snc = groups.domains().iter().any(|d| !d.sub.is_empty());
    let node = |c: u32| cachescope_platform::topology::numa_node_of(Path::new("/sys"), c);
    let nodes: HashMap<u32, u32> =
        if snc { topo.cpus.iter().filter_map(|c| Some((c.cpu, node(c.cpu)?))).collect() } else { HashMap::new() };
    let (pmu, desc) = host_pmu(args, &topo, |c| match nodes.get(&c) {
        Some(&n) => n,
        None => topo.domain_of(c).map_or(0, |d| d.id),
    })?;
    Ok(Built {
        backend: Box::new(groups),
        containers: Box::new(
            HostContainers::start_with(&h, args.globs(&h)?, Some(Box::new(move |id, dir| young.young(id, dir))))
                .map_err(CliError::unavailable)?,
        ),
        pmu,
        world: None,
        interval,
        virtual_time: false,
        pmu_description: desc,
    })
}

pub(super) fn resctrl_info(mut i: BackendInfo, upscale: u32) -> BackendInfo {
    i.upscale = u64::from(upscale);
    i.upkeep_every = Duration::from_millis(500);
    i
}
