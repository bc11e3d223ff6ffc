use super::*;
use cachescope_hw::cpuid::{CpuidSnapshot, Regs};
use std::cell::Cell;
use std::io;
use std::path::Path;

/// A kernel that answers each probe as told.
struct FakeKernel {
    perf: Option<i32>,
    bpf: Option<i32>,
    open: Option<i32>,
    opened: Cell<usize>,
}

impl FakeKernel {
    fn ok() -> Self {
        FakeKernel { perf: None, bpf: None, open: None, opened: Cell::new(0) }
    }
}

fn res(e: Option<i32>) -> io::Result<()> {
    e.map_or(Ok(()), |e| Err(io::Error::from_raw_os_error(e)))
}

impl SyscallProbe for FakeKernel {
    fn perf_cycles(&self) -> io::Result<()> {
        res(self.perf)
    }
    fn bpf_map_create(&self) -> io::Result<()> {
        res(self.bpf)
    }
    fn open_rw(&self, _path: &Path) -> io::Result<()> {
        self.opened.set(self.opened.get() + 1);
        res(self.open)
    }
}

fn cpu(cmt: bool) -> CpuInfo {
    let mut leaves = vec![((0, 0), Regs::new(0x16, 0x756e_6547, 0x6c65_746e, 0x4965_6e69))];
    if cmt {
        leaves.push(((7, 0), Regs::new(0, 1 << 12, 0, 0)));
        leaves.push(((0xF, 0), Regs::new(0, 0xBF, 0, 2)));
        leaves.push(((0xF, 1), Regs::new(0, 0x18000, 0xBF, 7)));
    }
    CpuInfo::decode(&CpuidSnapshot::from_leaves(leaves))
}

fn host(dir: &Path, filesystems: &str, mountinfo: &str) -> HostPaths {
    let paths = HostPaths { proc_root: dir.join("proc"), sys_root: dir.join("sys"), dev_root: dir.join("dev") };
    std::fs::create_dir_all(paths.proc_root.join("self")).unwrap();
    std::fs::write(paths.proc_root.join("filesystems"), filesystems).unwrap();
    std::fs::write(paths.proc_root.join("self/mountinfo"), mountinfo).unwrap();
    paths
}

const HYBRID: &str = "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n\
                      32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";

#[test]
fn our_machines_amd_guest_without_pqos() {
    let dir = tempfile::tempdir().unwrap();
    let paths = host(dir.path(), "nodev\tcgroup2\nnodev\tbpf\n", HYBRID);
    let k = FakeKernel::ok();
    let d = detect(&paths, &cpu(false), &k);
    let r = d.get("resctrl").unwrap();
    assert!(!r.available);
    assert!(r.reason.contains("not in /proc/filesystems") && r.reason.contains("EBX[12]"), "{}", r.reason);
    let m = d.get("msr").unwrap();
    assert!(!m.available && m.reason.contains("PQM"), "{}", m.reason);
    assert_eq!(k.opened.get(), 0, "msr device must not be touched on a CPU without CMT");
    assert!(!d.get("perf-cqm").unwrap().available);
    assert_eq!(d.auto(Role::CacheMonitoring).unwrap().name, "none", "emulated values are never picked silently");
    // No BTF in the fake sysfs: bpf unavailable, perf picked for the PMU.
    let b = d.get("bpf").unwrap();
    assert!(!b.available && b.reason.contains("BTF"), "{}", b.reason);
    assert_eq!(d.auto(Role::Pmu).unwrap().name, "perf");
    let c = d.get("cgroup-v2").unwrap();
    assert!(c.available && c.reason.contains("/sys/fs/cgroup/unified") && c.reason.contains("hybrid"), "{}", c.reason);
}

