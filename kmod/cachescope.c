// SPDX-License-Identifier: GPL-2.0
/*
 * cachescope: Resource Monitoring IDs per cgroup v2, assigned when the cgroup is created,
 * and cache occupancy / memory bandwidth sampled in the kernel every millisecond.
 *
 * - cgroup:cgroup_mkdir gives a cgroup that matches the watch rules (set by the one process
 *   that holds /dev/cachescope open) an RMID before any task runs in it; cgroups nested in a
 *   watched one share its RMID; cgroup:cgroup_rmdir sends it through limbo.
 * - sched:sched_switch writes IA32_PQR_ASSOC for the incoming task when its RMID differs from
 *   the CPU's (an RCU hash lookup, no locks, no allocation); tasks moved while running are
 *   re-tagged at their next scheduler tick (sched:sched_stat_runtime).
 * - One hrtimer per L3 domain, on a CPU of that domain, reads QM_EVTSEL/QM_CTR for the RMIDs
 *   that ran there during the interval and a few others round robin, and writes records to a
 *   ring that user space reads (and polls) through the character device.
 * - emulate=1: no RDT needed. PQR_ASSOC writes land in a per-CPU variable; counters come from
 *   a model: 1 byte of MBM per nanosecond a CPU runs under an RMID, occupancy filling an
 *   emulated L3 with random eviction, counters wrapping at an emulated width.
 */
#define pr_fmt(fmt) KBUILD_MODNAME ": " fmt

#include <linux/bitmap.h>
#include <linux/cgroup.h>
#include <linux/cpuhotplug.h>
#include <linux/cpumask.h>
#include <linux/file.h>
#include <linux/fs.h>
#include <linux/hashtable.h>
#include <linux/hrtimer.h>
#include <linux/irq_work.h>
#include <linux/kernfs.h>
#include <linux/ktime.h>
#include <linux/list.h>
#include <linux/miscdevice.h>
#include <linux/module.h>
#include <linux/mutex.h>
#include <linux/poll.h>
#include <linux/random.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/smp.h>
#include <linux/spinlock.h>
#include <linux/string.h>
#include <linux/topology.h>
#include <linux/tracepoint.h>
#include <linux/uaccess.h>
#include <linux/version.h>
#include <linux/vmalloc.h>
#include <linux/wait.h>
#include <asm/apicdef.h>
#include <asm/cpufeature.h>
#include <asm/msr.h>
#include <asm/processor.h>

#include "cachescope_abi.h"

#define CS_MSR_QM_EVTSEL	0x0c8d
#define CS_MSR_QM_CTR		0x0c8e
#define CS_MSR_PQR_ASSOC	0x0c8f
#define CS_CTR_ERROR		BIT_ULL(63)
#define CS_CTR_UNAVAIL		BIT_ULL(62)
#define CS_EVT_OCCUPANCY	1
#define CS_EVT_MBM_TOTAL	2
#define CS_EVT_MBM_LOCAL	3
/* The tracepoints' path buffer (TRACE_CGROUP_PATH_LEN) bounds what rules are matched on. */
#define CS_PATH_MAX		1024
#define CS_RULES_BYTES		1024
#define CS_LIMBO_EVERY		10	/* ticks between limbo checks */
#define CS_BOUNCE		128	/* records copied out per lock hold */

static bool emulate;
module_param(emulate, bool, 0444);
MODULE_PARM_DESC(emulate, "Counters from a software model, PQR_ASSOC in a per-CPU variable (no RDT needed)");
static uint interval_us = 1000;
module_param(interval_us, uint, 0444);
MODULE_PARM_DESC(interval_us, "Sampling period in microseconds (100..1000000)");
static uint rr_per_tick = 4;
module_param(rr_per_tick, uint, 0444);
MODULE_PARM_DESC(rr_per_tick, "RMIDs that did not run, read per tick round robin (0..64)");
static uint ring_records = 65536;
module_param(ring_records, uint, 0444);
MODULE_PARM_DESC(ring_records, "Ring size in records, a power of two (1024..4194304)");
static uint max_cgroups = 4096;
module_param(max_cgroups, uint, 0444);
MODULE_PARM_DESC(max_cgroups, "Watched cgroups at most, nested ones included (1..1048576)");
static ulong limbo_bytes;
module_param(limbo_bytes, ulong, 0444);
MODULE_PARM_DESC(limbo_bytes, "Occupancy below which a freed RMID is clean (0: L3 size / RMIDs)");
static uint emu_l3_kib = 32768;
module_param(emu_l3_kib, uint, 0444);
MODULE_PARM_DESC(emu_l3_kib, "Emulated L3 size per domain, KiB (64..1048576)");
static uint emu_rmids = 64;
module_param(emu_rmids, uint, 0444);
MODULE_PARM_DESC(emu_rmids, "Emulated RMIDs, RMID 0 included (2..1024)");
static uint emu_width = 24;
module_param(emu_width, uint, 0444);
MODULE_PARM_DESC(emu_width, "Emulated MBM counter width, bits (8..62)");
static uint emu_upscale = 65536;
module_param(emu_upscale, uint, 0444);
MODULE_PARM_DESC(emu_upscale, "Emulated bytes per count (1..16777216)");
static uint emu_local_pct = 80;
module_param(emu_local_pct, uint, 0444);
MODULE_PARM_DESC(emu_local_pct, "Emulated share of MBM bytes that are local, percent (0..100)");
static uint emu_domains;
module_param(emu_domains, uint, 0444);
MODULE_PARM_DESC(emu_domains, "Emulated L3 domains, CPUs dealt round robin (0: the host's L3s)");

enum cs_state { CS_FREE, CS_INUSE, CS_CLOSING, CS_LIMBO };

struct cs_rmid {
	u8 state;
	u64 cgid;		/* owner while in use or closing */
	u64 done;		/* domains (by index) past this state's step */
	struct list_head free;	/* FIFO: the longest rested is handed out first */
};

/* A watched cgroup: an owner (id == owner) or one nested in an owner. */
struct cs_cg {
	struct hlist_node node;
	struct rcu_head rcu;
	u64 id;
	u64 owner;
	u32 rmid;		/* read locklessly on the switch path; 0: untagged */
	bool manual;		/* detached by user space: not waiting for an RMID */
	u32 nested;		/* owners: entries sharing this RMID */
	struct list_head wait;	/* owners waiting for an RMID */
};

/* The pool of table entries, made at load: probes never allocate. */
static struct cs_cg *cs_pool;
static HLIST_HEAD(cs_pool_free);	/* under cs_lock */

struct cs_cpu {
	raw_spinlock_t lock;	/* emulation: ns below vs. the sampler */
	u32 rmid;		/* in PQR_ASSOC now (emulation: the write lands here) */
	u32 closid;		/* PQR_ASSOC high half, preserved */
	u32 orig_lo, orig_hi;	/* PQR_ASSOC before we opened, restored at close */
	bool recheck;		/* current task moved cgroup: re-tag at its next tick */
	u64 since;		/* emulation: when rmid began running */
	u64 *emu_ns;		/* emulation: ns per RMID not yet collected */
	unsigned long *ran;	/* RMIDs that ran here since the domain's last tick */
	u64 switches, writes;
	int domain;		/* index; -1: its L3 was not known at load */
};

struct cs_domain {
	u32 id;
	int cpu;		/* the timer's; -1 while every CPU of the domain is offline */
	struct cpumask cpus;
	struct hrtimer timer;
	raw_spinlock_t lock;	/* the model and the last values */
	unsigned long *active;
	u32 rr;
	u64 ticks;
	u64 *last_total, *last_local;	/* baselines for the next owner of a free RMID */
	unsigned long *known;		/* last_* read at least once */
	u64 *emu_bytes, *emu_fed, *emu_occ;
	u64 emu_sum;
};

static struct cs {
	u32 num_rmids, width, nr_domains;
	u64 upscale, l3_bytes, limbo, interval_ns, ctr_mask;
	bool has_total, has_local;
	struct cs_rmid *rmids;
	struct list_head free;
	struct list_head waiting;
	u32 in_use, in_limbo, nr_cgroups, nr_waiting;
	struct cs_domain *domains;
	bool open;		/* a session holds the device */
	bool running;		/* probes and timers live */
	u64 tick_ns, tick_ns_max, misplaced;
} cs;

