//! Backend detection: what this host offers cachescope, each answer with its reason.
//!
//! Every check reads the host through an injectable root (`/proc`, `/sys`, `/dev`) or a
//! [`SyscallProbe`], so the reasoning is tested against fake trees and fake kernels while the
//! real probes run on the real host.

pub mod report;
mod syscalls;

use cachescope_hw::CpuInfo;
use cachescope_platform::mountinfo::{self, CgroupLayout, Mount};
use cachescope_platform::msr::map_open_error;
use serde::Serialize;

use std::path::{Path, PathBuf};

pub use syscalls::{LiveProbe, SyscallProbe};

/// Where the host's pseudo-filesystems are.
#[derive(Debug, Clone)]
pub struct HostPaths {
    pub proc_root: PathBuf,
    pub sys_root: PathBuf,
    pub dev_root: PathBuf,
}

impl Default for HostPaths {
    fn default() -> Self {
        HostPaths { proc_root: "/proc".into(), sys_root: "/sys".into(), dev_root: "/dev".into() }
    }
}

/// What a backend provides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// LLC occupancy and memory bandwidth (CMT/MBM).
    CacheMonitoring,
    /// Core PMU counters per container.
    Pmu,
    /// Container discovery.
    Containers,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackendStatus {
    pub name: &'static str,
    pub available: bool,
    /// Why it is unavailable, or what was found when it is available.
    pub reason: String,
    pub role: Role,
    /// Available, but its values are emulated (the module loaded with emulate=1, for
    /// tests): `auto` never takes it. Not in `info --json` (its reason says so).
    #[serde(skip)]
    pub emulated: bool,
}

impl BackendStatus {
    fn yes(name: &'static str, role: Role, reason: impl Into<String>) -> Self {
        BackendStatus { name, role, available: true, reason: reason.into(), emulated: false }
    }
    fn no(name: &'static str, role: Role, reason: impl Into<String>) -> Self {
        BackendStatus { name, role, available: false, reason: reason.into(), emulated: false }
    }
}

/// The result of probing a host.
#[derive(Debug, Clone, Serialize)]
pub struct Detection {
    /// In order of preference within each role.
    pub backends: Vec<BackendStatus>,
}

impl Detection {
    /// The backend `auto` picks for a role: the first available in preference order. For
    /// cache monitoring that is resctrl, else `none` (containers with CPU time and PMU
    /// columns): msr needs `--cores` and emulated values are never chosen silently.
    pub fn auto(&self, role: Role) -> Option<&BackendStatus> {
        self.backends
            .iter()
            .filter(|b| role != Role::CacheMonitoring || AUTO_CACHE.contains(&b.name))
            // A module loaded with emulate=1 is for tests: its values are never taken silently.
            .filter(|b| !b.emulated)
            .find(|b| b.role == role && b.available)
    }

    pub fn get(&self, name: &str) -> Option<&BackendStatus> {
        self.backends.iter().find(|b| b.name == name)
    }
}

/// The cache-monitoring backends `auto` may pick, in order: the kernel module where it is
/// loaded (it tags containers from their first instruction), then resctrl.
const AUTO_CACHE: [&str; 3] = ["kmod", "resctrl", "none"];

/// What the probes need of the mount table, taken from it once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountFacts {
    /// The first resctrl mount.
    pub resctrl: Option<Mount>,
    pub cgroups: CgroupLayout,
}

impl MountFacts {
    pub fn of(mounts: &[Mount]) -> MountFacts {
        MountFacts {
            resctrl: mountinfo::mounts_of(mounts, "resctrl").next().cloned(),
            cgroups: mountinfo::cgroup_layout(mounts),
        }
    }
}

/// Probe everything. `host_cpu` is the running host's decoded CPUID (never a recorded dump:
/// backends describe the machine we run on).
pub fn detect(paths: &HostPaths, host_cpu: &CpuInfo, probe: &dyn SyscallProbe) -> Detection {
    let mounts = MountFacts::of(&mountinfo::read(&paths.proc_root).unwrap_or_default());
    let resctrl = resctrl(paths, &mounts, host_cpu);
    let msr = msr(paths, &mounts, host_cpu, probe);
    Detection {
        backends: vec![
            kmod(paths, &mounts),
            resctrl,
            msr,
            perf_cqm(paths),
            none(),
            emulated(),
            bpf(paths, probe),
            perf(probe),
            cgroup_v2(&mounts),
        ],
    }
}

fn cmt_cpu_reason(cpu: &CpuInfo) -> Option<String> {
    cpu.l3_monitoring_absence().map(|why| format!("this CPU cannot monitor the L3: {why}"))
}

