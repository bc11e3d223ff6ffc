//! Per-cgroup PMU attribution with eBPF (the primary PMU path of DESIGN.md §3).
//!
//! `src/bpf/attrib.bpf.c` runs at every context switch and at a per-CPU tick of one slot
//! length: it reads this CPU's counters, charges the delta to the running task's cgroup id in
//! the current time slot, and accumulates in a per-CPU hash keyed by (slot, cgroup id).
//! [`Attribution::drain`] empties that hash in batches (two or three syscalls, however many
//! context switches happened) and hands out each slot once it is complete. Counts that could
//! not be charged are counted in [`BpfStats`].

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
pub const MAX_EVENTS: usize = 4;
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
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Key {
    slot: u64,
    cgid: u64,
}

/// Values are per CPU, each rounded up to 8 bytes (slot_val is 48 bytes already).
const VAL_SIZE: usize = 48;

pub struct Attribution {
    nev: usize,
    slot_ns: u64,
    ncpus: usize,
    acc: MapHandle,
    stats: MapHandle,
    /// The PERF_EVENT_ARRAYs: the kernel drops their entries when the map file they were
    /// added through is closed, so a descriptor of that same file is kept.
    _arrays: Vec<MapHandle>,
    _links: Vec<Link>,
    _counters: Vec<perf_event::Counter>,
    _ticks: Vec<perf_event::Counter>,
    pending: BTreeMap<(u64, u64, u32), SlotRow>,
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
    /// room for `capacity` (slot, cgroup) pairs between drains. A drain walks every bucket of
    /// the hash, so capacity is its cost: size it to cgroups × slots per drain, with margin
    /// (see [`capacity_for`]).
    pub fn start(events: &[Encoded], cpus: &[usize], slot: Duration, capacity: u32) -> Result<Attribution, BpfError> {
        if events.is_empty() || events.len() > MAX_EVENTS {
            return Err(BpfError::Config(format!("1 to {MAX_EVENTS} events, not {}", events.len())));
        }
        let slot_ns = slot.as_nanos() as u64;
        if slot_ns < 100_000 {
            return Err(BpfError::Config(format!("slot {slot:?} is below 100us")));
        }
        libbpf_log::capture();
        let mut obj = MaybeUninit::uninit();
        let mut open = skel::AttribSkelBuilder::default().open(&mut obj).map_err(lb("opening the BPF object"))?;
        open.maps.acc.set_max_entries(capacity.max(64)).map_err(lb("sizing the slot map"))?;
        if let Some(ro) = open.maps.rodata_data.as_deref_mut() {
            ro.slot_ns = slot_ns;
            ro.nev = events.len() as u32;
        }
        let loaded = open.load().map_err(lb("loading the BPF program (root and a kernel with BPF needed)"))?;
        let arrays = [&loaded.maps.ev0, &loaded.maps.ev1, &loaded.maps.ev2, &loaded.maps.ev3];
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
        let mut links = vec![loaded.progs.on_switch.attach().map_err(lb("attaching to sched_switch"))?];
        let mut ticks = Vec::new();
        for &cpu in cpus {
            let mut b = Builder::new(perf_event::events::Software::CPU_CLOCK);
            b.any_pid().one_cpu(cpu).sample_period(slot_ns).include_kernel();
            let t =
                b.build().map_err(|error| BpfError::Io { what: format!("opening the tick on CPU {cpu}"), error })?;
            // libbpf closes the fd it is given when the link goes: give it its own.
            // SAFETY: dup of a descriptor we own; the result is owned by the link.
            let dup = unsafe { libc::dup(t.as_raw_fd()) };
            if dup < 0 {
                return Err(BpfError::Io { what: "dup".into(), error: std::io::Error::last_os_error() });
            }
            links.push(loaded.progs.on_tick.attach_perf_event(dup).map_err(lb("attaching the tick"))?);
            ticks.push(t);
        }
        let mut keep = Vec::new();
        for a in arrays {
            keep.push(MapHandle::try_from(a).map_err(lb("event array"))?);
        }
        let acc = MapHandle::try_from(&loaded.maps.acc).map_err(lb("acc map"))?;
        let stats = MapHandle::try_from(&loaded.maps.stats).map_err(lb("stats map"))?;
        // SAFETY: libbpf_num_possible_cpus reads sysfs and touches no memory of ours.
        let ncpus = unsafe { libbpf_sys::libbpf_num_possible_cpus() };
        if ncpus <= 0 {
            return Err(BpfError::Config("cannot count possible CPUs".into()));
        }
        // The programs stay loaded through the links; the maps through the programs and our handles.
        drop(loaded);
        Ok(Attribution {
            nev: events.len(),
            slot_ns,
            ncpus: ncpus as usize,
            acc,
            stats,
            _arrays: keep,
            _links: links,
            _counters: counters,
            _ticks: ticks,
            pending: BTreeMap::new(),
            cpu_domain: Vec::new(),
            cpu_totals: vec![0; ncpus as usize],
            keys: vec![Key::default(); BATCH],
            vals: vec![0u8; BATCH * ncpus as usize * VAL_SIZE],
            newest: 0,
        })
    }