/*
 * Table and RMIDs. Raw: it is taken in the hard-irq timer and in tracepoint probes (which run
 * with preemption off), where PREEMPT_RT's sleeping spinlock_t is invalid. Nothing under it
 * sleeps or allocates: cgroup entries come from a pool made at load.
 */
static DEFINE_RAW_SPINLOCK(cs_lock);

/* The watch rules: replaced whole (under cs_session), read under RCU by the mkdir probe. */
struct cs_rules {
	struct rcu_head rcu;
	u32 n;
	char rule[CACHESCOPE_MAX_RULES][CACHESCOPE_RULE_LEN];
};
static struct cs_rules __rcu *cs_rules;
static DEFINE_MUTEX(cs_session);	/* open, ioctl, release */
static DEFINE_HASHTABLE(cs_table, 12);
static DEFINE_PER_CPU(struct cs_cpu, cs_cpu);

static DEFINE_RAW_SPINLOCK(ring_lock);
static struct cachescope_record *ring;
static u32 ring_head, ring_tail;		/* free-running indexes */
static u64 ring_overruns, ring_lost;		/* total; not yet reported */
static DECLARE_WAIT_QUEUE_HEAD(ring_wait);
/* The timer wakes readers through irq_work: a wait queue's lock sleeps on PREEMPT_RT. */
static struct irq_work ring_wake;

/* ---- the ring ---- */

static void cs_push_locked(const struct cachescope_record *r)
{
	ring[ring_head & (ring_records - 1)] = *r;
	ring_head++;
}

/* Never sleeps; a full ring drops the record and counts it. */
static void cs_push(const struct cachescope_record *r)
{
	unsigned long flags;

	raw_spin_lock_irqsave(&ring_lock, flags);
	if (ring_lost && ring_head - ring_tail < ring_records) {
		struct cachescope_record o = {
			.time_ns = r->time_ns, .occupancy = ring_lost,
			.kind = CS_REC_OVERRUN, .flags = CS_F_MBM_NONE,
		};

		cs_push_locked(&o);
		ring_lost = 0;
	}
	if (ring_head - ring_tail < ring_records) {
		cs_push_locked(r);
	} else {
		ring_overruns++;
		ring_lost++;
	}
	raw_spin_unlock_irqrestore(&ring_lock, flags);
}

static u32 cs_ring_count(void)
{
	return READ_ONCE(ring_head) - READ_ONCE(ring_tail);
}

static void cs_ring_wake(struct irq_work *w)
{
	wake_up_interruptible(&ring_wait);
}

/* ---- rules: the same globs as `cachescope --containers` ---- */

/*
 * Whether pattern p matches all of s: '*' within a component, '**' across, '?' one byte
 * other than '/'. Dynamic programming over pattern suffixes, O(|p| * |s|) whatever the
 * pattern (backtracking is exponential in the stars); rows are bitmaps on the stack.
 */
static bool cs_glob(const char *p, size_t pl, const char *s, size_t sl)
{
	unsigned long rows[3][BITS_TO_LONGS(CS_PATH_MAX + 1)];
	unsigned long *next2 = rows[0], *next = rows[1], *cur = rows[2], *tmp;
	size_t i, j;

	if (sl > CS_PATH_MAX)
		return false;
	bitmap_zero(next2, sl + 1);
	bitmap_zero(next, sl + 1);
	__set_bit(sl, next);
	for (i = pl; i-- > 0;) {
		bool dbl = p[i] == '*' && i + 1 < pl && p[i + 1] == '*';

		for (j = sl + 1; j-- > 0;) {
			bool more = j < sl, m;

			if (dbl)
				m = test_bit(j, next2) || (more && test_bit(j + 1, cur));
			else if (p[i] == '*')
				m = test_bit(j, next) || (more && s[j] != '/' && test_bit(j + 1, cur));
			else if (p[i] == '?')
				m = more && s[j] != '/' && test_bit(j + 1, next);
			else
				m = more && s[j] == p[i] && test_bit(j + 1, next);
			__assign_bit(j, cur, m);
		}
		tmp = next2;
		next2 = next;
		next = cur;
		cur = tmp;
	}
	return test_bit(0, next);
}

/* path: absolute, as cgroupfs names it. ru: NULL (no session) matches nothing. */
static bool cs_rules_match(const struct cs_rules *ru, const char *path)
{
	size_t len;
	bool yes = false;
	u32 i;

	while (*path == '/')
		path++;
	len = strlen(path);
	while (len && path[len - 1] == '/')
		len--;
	for (i = 0; ru && i < ru->n; i++) {
		const char *r = ru->rule[i];
		bool not = r[0] == '!';

		if (not)
			r++;
		if (cs_glob(r, strlen(r), path, len)) {
			if (not)
				return false;
			yes = true;
		}
	}
	return yes;
}

/* ---- the table (writers under cs_lock, the switch path under RCU) ---- */

static struct cs_cg *cs_find(u64 id)
{
	struct cs_cg *cg;

	hash_for_each_possible_rcu(cs_table, cg, node, id)
		if (cg->id == id)
			return cg;
	return NULL;
}

static struct cs_cg *cs_new(u64 id, u64 owner, u32 rmid)
{
	struct cs_cg *cg;

	if (cs.nr_cgroups >= max_cgroups)
		return NULL;
	if (hlist_empty(&cs_pool_free))
		return NULL;
	cg = hlist_entry(cs_pool_free.first, struct cs_cg, node);
	hlist_del(&cg->node);
	memset(cg, 0, sizeof(*cg));
	cg->id = id;
	cg->owner = owner;
	cg->rmid = rmid;
	INIT_LIST_HEAD(&cg->wait);
	hash_add_rcu(cs_table, &cg->node, id);
	cs.nr_cgroups++;
	return cg;
}

/* Back to the pool once no reader on the switch path can hold it. */
static void cs_pool_put(struct rcu_head *head)
{
	struct cs_cg *cg = container_of(head, struct cs_cg, rcu);
	unsigned long flags;

	raw_spin_lock_irqsave(&cs_lock, flags);
	hlist_add_head(&cg->node, &cs_pool_free);
	raw_spin_unlock_irqrestore(&cs_lock, flags);
}

static void cs_del(struct cs_cg *cg)
{
	if (!list_empty(&cg->wait)) {
		list_del_init(&cg->wait);
		cs.nr_waiting--;
	}
	hash_del_rcu(&cg->node);
	cs.nr_cgroups--;
	call_rcu(&cg->rcu, cs_pool_put);
}

/* An owner's RMID, and its nested cgroups'. */
static void cs_set_rmid(struct cs_cg *owner, u32 rmid)
{
	struct cs_cg *cg;
	int bkt;

	WRITE_ONCE(owner->rmid, rmid);
	if (!owner->nested)
		return;
	hash_for_each(cs_table, bkt, cg, node)
		if (cg->owner == owner->id && cg != owner)
			WRITE_ONCE(cg->rmid, rmid);
}

static void cs_record(u64 now, u64 cgid, u32 rmid, u8 kind)
{
	struct cachescope_record r = {
		.time_ns = now, .cgroup_id = cgid, .rmid = rmid, .kind = kind,
		.flags = CS_F_OCC_NONE | CS_F_MBM_NONE,
	};

	cs_push(&r);
}

/* The cgroup runs untagged, and why (enum cachescope_no_rmid). */
static void cs_record_no_rmid(u64 now, u64 cgid, u32 why)
{
	struct cachescope_record r = {
		.time_ns = now, .cgroup_id = cgid, .occupancy = why, .kind = CS_REC_NO_RMID,
		.flags = CS_F_OCC_NONE | CS_F_MBM_NONE,
	};

	cs_push(&r);
}

