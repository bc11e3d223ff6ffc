//! The plugin's side of QEMU: registration, the translation callback that instruments memory
//! accesses once the device says monitoring is in use, and the access callback that drives the
//! domain's cache model and the device's counters.

use crate::decode::{classify, Operand, Special};
use crate::link::{RdtLink, PMU_INSNS, PMU_LLC_MISSES, PMU_LLC_REFS, PMU_LOOKUPS, VERSION};
use crate::model::{Geometry, Llc, Sink};
use crate::pmu::{Counted, Private};
use qemu_plugin_sys::{
    qemu_info_t, qemu_plugin_cb_flags, qemu_plugin_cond, qemu_plugin_get_hwaddr, qemu_plugin_get_registers,
    qemu_plugin_hwaddr_is_io, qemu_plugin_hwaddr_phys_addr, qemu_plugin_id_t, qemu_plugin_insn_data,
    qemu_plugin_insn_size, qemu_plugin_insn_vaddr, qemu_plugin_mem_is_store, qemu_plugin_mem_rw,
    qemu_plugin_mem_size_shift, qemu_plugin_meminfo_t, qemu_plugin_op, qemu_plugin_read_register,
    qemu_plugin_reg_descriptor, qemu_plugin_register, qemu_plugin_register_vcpu_init_cb,
    qemu_plugin_register_vcpu_insn_exec_cb, qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu,
    qemu_plugin_register_vcpu_mem_cb, qemu_plugin_register_vcpu_tb_exec_cond_cb,
    qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu, qemu_plugin_register_vcpu_tb_trans_cb,
    qemu_plugin_scoreboard_new, qemu_plugin_tb, qemu_plugin_tb_get_insn, qemu_plugin_tb_n_insns,
    qemu_plugin_translate_vaddr, qemu_plugin_u64, qemu_plugin_u64_add, qemu_plugin_u64_get, qemu_plugin_u64_set,
    GArray, GByteArray, QEMU_PLUGIN_VERSION,
};
use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, Once, OnceLock};

unsafe extern "C" {
    /// Exported by the patched QEMU (tools/rdt-qemu/patches): NULL until -device rdt exists.
    fn qemu_rdt_link() -> *mut RdtLink;
    // GLib, from QEMU's process: the register API's buffers.
    fn g_byte_array_new() -> *mut GByteArray;
    fn g_byte_array_set_size(array: *mut GByteArray, len: c_uint) -> *mut GByteArray;
    fn g_array_free(array: *mut GArray, free_segment: c_int) -> *mut c_char;
    // QEMU 10.1's discontinuity callbacks (plugin API 5), which the bindings crate predates.
    fn qemu_plugin_register_vcpu_discon_cb(id: qemu_plugin_id_t, kind: c_int, cb: Option<DisconCb>);
}

/// `qemu_plugin_vcpu_discon_cb_t`.
type DisconCb = unsafe extern "C" fn(id: qemu_plugin_id_t, vcpu: c_uint, kind: c_int, from_pc: u64, to_pc: u64);
/// `QEMU_PLUGIN_DISCON_EXCEPTION`.
const DISCON_EXCEPTION: c_int = 1 << 1;

/// The API version this plugin was built against; QEMU refuses a plugin without it.
#[unsafe(no_mangle)]
pub static qemu_plugin_version: c_int = QEMU_PLUGIN_VERSION as c_int;

struct Model {
    link: &'static RdtLink,
    domains: Vec<Domain>,
    /// With the device's PMU: what its counters are made of.
    pmu: Option<Pmu>,
}

/// Per vCPU, in a scoreboard so that the translated code adds to it inline: instructions
/// executed (supervisor, user), and instructions left before the device's next check.
#[repr(C)]
struct Score {
    insns: [u64; 2],
    countdown: u64,
}

/// The device's PMU sources: instructions in the scoreboard, L3 references and misses here.
struct Pmu {
    insns: [qemu_plugin_u64; 2],
    countdown: qemu_plugin_u64,
    vcpus: Vec<VcpuPmu>,
}