/// Why resctrl cannot be mounted on a kernel without it.
pub const NO_RESCTRL: &str = "the kernel offers no resctrl filesystem (not in /proc/filesystems)";

/// Whether the kernel lists resctrl in /proc/filesystems; None where that cannot be read.
pub fn resctrl_in_kernel(paths: &HostPaths) -> Option<bool> {
    let fs = std::fs::read_to_string(paths.proc_root.join("filesystems")).ok()?;
    Some(fs.lines().any(|l| l.split_whitespace().last() == Some("resctrl")))
}

/// Whether mounting resctrl could give cache monitoring here: the kernel registered the
/// filesystem (it does only on CPUs with RDT) and CPUID enumerates L3 monitoring. The kernel
/// may still have turned monitoring off (Skylake-SP's erratum): the mount says.
pub fn resctrl_mountable(paths: &HostPaths, cpu: &CpuInfo) -> bool {
    resctrl_in_kernel(paths) == Some(true) && cmt_cpu_reason(cpu).is_none()
}

/// resctrl: kernel support, the mount, and the monitoring features it offers.
pub fn resctrl(paths: &HostPaths, mounts: &MountFacts, cpu: &CpuInfo) -> BackendStatus {
    const N: &str = "resctrl";
    let supported = resctrl_in_kernel(paths).unwrap_or(false);
    let Some(mount) = &mounts.resctrl else {
        if !supported {
            let mut why = NO_RESCTRL.to_string();
            if let Some(cpu_why) = cmt_cpu_reason(cpu) {
                why.push_str("; ");
                why.push_str(&cpu_why);
            }
            return BackendStatus::no(N, Role::CacheMonitoring, why);
        }
        return BackendStatus::no(
            N,
            Role::CacheMonitoring,
            "resctrl is supported but not mounted (mount -t resctrl resctrl /sys/fs/resctrl, or --mount-resctrl)",
        );
    };
    let mon = mount.mount_point.join("info/L3_MON");
    let read = |f: &str| std::fs::read_to_string(mon.join(f)).ok().map(|s| s.trim().to_string());
    let Some(features) = read("mon_features") else {
        return BackendStatus::no(
            N,
            Role::CacheMonitoring,
            format!("resctrl is mounted at {} but has no L3 monitoring (no info/L3_MON)", mount.mount_point.display()),
        );
    };
    let features: Vec<&str> = features.lines().map(str::trim).filter(|s| !s.is_empty()).collect();
    let mut reason = format!(
        "mounted at {}; {} RMIDs; events {}",
        mount.mount_point.display(),
        read("num_rmids").unwrap_or_else(|| "?".into()),
        if features.is_empty() { "none".to_string() } else { features.join(",") }
    );
    if let Some(mode) = read("mbm_assign_mode") {
        let active = mode.lines().find(|l| l.starts_with('[')).unwrap_or(&mode).trim().to_string();
        reason.push_str(&format!("; mbm_assign_mode {active}"));
        if let Some(n) = read("num_mbm_cntrs") {
            reason.push_str(&format!(" ({} counters", n.replace('\n', " ")));
            if let Some(free) = read("available_mbm_cntrs") {
                reason.push_str(&format!(", {} free", free.replace('\n', " ")));
            }
            reason.push(')');
        }
        if active == "[mbm_event]" {
            reason.push_str("; cachescope assigns the counters itself (docs/counters.md)");
        }
    }
    // Groups others made (runc, NRI plugins, pqos, people): each holds an RMID.
    let (theirs, ours) = other_groups(&mount.mount_point);
    if !theirs.is_empty() {
        let shown: Vec<&str> = theirs.iter().take(5).map(String::as_str).collect();
        let more = if theirs.len() > 5 { format!(" and {} more", theirs.len() - 5) } else { String::new() };
        reason.push_str(&format!("; other owners' groups hold {} RMIDs: {}{more}", theirs.len(), shown.join(", ")));
    }
    if ours > 0 {
        reason.push_str(&format!(
            "; {ours} groups of cachescope's (a running or crashed run: the next removes its orphans)"
        ));
    }
    // Sub-NUMA Clustering (Linux 6.11+): each L3 domain shows one mon_sub_L3_YY per node.
    if let Some(nodes) = snc_nodes_per_l3(&mount.mount_point.join("mon_data")) {
        reason.push_str(&format!("; SNC on: {nodes} nodes per L3 (each node is a domain of the rows)"));
    }
    if features.is_empty() {
        return BackendStatus::no(N, Role::CacheMonitoring, reason);
    }
    BackendStatus::yes(N, Role::CacheMonitoring, reason)
}