/* ATTACH in every domain, with the counters the RMID was left at as the baseline. */
static void cs_attach_records(u64 now, u64 cgid, u32 rmid)
{
	u32 d;

	for (d = 0; d < cs.nr_domains; d++) {
		struct cs_domain *dom = &cs.domains[d];
		struct cachescope_record r = {
			.time_ns = now, .cgroup_id = cgid, .rmid = rmid,
			.domain = dom->id, .kind = CS_REC_ATTACH, .flags = CS_F_OCC_NONE,
		};

		if (test_bit(rmid, dom->known)) {
			r.mbm_total = READ_ONCE(dom->last_total[rmid]);
			r.mbm_local = READ_ONCE(dom->last_local[rmid]);
		} else {
			r.flags |= CS_F_MBM_NONE;
		}
		cs_push(&r);
	}
}

/* Under cs_lock: an owner gets the longest-rested free RMID, or waits (and says so). */
static void cs_assign(struct cs_cg *owner, u64 now)
{
	struct cs_rmid *r;
	u32 rmid;

	if (list_empty(&cs.free)) {
		if (list_empty(&owner->wait) && !owner->manual) {
			list_add_tail(&owner->wait, &cs.waiting);
			cs.nr_waiting++;
		}
		cs_record_no_rmid(now, owner->id,
				  cs.in_limbo ? CS_NO_RMID_LIMBO : CS_NO_RMID_EXHAUSTED);
		return;
	}
	r = list_first_entry(&cs.free, struct cs_rmid, free);
	list_del_init(&r->free);
	rmid = r - cs.rmids;
	r->state = CS_INUSE;
	r->cgid = owner->id;
	cs.in_use++;
	if (!list_empty(&owner->wait)) {
		list_del_init(&owner->wait);
		cs.nr_waiting--;
	}
	cs_attach_records(now, owner->id, rmid);
	cs_set_rmid(owner, rmid);
}

/* Under cs_lock: the RMID's last counters are read by each domain's next tick, then limbo. */
static void cs_release(struct cs_cg *owner)
{
	u32 rmid = owner->rmid;

	if (!rmid)
		return;
	cs_set_rmid(owner, 0);
	cs.rmids[rmid].state = CS_CLOSING;
	cs.rmids[rmid].done = 0;
	cs.in_use--;
	cs.in_limbo++;
}

/*
 * Under cs_lock: watch cgrp (matched, or attached by user space), and the cgroups already
 * nested in it, which share its RMID.
 */
static struct cs_cg *cs_watch(struct cgroup *cgrp, u64 now)
{
	struct cgroup_subsys_state *pos;
	struct cs_cg *owner;
	u64 id = cgroup_id(cgrp);

	owner = cs_new(id, id, 0);
	if (!owner)
		return NULL;
	rcu_read_lock();
	css_for_each_descendant_pre(pos, &cgrp->self) {
		u64 cid = cgroup_id(pos->cgroup);

		if (cid == id || cs_find(cid))
			continue;
		if (cs_new(cid, id, 0))
			owner->nested++;
	}
	rcu_read_unlock();
	cs_assign(owner, now);
	return owner;
}

/* ---- tagging ---- */

static void cs_pqr_write(struct cs_cpu *c, u32 rmid)
{
	if (!emulate)
		wrmsr(CS_MSR_PQR_ASSOC, rmid, c->closid);
	c->rmid = rmid;
	c->writes++;
}

static u32 cs_task_rmid(struct task_struct *t)
{
	struct cs_cg *cg;
	u32 rmid = 0;

	rcu_read_lock();
	cg = cs_find(cgroup_id(task_dfl_cgroup(t)));
	if (cg)
		rmid = READ_ONCE(cg->rmid);
	rcu_read_unlock();
	return rmid;
}

/* Interrupts off (the scheduler, a tick, an IPI): this CPU now runs t. */
static void cs_retag(struct cs_cpu *c, struct task_struct *t)
{
	u32 rmid = cs_task_rmid(t);

	if (emulate) {
		u64 now = ktime_get_ns();

		raw_spin_lock(&c->lock);
		if (c->rmid)
			c->emu_ns[c->rmid] += now - c->since;
		c->since = now;
		if (rmid != c->rmid)
			cs_pqr_write(c, rmid);
		raw_spin_unlock(&c->lock);
	} else if (rmid != c->rmid) {
		cs_pqr_write(c, rmid);
	}
	if (rmid)
		set_bit(rmid, c->ran);
}

static void cs_probe_switch(void *data, bool preempt, struct task_struct *prev,
			    struct task_struct *next, unsigned int prev_state)
{
	struct cs_cpu *c = this_cpu_ptr(&cs_cpu);

	c->switches++;
	cs_retag(c, next);
}

/*
 * Fair-class accounting runs at every scheduler tick: where a running task moved, re-tag.
 * The probe's prototype is the tracepoint's (6.8 dropped vruntime): a kernel built with kCFI
 * traps on any other.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 8, 0)
static void cs_probe_runtime(void *data, struct task_struct *t, u64 runtime)
#else
static void cs_probe_runtime(void *data, struct task_struct *t, u64 runtime, u64 vruntime)
#endif
{
	struct cs_cpu *c = this_cpu_ptr(&cs_cpu);

	if (unlikely(READ_ONCE(c->recheck)) && t == current) {
		WRITE_ONCE(c->recheck, false);
		cs_retag(c, t);
	}
}

static void cs_probe_attach(void *data, struct cgroup *dst, const char *path,
			    struct task_struct *t, bool threadgroup)
{
	if (dst->root != &cgrp_dfl_root)
		return;
	WRITE_ONCE(per_cpu(cs_cpu, task_cpu(t)).recheck, true);
}

static void cs_probe_mkdir(void *data, struct cgroup *cgrp, const char *path)
{
	struct cgroup *parent = cgroup_parent(cgrp);
	u64 now = ktime_get_ns();
	struct cs_cg *p;
	unsigned long flags;
	bool match;

	if (cgrp->root != &cgrp_dfl_root || !parent)
		return;
	/* The rules are matched outside cs_lock: the glob costs O(rule x path). */
	rcu_read_lock();
	match = !cs_find(cgroup_id(parent)) && cs_rules_match(rcu_dereference(cs_rules), path);
	rcu_read_unlock();
	raw_spin_lock_irqsave(&cs_lock, flags);
	p = cs_find(cgroup_id(parent));
	if (p) {
		struct cs_cg *owner = p->owner == p->id ? p : cs_find(p->owner);

		if (owner && cs_new(cgroup_id(cgrp), owner->id, owner->rmid))
			owner->nested++;
	} else if (match) {
		if (!cs_watch(cgrp, now))
			cs_record_no_rmid(now, cgroup_id(cgrp), CS_NO_RMID_TABLE_FULL);
	}
	raw_spin_unlock_irqrestore(&cs_lock, flags);
}

static void cs_probe_rmdir(void *data, struct cgroup *cgrp, const char *path)
{
	struct cs_cg *cg, *owner;
	unsigned long flags;

	if (cgrp->root != &cgrp_dfl_root)
		return;
	raw_spin_lock_irqsave(&cs_lock, flags);
	cg = cs_find(cgroup_id(cgrp));
	if (cg) {
		if (cg->owner == cg->id) {
			cs_release(cg);
		} else {
			owner = cs_find(cg->owner);
			if (owner)
				owner->nested--;
		}
		cs_del(cg);
	}
	raw_spin_unlock_irqrestore(&cs_lock, flags);
}

/* ---- counters ---- */

static u64 cs_ctr(u32 rmid, u32 evt, u8 err, u8 unavail, u8 *flags)
{
	u64 v;

	u32 lo, hi;

	wrmsr(CS_MSR_QM_EVTSEL, evt, rmid);
	/* rdmsr: the one spelling every kernel has (rdmsrl became rdmsrq in 6.16). */
	rdmsr(CS_MSR_QM_CTR, lo, hi);
	v = (u64)hi << 32 | lo;
	if (v & CS_CTR_ERROR)
		*flags |= err;
	if (v & CS_CTR_UNAVAIL)
		*flags |= unavail;
	return v & ~(CS_CTR_ERROR | CS_CTR_UNAVAIL);
}