/// One vCPU's private cache and counts, touched only by the thread running that vCPU (its
/// memory callbacks, and the device's MSR and RDPMC helpers on the same thread).
#[repr(align(128))]
struct VcpuPmu {
    private: UnsafeCell<Private>,
    /// [supervisor, user]
    lookups: [AtomicU64; 2],
    refs: [AtomicU64; 2],
    misses: [AtomicU64; 2],
}

/// One L3 domain's model, alone on its cache lines: with the domains' locks side by side,
/// each access moved the shared line between host cores (86 % of QEMU's time went to the
/// plugin, most of it there). A domain of one vCPU takes no lock at all: even an uncontended
/// lock was most of what an access cost.
#[repr(align(128))]
struct Domain {
    /// Several vCPUs share the domain: their accesses take `lock`.
    shared: bool,
    lock: Mutex<()>,
    cache: UnsafeCell<Llc>,
}

impl Domain {
    /// Runs `f` on the model. The caller is a memory callback of one of this domain's vCPUs.
    fn with(&self, f: impl FnOnce(&mut Llc)) {
        // A poisoned lock means a panic in the model: keep counting with its state as it was.
        let _held = self.shared.then(|| self.lock.lock().unwrap_or_else(|p| p.into_inner()));
        // SAFETY: either the lock is held, or the domain has one vCPU, and QEMU runs a vCPU's
        // callbacks on the one thread executing it, one at a time: no other reference to the
        // model exists meanwhile.
        f(unsafe { &mut *self.cache.get() });
    }
}

// SAFETY: the link's pointers are the device's arrays, alive for the process and touched only
// through atomics (counters, RMIDs) or never written after realize (domains, sizes).
unsafe impl Sync for Model {}
// SAFETY: as for Sync.
unsafe impl Send for Model {}

static MODEL: OnceLock<Option<Model>> = OnceLock::new();

/// The model, once the device exists and the guest has used monitoring; None before.
fn model() -> Option<&'static Model> {
    if let Some(m) = MODEL.get() {
        return m.as_ref();
    }
    // SAFETY: the function takes nothing and returns a pointer to the device's link, which
    // lives as long as the process once the device is realized (or NULL).
    let link = unsafe { qemu_rdt_link() };
    // SAFETY: non-null means it points at the realized device's struct, never freed.
    let link: &'static RdtLink = unsafe { link.as_ref() }?;
    // SAFETY: `active` is a u32 the device writes atomically; AtomicU32 has its layout.
    let active = unsafe { AtomicU32::from_ptr(std::ptr::addr_of!(link.active).cast_mut()) };
    if active.load(Ordering::Acquire) == 0 {
        return None;
    }
    let m = MODEL.get_or_init(|| build(link)).as_ref();
    if let Some(m) = m {
        publish_pmu(m);
    }
    m
}

/// Hands the device the PMU's sources, once the model they live in is in place.
fn publish_pmu(m: &'static Model) {
    static ONCE: Once = Once::new();
    if m.pmu.is_none() {
        return;
    }
    ONCE.call_once(|| {
        let source: unsafe extern "C" fn(u32, u32, u32) -> u64 = pmu_source;
        let rearm: unsafe extern "C" fn(u32, u64) = pmu_rearm;
        // SAFETY: the two fields are function pointers in the device's link, which it reads
        // atomically (qatomic_read); a pointer-sized atomic store is what it expects.
        unsafe {
            AtomicPtr::from_ptr(std::ptr::addr_of!(m.link.pmu_source).cast_mut().cast::<*mut c_void>())
                .store(source as *mut c_void, Ordering::Release);
            AtomicPtr::from_ptr(std::ptr::addr_of!(m.link.pmu_rearm).cast_mut().cast::<*mut c_void>())
                .store(rearm as *mut c_void, Ordering::Release);
        }
    });
}

fn pmu_of(vcpu: c_uint) -> Option<(&'static Pmu, &'static VcpuPmu)> {
    let p = MODEL.get()?.as_ref()?.pmu.as_ref()?;
    Some((p, p.vcpus.get(vcpu as usize)?))
}

