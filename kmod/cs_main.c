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
#include "cs_internal.h"

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
		INIT_DELAYED_WORK(&dom->limbo_work, cs_limbo_work);
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
			/*
			 * Seeded here, in process context: the model draws in the hard-irq timer,
			 * where get_random_u32() may take the crng's local lock, a sleeping lock on
			 * PREEMPT_RT (a 6.1-rt guest said "scheduling while atomic" from cs_tick).
			 */
			prandom_seed_state(&dom->emu_rnd, get_random_u64());
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
	ret = cs_find_tps();
	if (ret)
		return ret;
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
	/* No session is open (the device held a module reference): the probes only return. */
	mutex_lock(&cs_session);
	cs_probes_stop_all();
	mutex_unlock(&cs_session);
	cpuhp_remove_state_nocalls(cs_hp_state);
	cs_free_all();
	pr_info("unloaded; IA32_PQR_ASSOC restored on every CPU at the last close\n");
}

module_init(cs_init);
module_exit(cs_exit);
MODULE_LICENSE("GPL");
MODULE_AUTHOR("cachescope developers");
MODULE_DESCRIPTION("RMIDs per cgroup v2 at creation, CMT/MBM sampled every millisecond");
MODULE_VERSION("0.1");