/* Under d->lock, on a CPU of d. mbm: read the MBM counters too. */
static void cs_read(struct cs_domain *d, u32 rmid, bool mbm, struct cachescope_record *r)
{
	r->rmid = rmid;
	r->domain = d->id;
	r->flags = mbm ? 0 : CS_F_MBM_NONE;
	if (emulate) {
		u64 b = d->emu_bytes[rmid];

		r->occupancy = div64_u64(d->emu_occ[rmid], cs.upscale);
		r->mbm_total = div64_u64(b, cs.upscale) & cs.ctr_mask;
		r->mbm_local = div64_u64(div64_u64(b, 100) * emu_local_pct +
					 div64_u64((b % 100) * emu_local_pct, 100),
					 cs.upscale) & cs.ctr_mask;
	} else {
		r->occupancy = cs_ctr(rmid, CS_EVT_OCCUPANCY, CS_F_OCC_ERROR, CS_F_OCC_UNAVAIL, &r->flags);
		if (mbm && cs.has_total)
			r->mbm_total = cs_ctr(rmid, CS_EVT_MBM_TOTAL, CS_F_TOTAL_ERROR,
					      CS_F_TOTAL_UNAVAIL, &r->flags);
		else if (mbm)
			r->flags |= CS_F_TOTAL_UNAVAIL;
		if (mbm && cs.has_local)
			r->mbm_local = cs_ctr(rmid, CS_EVT_MBM_LOCAL, CS_F_LOCAL_ERROR,
					      CS_F_LOCAL_UNAVAIL, &r->flags);
		else if (mbm)
			r->flags |= CS_F_LOCAL_UNAVAIL;
	}
	if (mbm && !(r->flags & (CS_F_TOTAL_ERROR | CS_F_TOTAL_UNAVAIL |
				 CS_F_LOCAL_ERROR | CS_F_LOCAL_UNAVAIL))) {
		WRITE_ONCE(d->last_total[rmid], r->mbm_total);
		WRITE_ONCE(d->last_local[rmid], r->mbm_local);
		set_bit(rmid, d->known);
	}
}

/* Emulation, under d->lock: bytes moved by rmid fill the L3, evicting others at random. */
static void cs_emu_fill(struct cs_domain *d, u32 rmid, u64 bytes)
{
	u64 l3 = cs.l3_bytes, need, left;
	u32 r, start;

	bytes = min(bytes, l3);
	if (d->emu_sum + bytes > l3) {
		need = d->emu_sum + bytes - l3;
		left = need;
		/* Each line is evicted with equal chance: on average in proportion to what each
		 * RMID holds; the rounding remainder goes to RMIDs from a random start. */
		for (r = 0; r < cs.num_rmids && d->emu_sum; r++) {
			u64 take = div64_u64(need * (d->emu_occ[r] >> 10), max(d->emu_sum >> 10, 1ULL));

			take = min3(take, d->emu_occ[r], left);
			d->emu_occ[r] -= take;
			left -= take;
		}
		start = get_random_u32() % cs.num_rmids;
		for (r = 0; r < cs.num_rmids && left; r++) {
			u32 v = (start + r) % cs.num_rmids;
			u64 take = min(d->emu_occ[v], left);

			d->emu_occ[v] -= take;
			left -= take;
		}
		d->emu_sum -= need - left;
	}
	d->emu_occ[rmid] += bytes;
	d->emu_sum += bytes;
}

/* Emulation, under d->lock: collect what each CPU of d ran, feed it to the model. */
static void cs_emu_collect(struct cs_domain *d, u64 now)
{
	int cpu;
	u32 r;

	for_each_cpu(cpu, &d->cpus) {
		struct cs_cpu *c = per_cpu_ptr(&cs_cpu, cpu);

		raw_spin_lock(&c->lock);
		if (c->rmid) {
			c->emu_ns[c->rmid] += now - c->since;
			c->since = now;
		}
		for (r = 1; r < cs.num_rmids; r++) {
			if (c->emu_ns[r]) {
				d->emu_bytes[r] += c->emu_ns[r];
				c->emu_ns[r] = 0;
			}
		}
		raw_spin_unlock(&c->lock);
	}
	for (r = 1; r < cs.num_rmids; r++) {
		if (d->emu_bytes[r] != d->emu_fed[r]) {
			cs_emu_fill(d, r, d->emu_bytes[r] - d->emu_fed[r]);
			d->emu_fed[r] = d->emu_bytes[r];
		}
	}
}

/* Under cs_lock and d->lock: final counters of closing RMIDs, limbo checks, hand-outs. */
/* The domains with a CPU online: an RMID is done when each of them has read it. */
static u64 cs_live_domains(void)
{
	u64 all = 0;
	u32 d;

	for (d = 0; d < cs.nr_domains; d++)
		if (READ_ONCE(cs.domains[d].cpu) >= 0)
			all |= BIT_ULL(d);
	return all;
}

static void cs_tick_states(struct cs_domain *d, u32 di, u64 now)
{
	u64 all = cs_live_domains();
	bool limbo_turn = d->ticks % CS_LIMBO_EVERY == 0;
	struct cachescope_record rec;
	u32 r;

	for (r = 1; r < cs.num_rmids; r++) {
		struct cs_rmid *s = &cs.rmids[r];

		if (s->state == CS_CLOSING && !(s->done & BIT_ULL(di))) {
			rec = (struct cachescope_record){ .time_ns = now, .cgroup_id = s->cgid,
							  .kind = CS_REC_DETACH };
			cs_read(d, r, true, &rec);
			cs_push(&rec);
			s->done |= BIT_ULL(di);
			if ((s->done & all) == all) {
				s->state = CS_LIMBO;
				s->done = 0;
			}
		} else if (s->state == CS_LIMBO && limbo_turn && !(s->done & BIT_ULL(di))) {
			rec = (struct cachescope_record){ 0 };
			cs_read(d, r, true, &rec);
			if (!(rec.flags & (CS_F_OCC_ERROR | CS_F_OCC_UNAVAIL)) &&
			    rec.occupancy * cs.upscale <= cs.limbo)
				s->done |= BIT_ULL(di);
			if ((s->done & all) == all) {
				s->state = CS_FREE;
				s->cgid = 0;
				list_add_tail(&s->free, &cs.free);
				cs.in_limbo--;
				cs_record(now, 0, r, CS_REC_FREED);
				if (!list_empty(&cs.waiting))
					cs_assign(list_first_entry(&cs.waiting, struct cs_cg, wait), now);
			}
		} else if (s->state == CS_FREE && !test_bit(r, d->known)) {
			/* Real counters start anywhere: read the baseline of a never-used RMID. */
			rec = (struct cachescope_record){ 0 };
			cs_read(d, r, true, &rec);
		}
	}
}

static enum hrtimer_restart cs_tick(struct hrtimer *t)
{
	struct cs_domain *d = container_of(t, struct cs_domain, timer);
	u32 di = d - cs.domains, r, words = BITS_TO_LONGS(cs.num_rmids), n;
	u64 now = ktime_get_ns(), spent;
	struct cachescope_record rec;
	int cpu, i;

	hrtimer_forward_now(t, ns_to_ktime(cs.interval_ns));
	if (!cpumask_test_cpu(smp_processor_id(), &d->cpus) && !emulate) {
		/* Our CPU went offline and the timer moved: reading here would read another L3. */
		cs.misplaced++;
		return HRTIMER_RESTART;
	}
	raw_spin_lock(&d->lock);
	d->ticks++;
	bitmap_zero(d->active, cs.num_rmids);
	for_each_cpu(cpu, &d->cpus) {
		struct cs_cpu *c = per_cpu_ptr(&cs_cpu, cpu);

		for (i = 0; i < words; i++)
			d->active[i] |= xchg(&c->ran[i], 0);
		r = READ_ONCE(c->rmid);
		if (r)
			__set_bit(r, d->active);
	}
	if (emulate)
		cs_emu_collect(d, now);

	raw_spin_lock(&cs_lock);
	cs_tick_states(d, di, now);
	raw_spin_unlock(&cs_lock);