/// The device asks what a source counted (on the vCPU's own thread).
unsafe extern "C" fn pmu_source(vcpu: u32, user: u32, source: u32) -> u64 {
    let Some((p, v)) = pmu_of(vcpu) else { return 0 };
    let u = usize::from(user != 0);
    match source {
        // SAFETY: the entry is the scoreboard's, vcpu one QEMU runs (pmu_of checked it).
        PMU_INSNS => unsafe { qemu_plugin_u64_get(p.insns[u], vcpu) },
        PMU_LLC_REFS => v.refs[u].load(Ordering::Relaxed),
        PMU_LLC_MISSES => v.misses[u].load(Ordering::Relaxed),
        PMU_LOOKUPS => v.lookups[u].load(Ordering::Relaxed),
        _ => 0,
    }
}

/// An exception on `vcpu`: an instruction that faulted retired nothing, but its inline count
/// ran before it did; the device says which (and at which privilege), and the count is taken
/// back, so that the retry is the one that counts.
unsafe extern "C" fn on_exception(_: qemu_plugin_id_t, vcpu: c_uint, _: c_int, _: u64, _: u64) {
    let Some(m) = model() else { return };
    let (Some(p), Some(fault)) = (m.pmu.as_ref(), m.link.pmu_fault) else { return };
    // SAFETY: the device's function, called on this vCPU's thread as the exception is raised.
    let u = match unsafe { fault(vcpu) } {
        0 => 0,
        1 => 1,
        _ => return,
    };
    // SAFETY: the scoreboard entry and a vCPU QEMU runs; adding 2^64 - 1 takes one back.
    unsafe { qemu_plugin_u64_add(p.insns[u], vcpu, u64::MAX) };
}

/// The device wants its next check after `insns` instructions (on the vCPU's own thread).
unsafe extern "C" fn pmu_rearm(vcpu: u32, insns: u64) {
    if let Some((p, _)) = pmu_of(vcpu) {
        // SAFETY: as in pmu_source.
        unsafe { qemu_plugin_u64_set(p.countdown, vcpu, insns) };
    }
}

/// A block ran the vCPU's countdown out: the device brings its counters up to date (and
/// raises what overflowed), and says when to ask again.
unsafe extern "C" fn on_countdown(vcpu: c_uint, _: *mut c_void) {
    let Some(m) = model() else { return };
    let (Some(p), Some(check)) = (m.pmu.as_ref(), m.link.pmu_check) else { return };
    // SAFETY: the device's function, called on this vCPU's thread as it asks.
    let next = unsafe { check(vcpu) };
    // SAFETY: the scoreboard entry and a vCPU QEMU runs.
    unsafe { qemu_plugin_u64_set(p.countdown, vcpu, next) };
}

fn build_pmu(link: &RdtLink) -> Option<Pmu> {
    if link.pmu == 0 {
        return None;
    }
    let ways = link.l2_ways;
    let mut vcpus = Vec::new();
    for _ in 0..link.nr_vcpus {
        let Some(private) = Private::new(link.l2_size, ways, link.line_size) else {
            eprintln!("rdt plugin: private cache of {} B in {ways} ways: no PMU counts", link.l2_size);
            return None;
        };
        vcpus.push(VcpuPmu {
            private: UnsafeCell::new(private),
            lookups: Default::default(),
            refs: Default::default(),
            misses: Default::default(),
        });
    }
    // SAFETY: a scoreboard of Score-sized entries, one per vCPU, zeroed, which QEMU keeps
    // for the process (never freed here).
    let score = unsafe { qemu_plugin_scoreboard_new(std::mem::size_of::<Score>()) };
    let entry = |offset| qemu_plugin_u64 { score, offset };
    Some(Pmu {
        insns: [entry(std::mem::offset_of!(Score, insns)), entry(std::mem::offset_of!(Score, insns) + 8)],
        countdown: entry(std::mem::offset_of!(Score, countdown)),
        vcpus,
    })
}

