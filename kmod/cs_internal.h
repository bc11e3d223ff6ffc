/* SPDX-License-Identifier: GPL-2.0 */
/*
 * cachescope: what the parts of the module share (one module, several files:
 * cs_main.c loads it, cs_ring.c, cs_table.c, cs_tag.c, cs_sample.c, cs_session.c, cs_dev.c).
 * The module's overview is in cs_main.c.
 */
#ifndef _CS_INTERNAL_H
#define _CS_INTERNAL_H

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
#include <linux/prandom.h>
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
#include <linux/workqueue.h>
#include <asm/apicdef.h>
#include <asm/cpufeature.h>
#include <asm/msr.h>
#include <asm/processor.h>
#include "cachescope_abi.h"

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
#define CS_LIMBO_EVERY		10	/* intervals between limbo walks */
#define CS_BOUNCE		128	/* records copied out per lock hold */

/* Module parameters (cs_main.c). */
extern bool emulate;
extern uint interval_us;
extern uint rr_per_tick;
extern uint ring_records;
extern uint max_cgroups;
extern ulong limbo_bytes;
extern uint emu_l3_kib;
extern uint emu_rmids;
extern uint emu_width;
extern uint emu_upscale;
extern uint emu_local_pct;
extern uint emu_domains;

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
	struct rnd_state emu_rnd;	/* the eviction model's draws, under lock */
	struct delayed_work limbo_work;	/* on the timer's CPU, every CS_LIMBO_EVERY intervals */
};

struct cs {
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
	bool probes;		/* registered (at the first session), under cs_session */
	u64 tick_ns, tick_ns_max, misplaced;
};

/* The watch rules: replaced whole (under cs_session), read under RCU by the mkdir probe. */
struct cs_rules {
	struct rcu_head rcu;
	u32 n;
	char rule[CACHESCOPE_MAX_RULES][CACHESCOPE_RULE_LEN];
};

/* State (cs_main.c, cs_session.c, cs_dev.c). */
extern struct cs_cg *cs_pool;
extern struct hlist_head cs_pool_free;
extern raw_spinlock_t cs_lock;
extern struct cs_rules __rcu *cs_rules;
extern struct mutex cs_session;
extern DECLARE_HASHTABLE(cs_table, 12);
DECLARE_PER_CPU(struct cs_cpu, cs_cpu);
extern raw_spinlock_t ring_lock;
extern struct cachescope_record *ring;
extern u32 ring_head, ring_tail;
extern u64 ring_overruns, ring_lost;
extern wait_queue_head_t ring_wait;
extern struct irq_work ring_wake;
extern struct cs cs;
extern enum cpuhp_state cs_hp_state;
extern struct miscdevice cs_misc;

/* Functions one part calls in another. */
void cs_push(const struct cachescope_record *r);
u32 cs_ring_count(void);
void cs_ring_wake(struct irq_work *w);
bool cs_rules_match(const struct cs_rules *ru, const char *path);
struct cs_cg *cs_find(u64 id);
struct cs_cg *cs_new(u64 id, u64 owner, u32 rmid);
void cs_del(struct cs_cg *cg);
void cs_record(u64 now, u64 cgid, u32 rmid, u8 kind);
void cs_record_no_rmid(u64 now, u64 cgid, u32 why);
void cs_assign(struct cs_cg *owner, u64 now);
void cs_release(struct cs_cg *owner);
struct cs_cg *cs_watch(struct cgroup *cgrp, u64 now);
void cs_retag(struct cs_cpu *c, struct task_struct *t);
void cs_probe_switch(void *data, bool preempt, struct task_struct *prev,
			    struct task_struct *next, unsigned int prev_state);
void cs_probe_attach(void *data, struct cgroup *dst, const char *path,
			    struct task_struct *t, bool threadgroup);
void cs_probe_mkdir(void *data, struct cgroup *cgrp, const char *path);
void cs_probe_rmdir(void *data, struct cgroup *cgrp, const char *path);
enum hrtimer_restart cs_tick(struct hrtimer *t);
void cs_limbo_work(struct work_struct *w);

/* How long the limbo worker waits between its walks. */
static inline unsigned long cs_limbo_delay(void)
{
	return max(nsecs_to_jiffies(cs.interval_ns * CS_LIMBO_EVERY), 1UL);
}
int cs_find_tps(void);
void cs_probes_stop_all(void);
void cs_cpu_retag(void *unused);
int cs_start(void);
void cs_put_rules(struct cs_rules *ru);
void cs_stop(void);
int cs_cpu_online(unsigned int cpu);
int cs_cpu_offline(unsigned int cpu);
u32 cs_domain_id(int cpu);
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 8, 0)
void cs_probe_runtime(void *data, struct task_struct *t, u64 runtime);
#else
void cs_probe_runtime(void *data, struct task_struct *t, u64 runtime, u64 vruntime);
#endif

#endif /* _CS_INTERNAL_H */
