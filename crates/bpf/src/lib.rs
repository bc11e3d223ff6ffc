//! Per-cgroup PMU attribution with eBPF (the primary PMU path of DESIGN.md §3).
//!
//! `src/bpf/attrib.bpf.c` runs at every context switch and at ticks of one slot length on
//! the CPUs that run a followed cgroup's task ([`Ticks`]): it reads this CPU's counters,
//! charges the delta to the running task's cgroup id in the current time slot, and
//! accumulates per CPU and slot in a ring of records user space maps (up to six cgroups a
//! record), or where a record is full or still unread, in a per-CPU hash keyed by (slot,
//! cgroup id). [`Attribution::drain`] reads the ring without a syscall, empties the hash in
//! batches only when something went there, and hands out each slot once it is complete.
//! Counts that could not be charged are counted in [`BpfStats`].

mod skel {
    #![allow(
        clippy::all,
        clippy::unwrap_used,
        clippy::undocumented_unsafe_blocks,
        unsafe_op_in_unsafe_fn,
        dead_code,
        non_camel_case_types
    )]
    include!(concat!(env!("OUT_DIR"), "/attrib.skel.rs"));
}

mod cgroup_id;
pub mod columns;
mod libbpf_log;

use cachescope_perf::Encoded;
use libbpf_rs::libbpf_sys;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle};
use perf_event::Builder;
use std::collections::BTreeMap;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, AsRawFd};
use std::time::Duration;

/// Events the program can read per CPU.
pub const MAX_EVENTS: usize = 5;
/// Cgroup id under which idle time is charged.
pub const IDLE: u64 = 0;

#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    /// `said`: what libbpf itself printed about it (its first line), where it did.
    #[error("{what}: {error}{}", said.as_deref().map(|s| format!(" (libbpf: {s})")).unwrap_or_default())]
    Libbpf { what: &'static str, error: libbpf_rs::Error, said: Option<String> },
    #[error("{what}: {error}")]
    Io { what: String, error: std::io::Error },
    #[error("{0}")]
    Config(String),
}

fn lb(what: &'static str) -> impl FnOnce(libbpf_rs::Error) -> BpfError {
    move |error| BpfError::Libbpf { what, error, said: libbpf_log::reason(libbpf_log::take()) }
}

/// Delete cgroup `id`'s entry from `map`: whether there was one.
fn delete(map: &MapHandle, id: u64, what: &'static str) -> Result<bool, BpfError> {
    match map.delete(&id.to_ne_bytes()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == libbpf_rs::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(lb(what)(e)),
    }
}

/// One cgroup's counts over one completed slot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotRow {
    /// Slot number: the slot covers [slot × slot_ns, (slot+1) × slot_ns) of CLOCK_MONOTONIC.
    pub slot: u64,
    /// cgroup v2 id (the directory's inode), or [`IDLE`].
    pub cgroup_id: u64,
    /// The group of the CPUs that counted (the L3 domain, see [`Attribution::group_cpus`]; 0
    /// until set).
    pub domain: u32,
    /// Counts per event, in the order given to [`Attribution::start`].
    pub values: Vec<u64>,
    /// Context switches away from this cgroup in the slot.
    pub switches: u64,
    /// Charges whose delta was scaled because the PMU multiplexed.
    pub multiplexed: u64,
}

/// What the in-kernel side could not do, summed over CPUs since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BpfStats {
    /// Charges dropped because the (slot, cgroup) hash was full.
    pub lost_charges: u64,
    /// Counter reads that failed.
    pub read_failures: u64,
    /// Counts of the first event lost with dropped charges.
    pub lost_counts: u64,
    /// First reads per CPU and event (counts before them are not attributed).
    pub baselines: u64,
    pub charges: u64,
    /// Charges that went to the hash rather than the slot ring: their CPU's record of the
    /// slot held other cgroups already, or was not read yet (user space fell behind).
    pub hash_charges: u64,
    /// Time spent in tick timer callbacks, which the kernel's per-program run time
    /// (`kernel.bpf_stats_enabled`) does not count, and how many ran.
    pub timer_ns: u64,
    pub timer_runs: u64,
    /// Tick timers that failed to start.
    pub timer_failures: u64,
}