fn build(link: &'static RdtLink) -> Option<Model> {
    if link.version != VERSION {
        eprintln!("rdt plugin: device link version {} (this plugin speaks {VERSION}): no cache model", link.version);
        return None;
    }
    let g = Geometry { size: link.llc_size, ways: link.llc_ways, line_size: link.line_size };
    let mut domains = Vec::new();
    for d in 0..link.nr_domains {
        // SAFETY: vcpu_domain holds nr_vcpus u32s, written before the device was realized.
        let vcpus = (0..link.nr_vcpus as usize).filter(|&v| unsafe { *link.vcpu_domain.add(v) } == d).count();
        match Llc::new(g) {
            Ok(c) => domains.push(Domain { shared: vcpus > 1, lock: Mutex::new(()), cache: UnsafeCell::new(c) }),
            Err(e) => {
                eprintln!("rdt plugin: {e}: no cache model");
                return None;
            }
        }
    }
    Some(Model { link, domains, pmu: build_pmu(link) })
}

/// Writes the model's charges into the device's counters of one domain.
struct Counters<'a> {
    link: &'a RdtLink,
    base: usize,
}

impl Counters<'_> {
    fn cell(&self, array: *mut u64, rmid: u16) -> Option<&AtomicU64> {
        if u32::from(rmid) >= self.link.nr_rmids {
            return None;
        }
        // SAFETY: the arrays hold nr_domains * nr_rmids u64s; base is domain * nr_rmids for
        // a domain below nr_domains and rmid is below nr_rmids, so the cell is inside. The
        // device reads them atomically; AtomicU64 has u64's layout.
        Some(unsafe { AtomicU64::from_ptr(array.add(self.base + usize::from(rmid))) })
    }
}

impl Sink for Counters<'_> {
    fn occupancy(&mut self, rmid: u16, lines: i64) {
        if let Some(c) = self.cell(self.link.lines, rmid) {
            c.fetch_add(lines as u64, Ordering::Relaxed);
        }
    }
    fn filled(&mut self, rmid: u16, bytes: u64) {
        if let Some(c) = self.cell(self.link.fill_bytes, rmid) {
            c.fetch_add(bytes, Ordering::Relaxed);
        }
    }
    fn written_back(&mut self, rmid: u16, bytes: u64) {
        if let Some(c) = self.cell(self.link.wb_bytes, rmid) {
            c.fetch_add(bytes, Ordering::Relaxed);
        }
    }
}

/// A load or store; `user` (non-null) when the instruction runs at CPL 3.
unsafe extern "C" fn on_access(vcpu: c_uint, info: qemu_plugin_meminfo_t, vaddr: u64, user: *mut c_void) {
    let Some(m) = model() else { return };
    let Some((cache, rmid, cbm, mut sink)) = vcpu_state(m, vcpu) else { return };
    let Some((addr, size)) = ram_access(info, vaddr) else { return };
    // SAFETY: info is this callback's argument.
    let store = unsafe { qemu_plugin_mem_is_store(info) };
    let Some((_, v)) = pmu_of(vcpu) else {
        return cache.with(|c| c.access(addr, size, store, rmid, cbm, &mut sink));
    };
    // SAFETY: this vCPU's private cache, only ever touched on its own thread (this one).
    let private = unsafe { &mut *v.private.get() };
    let mut n = Counted::default();
    cache.with(|c| {
        for line in c.lines(addr, size) {
            let hit = private.touch(line);
            n.line(hit, c.access_line(line, store, rmid, cbm, &mut sink));
        }
    });
    let u = usize::from(!user.is_null());
    // This thread is the counts' only writer: a load and a store, not a locked add (three of
    // those were half of this callback's time). The device's reads stay atomic.
    let add = |c: &AtomicU64, n: u64| c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
    add(&v.lookups[u], n.lookups);
    add(&v.refs[u], n.references);
    add(&v.misses[u], n.misses);
}

/// The private cache of `vcpu`, when there is a PMU: run on that vCPU's thread only.
fn with_private(vcpu: c_uint, f: impl FnOnce(&mut Private)) {
    if let Some((_, v)) = pmu_of(vcpu) {
        // SAFETY: as in on_access: the caller is a callback of this vCPU, on its thread.
        f(unsafe { &mut *v.private.get() });
    }
}