#[test]
fn resctrl_mounted_wins_and_blocks_msr() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("resctrl");
    std::fs::create_dir_all(mnt.join("info/L3_MON")).unwrap();
    std::fs::write(mnt.join("info/L3_MON/mon_features"), "llc_occupancy\nmbm_total_bytes\nmbm_local_bytes\n").unwrap();
    std::fs::write(mnt.join("info/L3_MON/num_rmids"), "224\n").unwrap();
    std::fs::write(mnt.join("info/L3_MON/mbm_assign_mode"), "[mbm_event]\ndefault\n").unwrap();
    std::fs::write(mnt.join("info/L3_MON/num_mbm_cntrs"), "0=32;1=32\n").unwrap();
    std::fs::write(mnt.join("info/L3_MON/available_mbm_cntrs"), "0=30;1=29\n").unwrap();
    for sub in ["mon_L3_00/mon_sub_L3_00", "mon_L3_00/mon_sub_L3_01", "mon_L3_01/mon_sub_L3_02"] {
        std::fs::create_dir_all(mnt.join("mon_data").join(sub)).unwrap();
    }
    for g in ["mon_groups/runc-abc", "mon_groups/cachescope-x", "gold/mon_groups/nri-1"] {
        std::fs::create_dir_all(mnt.join(g)).unwrap();
    }
    let mi = format!("{HYBRID}60 23 0:50 / {} rw - resctrl resctrl rw\n", mnt.display());
    let paths = host(dir.path(), "nodev\tresctrl\n", &mi);
    std::fs::create_dir_all(paths.sys_root.join("kernel/btf")).unwrap();
    std::fs::write(paths.sys_root.join("kernel/btf/vmlinux"), "").unwrap();
    let d = detect(&paths, &cpu(true), &FakeKernel::ok());
    let r = d.get("resctrl").unwrap();
    assert!(r.available, "{}", r.reason);
    assert!(r.reason.contains("224 RMIDs") && r.reason.contains("mbm_local_bytes"), "{}", r.reason);
    assert!(r.reason.contains("mbm_assign_mode [mbm_event] (0=32;1=32 counters, 0=30;1=29 free)"), "{}", r.reason);
    assert!(r.reason.contains("cachescope assigns the counters itself"), "{}", r.reason);
    assert!(r.reason.contains("SNC on: 2 nodes per L3"), "{}", r.reason);
    assert!(
        r.reason.contains("other owners' groups hold 3 RMIDs: gold, mon_groups/runc-abc, gold/mon_groups/nri-1"),
        "{}",
        r.reason
    );
    assert!(r.reason.contains("1 groups of cachescope's"), "{}", r.reason);
    let m = d.get("msr").unwrap();
    assert!(!m.available && m.reason.contains("owns IA32_PQR_ASSOC"), "{}", m.reason);
    assert_eq!(d.auto(Role::CacheMonitoring).unwrap().name, "resctrl");
    assert_eq!(d.auto(Role::Pmu).unwrap().name, "bpf");
}

#[test]
fn resctrl_supported_but_unmounted_and_msr_errors() {
    let dir = tempfile::tempdir().unwrap();
    let paths = host(dir.path(), "nodev\tresctrl\n", HYBRID);
    let c = cpu(true);
    let r = resctrl(&paths, &MountFacts::of(&[]), &c);
    assert!(!r.available && r.reason.contains("not mounted"), "{}", r.reason);
    let k = FakeKernel { open: Some(libc::ENOENT), ..FakeKernel::ok() };
    let m = msr(&paths, &MountFacts::of(&[]), &c, &k);
    assert!(!m.available && m.reason.contains("modprobe msr"), "{}", m.reason);
    let k = FakeKernel { open: Some(libc::EACCES), ..FakeKernel::ok() };
    let m = msr(&paths, &MountFacts::of(&[]), &c, &k);
    assert!(m.reason.contains("CAP_SYS_RAWIO"), "{}", m.reason);
    let m = msr(&paths, &MountFacts::of(&[]), &c, &FakeKernel::ok());
    assert!(m.available, "{}", m.reason);
}