/// CPU time the in-kernel side took since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelCost {
    /// The attached programs' run time and runs, as the kernel counts them: only while
    /// `kernel.bpf_stats_enabled` is 1 (`counted`), and from when it was set.
    pub run_ns: u64,
    pub runs: u64,
    pub counted: bool,
    /// Tick timer callbacks (always counted, by the program itself), and how many ran.
    pub timer_ns: u64,
    pub timer_runs: u64,
}

/// Where the ticks that split a running task's counts at slot boundaries run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ticks {
    /// Only on CPUs whose current task is in a followed cgroup ([`Attribution::follow`]) or
    /// below one: a per-CPU bpf_timer. Falls back to [`Ticks::EveryCpu`] where the kernel
    /// refuses it.
    Followed,
    /// A cpu-clock timer on every CPU, whatever runs there (cost grows with the CPU count).
    EveryCpu,
}

/// How ticks run after start: what was asked, or the fallback and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TickMode {
    /// `sched_tick`: the hook at the scheduler tick that arms a timer for a task followed
    /// while it runs (else that task waits for its next switch).
    Followed {
        sched_tick: bool,
    },
    EveryCpu {
        why: Option<String>,
    },
}

impl std::fmt::Display for TickMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TickMode::Followed { sched_tick: true, .. } => f.write_str("ticks where followed containers run"),
            TickMode::Followed { sched_tick: false, .. } => {
                f.write_str("ticks where followed containers run (armed at switches only)")
            }
            TickMode::EveryCpu { why: None } => f.write_str("ticks on every CPU"),
            TickMode::EveryCpu { why: Some(w) } => write!(f, "ticks on every CPU ({w})"),
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Key {
    slot: u64,
    cgid: u64,
}

/// Values are per CPU, each rounded up to 8 bytes (slot_val is 56 bytes already).
const VAL_SIZE: usize = 56;

/// The slot ring's shape (attrib.bpf.c): records per CPU, cgroups per record, and a record's
/// bytes (`slot`, `n`, then per cgroup its id and a slot_val).
const RING_SLOTS: u64 = 256;
const RING_CG: usize = 6;
const RING_REC: usize = 16 + RING_CG * (8 + VAL_SIZE);

/// The slot ring, mapped from the kernel: per CPU, the sums of the last [`RING_SLOTS`] slots
/// by cgroup, read here without a system call (attrib.bpf.c says how records are reused).
struct Ring {
    base: std::ptr::NonNull<u8>,
    len: usize,
    cpus: usize,
    /// The control record's count of charges that went to the hash, when last looked at, and
    /// whether the hash held anything then: the hash is emptied only when either says so.
    spills: u64,
    hash_held: bool,
}

// SAFETY: the mapping is owned by the Ring (unmapped in Drop) and only touched through
// `&self`/`&mut self` of the Attribution that owns it; the kernel side writes it concurrently
// whatever thread reads it.
unsafe impl Send for Ring {}