/// A memory callback's physical address and size (at most a line), None for device memory.
fn ram_access(info: qemu_plugin_meminfo_t, vaddr: u64) -> Option<(u64, u64)> {
    // SAFETY: info and vaddr are the calling memory callback's own arguments, valid during it.
    let hw = unsafe { qemu_plugin_get_hwaddr(info, vaddr) };
    // SAFETY: hw came from qemu_plugin_get_hwaddr in this callback and is checked non-null.
    if hw.is_null() || unsafe { qemu_plugin_hwaddr_is_io(hw) } {
        return None;
    }
    // SAFETY: as above; info is the callback's argument.
    let (addr, shift) = unsafe { (qemu_plugin_hwaddr_phys_addr(hw), qemu_plugin_mem_size_shift(info)) };
    Some((addr, 1u64 << shift.min(6)))
}

/// The executing vCPU's domain, RMID and mask, and the domain's model (None: not a vCPU the
/// device knows).
fn vcpu_state(m: &'static Model, vcpu: c_uint) -> Option<(&'static Domain, u16, u64, Counters<'static>)> {
    if vcpu >= m.link.nr_vcpus {
        return None;
    }
    let v = vcpu as usize;
    // SAFETY: the three arrays hold nr_vcpus entries and v is below it; vcpu_rmid is written
    // atomically by the vCPU's own thread (this one) in wrmsr, vcpu_cbm atomically by wrmsr on
    // any vCPU of the domain (a mask MSR) or this one (PQR_ASSOC).
    let (domain, rmid, cbm) = unsafe {
        (
            *m.link.vcpu_domain.add(v),
            AtomicU32::from_ptr(m.link.vcpu_rmid.add(v).cast_mut()).load(Ordering::Relaxed),
            AtomicU64::from_ptr(m.link.vcpu_cbm.add(v).cast_mut()).load(Ordering::Relaxed),
        )
    };
    let (Some(cache), Ok(rmid)) = (m.domains.get(domain as usize), u16::try_from(rmid)) else { return None };
    Some((cache, rmid, cbm, Counters { link: m.link, base: domain as usize * m.link.nr_rmids as usize }))
}

/// A non-temporal store's access: to memory, without allocating (a load by such an
/// instruction, which has none, would be an ordinary access).
unsafe extern "C" fn on_nt_store(vcpu: c_uint, info: qemu_plugin_meminfo_t, vaddr: u64, user: *mut c_void) {
    let Some(m) = model() else { return };
    // SAFETY: info is this callback's argument.
    if !unsafe { qemu_plugin_mem_is_store(info) } {
        // SAFETY: the same arguments, passed on within the callback.
        return unsafe { on_access(vcpu, info, vaddr, user) };
    }
    let Some((cache, rmid, _, mut sink)) = vcpu_state(m, vcpu) else { return };
    let Some((addr, size)) = ram_access(info, vaddr) else { return };
    cache.with(|c| {
        with_private(vcpu, |p| c.lines(addr, size).for_each(|l| p.invalidate(l)));
        c.store_nt(addr, size, rmid, &mut sink)
    });
}

/// A flush instruction as translated: what it does and where the next one starts.
struct FlushSite {
    keep: bool,
    at: Operand,
    next_ip: u64,
}

/// Register handles by the encoding's numbers (0-15), then FS's and GS's bases: the same for
/// every vCPU of a machine, found when the first one starts.
struct Registers([usize; 18]);

static REGISTERS: OnceLock<Option<Registers>> = OnceLock::new();

const REGISTER_NAMES: [&str; 18] = [
    "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
    "fs_base", "gs_base",
];