	/* Idle RMIDs in use: occupancy drains as others evict, read a few per tick. */
	for (n = 0, i = 1; n < rr_per_tick && i < cs.num_rmids; i++) {	/* each at most once */
		d->rr = d->rr + 1 >= cs.num_rmids ? 1 : d->rr + 1;
		if (READ_ONCE(cs.rmids[d->rr].state) == CS_INUSE && !test_bit(d->rr, d->active)) {
			rec = (struct cachescope_record){ .time_ns = now, .kind = CS_REC_SAMPLE,
							  .cgroup_id = READ_ONCE(cs.rmids[d->rr].cgid) };
			cs_read(d, d->rr, true, &rec);
			cs_push(&rec);
			n++;
		}
	}
	for_each_set_bit(r, d->active, cs.num_rmids) {
		if (READ_ONCE(cs.rmids[r].state) != CS_INUSE)
			continue;
		rec = (struct cachescope_record){ .time_ns = now, .kind = CS_REC_SAMPLE,
						  .cgroup_id = READ_ONCE(cs.rmids[r].cgid) };
		cs_read(d, r, true, &rec);
		cs_push(&rec);
	}
	raw_spin_unlock(&d->lock);

	/* The local CPU's task may have moved cgroup without a tick of its own yet. */
	if (READ_ONCE(this_cpu_ptr(&cs_cpu)->recheck)) {
		WRITE_ONCE(this_cpu_ptr(&cs_cpu)->recheck, false);
		cs_retag(this_cpu_ptr(&cs_cpu), current);
	}
	if (cs_ring_count() >= ring_records / 4 && wq_has_sleeper(&ring_wait))
		irq_work_queue(&ring_wake);
	spent = ktime_get_ns() - now;
	WRITE_ONCE(cs.tick_ns, cs.tick_ns + spent);
	if (spent > cs.tick_ns_max)
		WRITE_ONCE(cs.tick_ns_max, spent);
	return HRTIMER_RESTART;
}

/* ---- probes and timers for a session ---- */

struct cs_tp {
	const char *name;
	void *probe;
	struct tracepoint *tp;
};

static struct cs_tp cs_tps[] = {
	{ "cgroup_mkdir", cs_probe_mkdir },
	{ "cgroup_rmdir", cs_probe_rmdir },
	{ "cgroup_attach_task", cs_probe_attach },
	{ "sched_switch", cs_probe_switch },
	{ "sched_stat_runtime", cs_probe_runtime },
};

static void cs_find_tp(struct tracepoint *tp, void *priv)
{
	size_t i;

	for (i = 0; i < ARRAY_SIZE(cs_tps); i++)
		if (!strcmp(tp->name, cs_tps[i].name))
			cs_tps[i].tp = tp;
}

static void cs_cpu_start(void *unused)
{
	struct cs_cpu *c = this_cpu_ptr(&cs_cpu);

	if (!emulate) {
		rdmsr(CS_MSR_PQR_ASSOC, c->orig_lo, c->orig_hi);
		c->closid = c->orig_hi;
	}
	c->rmid = emulate ? 0 : c->orig_lo & 0x3ff;
	c->since = ktime_get_ns();
	c->recheck = true;
}

static void cs_cpu_stop(void *unused)
{
	struct cs_cpu *c = this_cpu_ptr(&cs_cpu);

	if (!emulate)
		wrmsr(CS_MSR_PQR_ASSOC, c->orig_lo, c->orig_hi);
	c->rmid = 0;
}

/* Re-tag what each CPU runs now (after rules adopted running tasks' cgroups). */
static void cs_cpu_retag(void *unused)
{
	cs_retag(this_cpu_ptr(&cs_cpu), current);
}

static void cs_timer_start(void *data)
{
	struct cs_domain *d = data;

	hrtimer_start(&d->timer, ns_to_ktime(cs.interval_ns), HRTIMER_MODE_REL_PINNED_HARD);
}

static void cs_stop_probes(size_t n)
{
	while (n-- > 0)
		tracepoint_probe_unregister(cs_tps[n].tp, cs_tps[n].probe, NULL);
	tracepoint_synchronize_unregister();
}

static int cs_start(void)
{
	size_t i;
	u32 d;
	int ret;

	/* CPUs neither come nor go meanwhile: the hotplug callbacks see running as it is. */
	cpus_read_lock();
	on_each_cpu(cs_cpu_start, NULL, 1);
	for (i = 0; i < ARRAY_SIZE(cs_tps); i++) {
		ret = tracepoint_probe_register(cs_tps[i].tp, cs_tps[i].probe, NULL);
		if (ret) {
			pr_err("cannot probe %s: %d\n", cs_tps[i].name, ret);
			cs_stop_probes(i);
			on_each_cpu(cs_cpu_stop, NULL, 1);
			cpus_read_unlock();
			return ret;
		}
	}
	for (d = 0; d < cs.nr_domains; d++)
		if (cs.domains[d].cpu >= 0)
			smp_call_function_single(cs.domains[d].cpu, cs_timer_start, &cs.domains[d], 1);
	cs.running = true;
	cpus_read_unlock();
	return 0;
}

/* Under cs_session: ru replaces the rules (NULL: none); the old ones go after a grace period. */
static void cs_put_rules(struct cs_rules *ru)
{
	struct cs_rules *old = rcu_replace_pointer(cs_rules, ru, lockdep_is_held(&cs_session));

	if (old)
		kfree_rcu(old, rcu);
}

/* Everything back: no probe, no timer, PQR_ASSOC as found, every RMID to limbo. */
static void cs_stop(void)
{
	struct hlist_node *tmp;
	struct cs_cg *cg;
	unsigned long flags;
	u32 d;
	int bkt;

	if (!cs.running)
		return;
	cs_stop_probes(ARRAY_SIZE(cs_tps));
	cpus_read_lock();
	for (d = 0; d < cs.nr_domains; d++)
		hrtimer_cancel(&cs.domains[d].timer);
	on_each_cpu(cs_cpu_stop, NULL, 1);
	cs.running = false;
	cpus_read_unlock();
	raw_spin_lock_irqsave(&cs_lock, flags);
	hash_for_each_safe(cs_table, bkt, tmp, cg, node) {
		if (cg->owner == cg->id)
			cs_release(cg);
		cs_del(cg);
	}
	/* Closing RMIDs had their last read, or nobody is left to want it. */
	for (d = 1; d < cs.num_rmids; d++)
		if (cs.rmids[d].state == CS_CLOSING) {
			cs.rmids[d].state = CS_LIMBO;
			cs.rmids[d].done = 0;
		}
	raw_spin_unlock_irqrestore(&cs_lock, flags);
	cs_put_rules(NULL);
}

/* ---- CPU hotplug ---- */

static enum cpuhp_state cs_hp_state;
static u32 cs_domain_id(int cpu);

/* Under d->lock: a domain that lost its last CPU says so for every RMID in use there. */
static void cs_domain_gone(struct cs_domain *d, u64 now)
{
	struct cachescope_record rec;
	u32 r;

	for (r = 1; r < cs.num_rmids; r++) {
		if (READ_ONCE(cs.rmids[r].state) != CS_INUSE)
			continue;
		rec = (struct cachescope_record){
			.time_ns = now, .cgroup_id = READ_ONCE(cs.rmids[r].cgid), .rmid = r,
			.domain = d->id, .kind = CS_REC_SAMPLE,
			.flags = CS_F_OCC_UNAVAIL | CS_F_TOTAL_UNAVAIL | CS_F_LOCAL_UNAVAIL,
		};
		cs_push(&rec);
	}
}

/*
 * On the CPU coming up, before the scheduler activates it (CPUHP_AP_ONLINE_DYN): it joins
 * its domain, a session's PQR_ASSOC is set before ordinary tasks run here, and a domain that
 * had no CPU left gets its timer back.
 */