/// The groups under a resctrl mount that hold an RMID besides the default group: CTRL_MON
/// groups (`NAME`) and MON groups (`[CTRL/]mon_groups/NAME`) others made, and how many MON
/// groups are cachescope's (named `cachescope-...`).
fn other_groups(root: &Path) -> (Vec<String>, usize) {
    let dirs = |p: &Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(p)
            .map(|rd| {
                rd.filter_map(Result::ok)
                    .filter(|e| e.path().is_dir())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let (mut theirs, mut ours) = (Vec::new(), 0);
    let mut ctrls = vec![String::new()];
    for n in dirs(root) {
        if !matches!(n.as_str(), "info" | "mon_groups" | "mon_data") && root.join(&n).join("mon_groups").is_dir() {
            theirs.push(n.clone());
            ctrls.push(n);
        }
    }
    for ctrl in ctrls {
        let base = if ctrl.is_empty() { root.to_path_buf() } else { root.join(&ctrl) };
        for m in dirs(&base.join("mon_groups")) {
            if m.starts_with("cachescope-") {
                ours += 1;
            } else if ctrl.is_empty() {
                theirs.push(format!("mon_groups/{m}"));
            } else {
                theirs.push(format!("{ctrl}/mon_groups/{m}"));
            }
        }
    }
    (theirs, ours)
}

/// Nodes per L3 where the first L3 domain of `mon_data` has `mon_sub_L3_YY` entries (SNC).
fn snc_nodes_per_l3(mon_data: &Path) -> Option<usize> {
    let first = std::fs::read_dir(mon_data)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("mon_L3_")));
    let first = first.min()?;
    let subs = std::fs::read_dir(first)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.starts_with("mon_sub_L3_")))
        .count();
    (subs > 0).then_some(subs)
}

/// msr: core-pinned RMIDs through `/dev/cpu/N/msr`.
pub fn msr(paths: &HostPaths, mounts: &MountFacts, cpu: &CpuInfo, probe: &dyn SyscallProbe) -> BackendStatus {
    const N: &str = "msr";
    if let Some(why) = cmt_cpu_reason(cpu) {
        return BackendStatus::no(N, Role::CacheMonitoring, why);
    }
    if let Some(m) = &mounts.resctrl {
        return BackendStatus::no(
            N,
            Role::CacheMonitoring,
            format!(
                "resctrl is mounted at {}: it owns IA32_PQR_ASSOC, so the msr backend stays off",
                m.mount_point.display()
            ),
        );
    }
    let dev = paths.dev_root.join("cpu/0/msr");
    match probe.open_rw(&dev) {
        Ok(()) => BackendStatus::yes(N, Role::CacheMonitoring, format!("{} opens read-write", dev.display())),
        Err(e) => BackendStatus::no(N, Role::CacheMonitoring, map_open_error(&e, &dev, 0).to_string()),
    }
}

/// kmod: the cachescope kernel module (kmod/), loaded, with its device. Its parameters are
/// read from sysfs; the device is not opened (opening it starts a session).
pub fn kmod(paths: &HostPaths, mounts: &MountFacts) -> BackendStatus {
    const N: &str = "kmod";
    let dir = paths.sys_root.join("module/cachescope/parameters");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return BackendStatus::no(
            N,
            Role::CacheMonitoring,
            "the cachescope kernel module is not loaded (make -C kmod && insmod kmod/cachescope.ko; kmod/README.md)",
        );
    };
    let mut params: Vec<(String, String)> = entries
        .flatten()
        .filter_map(|e| {
            let v = std::fs::read_to_string(e.path()).ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), v.trim().to_string()))
        })
        .collect();
    params.sort();
    let emulate = params.iter().any(|(n, v)| n == "emulate" && v == "Y");
    let listed: Vec<String> = params.iter().map(|(n, v)| format!("{n}={v}")).collect();
    let dev = paths.dev_root.join("cachescope");
    if !dev.exists() {
        return BackendStatus::no(
            N,
            Role::CacheMonitoring,
            format!("the module is loaded but {} is missing", dev.display()),
        );
    }
    if let Some(m) = mounts.resctrl.as_ref().filter(|_| !emulate) {
        return BackendStatus::no(
            N,
            Role::CacheMonitoring,
            format!("resctrl is mounted at {}: it owns IA32_PQR_ASSOC too; unmount it", m.mount_point.display()),
        );
    }
    let what = if emulate { "loaded with EMULATED counters (emulate=1)" } else { "loaded" };
    let found =
        BackendStatus::yes(N, Role::CacheMonitoring, format!("{what}, {}; {}", dev.display(), listed.join(" ")));
    BackendStatus { emulated: emulate, ..found }
}

