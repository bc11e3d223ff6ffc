//! The plugin's side of QEMU: registration, the translation callback that instruments memory
//! accesses once the device says monitoring is in use, and the access callback that drives the
//! domain's cache model and the device's counters.

use crate::link::{RdtLink, VERSION};
use crate::model::{Geometry, Llc, Sink};
use qemu_plugin_sys::{
    qemu_info_t, qemu_plugin_cb_flags, qemu_plugin_get_hwaddr, qemu_plugin_hwaddr_is_io, qemu_plugin_hwaddr_phys_addr,
    qemu_plugin_id_t, qemu_plugin_mem_is_store, qemu_plugin_mem_rw, qemu_plugin_mem_size_shift, qemu_plugin_meminfo_t,
    qemu_plugin_register_vcpu_mem_cb, qemu_plugin_register_vcpu_tb_trans_cb, qemu_plugin_tb, qemu_plugin_tb_get_insn,
    qemu_plugin_tb_n_insns, QEMU_PLUGIN_VERSION,
};
use std::cell::UnsafeCell;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

unsafe extern "C" {
    /// Exported by the patched QEMU (tools/rdt-qemu/patches): NULL until -device rdt exists.
    fn qemu_rdt_link() -> *mut RdtLink;
}

/// The API version this plugin was built against; QEMU refuses a plugin without it.
#[unsafe(no_mangle)]
pub static qemu_plugin_version: c_int = QEMU_PLUGIN_VERSION as c_int;

struct Model {
    link: &'static RdtLink,
    domains: Vec<Domain>,
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
    MODEL.get_or_init(|| build(link)).as_ref()
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
    Some(Model { link, domains })
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

unsafe extern "C" fn on_access(vcpu: c_uint, info: qemu_plugin_meminfo_t, vaddr: u64, _: *mut c_void) {
    let Some(m) = model() else { return };
    if vcpu >= m.link.nr_vcpus {
        return;
    }
    // SAFETY: info and vaddr are this callback's own arguments, valid during it.
    let hw = unsafe { qemu_plugin_get_hwaddr(info, vaddr) };
    // SAFETY: hw came from qemu_plugin_get_hwaddr in this callback and is checked non-null.
    if hw.is_null() || unsafe { qemu_plugin_hwaddr_is_io(hw) } {
        return;
    }
    // SAFETY: as above.
    let addr = unsafe { qemu_plugin_hwaddr_phys_addr(hw) };
    // SAFETY: info is this callback's argument.
    let (shift, store) = unsafe { (qemu_plugin_mem_size_shift(info), qemu_plugin_mem_is_store(info)) };
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
    let (Some(cache), Ok(rmid)) = (m.domains.get(domain as usize), u16::try_from(rmid)) else { return };
    let mut sink = Counters { link: m.link, base: domain as usize * m.link.nr_rmids as usize };
    cache.with(|c| c.access(addr, 1u64 << shift.min(6), store, rmid, cbm, &mut sink));
}

unsafe extern "C" fn on_translate(_: qemu_plugin_id_t, tb: *mut qemu_plugin_tb) {
    if model().is_none() {
        return;
    }
    // SAFETY: tb is the translation callback's argument, valid during it.
    let n = unsafe { qemu_plugin_tb_n_insns(tb) };
    for i in 0..n {
        // SAFETY: i is below the block's instruction count; the handle is valid during the
        // callback, which is when callbacks may be registered on it.
        unsafe {
            let insn = qemu_plugin_tb_get_insn(tb, i);
            qemu_plugin_register_vcpu_mem_cb(
                insn,
                Some(on_access),
                qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS,
                qemu_plugin_mem_rw::QEMU_PLUGIN_MEM_RW,
                std::ptr::null_mut(),
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
    // SAFETY: id is the one QEMU gave this plugin; the callback has the expected signature.
    unsafe { qemu_plugin_register_vcpu_tb_trans_cb(id, Some(on_translate)) };
    0
}