static int cs_cpu_online(unsigned int cpu)
{
	struct cs_cpu *c = per_cpu_ptr(&cs_cpu, cpu);
	struct cs_domain *d = NULL;
	unsigned long flags;
	bool timer = false;
	u32 i, id = cs_domain_id(cpu);

	for (i = 0; i < cs.nr_domains; i++)
		if (cs.domains[i].id == id)
			d = &cs.domains[i];
	c->domain = d ? d - cs.domains : -1;
	if (d) {
		raw_spin_lock_irqsave(&d->lock, flags);
		cpumask_set_cpu(cpu, &d->cpus);
		if (d->cpu < 0) {
			WRITE_ONCE(d->cpu, cpu);
			timer = true;
		}
		raw_spin_unlock_irqrestore(&d->lock, flags);
	}
	if (!cs.running)
		return 0;
	local_irq_save(flags);
	cs_cpu_start(NULL);
	/* c->rmid holds what PQR_ASSOC holds now: force the write for what runs here. */
	cs_retag(c, current);
	local_irq_restore(flags);
	if (d && timer)
		cs_timer_start(d);
	return 0;
}

/* On the CPU going down: PQR_ASSOC as found, and its domain's timer moves to a CPU left. */
static int cs_cpu_offline(unsigned int cpu)
{
	struct cs_cpu *c = per_cpu_ptr(&cs_cpu, cpu);
	struct cs_domain *d;
	unsigned long flags;
	unsigned int next;

	if (cs.running) {
		local_irq_save(flags);
		cs_cpu_stop(NULL);
		local_irq_restore(flags);
	}
	if (c->domain < 0)
		return 0;
	d = &cs.domains[c->domain];
	/* The timer first: a tick between the two would find itself on a CPU not the domain's. */
	if (d->cpu == (int)cpu && cs.running)
		hrtimer_cancel(&d->timer);
	raw_spin_lock_irqsave(&d->lock, flags);
	cpumask_clear_cpu(cpu, &d->cpus);
	raw_spin_unlock_irqrestore(&d->lock, flags);
	if (d->cpu != (int)cpu)
		return 0;
	next = cpumask_any_but(&d->cpus, cpu);
	WRITE_ONCE(d->cpu, next < nr_cpu_ids ? (int)next : -1);
	if (!cs.running)
		return 0;
	if (d->cpu >= 0) {
		smp_call_function_single(d->cpu, cs_timer_start, d, 1);
	} else {
		raw_spin_lock_irqsave(&d->lock, flags);
		cs_domain_gone(d, ktime_get_ns());
		raw_spin_unlock_irqrestore(&d->lock, flags);
	}
	return 0;
}

/* ---- the device ---- */

static int cs_open(struct inode *inode, struct file *f)
{
	int ret = 0;

	mutex_lock(&cs_session);
	if (cs.open) {
		ret = -EBUSY;
		goto out;
	}
	ret = cs_start();
	if (!ret)
		cs.open = true;
out:
	mutex_unlock(&cs_session);
	return ret ? ret : nonseekable_open(inode, f);
}

static int cs_release_file(struct inode *inode, struct file *f)
{
	mutex_lock(&cs_session);
	cs_stop();
	cs.open = false;
	mutex_unlock(&cs_session);
	return 0;
}

static ssize_t cs_read_file(struct file *f, char __user *buf, size_t len, loff_t *off)
{
	struct cachescope_record *bounce;
	size_t done = 0, want = len / sizeof(*bounce);
	unsigned long flags;
	ssize_t ret = 0;
	u32 n, i;

	if (!want)
		return -EINVAL;
	if (!(f->f_flags & O_NONBLOCK)) {
		ret = wait_event_interruptible(ring_wait, cs_ring_count() > 0);
		if (ret)
			return ret;
	}
	bounce = kmalloc_array(CS_BOUNCE, sizeof(*bounce), GFP_KERNEL);
	if (!bounce)
		return -ENOMEM;
	while (done < want) {
		raw_spin_lock_irqsave(&ring_lock, flags);
		n = min_t(u32, ring_head - ring_tail, min_t(size_t, want - done, CS_BOUNCE));
		for (i = 0; i < n; i++)
			bounce[i] = ring[(ring_tail + i) & (ring_records - 1)];
		ring_tail += n;
		raw_spin_unlock_irqrestore(&ring_lock, flags);
		if (!n)
			break;
		/* Records already taken from the ring are lost if this fails: say so. */
		if (copy_to_user(buf + done * sizeof(*bounce), bounce, n * sizeof(*bounce))) {
			ret = -EFAULT;
			break;
		}
		done += n;
	}
	kfree(bounce);
	if (done)
		return done * sizeof(*bounce);
	return ret ? ret : -EAGAIN;
}

static __poll_t cs_poll(struct file *f, poll_table *wait)
{
	poll_wait(f, &ring_wait, wait);
	return cs_ring_count() ? EPOLLIN | EPOLLRDNORM : 0;
}

static void cs_fill_info(struct cachescope_info *i)
{
	u32 d;

	memset(i, 0, sizeof(*i));
	i->abi_version = CACHESCOPE_ABI_VERSION;
	i->record_size = sizeof(struct cachescope_record);
	i->emulate = emulate;
	i->num_rmids = cs.num_rmids;
	i->nr_domains = cs.nr_domains;
	i->ctr_width = cs.width;
	i->upscale = cs.upscale;
	i->interval_ns = cs.interval_ns;
	i->l3_bytes = cs.l3_bytes;
	i->limbo_bytes = cs.limbo;
	for (d = 0; d < cs.nr_domains; d++)
		i->domain_ids[d] = cs.domains[d].id;
	i->ring_records = ring_records;
	i->local_pct = emu_local_pct;
	i->has_total = cs.has_total;
	i->has_local = cs.has_local;
}

static void cs_fill_stats(struct cachescope_stats *s)
{
	unsigned long flags;
	int cpu;

	memset(s, 0, sizeof(*s));
	raw_spin_lock_irqsave(&cs_lock, flags);
	s->rmids_in_use = cs.in_use;
	s->rmids_limbo = cs.in_limbo;
	s->rmids_free = cs.num_rmids - 1 - cs.in_use - cs.in_limbo;
	s->cgroups = cs.nr_cgroups;
	s->waiting = cs.nr_waiting;
	raw_spin_unlock_irqrestore(&cs_lock, flags);
	raw_spin_lock_irqsave(&ring_lock, flags);
	s->overruns = ring_overruns;
	raw_spin_unlock_irqrestore(&ring_lock, flags);
	for_each_possible_cpu(cpu) {
		s->switches += READ_ONCE(per_cpu(cs_cpu, cpu).switches);
		s->pqr_writes += READ_ONCE(per_cpu(cs_cpu, cpu).writes);
	}
	for (cpu = 0; cpu < cs.nr_domains; cpu++)
		s->ticks += READ_ONCE(cs.domains[cpu].ticks);
	s->tick_ns = READ_ONCE(cs.tick_ns);
	s->tick_ns_max = READ_ONCE(cs.tick_ns_max);
	s->misplaced = READ_ONCE(cs.misplaced);
}

/* Rules replace the previous ones; existing cgroups that match are adopted. */
static long cs_set_rules(struct cachescope_rules *ru, char *path)
{
	struct cgroup_subsys_state *pos;
	struct cs_rules *rules;
	unsigned long flags;
	size_t total = 0;
	u32 i;
	long adopted = 0;

	if (ru->count > CACHESCOPE_MAX_RULES)
		return -EINVAL;
	for (i = 0; i < ru->count; i++) {
		size_t n = strnlen(ru->rule[i], CACHESCOPE_RULE_LEN);

		if (n == 0 || n == CACHESCOPE_RULE_LEN)
			return -EINVAL;
		total += n;
	}
	if (total > CS_RULES_BYTES)
		return -E2BIG;
	rules = kzalloc(sizeof(*rules), GFP_KERNEL);
	if (!rules)
		return -ENOMEM;
	BUILD_BUG_ON(sizeof(rules->rule) != sizeof(ru->rule));
	memcpy(rules->rule, ru->rule, sizeof(rules->rule));
	rules->n = ru->count;
	cs_put_rules(rules);
	/*
	 * Paths are made and matched outside cs_lock (kernfs_path's lock sleeps on PREEMPT_RT;
	 * RCU readers may take it there); only adopting a match takes it.
	 */
	rcu_read_lock();
	css_for_each_descendant_pre(pos, &cgrp_dfl_root.cgrp.self) {
		struct cgroup *cg = pos->cgroup;

		if (cg == &cgrp_dfl_root.cgrp || cs_find(cgroup_id(cg)))
			continue;
		if (kernfs_path(cg->kn, path, CS_PATH_MAX + 1) < 0 || !cs_rules_match(rules, path))
			continue;
		raw_spin_lock_irqsave(&cs_lock, flags);
		if (!cs_find(cgroup_id(cg)) && cs_watch(cg, ktime_get_ns()))
			adopted++;
		raw_spin_unlock_irqrestore(&cs_lock, flags);
	}
	rcu_read_unlock();
	on_each_cpu(cs_cpu_retag, NULL, 1);
	return adopted;
}

