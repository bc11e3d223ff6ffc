// SPDX-License-Identifier: GPL-2.0
/* cachescope: watched cgroups and their RMIDs: hand-out, release, limbo's bookkeeping. */
#include "cs_internal.h"

/* ---- the table (writers under cs_lock, the switch path under RCU) ---- */

struct cs_cg *cs_find(u64 id)
{
	struct cs_cg *cg;

	hash_for_each_possible_rcu(cs_table, cg, node, id)
		if (cg->id == id)
			return cg;
	return NULL;
}

struct cs_cg *cs_new(u64 id, u64 owner, u32 rmid)
{
	struct cs_cg *cg;

	lockdep_assert_held(&cs_lock);
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

void cs_del(struct cs_cg *cg)
{
	lockdep_assert_held(&cs_lock);
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

void cs_record(u64 now, u64 cgid, u32 rmid, u8 kind)
{
	struct cachescope_record r = {
		.time_ns = now, .cgroup_id = cgid, .rmid = rmid, .kind = kind,
		.flags = CS_F_OCC_NONE | CS_F_MBM_NONE,
	};

	cs_push(&r);
}

/* The cgroup runs untagged, and why (enum cachescope_no_rmid). */
void cs_record_no_rmid(u64 now, u64 cgid, u32 why)
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
void cs_assign(struct cs_cg *owner, u64 now)
{
	struct cs_rmid *r;
	u32 rmid;

	lockdep_assert_held(&cs_lock);
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
void cs_release(struct cs_cg *owner)
{
	u32 rmid = owner->rmid;

	lockdep_assert_held(&cs_lock);
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
struct cs_cg *cs_watch(struct cgroup *cgrp, u64 now)
{
	struct cgroup_subsys_state *pos;
	struct cs_cg *owner;
	u64 id = cgroup_id(cgrp);

	lockdep_assert_held(&cs_lock);
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
