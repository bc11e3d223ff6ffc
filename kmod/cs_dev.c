// SPDX-License-Identifier: GPL-2.0
/* cachescope: the character device: open, read, poll, ioctl. */
#include "cs_internal.h"

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

struct miscdevice cs_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = "cachescope",
	.fops = &cs_fops,
	.mode = 0600,
};