unsafe extern "C" fn on_vcpu_init(_: qemu_plugin_id_t, _: c_uint) {
    REGISTERS.get_or_init(|| {
        // SAFETY: called in a vCPU's initialisation callback, as the API asks; the array is
        // ours to free (not the names), and holds `len` descriptors.
        let list = unsafe { qemu_plugin_get_registers() };
        if list.is_null() {
            return None;
        }
        let mut found = [0usize; 18];
        // SAFETY: as above: `data` holds `len` qemu_plugin_reg_descriptor.
        let descs = unsafe {
            std::slice::from_raw_parts((*list).data.cast::<qemu_plugin_reg_descriptor>(), (*list).len as usize)
        };
        let mut n = 0;
        for d in descs {
            // SAFETY: each descriptor's name is a NUL-terminated string QEMU keeps.
            let name = unsafe { std::ffi::CStr::from_ptr(d.name) }.to_string_lossy();
            if let Some(i) = REGISTER_NAMES.iter().position(|r| *r == name) {
                found[i] = d.handle as usize;
                n += 1;
            }
        }
        // SAFETY: the array from qemu_plugin_get_registers, freed once with its elements.
        unsafe { g_array_free(list, 1) };
        if n < REGISTER_NAMES.len() {
            eprintln!(
                "rdt plugin: {n} of the {} registers a flush's address needs: flushes not modelled",
                REGISTER_NAMES.len()
            );
            return None;
        }
        Some(Registers(found))
    });
}

