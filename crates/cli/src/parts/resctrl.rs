//! The resctrl backend's builder: the kernel's mount (with the tagger for young containers),
//! or the emulated filesystem over FUSE.

use super::*;

/// resctrl: the kernel's mount, or (with `--emulate`) the emulated one over FUSE with the
/// scenario played as real cgroups and processes.
pub(super) fn resctrl(args: &Common, emulate: bool) -> Result<Built, CliError> {
    let interval = args.interval.unwrap_or(cachescope_resctrl::DEFAULT_INTERVAL);
    if interval < cachescope_resctrl::MIN_INTERVAL {
        return Err(CliError::input(format!(
            "--interval {interval:?} is shorter than resctrl can sustain (each read is a syscall that takes the kernel's global mutex): use {:?} or more",
            cachescope_resctrl::MIN_INTERVAL
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
    let parts = HostParts::read(args, "the resctrl backend")?;
    if emulate {
        let (scenario, model, platform) = args.emulation(
            "--backend resctrl --emulate needs --scenario FILE; without --backend resctrl, --emulate MODEL follows this host's containers",
        )?;
        if let Some(said) = cachescope_emu_resctrl::play::clean_leftovers(&parts.cgroups).said() {
            cachescope_platform::say!("{said}");
        }
        // A lead well beyond one interval, so a late wake-up cannot let a container start first.
        let lead = (interval * 2).max(Duration::from_millis(100));
        let mut play = Play::new(&parts.cgroups, &scenario, lead).map_err(CliError::unavailable)?;
        let prefix = format!("{}/", play.rel_prefix());
        let workload = move |cg: &str| cg.strip_prefix(&prefix).map(|n| n.split('/').next().unwrap_or(n).to_string());
        // The platform's clock starts once the first containers are attached.
        let opts = FuseOptions { wall_clock: false, ..FuseOptions::default() };
        let m = Mounted::start(platform.clone(), opts, proc_resolver("/proc".into(), workload))
            .map_err(CliError::unavailable)?;
        let root = m.root().to_path_buf();
        let label = format!("resctrl (emulated {model}, FUSE at {})", root.display());
        let emulated = Some(format!("the scenario {}", args.scenario.as_deref().unwrap_or(Path::new("")).display()));
        let mut i = BackendInfo::new(label, platform.cpu_info().summary(), Some(platform.l3_bytes()));
        (i.emulated, i.upscale) = (emulated, u64::from(platform.l3().upscale_factor));
        // The scenario's traffic, not its idle processes, moves the counters.
        i.moves_without_tasks = true;
        let groups = ContainerGroups::new(Resctrl::at(root), i).map_err(CliError::unavailable)?;
        play.hold(m);
        let (pmu, desc) = host_pmu(args, &parts.topo, |c| parts.topo.domain_id_of(c))?;
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
    // Checked before the backend turns the kernel's mbm_assign_on_mkdir off.
    let policy = args.counter_policy()?;
    // Young containers tagged at their first thread, before the engine attaches them.
    let (tagger, young) = Tagger::start(rc.clone(), |dir| {
        cachescope_cgroups::threads(dir, "", true).map_err(|e| std::io::Error::other(e.to_string()))
    })
    .map_err(|e| CliError::unavailable(format!("resctrl's tagger: {e}")))?;
    let groups = ContainerGroups::on_host(rc, host_cpu().as_ref(), &parts.topo)
        .map_err(CliError::unavailable)?
        .with_counter_policy(policy)
        .with_tagger(tagger);
    // With Sub-NUMA Clustering the rows' domains are nodes: the PMU columns follow them.
    let domain_of = groups.pmu_domain_of(&parts.topo);
    let early: cachescope_cgroups::watch::Early = Box::new(move |id, dir| young.young(id, dir));
    parts.finish(args, Box::new(groups), interval, move |_, c| domain_of(c), Some(early))
}