/// The legacy `intel_cqm` perf PMU (Linux 4.1–4.13).
pub fn perf_cqm(paths: &HostPaths) -> BackendStatus {
    const N: &str = "perf-cqm";
    let dir = paths.sys_root.join("bus/event_source/devices/intel_cqm");
    let alt = paths.sys_root.join("devices/intel_cqm");
    let dir = if dir.exists() { dir } else { alt };
    match std::fs::read_to_string(dir.join("type")) {
        Ok(t) => {
            let events: Vec<String> = ["llc_occupancy", "local_bytes", "total_bytes"]
                .iter()
                .filter(|e| dir.join("events").join(e).exists())
                .map(|e| e.to_string())
                .collect();
            BackendStatus::yes(
                N,
                Role::CacheMonitoring,
                format!("intel_cqm PMU type {}; events {}", t.trim(), events.join(",")),
            )
        }
        Err(_) => BackendStatus::no(
            N,
            Role::CacheMonitoring,
            "no intel_cqm perf PMU (it existed only in Linux 4.1-4.13; resctrl replaced it)",
        ),
    }
}

/// What the `none` backend does, in the words `info` and the commands both use.
pub const NONE_DOES: &str =
    "following containers with CPU time and PMU columns, occupancy and bandwidth null (status unsupported)";

/// Without cache monitoring, containers are still followed: CPU time and PMU columns.
pub fn none() -> BackendStatus {
    BackendStatus::yes("none", Role::CacheMonitoring, format!("no cache monitoring: {NONE_DOES}"))
}

pub fn emulated() -> BackendStatus {
    let status = BackendStatus::yes(
        "emulated",
        Role::CacheMonitoring,
        "software model of an RDT platform (always available; its occupancy and bandwidth are emulated, not measured)",
    );
    BackendStatus { emulated: true, ..status }
}

/// BPF attribution needs map creation and kernel BTF (for CO-RE programs).
pub fn bpf(paths: &HostPaths, probe: &dyn SyscallProbe) -> BackendStatus {
    const N: &str = "bpf";
    if let Err(e) = probe.bpf_map_create() {
        let hint = match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => " (needs root, or CAP_BPF and CAP_PERFMON)",
            Some(libc::ENOSYS) => " (kernel built without CONFIG_BPF_SYSCALL)",
            _ => "",
        };
        return BackendStatus::no(N, Role::Pmu, format!("cannot create a BPF map: {e}{hint}"));
    }
    let btf = paths.sys_root.join("kernel/btf/vmlinux");
    if !btf.exists() {
        return BackendStatus::no(
            N,
            Role::Pmu,
            format!("BPF maps work but kernel BTF is missing ({} absent; CONFIG_DEBUG_INFO_BTF)", btf.display()),
        );
    }
    if let Err(e) = probe.perf_cycles() {
        // The program still attributes CPU time (cpu-clock) per container.
        return BackendStatus::yes(
            N,
            Role::Pmu,
            format!(
                "BPF map created; kernel BTF at {}; hardware counters do not open ({e}): CPU time only",
                btf.display()
            ),
        );
    }
    BackendStatus::yes(N, Role::Pmu, format!("BPF map created; kernel BTF at {}", btf.display()))
}

/// Hardware perf events: can a cycles counter be opened for this process?
pub fn perf(probe: &dyn SyscallProbe) -> BackendStatus {
    const N: &str = "perf";
    match probe.perf_cycles() {
        Ok(()) => BackendStatus::yes(N, Role::Pmu, "hardware cycles counter opened"),
        Err(e) => {
            let hint = match e.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
                    " (no hardware PMU exposed: common in virtual machines)"
                }
                Some(libc::EACCES) | Some(libc::EPERM) => {
                    " (check /proc/sys/kernel/perf_event_paranoid, or run as root)"
                }
                _ => "",
            };
            BackendStatus::no(N, Role::Pmu, format!("cannot open a hardware cycles counter: {e}{hint}"))
        }
    }
}

pub fn cgroup_v2(mounts: &MountFacts) -> BackendStatus {
    const N: &str = "cgroup-v2";
    match &mounts.cgroups {
        CgroupLayout::Unified { v2 } => BackendStatus::yes(N, Role::Containers, format!("cgroup2 at {}", v2.display())),
        CgroupLayout::Hybrid { v2, v1_controllers } => BackendStatus::yes(
            N,
            Role::Containers,
            format!("cgroup2 at {} (hybrid layout beside {} v1 hierarchies)", v2.display(), v1_controllers.len()),
        ),
        CgroupLayout::Legacy { v1_controllers } => BackendStatus::no(
            N,
            Role::Containers,
            format!("no cgroup2 mount; only {} cgroup v1 hierarchies", v1_controllers.len()),
        ),
        CgroupLayout::None => BackendStatus::no(N, Role::Containers, "no cgroup filesystem mounted"),
    }
}

#[cfg(test)]
mod tests;