thread_local! {
    /// This vCPU thread's buffer for register reads.
    static REG_BUF: std::cell::Cell<*mut GByteArray> = const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// Register `handle`'s value, in a callback registered to read registers.
fn read_register(handle: usize) -> u64 {
    REG_BUF.with(|b| {
        if b.get().is_null() {
            // SAFETY: GLib's allocation; kept for the thread's life.
            b.set(unsafe { g_byte_array_new() });
        }
        let buf = b.get();
        // SAFETY: buf is a GByteArray of this thread; the handle is one QEMU listed; the
        // callback was registered with QEMU_PLUGIN_CB_R_REGS. The value is little-endian.
        unsafe {
            g_byte_array_set_size(buf, 0);
            if qemu_plugin_read_register(handle as *mut qemu_plugin_register, buf) < 8 {
                return 0;
            }
            let bytes = std::slice::from_raw_parts((*buf).data, 8);
            u64::from_le_bytes(bytes.try_into().unwrap_or([0; 8]))
        }
    })
}

/// CLFLUSH, CLFLUSHOPT or CLWB executing: the line at its address, in the vCPU's own domain
/// (a copy in another socket's L3 stays: not modelled).
unsafe extern "C" fn on_flush(vcpu: c_uint, site: *mut c_void) {
    let (Some(m), Some(Some(regs))) = (model(), REGISTERS.get()) else { return };
    // SAFETY: site is the FlushSite leaked for this instruction at its translation.
    let site = unsafe { &*site.cast::<FlushSite>() };
    let Some((cache, _, _, mut sink)) = vcpu_state(m, vcpu) else { return };
    let va = site.at.address(
        |r| read_register(regs.0[usize::from(r) & 15]),
        read_register(regs.0[16]),
        read_register(regs.0[17]),
        site.next_ip,
    );
    let mut pa = 0u64;
    // SAFETY: called in vCPU context (an execution callback), as the API asks.
    if unsafe { qemu_plugin_translate_vaddr(va, &mut pa) } {
        cache.with(|c| {
            if !site.keep {
                with_private(vcpu, |p| c.lines(pa, 1).for_each(|l| p.invalidate(l)));
            }
            c.flush_line(pa, site.keep, &mut sink)
        });
    }
}

/// WBINVD (userdata 1) or INVD (0): the vCPU's own domain.
unsafe extern "C" fn on_flush_all(vcpu: c_uint, write_back: *mut c_void) {
    let Some(m) = model() else { return };
    let Some((cache, _, _, mut sink)) = vcpu_state(m, vcpu) else { return };
    with_private(vcpu, Private::clear);
    cache.with(|c| c.flush_all(!write_back.is_null(), &mut sink));
}

unsafe extern "C" fn on_translate(_: qemu_plugin_id_t, tb: *mut qemu_plugin_tb) {
    let Some(m) = model() else { return };
    let flushes = matches!(REGISTERS.get(), Some(Some(_)));
    // SAFETY: tb is the translation callback's argument, valid during it.
    let n = unsafe { qemu_plugin_tb_n_insns(tb) };
    // The privilege this block runs at: part of its translation's key, so fixed for it.
    // SAFETY: the device's function, for a translation callback (this one).
    let user = m.pmu.is_some() && m.link.cpl.is_some_and(|cpl| unsafe { cpl() } == 3);
    if let Some(p) = m.pmu.as_ref() {
        // SAFETY: tb is valid during the callback; the entries are the scoreboard's. The
        // countdown runs down by the block's length, wrapping below zero, and the device is
        // asked when it has.
        unsafe {
            qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu(
                tb,
                qemu_plugin_op::QEMU_PLUGIN_INLINE_ADD_U64,
                p.countdown,
                (n as u64).wrapping_neg(),
            );
            qemu_plugin_register_vcpu_tb_exec_cond_cb(
                tb,
                Some(on_countdown),
                qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS,
                qemu_plugin_cond::QEMU_PLUGIN_COND_GE,
                p.countdown,
                1 << 63,
                std::ptr::null_mut(),
            );
        }
    }
    for i in 0..n {
        // SAFETY: i is below the block's instruction count; the handle is valid during the
        // callback, which is when callbacks may be registered on it. An instruction is at
        // most 15 bytes.
        unsafe {
            let insn = qemu_plugin_tb_get_insn(tb, i);
            if let Some(p) = m.pmu.as_ref() {
                // Counted as it starts; one that faults is taken back (on_exception).
                qemu_plugin_register_vcpu_insn_exec_inline_per_vcpu(
                    insn,
                    qemu_plugin_op::QEMU_PLUGIN_INLINE_ADD_U64,
                    p.insns[usize::from(user)],
                    1,
                );
            }
            let mut bytes = [0u8; 16];
            let len = qemu_plugin_insn_data(insn, bytes.as_mut_ptr().cast(), bytes.len());
            let access: unsafe extern "C" fn(c_uint, qemu_plugin_meminfo_t, u64, *mut c_void) =
                match classify(&bytes[..len.min(16)]) {
                    Some(Special::NtStore) => on_nt_store,
                    Some(Special::Flush { keep, at }) if flushes => {
                        // One per translation of a flush site (a few, retranslated rarely):
                        // leaked, as the callback may run for as long as the block exists.
                        let next_ip = qemu_plugin_insn_vaddr(insn).wrapping_add(qemu_plugin_insn_size(insn) as u64);
                        let site = Box::into_raw(Box::new(FlushSite { keep, at, next_ip }));
                        qemu_plugin_register_vcpu_insn_exec_cb(
                            insn,
                            Some(on_flush),
                            qemu_plugin_cb_flags::QEMU_PLUGIN_CB_R_REGS,
                            site.cast(),
                        );
                        continue;
                    }
                    Some(Special::FlushAll { write_back }) => {
                        qemu_plugin_register_vcpu_insn_exec_cb(
                            insn,
                            Some(on_flush_all),
                            qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS,
                            usize::from(write_back) as *mut c_void,
                        );
                        continue;
                    }
                    _ => on_access,
                };
            qemu_plugin_register_vcpu_mem_cb(
                insn,
                Some(access),
                qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS,
                qemu_plugin_mem_rw::QEMU_PLUGIN_MEM_RW,
                usize::from(user) as *mut c_void,
            );
        }
    }
}

/// Called by QEMU when it loads the plugin.
///
/// # Safety
/// QEMU passes its plugin id, its info and the plugin's arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn qemu_plugin_install(
    id: qemu_plugin_id_t,
    _info: *const qemu_info_t,
    _argc: c_int,
    _argv: *mut *mut c_char,
) -> c_int {
    // SAFETY: id is the one QEMU gave this plugin; the callbacks have the expected signatures.
    unsafe {
        qemu_plugin_register_vcpu_init_cb(id, Some(on_vcpu_init));
        qemu_plugin_register_vcpu_tb_trans_cb(id, Some(on_translate));
        qemu_plugin_register_vcpu_discon_cb(id, DISCON_EXCEPTION, Some(on_exception));
    }
    0
}
