//! The emulated platform's builders: a scenario's world, or this host's containers driving
//! an emulated L3 (`--emulate`).

use super::*;

pub(super) struct EmuTagger(Arc<EmuPlatform>);

impl TaskTagger for EmuTagger {
    fn tag(&self, container: &str, rmid: Option<u32>) -> PartResult {
        let tagged = self.0.tag_container(container, rmid);
        tagged.then_some(()).ok_or_else(|| PartError::container(container, "no such emulated container"))
    }
}

/// The platform's L3 already carries the counter width it emulates.
pub(super) fn emu_caps(emu: &EmuPlatform) -> Caps {
    let l3 = emu.l3();
    Caps::from_l3(l3, emu.cpu_info().monitoring.max_rmid_any.unwrap_or(l3.max_rmid))
}

/// The emulated platform, driven by a scenario or by this host's containers.
pub(super) fn emulate(args: &Common) -> Result<Built, CliError> {
    if args.scenario.is_none() && args.cores.is_none() {
        return host_driven(args);
    }
    let (scenario, model, emu) = args.emulation("--emulate with --cores needs --scenario FILE")?;
    let caps = emu_caps(&emu);
    args.check_mbm_interval(&caps)?;
    let path = args.scenario.as_deref().map_or(String::new(), |p| p.display().to_string());
    let mut i = BackendInfo::new(format!("emulated ({model})"), emu.cpu_info().summary(), Some(emu.l3_bytes()));
    i.emulated = Some(format!("the scenario {path}"));
    let (containers, tagger): (Box<dyn ContainerSource>, Option<Box<dyn TaskTagger>>) = match &args.cores {
        Some(groups) => {
            let groups = parse_core_groups(groups).map_err(CliError::input)?;
            for cpu in groups.iter().flatten() {
                if !emu.domains().iter().any(|(_, cpus)| cpus.contains(cpu)) {
                    return Err(CliError::input(format!("--cores: CPU {cpu} is not an online CPU with an L3")));
                }
            }
            i.label = format!("emulated ({model}), core groups");
            (Box::new(CoreGroups::new(groups)), None)
        }
        None => (Box::new(ScenarioContainers::new(&scenario)), Some(Box::new(EmuTagger(emu.clone())))),
    };
    let cfg = rmid_config(&caps, emu.l3_bytes());
    let backend = MsrBackend::new(emu.clone(), caps, &emu.domains(), cfg, tagger, i);
    Ok(Built {
        backend: Box::new(backend),
        containers,
        pmu: None,
        world: Some(Box::new(ScenarioWorld(emu))),
        interval: args.msr_interval(),
        virtual_time: args.fast,
        pmu_description: "off: scenario containers are not processes".into(),
    })
}

/// `--emulate MODEL` without a scenario: an emulated L3 shaped like this host's, driven by
/// what its real containers were measured to do.
fn host_driven(args: &Common) -> Result<Built, CliError> {
    let model = args.emulate.as_deref().ok_or_else(|| CliError::input("--backend emulated needs --emulate MODEL"))?;
    if args.fast {
        return Err(CliError::input(
            "--fast needs --scenario: without one the host's containers drive the emulated cache in real time",
        ));
    }
    let parts = HostParts::read(args, "--emulate without --scenario")?;
    let topo = &parts.topo;
    let emu = Arc::new(EmuPlatform::like_host(model, topo).map_err(|e| match e {
        cachescope_emu::EmuError::Host(_) => CliError::unavailable(e),
        _ => CliError::input(e),
    })?);
    // PMU counts are charged to emulated domains (their index), as the rows are.
    let index = |cpu: u32| topo.l3_domains.iter().position(|d| d.cpus.contains(&cpu)).unwrap_or(0) as u32;
    let pmu = args.pmu(topo, index).map_err(|why| {
        CliError::unavailable(format!(
            "--emulate without --scenario measures the host's containers with eBPF or perf events, which are {why}"
        ))
    })?;
    let misses = pmu.counts_llc_misses();
    let driver = DrivenWorld::driver(misses);
    cachescope_platform::say!(
        "LLC occupancy and memory bandwidth are EMULATED ({model}, this host's L3 shape), driven by {driver}"
    );
    let caps = emu_caps(&emu);
    args.check_mbm_interval(&caps)?;
    let label = format!("emulated ({model}) driven by host containers");
    let mut i = BackendInfo::new(label, emu.cpu_info().summary(), Some(emu.l3_bytes()));
    i.emulated = Some(driver);
    let cfg = rmid_config(&caps, emu.l3_bytes());
    let backend = MsrBackend::new(emu.clone(), caps, &emu.domains(), cfg, Some(Box::new(EmuTagger(emu.clone()))), i);
    let domains = (0..topo.l3_domains.len() as u32).collect();
    let desc = pmu.describe();
    Ok(Built {
        backend: Box::new(backend),
        containers: Box::new(HostContainers::start(&parts.cgroups, parts.globs).map_err(CliError::unavailable)?),
        pmu: Some(Box::new(pmu)),
        world: Some(Box::new(DrivenWorld::new(emu, domains, misses))),
        interval: args.msr_interval(),
        virtual_time: false,
        pmu_description: desc,
    })
}