static long cs_attach_fd(int fd, bool attach)
{
	struct cgroup *cgrp = cgroup_get_from_fd(fd);
	struct cs_cg *cg, *owner;
	unsigned long flags;
	long ret;

	if (IS_ERR(cgrp))
		return PTR_ERR(cgrp);
	raw_spin_lock_irqsave(&cs_lock, flags);
	cg = cs_find(cgroup_id(cgrp));
	owner = cg && cg->owner != cg->id ? cs_find(cg->owner) : cg;
	if (!attach) {
		ret = 0;
		if (owner) {
			owner->manual = true;
			if (!list_empty(&owner->wait)) {
				list_del_init(&owner->wait);
				cs.nr_waiting--;
			}
			cs_release(owner);
		}
	} else {
		if (!owner)
			owner = cs_watch(cgrp, ktime_get_ns());
		else if (!owner->rmid)
			cs_assign(owner, ktime_get_ns());
		if (owner)
			owner->manual = false;
		ret = !owner ? -ENOMEM : owner->rmid ? owner->rmid : -ENOSPC;
	}
	raw_spin_unlock_irqrestore(&cs_lock, flags);
	cgroup_put(cgrp);
	if (ret > 0)
		on_each_cpu(cs_cpu_retag, NULL, 1);
	return ret;
}

static long cs_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	void __user *up = (void __user *)arg;
	long ret;

	mutex_lock(&cs_session);
	switch (cmd) {
	case CS_IOC_INFO: {
		struct cachescope_info i;

		cs_fill_info(&i);
		ret = copy_to_user(up, &i, sizeof(i)) ? -EFAULT : 0;
		break;
	}
	case CS_IOC_STATS: {
		struct cachescope_stats s;

		cs_fill_stats(&s);
		ret = copy_to_user(up, &s, sizeof(s)) ? -EFAULT : 0;
		break;
	}
	case CS_IOC_RULES: {
		struct cachescope_rules *ru = memdup_user(up, sizeof(*ru));
		char *path;

		if (IS_ERR(ru)) {
			ret = PTR_ERR(ru);
			break;
		}
		path = kmalloc(CS_PATH_MAX + 1, GFP_KERNEL);
		ret = path ? cs_set_rules(ru, path) : -ENOMEM;
		kfree(path);
		kfree(ru);
		break;
	}
	case CS_IOC_ATTACH:
	case CS_IOC_DETACH: {
		s32 fd;

		if (get_user(fd, (s32 __user *)up)) {
			ret = -EFAULT;
			break;
		}
		ret = cs_attach_fd(fd, cmd == CS_IOC_ATTACH);
		break;
	}
	default:
		ret = -ENOTTY;
	}
	mutex_unlock(&cs_session);
	return ret;
}

static const struct file_operations cs_fops = {
	.owner = THIS_MODULE,
	.open = cs_open,
	.release = cs_release_file,
	.read = cs_read_file,
	.poll = cs_poll,
	.unlocked_ioctl = cs_ioctl,
	/* No llseek: nonseekable_open makes lseek fail with ESPIPE (no_llseek is gone in 6.12). */
};

static struct miscdevice cs_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "cachescope",
	.fops = &cs_fops,
	.mode = 0600,
};

/* ---- load and unload ---- */

static bool cs_resctrl_mounted(void)
{
	struct file_system_type *fs = get_fs_type("resctrl");
	bool mounted;

	if (!fs)
		return false;
	mounted = !hlist_empty(&fs->fs_supers);
	module_put(fs->owner);
	return mounted;
}

static int cs_check_params(void)
{
#define CS_RANGE(p, lo, hi) do { \
		if ((p) < (lo) || (p) > (hi)) { \
			pr_err(#p "=%lu: must be in %lu..%lu\n", (unsigned long)(p), \
			       (unsigned long)(lo), (unsigned long)(hi)); \
			return -EINVAL; \
		} \
	} while (0)
	CS_RANGE(interval_us, 100, 1000000);
	CS_RANGE(rr_per_tick, 0, 64);
	CS_RANGE(ring_records, 1024, 4194304);
	CS_RANGE(max_cgroups, 1, 1048576);
	CS_RANGE(emu_l3_kib, 64, 1048576);
	CS_RANGE(emu_rmids, 2, 1024);
	CS_RANGE(emu_width, 8, 62);
	CS_RANGE(emu_upscale, 1, 16777216);
	CS_RANGE(emu_local_pct, 0, 100);
	CS_RANGE(emu_domains, 0, CACHESCOPE_MAX_DOMAINS);
#undef CS_RANGE
	if (!is_power_of_2(ring_records)) {
		pr_err("ring_records=%u: must be a power of two\n", ring_records);
		return -EINVAL;
	}
	return 0;
}

/* The monitoring capabilities: the CPU's, or the emulated ones. */
static int cs_caps(void)
{
	if (emulate) {
		cs.num_rmids = emu_rmids;
		cs.width = emu_width;
		cs.upscale = emu_upscale;
		cs.l3_bytes = (u64)emu_l3_kib * 1024;
		cs.has_total = cs.has_local = true;
		return 0;
	}
	if (!boot_cpu_has(X86_FEATURE_CQM_LLC) || !boot_cpu_has(X86_FEATURE_CQM_OCCUP_LLC)) {
		pr_err("this CPU does not enumerate L3 cache monitoring (CPUID 0xF); load with emulate=1 to use the model\n");
		return -ENODEV;
	}
	if (cs_resctrl_mounted()) {
		pr_err("resctrl is mounted and owns IA32_PQR_ASSOC; unmount /sys/fs/resctrl first\n");
		return -EBUSY;
	}
	cs.num_rmids = min_t(u32, boot_cpu_data.x86_cache_max_rmid + 1, 4096);
	cs.width = 24 + boot_cpu_data.x86_cache_mbm_width_offset;
	cs.upscale = boot_cpu_data.x86_cache_occ_scale;
	cs.l3_bytes = (u64)boot_cpu_data.x86_cache_size * 1024;
	cs.has_total = boot_cpu_has(X86_FEATURE_CQM_MBM_TOTAL);
	cs.has_local = boot_cpu_has(X86_FEATURE_CQM_MBM_LOCAL);
	if (cs.num_rmids < 2 || !cs.upscale || cs.width > 62) {
		pr_err("implausible monitoring capabilities: %u RMIDs, upscale %llu, width %u\n",
		       cs.num_rmids, cs.upscale, cs.width);
		return -ENODEV;
	}
	return 0;
}

/* The last-level cache's id; the package where none is known. */
static u32 cs_domain_id(int cpu)
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

static void cs_free_domains(void)
{
	u32 d;

	if (!cs.domains)
		return;
	for (d = 0; d < cs.nr_domains; d++) {
		struct cs_domain *dom = &cs.domains[d];

		bitmap_free(dom->active);
		bitmap_free(dom->known);
		kfree(dom->last_total);
		kfree(dom->last_local);
		kfree(dom->emu_bytes);
		kfree(dom->emu_fed);
		kfree(dom->emu_occ);
	}
	kfree(cs.domains);
	cs.domains = NULL;
}

