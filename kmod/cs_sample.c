// SPDX-License-Identifier: GPL-2.0
/* cachescope: sampling: the counters, the emulated model, the per-domain timer. */
#include "cs_internal.h"

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

	lockdep_assert_held(&d->lock);
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
		start = prandom_u32_state(&d->emu_rnd) % cs.num_rmids;
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

/* Under cs_lock and d->lock: final counters of closing RMIDs, baselines of unused ones. */
static void cs_tick_states(struct cs_domain *d, u32 di, u64 now)
{
	u64 all = cs_live_domains();
	struct cachescope_record rec;
	u32 r;

	lockdep_assert_held(&cs_lock);
	lockdep_assert_held(&d->lock);
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
		} else if (s->state == CS_FREE && !test_bit(r, d->known)) {
			/* Real counters start anywhere: read the baseline of a never-used RMID. */
			rec = (struct cachescope_record){ 0 };
			cs_read(d, r, true, &rec);
		}
	}
}

/*
 * Limbo, out of the timer: every CS_LIMBO_EVERY intervals a worker on a CPU of the domain
 * reads the occupancy of the RMIDs in limbo there, one at a time with interrupts off (the
 * timer's reads on this CPU cannot come between its EVTSEL write and CTR read), and frees
 * those clean in every domain with a CPU. Its cost grows with the RMIDs in limbo; the timer's
 * does not.
 */
void cs_limbo_work(struct work_struct *w)
{
	struct cs_domain *d = container_of(to_delayed_work(w), struct cs_domain, limbo_work);
	u32 di = d - cs.domains, r;
	unsigned long flags;
	int cpu;

	for (r = 1; READ_ONCE(cs.in_limbo) && r < cs.num_rmids; r++) {
		struct cachescope_record rec = { 0 };
		struct cs_rmid *s = &cs.rmids[r];
		bool here;

		if (READ_ONCE(s->state) != CS_LIMBO || (READ_ONCE(s->done) & BIT_ULL(di)))
			continue;
		local_irq_save(flags);
		/* A worker whose CPU went offline runs elsewhere: read nothing there. */
		here = cpumask_test_cpu(smp_processor_id(), &d->cpus) || emulate;
		if (here) {
			raw_spin_lock(&d->lock);
			cs_read(d, r, true, &rec);
			raw_spin_unlock(&d->lock);
		}
		local_irq_restore(flags);
		if (!here)
			break;
		if ((rec.flags & (CS_F_OCC_ERROR | CS_F_OCC_UNAVAIL)) ||
		    rec.occupancy * cs.upscale > cs.limbo)
			continue;
		raw_spin_lock_irqsave(&cs_lock, flags);
		if (s->state == CS_LIMBO) {
			u64 all = cs_live_domains(), now = ktime_get_ns();

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
		}
		raw_spin_unlock_irqrestore(&cs_lock, flags);
		cond_resched();
	}
	cpu = READ_ONCE(d->cpu);
	if (READ_ONCE(cs.running) && cpu >= 0)
		queue_delayed_work_on(cpu, system_wq, &d->limbo_work, cs_limbo_delay());
}

enum hrtimer_restart cs_tick(struct hrtimer *t)
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