impl Ring {
    /// Map `map` (the program's `ring`, `cpus` × RING_SLOTS records and the control record).
    fn map(map: &MapHandle, cpus: usize) -> Result<Ring, BpfError> {
        // SAFETY: sysconf has no memory effects.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
        let len = (cpus * RING_SLOTS as usize + 1) * RING_REC;
        let len = len.div_ceil(page) * page;
        // SAFETY: a shared mapping of an mmapable array map's descriptor, `len` within its
        // size (the kernel refuses more); the result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                map.as_fd().as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(BpfError::Io { what: "mapping the slot ring".into(), error: std::io::Error::last_os_error() });
        }
        let base = std::ptr::NonNull::new(p.cast::<u8>())
            .ok_or_else(|| BpfError::Config("the slot ring was mapped at address 0".into()))?;
        Ok(Ring { base, len, cpus, spills: 0, hash_held: true })
    }

    /// Word `w` of record `rec`.
    fn word(&self, rec: usize, w: usize) -> u64 {
        debug_assert!((rec + 1) * RING_REC <= self.len && w * 8 < RING_REC);
        // SAFETY: within the mapping (records are 8-byte aligned, 400 bytes each, and the
        // mapping holds cpus × RING_SLOTS + 1 of them); volatile, as the kernel writes it.
        unsafe { std::ptr::read_volatile(self.base.as_ptr().add(rec * RING_REC + w * 8).cast::<u64>()) }
    }

    fn control(&self) -> usize {
        self.cpus * RING_SLOTS as usize
    }

    /// Every record of a slot below this one is read (the mark the program reads too).
    fn next(&self) -> u64 {
        self.word(self.control(), 0)
    }

    /// Charges that went to the hash since start.
    fn spills(&self) -> u64 {
        self.word(self.control(), 1)
    }

    /// Charges lost since start (the hash was full too).
    fn lost(&self) -> u64 {
        self.word(self.control(), 2)
    }

    /// Let the program reuse the records of slots below `slot`.
    fn read_below(&mut self, slot: u64) {
        // SAFETY: the control record's first word, within the mapping; volatile, as the
        // kernel reads it concurrently (a torn value cannot occur for an aligned u64 store).
        unsafe {
            std::ptr::write_volatile(self.base.as_ptr().add(self.control() * RING_REC).cast::<u64>(), slot);
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in Ring::map, used by nothing after this.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

pub struct Attribution {
    nev: usize,
    slot_ns: u64,
    ncpus: usize,
    acc: MapHandle,
    ring: Ring,
    stats: MapHandle,
    /// The PERF_EVENT_ARRAYs: the kernel drops their entries when the map file they were
    /// added through is closed, so a descriptor of that same file is kept; and the tick
    /// timers' map, whose timers run only while user space holds it.
    _arrays: Vec<MapHandle>,
    _links: Vec<Link>,
    _counters: Vec<perf_event::Counter>,
    _ticks: Vec<perf_event::Counter>,
    followed: MapHandle,
    /// cgroups whose counts are charged in lumps (attrib.bpf.c, "Quiet switches"), and the
    /// epoch that makes the program judge cgroups again after `followed` changes.
    quiet: MapHandle,
    verdicts: MapHandle,
    epoch: MapHandle,
    epoch_n: std::sync::atomic::AtomicU64,
    ticks: TickMode,
    /// The attached programs (own descriptors), for their run time.
    progs: Vec<std::os::fd::OwnedFd>,
    pending: BTreeMap<(u64, u64, u32), SlotRow>,
    /// The slots below this one were complete before the last drain read the map, and are
    /// drained.
    drained_below: u64,
    /// CPU index → domain.
    cpu_domain: Vec<u32>,
    cpu_totals: Vec<u64>,
    /// Batch buffers, kept between drains (a drain runs up to every slot).
    keys: Vec<Key>,
    vals: Vec<u8>,
    /// The newest slot any charge reached the map in.
    newest: u64,
}

/// Slot-map capacity for `cgroups` active cgroups drained every `drain_every` slots: each
/// cgroup can appear in every slot between two drains plus the two incomplete ones kept, and
/// the idle bucket too; doubled for headroom, at least 1024.
pub fn capacity_for(cgroups: usize, drain_every: u32) -> u32 {
    let need = (cgroups as u64 + 1) * (u64::from(drain_every) + 2) * 2;
    need.clamp(1024, 1 << 20) as u32
}

/// Keys per batch syscall.
const BATCH: usize = 256;

impl Attribution {
    /// Load and attach: count `events` on every CPU in `cpus`, slots of `slot` length, with
    /// room for `capacity` (slot, cgroup) pairs between drains, ticks as [`Ticks::Followed`].
    /// A drain walks every bucket of the hash, so capacity is its cost: size it to cgroups ×
    /// slots per drain, with margin (see [`capacity_for`]).
    pub fn start(events: &[Encoded], cpus: &[usize], slot: Duration, capacity: u32) -> Result<Attribution, BpfError> {
        Self::start_with(events, cpus, slot, capacity, Ticks::Followed)
    }

    /// [`Attribution::start`] with the ticks chosen.
    pub fn start_with(
        events: &[Encoded],
        cpus: &[usize],
        slot: Duration,
        capacity: u32,
        ticks: Ticks,
    ) -> Result<Attribution, BpfError> {
        if events.is_empty() || events.len() > MAX_EVENTS {
            return Err(BpfError::Config(format!("1 to {MAX_EVENTS} events, not {}", events.len())));
        }
        let slot_ns = slot.as_nanos() as u64;
        if slot_ns < 100_000 {
            return Err(BpfError::Config(format!("slot {slot:?} is below 100us")));
        }
        // SAFETY: libbpf_num_possible_cpus reads sysfs and touches no memory of ours.
        let ncpus = unsafe { libbpf_sys::libbpf_num_possible_cpus() };
        if ncpus <= 0 {
            return Err(BpfError::Config("cannot count possible CPUs".into()));
        }
        let ncpus = ncpus as usize;
        libbpf_log::capture();
        let load = |obj, mode: Load| -> Result<skel::AttribSkel<'_>, BpfError> {
            let mut open = skel::AttribSkelBuilder::default().open(obj).map_err(lb("opening the BPF object"))?;
            open.maps.acc.set_max_entries(capacity.max(64)).map_err(lb("sizing the slot map"))?;
            open.maps.ring.set_max_entries(ncpus as u32 * RING_SLOTS as u32 + 1).map_err(lb("sizing the slot ring"))?;
            open.maps.ticks.set_max_entries(ncpus as u32).map_err(lb("sizing the tick timers"))?;
            if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
                ro.slot_ns = slot_ns;
                ro.nev = events.len() as u32;
                ro.ring_cpus = ncpus as u32;
            }
            let followed = !matches!(mode, Load::EveryCpu);
            open.progs.on_switch.set_autoload(!followed);
            open.progs.on_tick.set_autoload(!followed);
            open.progs.on_switch_followed.set_autoload(followed);
            open.progs.on_hrtimer.set_autoload(matches!(mode, Load::Followed { hrtimer_hook: true }));
            open.load().map_err(lb("loading the BPF program (root and a kernel with BPF needed)"))
        };
        let mut objs: [MaybeUninit<libbpf_rs::OpenObject>; 3] =
            [MaybeUninit::uninit(), MaybeUninit::uninit(), MaybeUninit::uninit()];
        let [o1, o2, o3] = &mut objs;
        let (loaded, mut mode) = match ticks {
            Ticks::EveryCpu => (load(o1, Load::EveryCpu)?, TickMode::EveryCpu { why: None }),
            Ticks::Followed => match load(o1, Load::Followed { hrtimer_hook: true }) {
                Ok(l) => (l, TickMode::Followed { sched_tick: true }),
                Err(_) => match load(o2, Load::Followed { hrtimer_hook: false }) {
                    Ok(l) => (l, TickMode::Followed { sched_tick: false }),
                    Err(e) => (load(o3, Load::EveryCpu)?, TickMode::EveryCpu { why: Some(format!("no timers: {e}")) }),
                },
            },
        };
        let arrays = [&loaded.maps.ev0, &loaded.maps.ev1, &loaded.maps.ev2, &loaded.maps.ev3, &loaded.maps.ev4];
        let mut counters = Vec::new();
        for (i, ev) in events.iter().enumerate() {
            for &cpu in cpus {
                let mut b = Builder::new(*ev);
                b.any_pid().one_cpu(cpu).include_kernel().enabled(true);
                let c = b
                    .build()
                    .map_err(|error| BpfError::Io { what: format!("opening event {i} on CPU {cpu}"), error })?;
                let fd = c.as_raw_fd() as u32;
                arrays[i]
                    .update(&(cpu as u32).to_ne_bytes(), &fd.to_ne_bytes(), MapFlags::ANY)
                    .map_err(lb("placing a counter in the PERF_EVENT_ARRAY"))?;
                counters.push(c);
            }
        }
        let mut links = Vec::new();
        let mut ticks = Vec::new();
        let mut progs = Vec::new();
        {
            let p = &loaded.progs;
            let attached = match mode {
                TickMode::Followed { .. } => [&p.on_switch_followed, &p.on_hrtimer],
                TickMode::EveryCpu { .. } => [&p.on_switch, &p.on_tick],
            };
            for prog in attached {
                if prog.autoload() {
                    let fd = prog.as_fd().try_clone_to_owned().map_err(|error| BpfError::Io {
                        what: format!("keeping program {}", prog.name().to_string_lossy()),
                        error,
                    })?;
                    progs.push(fd);
                }
            }
        }
        if let TickMode::Followed { sched_tick, .. } = &mut mode {
            links.push(loaded.progs.on_switch_followed.attach().map_err(lb("attaching to sched_switch"))?);
            if *sched_tick {
                match loaded.progs.on_hrtimer.attach() {
                    Ok(l) => links.push(l),
                    Err(_) => *sched_tick = false,
                }
            }
        } else {
            links.push(loaded.progs.on_switch.attach().map_err(lb("attaching to sched_switch"))?);
            for &cpu in cpus {
                let mut b = Builder::new(perf_event::events::Software::CPU_CLOCK);
                b.any_pid().one_cpu(cpu).sample_period(slot_ns).include_kernel();
                let t = b
                    .build()
                    .map_err(|error| BpfError::Io { what: format!("opening the tick on CPU {cpu}"), error })?;
                // libbpf closes the fd it is given when the link goes: give it its own.
                // SAFETY: dup of a descriptor we own; the result is owned by the link.
                let dup = unsafe { libc::dup(t.as_raw_fd()) };
                if dup < 0 {
                    return Err(BpfError::Io { what: "dup".into(), error: std::io::Error::last_os_error() });
                }
                links.push(loaded.progs.on_tick.attach_perf_event(dup).map_err(lb("attaching the tick"))?);
                ticks.push(t);
            }
        }
        let mut keep = Vec::new();
        for a in arrays {
            keep.push(MapHandle::try_from(a).map_err(lb("event array"))?);
        }
        let acc = MapHandle::try_from(&loaded.maps.acc).map_err(lb("acc map"))?;
        let ring = Ring::map(&MapHandle::try_from(&loaded.maps.ring).map_err(lb("slot ring"))?, ncpus)?;
        let stats = MapHandle::try_from(&loaded.maps.stats).map_err(lb("stats map"))?;
        let followed = MapHandle::try_from(&loaded.maps.followed).map_err(lb("followed map"))?;
        let quiet = MapHandle::try_from(&loaded.maps.quiet).map_err(lb("quiet map"))?;
        let epoch = MapHandle::try_from(&loaded.maps.epoch).map_err(lb("epoch map"))?;
        let verdicts = MapHandle::try_from(&loaded.maps.verdicts).map_err(lb("verdict map"))?;
        // The kernel lets timers start only in a map user space holds, and frees them when
        // the last user reference goes.
        keep.push(MapHandle::try_from(&loaded.maps.ticks).map_err(lb("tick timers"))?);
        // The programs stay loaded through the links; the maps through the programs and our handles.
        drop(loaded);
        Ok(Attribution {
            nev: events.len(),
            slot_ns,
            ncpus,
            acc,
            ring,
            stats,
            _arrays: keep,
            _links: links,
            _counters: counters,
            _ticks: ticks,
            followed,
            quiet,
            verdicts,
            epoch,
            epoch_n: std::sync::atomic::AtomicU64::new(0),
            ticks: mode,
            progs,
            pending: BTreeMap::new(),
            drained_below: 0,
            cpu_domain: Vec::new(),
            cpu_totals: vec![0; ncpus],
            keys: vec![Key::default(); BATCH],
            vals: vec![0u8; BATCH * ncpus * VAL_SIZE],
            newest: 0,
        })
    }

    /// What the programs cost since start.
    pub fn kernel_cost(&self) -> Result<KernelCost, BpfError> {
        let mut cost = KernelCost { timer_ns: self.stat(7)?, timer_runs: self.stat(8)?, ..KernelCost::default() };
        for fd in &self.progs {
            // SAFETY: bpf_prog_info is plain data; zeroed is valid and the kernel fills at
            // most `len` bytes of it.
            let mut info: libbpf_sys::bpf_prog_info = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libbpf_sys::bpf_prog_info>() as u32;
            // SAFETY: `fd` is a program descriptor we own; `info` and `len` outlive the call.
            let rc = unsafe { libbpf_sys::bpf_prog_get_info_by_fd(fd.as_raw_fd(), &mut info, &mut len) };
            if rc < 0 {
                return Err(BpfError::Io {
                    what: "reading a program's run time".into(),
                    error: std::io::Error::last_os_error(),
                });
            }
            cost.run_ns += info.run_time_ns;
            cost.runs += info.run_cnt;
        }
        // The kernel counts program runs (and their time) only while
        // kernel.bpf_stats_enabled is 1: none counted means it never was.
        cost.counted = cost.runs > 0;
        Ok(cost)
    }

    /// How ticks run (what start chose).
    pub fn tick_mode(&self) -> &TickMode {
        &self.ticks
    }

    /// Tick where the tasks of cgroup `id` (or of any cgroup below it) run. A task already
    /// running gets its ticks from its next switch or scheduler tick.
    pub fn follow(&self, id: u64) -> Result<(), BpfError> {
        self.followed.update(&id.to_ne_bytes(), &[1], MapFlags::ANY).map_err(lb("following a cgroup"))?;
        self.new_epoch()
    }

    /// Stop ticking for cgroup `id` (its counts are still charged at switches, apart until
    /// it is made [`Attribution::quiet`]).
    pub fn unfollow(&self, id: u64) -> Result<(), BpfError> {
        if delete(&self.followed, id, "unfollowing a cgroup")? {
            self.new_epoch()?;
        }
        Ok(())
    }

    /// The program judges every cgroup again (a cgroup below one followed or unfollowed
    /// changes too, and only the program walks up from it).
    fn new_epoch(&self) -> Result<(), BpfError> {
        let n = self.epoch_n.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        self.epoch.update(&0u32.to_ne_bytes(), &n.to_ne_bytes(), MapFlags::ANY).map_err(lb("new epoch"))
    }

    /// Charge cgroup `id`'s counts in lumps with the other quiet ones and the idle task's: a
    /// switch between two quiet tasks reads no counter. For cgroups no one needs apart; one
    /// followed (or below a followed one) is charged apart whatever this says. The kernel
    /// forgets the least recently switched-to when 16,384 are quiet: those are charged apart
    /// again until said again.
    pub fn quiet(&self, id: u64) -> Result<(), BpfError> {
        self.quiet.update(&id.to_ne_bytes(), &[1], MapFlags::ANY).map_err(lb("quieting a cgroup"))?;
        // Its cached verdict said "charged"; a task judged meanwhile may cache that again,
        // until the next call for it.
        delete(&self.verdicts, id, "quieting a cgroup").map(|_| ())
    }

    pub fn slot_ns(&self) -> u64 {
        self.slot_ns
    }

    /// The slot CLOCK_MONOTONIC is in now.
    pub fn current_slot(&self) -> u64 {
        cachescope_platform::clock::monotonic().as_nanos() as u64 / self.slot_ns
    }

    /// Move everything accumulated in the kernel into our table (batched lookup-and-delete),
    /// then return the slots that were complete when it began (older than the previous slot,
    /// so a CPU still finishing a charge across the boundary is not cut off), oldest first.
    /// The boundary is read before the map: read after it, a collector paused in between (a
    /// CPU quota, a stop) declared complete the slots charged meanwhile, which were still in
    /// the map, and the rows over them said 0 (the likely cause of a CI run's starved recorder
    /// in `stalls.rs` reading 566 rows of 0 for a loop that ran).
    pub fn drain(&mut self) -> Result<Vec<SlotRow>, BpfError> {
        let complete_below = self.current_slot().saturating_sub(1);
        self.collect(complete_below)?;
        self.drained_below = self.drained_below.max(complete_below);
        let later = self.pending.split_off(&(complete_below, 0, 0));
        let done = std::mem::replace(&mut self.pending, later);
        Ok(done.into_values().collect())
    }

    /// The slots below this one are drained: those complete when the last [`Self::drain`]
    /// began.
    pub fn drained_below(&self) -> u64 {
        self.drained_below
    }

    /// Everything accumulated so far, complete or not (at shutdown).
    pub fn drain_all(&mut self) -> Result<Vec<SlotRow>, BpfError> {
        self.collect(self.current_slot() + 1)?;
        Ok(std::mem::take(&mut self.pending).into_values().collect())
    }

    /// Split rows by group of CPUs: `domain_of[cpu]` is the group (the L3 domain) CPU `cpu`
    /// counts for; CPUs beyond the slice count for group 0.
    pub fn group_cpus(&mut self, domain_of: Vec<u32>) {
        self.cpu_domain = domain_of;
    }

    /// Counts of the first event charged on each CPU (all cgroups and idle) since start, as
    /// drained so far: per CPU, this must match the CPU's own total.
    pub fn cpu_totals(&self) -> &[u64] {
        &self.cpu_totals
    }

    /// Sum `vals` (the events, then switches and multiplexed charges) of `cgid` in `slot`,
    /// counted on `cpu`, into the pending rows.
    fn add(&mut self, slot: u64, cgid: u64, cpu: usize, vals: impl Fn(usize) -> u64) {
        self.newest = self.newest.max(slot);
        if (0..MAX_EVENTS + 2).all(|j| vals(j) == 0) {
            return;
        }
        let domain = self.cpu_domain.get(cpu).copied().unwrap_or(0);
        let nev = self.nev;
        let row = self.pending.entry((slot, cgid, domain)).or_insert_with(|| SlotRow {
            slot,
            cgroup_id: cgid,
            domain,
            values: vec![0; nev],
            switches: 0,
            multiplexed: 0,
        });
        for (e, v) in row.values.iter_mut().enumerate() {
            *v += vals(e);
        }
        if let Some(t) = self.cpu_totals.get_mut(cpu) {
            *t += vals(0);
        }
        row.switches += vals(MAX_EVENTS);
        row.multiplexed += vals(MAX_EVENTS + 1);
    }

    /// Everything below slot `below` from the ring, and whatever went to the hash.
    fn collect(&mut self, below: u64) -> Result<(), BpfError> {
        // The count first: a charge that goes to the hash after it is read is in the hash
        // before the count moves again, and the next drain empties it.
        let spills = self.ring.spills();
        let next = self.ring.next();
        let from = next.max(below.saturating_sub(RING_SLOTS));
        for cpu in 0..self.ring.cpus {
            for s in from..below {
                let rec = cpu * RING_SLOTS as usize + (s % RING_SLOTS) as usize;
                // A record holds the slot of its index that was charged last; one older than
                // `from` but unread (the program kept it and used the hash) is read too.
                let slot = self.ring.word(rec, 0);
                let n = self.ring.word(rec, 1).min(RING_CG as u64) as usize;
                if slot < next || slot >= below || n == 0 {
                    continue;
                }
                for j in 0..n {
                    let at = 2 + j * (1 + VAL_SIZE / 8);
                    let cgid = self.ring.word(rec, at);
                    let mut vals = [0u64; MAX_EVENTS + 2];
                    for (w, v) in vals.iter_mut().enumerate() {
                        *v = self.ring.word(rec, at + 1 + w);
                    }
                    self.add(slot, cgid, cpu, |w| vals[w]);
                }
            }
        }
        self.ring.read_below(below);
        if spills != self.ring.spills || self.ring.hash_held {
            self.ring.spills = spills;
            self.ring.hash_held = self.collect_hash()? > 0;
        }
        Ok(())
    }

    /// Empty the hash (batched lookup-and-delete): how many entries it held.
    fn collect_hash(&mut self) -> Result<usize, BpfError> {
        // The batch buffers are lent out while `add` needs `self`.
        let (mut keys, mut vals) = (std::mem::take(&mut self.keys), std::mem::take(&mut self.vals));
        let held = self.collect_hash_into(&mut keys, &mut vals);
        (self.keys, self.vals) = (keys, vals);
        held
    }

    fn collect_hash_into(&mut self, keys: &mut [Key], vals: &mut [u8]) -> Result<usize, BpfError> {
        let mut held = 0;
        let mut token = [0u64; 2];
        let mut first = true;
        loop {
            let mut count = BATCH as u32;
            let opts = libbpf_sys::bpf_map_batch_opts {
                sz: std::mem::size_of::<libbpf_sys::bpf_map_batch_opts>() as _,
                ..Default::default()
            };
            let in_batch = if first { std::ptr::null_mut() } else { token.as_mut_ptr().cast() };
            let mut out = [0u64; 2];
            // SAFETY: the buffers hold `count` keys and `count × ncpus` values of the map's
            // sizes; the batch tokens are 16 bytes (a hash map's bucket index needs 4).
            let rc = unsafe {
                libbpf_sys::bpf_map_lookup_and_delete_batch(
                    self.acc.as_fd().as_raw_fd(),
                    in_batch,
                    out.as_mut_ptr().cast(),
                    keys.as_mut_ptr().cast(),
                    vals.as_mut_ptr().cast(),
                    &mut count,
                    &opts,
                )
            };
            let errno = if rc < 0 { std::io::Error::last_os_error().raw_os_error() } else { None };
            held += count as usize;
            for (i, k) in keys.iter().take(count as usize).copied().enumerate() {
                self.newest = self.newest.max(k.slot);
                for cpu in 0..self.ncpus {
                    let base = (i * self.ncpus + cpu) * VAL_SIZE;
                    let w = |j: usize| {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(&vals[base + j * 8..base + j * 8 + 8]);
                        u64::from_ne_bytes(b)
                    };
                    self.add(k.slot, k.cgid, cpu, w);
                }
            }
            match (rc, errno) {
                (0, _) => {
                    token = out;
                    first = false;
                }
                (_, Some(libc::ENOENT)) => break,
                _ => {
                    return Err(BpfError::Io {
                        what: "draining the slot map".into(),
                        error: std::io::Error::from_raw_os_error(errno.unwrap_or(libc::EIO)),
                    })
                }
            }
        }
        Ok(held)
    }

    /// The slots charges were lost in since the last call (first, last), if any: the map
    /// was full (the collector fell behind), so those slots' counts are incomplete. Call when
    /// [`Attribution::lost_charges`] grew. The kernel may lose one more between the read and
    /// the clearing of the first slot; the last one is never cleared, so the range still ends
    /// right.
    pub fn take_lost_slots(&self) -> Result<Option<(u64, u64)>, BpfError> {
        let first = self.per_cpu(5)?.into_iter().filter(|&s| s > 0).min();
        let last = self.per_cpu(6)?.into_iter().max();
        let zeros = vec![vec![0u8; 8]; self.ncpus];
        self.stats.update_percpu(&5u32.to_ne_bytes(), &zeros, MapFlags::ANY).map_err(lb("clearing stats"))?;
        // Before anything was lost since the last call, `first` is 0 everywhere: then the
        // loss began after the newest slot drained.
        Ok(last.filter(|&l| l > 0).map(|l| (first.unwrap_or(self.newest).min(l), l)))
    }

    /// Charges dropped because the map was full, since start (read from the mapped ring's
    /// control record: no system call, at every drain).
    pub fn lost_charges(&self) -> Result<u64, BpfError> {
        Ok(self.ring.lost())
    }

    fn stat(&self, i: u32) -> Result<u64, BpfError> {
        Ok(self.per_cpu(i)?.into_iter().sum())
    }

    /// Entry `i` of the stats map, one word per CPU.
    fn per_cpu(&self, i: u32) -> Result<Vec<u64>, BpfError> {
        let per_cpu = self.stats.lookup_percpu(&i.to_ne_bytes(), MapFlags::ANY).map_err(lb("reading stats"))?;
        Ok(per_cpu
            .unwrap_or_default()
            .iter()
            .map(|b| b.get(..8).and_then(|s| s.try_into().ok()).map_or(0, u64::from_ne_bytes))
            .collect())
    }

    /// The in-kernel counters of what could not be done.
    pub fn stats(&self) -> Result<BpfStats, BpfError> {
        let get = |i: u32| self.stat(i);
        Ok(BpfStats {
            lost_charges: self.ring.lost(),
            read_failures: get(1)?,
            lost_counts: get(2)?,
            baselines: get(3)?,
            charges: get(4)?,
            hash_charges: self.ring.spills(),
            timer_ns: get(7)?,
            timer_runs: get(8)?,
            timer_failures: get(9)?,
        })
    }
}

/// What to load: the followed mode (with or without the hrtimer hook that arms ticks for a
/// task followed while it runs), or ticks on every CPU.
#[derive(Clone, Copy)]
enum Load {
    Followed { hrtimer_hook: bool },
    EveryCpu,
}
