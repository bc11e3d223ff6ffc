// SPDX-License-Identifier: GPL-2.0
/* cachescope: tagging: PQR_ASSOC at every switch, and the cgroup probes. */
#include "cs_internal.h"

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
void cs_retag(struct cs_cpu *c, struct task_struct *t)
{
	/*
	 * The switch's time, taken before the lookup: the CPU ran the old RMID until the
	 * probe was entered (on a debug kernel the lookup's RCU and lock checks take tens of
	 * microseconds, which the old task's CPU time does not hold).
	 */
	u64 now = emulate ? ktime_get_ns() : 0;
	u32 rmid = cs_task_rmid(t);

	if (emulate) {
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

void cs_probe_switch(void *data, bool preempt, struct task_struct *prev,
			    struct task_struct *next, unsigned int prev_state)
{
	struct cs_cpu *c = this_cpu_ptr(&cs_cpu);

	/* Registered from the first session until unload: nothing outside one (cs_start, cs_stop). */
	if (unlikely(!READ_ONCE(cs.running)))
		return;
	c->switches++;
	cs_retag(c, next);
}

/*
 * Fair-class accounting runs at every scheduler tick: where a running task moved, re-tag.
 * The probe's prototype is the tracepoint's (6.8 dropped vruntime): a kernel built with kCFI
 * traps on any other.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 8, 0)
void cs_probe_runtime(void *data, struct task_struct *t, u64 runtime)
#else
void cs_probe_runtime(void *data, struct task_struct *t, u64 runtime, u64 vruntime)
#endif
{
	struct cs_cpu *c = this_cpu_ptr(&cs_cpu);

	if (unlikely(!READ_ONCE(cs.running)))
		return;
	if (unlikely(READ_ONCE(c->recheck)) && t == current) {
		WRITE_ONCE(c->recheck, false);
		cs_retag(c, t);
	}
}

void cs_probe_attach(void *data, struct cgroup *dst, const char *path,
			    struct task_struct *t, bool threadgroup)
{
	if (!READ_ONCE(cs.running) || dst->root != &cgrp_dfl_root)
		return;
	WRITE_ONCE(per_cpu(cs_cpu, task_cpu(t)).recheck, true);
}

void cs_probe_mkdir(void *data, struct cgroup *cgrp, const char *path)
{
	struct cgroup *parent = cgroup_parent(cgrp);
	u64 now = ktime_get_ns();
	struct cs_cg *p;
	unsigned long flags;
	bool match, running;

	if (!READ_ONCE(cs.running) || cgrp->root != &cgrp_dfl_root || !parent)
		return;
	/* The rules are matched outside cs_lock: the glob costs O(rule x path). */
	rcu_read_lock();
	match = !cs_find(cgroup_id(parent)) && cs_rules_match(rcu_dereference(cs_rules), path);
	rcu_read_unlock();
	raw_spin_lock_irqsave(&cs_lock, flags);
	/* Again under the lock: cs_stop empties the table under it after running goes off. */
	running = READ_ONCE(cs.running);
	p = running ? cs_find(cgroup_id(parent)) : NULL;
	match = match && running;
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

void cs_probe_rmdir(void *data, struct cgroup *cgrp, const char *path)
{
	struct cs_cg *cg, *owner;
	unsigned long flags;

	if (!READ_ONCE(cs.running) || cgrp->root != &cgrp_dfl_root)
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
