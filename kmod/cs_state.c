// SPDX-License-Identifier: GPL-2.0
/*
 * The module's parameters and the state its parts share (the session, the probes, the timer,
 * the device, load and unload), defined once here so that each part depends on this file
 * and none on another's.
 */
#include "cs_internal.h"

bool emulate;
module_param(emulate, bool, 0444);
MODULE_PARM_DESC(emulate, "Counters from a software model, PQR_ASSOC in a per-CPU variable (no RDT needed)");
uint interval_us = 1000;
module_param(interval_us, uint, 0444);
MODULE_PARM_DESC(interval_us, "Sampling period in microseconds (100..1000000)");
uint rr_per_tick = 4;
module_param(rr_per_tick, uint, 0444);
MODULE_PARM_DESC(rr_per_tick, "RMIDs that did not run, read per tick round robin (0..64)");
uint ring_records = 65536;
module_param(ring_records, uint, 0444);
MODULE_PARM_DESC(ring_records, "Ring size in records, a power of two (1024..4194304)");
uint max_cgroups = 4096;
module_param(max_cgroups, uint, 0444);
MODULE_PARM_DESC(max_cgroups, "Watched cgroups at most, nested ones included (1..1048576)");
ulong limbo_bytes;
module_param(limbo_bytes, ulong, 0444);
MODULE_PARM_DESC(limbo_bytes, "Occupancy below which a freed RMID is clean (0: L3 size / RMIDs)");
uint emu_l3_kib = 32768;
module_param(emu_l3_kib, uint, 0444);
MODULE_PARM_DESC(emu_l3_kib, "Emulated L3 size per domain, KiB (64..1048576)");
uint emu_rmids = 64;
module_param(emu_rmids, uint, 0444);
MODULE_PARM_DESC(emu_rmids, "Emulated RMIDs, RMID 0 included (2..1024)");
uint emu_width = 24;
module_param(emu_width, uint, 0444);
MODULE_PARM_DESC(emu_width, "Emulated MBM counter width, bits (8..62)");
uint emu_upscale = 65536;
module_param(emu_upscale, uint, 0444);
MODULE_PARM_DESC(emu_upscale, "Emulated bytes per count (1..16777216)");
uint emu_local_pct = 80;
module_param(emu_local_pct, uint, 0444);
MODULE_PARM_DESC(emu_local_pct, "Emulated share of MBM bytes that are local, percent (0..100)");
uint emu_domains;
module_param(emu_domains, uint, 0444);
MODULE_PARM_DESC(emu_domains, "Emulated L3 domains, CPUs dealt round robin (0: the host's L3s)");

/* Everything a session and the load share: under cs_lock where it says so. */
struct cs cs;

/* The pool of table entries, made at load: probes never allocate. */
struct cs_cg *cs_pool;
HLIST_HEAD(cs_pool_free);	/* under cs_lock */

/*
 * Table and RMIDs. Raw: it is taken in the hard-irq timer and in tracepoint probes (which run
 * with preemption off), where PREEMPT_RT's sleeping spinlock_t is invalid. Nothing under it
 * sleeps or allocates: cgroup entries come from a pool made at load.
 */
DEFINE_RAW_SPINLOCK(cs_lock);

struct cs_rules __rcu *cs_rules;
DEFINE_MUTEX(cs_session);	/* open, ioctl, release */
DEFINE_HASHTABLE(cs_table, 12);
DEFINE_PER_CPU(struct cs_cpu, cs_cpu);

DEFINE_RAW_SPINLOCK(ring_lock);
struct cachescope_record *ring;
u32 ring_head, ring_tail;		/* free-running indexes */
u64 ring_overruns, ring_lost;		/* total; not yet reported */
DECLARE_WAIT_QUEUE_HEAD(ring_wait);
/* The timer wakes readers through irq_work: a wait queue's lock sleeps on PREEMPT_RT. */
struct irq_work ring_wake;

/* The CPU hotplug state of the online/offline callbacks (cs_session.c), set at load. */
enum cpuhp_state cs_hp_state;

/* The last-level cache's id; the package where none is known. */
u32 cs_domain_id(int cpu)
{
	u32 llc;

	if (emulate && emu_domains)
		return cpu % emu_domains;
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 7, 0)
	llc = cpu_data(cpu).topo.llc_id;	/* 6.7's topology rework removed get_llc_id() */
#else
	llc = get_llc_id(cpu);
#endif
	return llc == BAD_APICID ? topology_physical_package_id(cpu) : llc;
}