static void cs_free_cpus(void)
{
	int cpu;

	for_each_possible_cpu(cpu) {
		struct cs_cpu *c = per_cpu_ptr(&cs_cpu, cpu);

		kfree(c->emu_ns);
		bitmap_free(c->ran);
		c->emu_ns = NULL;
		c->ran = NULL;
	}
}

static int cs_init_domains(void)
{
	u32 ids[CACHESCOPE_MAX_DOMAINS], n = 0, d, r;
	int cpu;

	cpus_read_lock();
	for_each_online_cpu(cpu) {
		u32 id = cs_domain_id(cpu);

		for (d = 0; d < n && ids[d] != id; d++)
			;
		if (d == n) {
			if (n == CACHESCOPE_MAX_DOMAINS) {
				cpus_read_unlock();
				pr_err("more than %d L3 domains\n", CACHESCOPE_MAX_DOMAINS);
				return -E2BIG;
			}
			ids[n++] = id;
		}
	}
	cs.domains = kcalloc(n, sizeof(*cs.domains), GFP_KERNEL);
	if (!cs.domains) {
		cpus_read_unlock();
		return -ENOMEM;
	}
	cs.nr_domains = n;
	for (d = 0; d < n; d++) {
		struct cs_domain *dom = &cs.domains[d];

		dom->id = ids[d];
		dom->cpu = -1;
		raw_spin_lock_init(&dom->lock);
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 13, 0)
		hrtimer_setup(&dom->timer, cs_tick, CLOCK_MONOTONIC, HRTIMER_MODE_REL_PINNED_HARD);
#else
		hrtimer_init(&dom->timer, CLOCK_MONOTONIC, HRTIMER_MODE_REL_PINNED_HARD);
		dom->timer.function = cs_tick;
#endif
		dom->active = bitmap_zalloc(cs.num_rmids, GFP_KERNEL);
		dom->known = bitmap_zalloc(cs.num_rmids, GFP_KERNEL);
		dom->last_total = kcalloc(cs.num_rmids, sizeof(u64), GFP_KERNEL);
		dom->last_local = kcalloc(cs.num_rmids, sizeof(u64), GFP_KERNEL);
		if (!dom->active || !dom->known || !dom->last_total || !dom->last_local)
			goto nomem;
		if (emulate) {
			dom->emu_bytes = kcalloc(cs.num_rmids, sizeof(u64), GFP_KERNEL);
			dom->emu_fed = kcalloc(cs.num_rmids, sizeof(u64), GFP_KERNEL);
			dom->emu_occ = kcalloc(cs.num_rmids, sizeof(u64), GFP_KERNEL);
			if (!dom->emu_bytes || !dom->emu_fed || !dom->emu_occ)
				goto nomem;
			/* The model starts at zero: every baseline is known. */
			bitmap_fill(dom->known, cs.num_rmids);
		}
	}
	/* CPUs that come online later join their domain then (cs_cpu_online). */
	for_each_possible_cpu(cpu)
		per_cpu(cs_cpu, cpu).domain = -1;
	for_each_online_cpu(cpu) {
		u32 id = cs_domain_id(cpu);

		for (d = 0; ids[d] != id; d++)
			;
		cpumask_set_cpu(cpu, &cs.domains[d].cpus);
		if (cs.domains[d].cpu < 0)
			cs.domains[d].cpu = cpu;
		per_cpu(cs_cpu, cpu).domain = d;
	}
	cpus_read_unlock();
	for_each_possible_cpu(cpu) {
		struct cs_cpu *c = per_cpu_ptr(&cs_cpu, cpu);

		raw_spin_lock_init(&c->lock);
		c->ran = bitmap_zalloc(cs.num_rmids, GFP_KERNEL);
		c->emu_ns = emulate ? kcalloc(cs.num_rmids, sizeof(u64), GFP_KERNEL) : NULL;
		if (!c->ran || (emulate && !c->emu_ns))
			return -ENOMEM;	/* the caller frees */
	}
	cs.rmids = kcalloc(cs.num_rmids, sizeof(*cs.rmids), GFP_KERNEL);
	if (!cs.rmids)
		return -ENOMEM;
	INIT_LIST_HEAD(&cs.free);
	INIT_LIST_HEAD(&cs.waiting);
	/* RMID 0 is everyone else's: never handed out. */
	for (r = 1; r < cs.num_rmids; r++)
		list_add_tail(&cs.rmids[r].free, &cs.free);
	return 0;
nomem:
	cpus_read_unlock();
	return -ENOMEM;
}

/*
 * max_cgroups entries, and as many again (up to 1024) for entries deleted but still waiting
 * out their RCU grace period.
 */
static int cs_pool_init(void)
{
	u32 n = max_cgroups + min_t(u32, max_cgroups, 1024), i;

	cs_pool = kvcalloc(n, sizeof(*cs_pool), GFP_KERNEL);
	if (!cs_pool)
		return -ENOMEM;
	for (i = 0; i < n; i++)
		hlist_add_head(&cs_pool[i].node, &cs_pool_free);
	return 0;
}

static void cs_free_all(void)
{
	irq_work_sync(&ring_wake);
	/* Entries on their way back to the pool (call_rcu) land before it goes. */
	rcu_barrier();
	kvfree(cs_pool);
	cs_pool = NULL;
	INIT_HLIST_HEAD(&cs_pool_free);
	cs_free_cpus();
	cs_free_domains();
	kfree(cs.rmids);
	cs.rmids = NULL;
	vfree(ring);
	ring = NULL;
}

static int __init cs_init(void)
{
	size_t i;
	int ret;

	ret = cs_check_params();
	if (ret)
		return ret;
	init_irq_work(&ring_wake, cs_ring_wake);
	ret = cs_caps();
	if (ret)
		return ret;
	cs.interval_ns = (u64)interval_us * NSEC_PER_USEC;
	cs.ctr_mask = BIT_ULL(cs.width) - 1;
	cs.limbo = limbo_bytes ? limbo_bytes : div64_u64(cs.l3_bytes, cs.num_rmids);
	for_each_kernel_tracepoint(cs_find_tp, NULL);
	for (i = 0; i < ARRAY_SIZE(cs_tps); i++) {
		if (!cs_tps[i].tp) {
			pr_err("tracepoint %s not found\n", cs_tps[i].name);
			return -ENOENT;
		}
	}
	ring = vmalloc(array_size(ring_records, sizeof(*ring)));
	if (!ring)
		return -ENOMEM;
	ret = cs_pool_init();
	if (ret)
		goto fail;
	ret = cs_init_domains();
	if (ret)
		goto fail;
	/* The CPUs online now are in their domains: only later changes call back. */
	ret = cpuhp_setup_state_nocalls(CPUHP_AP_ONLINE_DYN, "cachescope:online",
					cs_cpu_online, cs_cpu_offline);
	if (ret < 0)
		goto fail;
	cs_hp_state = ret;
	ret = misc_register(&cs_misc);
	if (ret)
		goto fail_hp;
	pr_info("%s: %u RMIDs, %u L3 domains of %llu KiB, MBM %u bits x %llu bytes, every %u us\n",
		emulate ? "EMULATED" : "RDT", cs.num_rmids, cs.nr_domains, cs.l3_bytes >> 10,
		cs.width, cs.upscale, interval_us);
	return 0;
fail_hp:
	cpuhp_remove_state_nocalls(cs_hp_state);
fail:
	cs_free_all();
	return ret;
}

static void __exit cs_exit(void)
{
	misc_deregister(&cs_misc);
	cpuhp_remove_state_nocalls(cs_hp_state);
	/* No session is open (the device held a module reference): nothing runs. */
	cs_free_all();
	pr_info("unloaded; IA32_PQR_ASSOC restored on every CPU at the last close\n");
}

module_init(cs_init);
module_exit(cs_exit);
MODULE_LICENSE("GPL");
MODULE_AUTHOR("cachescope developers");
MODULE_DESCRIPTION("RMIDs per cgroup v2 at creation, CMT/MBM sampled every millisecond");
MODULE_VERSION("0.1");
