// SPDX-License-Identifier: GPL-2.0
/* cachescope: the probes, a session's start and stop, and CPU hotplug. */
#include "cs_internal.h"

/* ---- probes (from the first session until unload) and a session's timers ---- */

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

/* The first n probes off; none of them runs once this returns. */
static void cs_probes_stop(size_t n)
{
	while (n-- > 0)
		tracepoint_probe_unregister(cs_tps[n].tp, cs_tps[n].probe, NULL);
	tracepoint_synchronize_unregister();
}

/* Out-of-tree modules find tracepoints by walking them: at load, so that a kernel without one
 * refuses the module at once. */
int cs_find_tps(void)
{
	size_t i;

	for_each_kernel_tracepoint(cs_find_tp, NULL);
	for (i = 0; i < ARRAY_SIZE(cs_tps); i++) {
		if (!cs_tps[i].tp) {
			pr_err("tracepoint %s not found\n", cs_tps[i].name);
			return -ENOENT;
		}
	}
	return 0;
}

/*
 * Under cs_session, at the first session's start: the probes, until unload. Registering one
 * patches the kernel's text (the tracepoint's static key and static call), so it is done once
 * and not at every open and close; a load that never opens a session patches nothing. A
 * session turns them on and off (cs.running); while none is open each costs one load and a
 * branch. Outside cpus_read_lock(): registering takes it itself (static calls), and a second
 * read acquisition deadlocks against a hotplug writer queued in between (lockdep on the debug
 * kernel said so).
 */
static int cs_probes_start(void)
{
	size_t i;
	int ret;

	lockdep_assert_held(&cs_session);
	if (cs.probes)
		return 0;
	for (i = 0; i < ARRAY_SIZE(cs_tps); i++) {
		ret = tracepoint_probe_register(cs_tps[i].tp, cs_tps[i].probe, NULL);
		if (ret) {
			pr_err("cannot probe %s: %d\n", cs_tps[i].name, ret);
			cs_probes_stop(i);
			return ret;
		}
	}
	cs.probes = true;
	return 0;
}

/* At unload, if a session registered them. */
void cs_probes_stop_all(void)
{
	if (cs.probes)
		cs_probes_stop(ARRAY_SIZE(cs_tps));
	cs.probes = false;
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
void cs_cpu_retag(void *unused)
{
	cs_retag(this_cpu_ptr(&cs_cpu), current);
}

static void cs_timer_start(void *data)
{
	struct cs_domain *d = data;

	hrtimer_start(&d->timer, ns_to_ktime(cs.interval_ns), HRTIMER_MODE_REL_PINNED_HARD);
}

int cs_start(void)
{
	u32 d;
	int ret;

	ret = cs_probes_start();
	if (ret)
		return ret;
	/* CPUs neither come nor go meanwhile: the hotplug callbacks see running as it is. */
	cpus_read_lock();
	on_each_cpu(cs_cpu_start, NULL, 1);
	/* The probes act from here (a switch before it is caught by the CPU's recheck). */
	WRITE_ONCE(cs.running, true);
	for (d = 0; d < cs.nr_domains; d++) {
		struct cs_domain *dom = &cs.domains[d];

		if (dom->cpu < 0)
			continue;
		smp_call_function_single(dom->cpu, cs_timer_start, dom, 1);
		queue_delayed_work_on(dom->cpu, system_wq, &dom->limbo_work, cs_limbo_delay());
	}
	cpus_read_unlock();
	return 0;
}

/* Under cs_session: ru replaces the rules (NULL: none); the old ones go after a grace period. */
void cs_put_rules(struct cs_rules *ru)
{
	struct cs_rules *old = rcu_replace_pointer(cs_rules, ru, lockdep_is_held(&cs_session));

	if (old)
		kfree_rcu(old, rcu);
}

/* Everything back: probes idle, no timer, PQR_ASSOC as found, every RMID to limbo. */
void cs_stop(void)
{
	struct hlist_node *tmp;
	struct cs_cg *cg;
	unsigned long flags;
	u32 d;
	int bkt;

	if (!cs.running)
		return;
	cpus_read_lock();
	for (d = 0; d < cs.nr_domains; d++)
		hrtimer_cancel(&cs.domains[d].timer);
	/*
	 * The probes go idle before each CPU's PQR_ASSOC is put back: a switch probe runs with
	 * interrupts off, so on each CPU it either ran before the IPI below or sees running off.
	 */
	WRITE_ONCE(cs.running, false);
	on_each_cpu(cs_cpu_stop, NULL, 1);
	cpus_read_unlock();
	/* The limbo workers last: they take cs_lock, and requeue only while running. */
	for (d = 0; d < cs.nr_domains; d++)
		cancel_delayed_work_sync(&cs.domains[d].limbo_work);
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
int cs_cpu_online(unsigned int cpu)
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
	if (d && timer) {
		cs_timer_start(d);
		queue_delayed_work_on(cpu, system_wq, &d->limbo_work, cs_limbo_delay());
	}
	return 0;
}

/* On the CPU going down: PQR_ASSOC as found, and its domain's timer moves to a CPU left. */
int cs_cpu_offline(unsigned int cpu)
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
