//! `cachescope info`: what this host (or a recorded CPUID dump) offers.

use crate::error::CliError;
use anyhow::anyhow;
use cachescope_detect::report::{assemble, per_cpu_check, render, CpuidOrigin, InfoReport, PerCpuCheck};
use cachescope_detect::{detect, HostPaths, LiveProbe};
use cachescope_hw::cpuid::CpuidSnapshot;
use cachescope_hw::CpuInfo;
use cachescope_platform::{InstructionCpuid, RecordedVector, Topology};
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct InfoArgs {
    /// Print JSON (the contract of docs/cli.md) instead of a table.
    #[arg(long)]
    json: bool,
    /// Decode this recorded CPUID vector instead of the running CPU (topology and backends
    /// still describe this host).
    #[arg(long, value_name = "FILE")]
    cpuid_dump: Option<PathBuf>,
    /// Require the per-CPU CPUID check through /dev/cpu/N/cpuid; fail (exit 3) if it cannot run.
    #[arg(long)]
    check_cpus: bool,
    #[arg(long, hide = true, default_value = "/sys")]
    sys_root: PathBuf,
    #[arg(long, hide = true, default_value = "/proc")]
    proc_root: PathBuf,
    #[arg(long, hide = true, default_value = "/dev")]
    dev_root: PathBuf,
}

pub fn run(args: &InfoArgs) -> Result<(), CliError> {
    let report = build(args)?;
    let text = match args.json {
        true => serde_json::to_string_pretty(&report).map_err(|e| CliError::Input(anyhow!(e)))? + "\n",
        false => render(&report),
    };
    crate::error::print_out(&text)
}

fn build(args: &InfoArgs) -> Result<InfoReport, CliError> {
    let paths = HostPaths {
        proc_root: args.proc_root.clone(),
        sys_root: args.sys_root.clone(),
        dev_root: args.dev_root.clone(),
    };
    let host_snapshot = CpuidSnapshot::capture(&InstructionCpuid)
        .map_err(|e| CliError::Unavailable(anyhow!("cannot execute CPUID on this host: {e}")))?;
    let host_cpu = CpuInfo::decode(&host_snapshot);

    let (cpu, source) = match &args.cpuid_dump {
        Some(path) => {
            let v = RecordedVector::load(path).map_err(|e| CliError::Input(anyhow!(e)))?;
            (CpuInfo::decode(&v.snapshot()), path.display().to_string())
        }
        None => (host_cpu.clone(), "instruction".to_string()),
    };

    let (topology, topo_err) = match Topology::read(&paths.sys_root) {
        Ok(t) => (Some(t), None),
        Err(e) => (None, Some(e.to_string())),
    };

    let per_cpu = if args.cpuid_dump.is_some() {
        PerCpuCheck { reason: Some("CPUID came from a recorded vector".into()), ..Default::default() }
    } else {
        let cpus: Vec<u32> = topology.as_ref().map(|t| t.online_cpus().collect()).unwrap_or_default();
        match per_cpu_check(&paths, &cpus) {
            Ok(c) => c,
            Err(e) if args.check_cpus => return Err(CliError::Unavailable(anyhow!("per-CPU CPUID check: {e}"))),
            Err(e) => PerCpuCheck { reason: Some(e), ..Default::default() },
        }
    };

    let detection = detect(&paths, &host_cpu, &LiveProbe);
    let mut report = assemble(&cpu, topology.as_ref(), topo_err, detection, CpuidOrigin { source, per_cpu });
    report.host_cmt_absence = host_cpu.l3_monitoring_absence().map(|a| a.to_string());
    Ok(report)
}