#[test]
fn perf_and_bpf_errors_explained() {
    let dir = tempfile::tempdir().unwrap();
    let paths = host(dir.path(), "", "");
    let p = perf(&FakeKernel { perf: Some(libc::ENOENT), ..FakeKernel::ok() });
    assert!(!p.available && p.reason.contains("no hardware PMU"), "{}", p.reason);
    let p = perf(&FakeKernel { perf: Some(libc::EACCES), ..FakeKernel::ok() });
    assert!(p.reason.contains("perf_event_paranoid"), "{}", p.reason);
    let b = bpf(&paths, &FakeKernel { bpf: Some(libc::EPERM), ..FakeKernel::ok() });
    assert!(!b.available && b.reason.contains("CAP_BPF"), "{}", b.reason);
    let c = cgroup_v2(&MountFacts::of(&[]));
    assert!(!c.available && c.reason.contains("no cgroup"), "{}", c.reason);
}

#[test]
fn legacy_intel_cqm_pmu() {
    let dir = tempfile::tempdir().unwrap();
    let paths = host(dir.path(), "", "");
    let pmu = paths.sys_root.join("bus/event_source/devices/intel_cqm");
    std::fs::create_dir_all(pmu.join("events")).unwrap();
    std::fs::write(pmu.join("type"), "9\n").unwrap();
    std::fs::write(pmu.join("events/llc_occupancy"), "event=0x01\n").unwrap();
    let s = perf_cqm(&paths);
    assert!(s.available && s.reason.contains("type 9") && s.reason.contains("llc_occupancy"), "{}", s.reason);
}

#[test]
fn live_probes_do_not_panic() {
    // Whatever this host allows, the live probes answer with a status, never a panic.
    let paths = HostPaths::default();
    let c = CpuInfo::decode(&CpuidSnapshot::default());
    let d = detect(&paths, &c, &LiveProbe);
    for b in &d.backends {
        println!("{:<10} {:<5} {}", b.name, b.available, b.reason);
        assert!(!b.reason.is_empty());
    }
    assert!(d.get("emulated").unwrap().available);
}

#[test]
fn kmod_states_and_auto() {
    let dir = tempfile::tempdir().unwrap();
    let paths = host(dir.path(), "nodev\tcgroup2\n", HYBRID);
    let mounts = mountinfo::parse(HYBRID);
    let k = kmod(&paths, &MountFacts::of(&mounts));
    assert!(!k.available && k.reason.contains("not loaded") && k.reason.contains("kmod/README.md"), "{}", k.reason);

    let params = paths.sys_root.join("module/cachescope/parameters");
    std::fs::create_dir_all(&params).unwrap();
    for (n, v) in [("emulate", "N"), ("interval_us", "1000"), ("ring_records", "65536")] {
        std::fs::write(params.join(n), format!("{v}\n")).unwrap();
    }
    let k = kmod(&paths, &MountFacts::of(&mounts));
    assert!(
        !k.available && k.reason.contains("loaded but") && k.reason.ends_with("cachescope is missing"),
        "{}",
        k.reason
    );

    std::fs::create_dir_all(&paths.dev_root).unwrap();
    std::fs::write(paths.dev_root.join("cachescope"), "").unwrap();
    let k = kmod(&paths, &MountFacts::of(&mounts));
    assert!(k.available, "{}", k.reason);
    assert!(k.reason.contains("emulate=N interval_us=1000 ring_records=65536"), "parameters listed: {}", k.reason);
    let d = detect(&paths, &cpu(true), &FakeKernel::ok());
    assert_eq!(d.auto(Role::CacheMonitoring).unwrap().name, "kmod", "a loaded module on real RDT comes first");

    // resctrl mounted: both would own PQR_ASSOC.
    let mi = format!("{HYBRID}60 23 0:50 / /sys/fs/resctrl rw - resctrl resctrl rw\n");
    let k = kmod(&paths, &MountFacts::of(&mountinfo::parse(&mi)));
    assert!(!k.available && k.reason.contains("resctrl is mounted at /sys/fs/resctrl"), "{}", k.reason);

    // Emulating: usable when asked for, never picked by auto.
    std::fs::write(params.join("emulate"), "Y\n").unwrap();
    let k = kmod(&paths, &MountFacts::of(&mounts));
    assert!(k.available && k.reason.contains("emulate=1"), "{}", k.reason);
    let d = detect(&paths, &cpu(false), &FakeKernel::ok());
    assert_eq!(d.auto(Role::CacheMonitoring).unwrap().name, "none", "emulated counters are never picked silently");
}