    pub fn slot_ns(&self) -> u64 {
        self.slot_ns
    }

    /// The slot CLOCK_MONOTONIC is in now.
    pub fn current_slot(&self) -> u64 {
        cachescope_platform::clock::monotonic().as_nanos() as u64 / self.slot_ns
    }

    /// Move everything accumulated in the kernel into our table (batched lookup-and-delete),
    /// then return the slots that are complete (older than the previous slot, so a CPU still
    /// finishing a charge across the boundary is not cut off), oldest first.
    pub fn drain(&mut self) -> Result<Vec<SlotRow>, BpfError> {
        self.collect()?;
        let complete_below = self.current_slot().saturating_sub(1);
        let later = self.pending.split_off(&(complete_below, 0, 0));
        let done = std::mem::replace(&mut self.pending, later);
        Ok(done.into_values().collect())
    }

    /// Everything accumulated so far, complete or not (at shutdown).
    pub fn drain_all(&mut self) -> Result<Vec<SlotRow>, BpfError> {
        self.collect()?;
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

    fn collect(&mut self) -> Result<(), BpfError> {
        let (keys, vals) = (&mut self.keys, &mut self.vals);
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
            for (i, k) in keys.iter().take(count as usize).copied().enumerate() {
                self.newest = self.newest.max(k.slot);
                for cpu in 0..self.ncpus {
                    let base = (i * self.ncpus + cpu) * VAL_SIZE;
                    let w = |j: usize| {
                        let mut b = [0u8; 8];
                        b.copy_from_slice(&vals[base + j * 8..base + j * 8 + 8]);
                        u64::from_ne_bytes(b)
                    };
                    if (0..6).all(|j| w(j) == 0) {
                        continue;
                    }
                    let domain = self.cpu_domain.get(cpu).copied().unwrap_or(0);
                    let row = self.pending.entry((k.slot, k.cgid, domain)).or_insert_with(|| SlotRow {
                        slot: k.slot,
                        cgroup_id: k.cgid,
                        domain,
                        values: vec![0; self.nev],
                        switches: 0,
                        multiplexed: 0,
                    });
                    for (e, v) in row.values.iter_mut().enumerate() {
                        *v += w(e);
                    }
                    self.cpu_totals[cpu] += w(0);
                    row.switches += w(4);
                    row.multiplexed += w(5);
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
        Ok(())
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

    /// Charges dropped because the map was full, since start (one lookup: cheap enough for
    /// every drain).
    pub fn lost_charges(&self) -> Result<u64, BpfError> {
        self.stat(0)
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
            lost_charges: get(0)?,
            read_failures: get(1)?,
            lost_counts: get(2)?,
            baselines: get(3)?,
            charges: get(4)?,
        })
    }
}
