// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// Per-cgroup attribution of per-CPU counter deltas, aggregated in-kernel per time slot.
//
// At every context switch (sched_switch, where `current` is still the outgoing task) and at
// ticks (so a task that never switches is still split at slot boundaries) the program reads
// this CPU's counters (bpf_perf_event_read_value on PERF_EVENT_ARRAY maps), takes the delta
// since the previous read on this CPU, scales it if the PMU multiplexed, and adds it to
// (slot, cgroup id) in this CPU's record of the slot in `ring`, which user space reads through
// mmap; where that record is full or not read yet, in a per-CPU hash (`acc`), which user
// space empties with batched syscalls. The idle task is charged to cgroup id 0. No event per
// context switch crosses to userspace. What cannot be charged (hash full, counter
// unreadable) is counted in `stats`, never silently dropped.
//
// Every delta belongs to `current` whenever it is read, because every switch is hooked; the
// ticks only decide where slots are split. Two tick modes:
// - followed (the default): a per-CPU bpf_timer runs only while a task of a followed cgroup
//   (one user space put in `followed`, or any cgroup below it) is on the CPU. It is armed when
//   such a task is switched in, or at an hrtimer expiry (the scheduler tick's among them: HZ,
//   busy CPUs only) when one became followed while running, fires at the next slot boundary,
//   and re-arms itself while
//   the CPU still runs followed work. An idle CPU, or one running only other work, does no
//   1 ms work: the cost follows the followed containers, not the host's CPU count.
// - every CPU (the fallback where the kernel refuses timers here): a perf_event program on a
//   per-CPU cpu-clock timer of one slot.
//
// Quiet switches (followed mode): counts only matter apart for followed cgroups and for those
// user space has not judged yet (a container's first milliseconds, before it is found). User
// space puts in `quiet` the cgroups it charged and no container claimed; the idle task is
// quiet too. A switch from a quiet task to a quiet one in the slot of this CPU's last read
// reads no counter: what accrued stays in the counters and is charged, in one lump, to the
// quiet task current at the next read (the next switch that involves anyone else, or the first
// in a later slot). Nothing is lost (per CPU, charges still sum to the CPU's count); only quiet
// cgroups' counts are blurred between them, within a slot. Which cgroup is quiet or followed
// is cached per cgroup id (`verdicts`), so such a switch costs a hash lookup or two, not a
// cgroup walk and five counter reads.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#ifndef BPF_F_TIMER_CPU_PIN
#define BPF_F_TIMER_CPU_PIN (1ULL << 1) /* 6.7 */
#endif
#define CLOCK_MONOTONIC 1
#define EINVAL 22
#define EBUSY 16
/* How far above a task's own cgroup a followed one is looked for. */
#define MAX_UP 16

/* The kernel's types, as far as read here (CO-RE relocates the offsets). */
struct kernfs_node {
	__u64 id;
} __attribute__((preserve_access_index));
struct cgroup_subsys_state {
	struct cgroup_subsys_state *parent;
} __attribute__((preserve_access_index));
struct cgroup {
	struct cgroup_subsys_state self;
	struct kernfs_node *kn;
} __attribute__((preserve_access_index));
struct css_set {
	struct cgroup *dfl_cgrp;
} __attribute__((preserve_access_index));
struct task_struct {
	int pid;
	struct css_set *cgroups;
} __attribute__((preserve_access_index));

// Four PMU events and cpu-clock (crates/bpf/src/columns.rs).
#define NEV 5
// The cgroups a CPU keeps counting rates of (estimate()): a power of two. The one a walk
// shares its CPU with (cachescope's drain, a kworker, the idle task) must not take its rate.
#define RATES 4

struct slot_key {
	__u64 slot;
	__u64 cgid;
};

struct slot_val {
	__u64 v[NEV];
	__u64 switches;
	__u64 multiplexed;
};

struct cpu_state {
	__u64 last[NEV];
	__u64 enabled[NEV];
	__u64 running[NEV];
	__u64 valid[NEV];
	/* For the RATES cgroups charged here most recently, per event: the count and ns of the
	 * cgroup's last charge the event counted for at least half of (see estimate()). */
	__u64 rate_cg[RATES];
	__u64 rate_used[RATES];
	__u64 rate_n[RATES][NEV];
	__u64 rate_t[RATES][NEV];
	__u64 rate_clock;
	/* Set once an event here was multiplexed: rates are kept from then on only. */
	__u64 muxed;
	/* The task last switched in: its cgroup id (0: idle) and verdict, at epoch cur_epoch. */
	__u64 cur_id;
	__u64 cur_bits;
	__u64 cur_epoch;
	/* The slot of this CPU's last read. */
	__u64 read_slot;
};

#define EVENT_ARRAY(name)                                       \
	struct {                                                \
		__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);    \
		__uint(key_size, sizeof(__u32));                \
		__uint(value_size, sizeof(__u32));              \
	} name SEC(".maps")

EVENT_ARRAY(ev0);
EVENT_ARRAY(ev1);
EVENT_ARRAY(ev2);
EVENT_ARRAY(ev3);
EVENT_ARRAY(ev4);

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct slot_key);
	__type(value, struct slot_val);
} acc SEC(".maps");

// The slot ring: where charges go first. Per CPU, RING_SLOTS records, the one of slot s at
// cpu * RING_SLOTS + s % RING_SLOTS, each holding up to RING_CG cgroups' sums for its slot.
// User space reads it through mmap, without a system call and without deleting anything:
// emptying a per-CPU hash cost about 400 ns of kernel time per (slot, cgroup) entry, the
// largest fixed part of a quiet run's CPU (docs/cost.md). A record is reused for a later slot
// once user space has read past its slot (the control record's `read_below`); a charge that finds
// its record unread, or full, goes to `acc` as before, which user space then empties too.
// The control record, at index ncpus * RING_SLOTS, is a `struct ring_ctl`: the slot user space
// has read every record below, the charges that went to `acc` (so user space knows to empty
// it) and those lost (so it knows to look at `stats`): read without a system call too.
#define RING_SLOTS 256
#define RING_CG 6

struct ring_cg {
	__u64 cgid;
	struct slot_val s;
};

struct ring_slot {
	__u64 slot;
	__u64 n;
	struct ring_cg e[RING_CG];
};

struct ring_ctl {
	__u64 read_below;
	__u64 spills;
	__u64 lost;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1); /* ncpus * RING_SLOTS + 1, set by user space */
	__type(key, __u32);
	__type(value, struct ring_slot);
} ring SEC(".maps");

// 0: unused (charges lost are counted in the ring's control record), 1: counter reads failed, 2: counts of event 0 lost,
// 3: baselines taken (first read of an event on a CPU), 4: charges made,
// 5: the first slot a charge was lost in since user space last cleared it, 6: the last one,
// 7: ns spent in timer callbacks (the kernel's run_time_ns does not count them),
// 8: timer callbacks run, 9: timers that failed to start.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 10);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

// cgroup ids whose tasks (and those below) get 1 ms ticks; set by user space. Not
// preallocated: only user space adds to it, and 65,536 elements made at load held about 4 MB
// of kernel memory for the few a host follows.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, __u8);
} followed SEC(".maps");

// cgroup ids whose counts no one needs apart (set by user space; least recently used
// forgotten first, and then charged again until user space says so once more).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u8);
} quiet SEC(".maps");

// Bumped by user space after it changes `followed`: verdicts made before are made again.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} epoch SEC(".maps");

#define V_FOLLOWED 1
#define V_CHARGED 2

struct verdict {
	__u64 epoch;
	__u64 bits;
};

// cgroup id -> whether its tasks are followed (ticks) and charged apart (not quiet).
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, struct verdict);
} verdicts SEC(".maps");

struct tick {
	struct bpf_timer timer;
	__u32 armed;
	__u32 ready;
};

// One tick timer per CPU, indexed by CPU number (sized by user space).
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tick);
} ticks SEC(".maps");

const volatile __u64 slot_ns = 1000000;
const volatile __u32 nev = 1;
// CPUs the ring has records for (0: no ring, every charge goes to `acc`).
const volatile __u32 ring_cpus = 0;
// Set once the kernel refused BPF_F_TIMER_CPU_PIN (before 6.7): then timers are started
// unpinned, which keeps them on this CPU because it is never idle when one is started.
__u32 no_pin;

static __always_inline void bump(__u32 i, __u64 d)
{
	__u64 *p = bpf_map_lookup_elem(&stats, &i);
	if (p)
		*p += d;
}

// Where charges were lost: user space marks those slots' counts as unknown.
static __always_inline void mark_lost(__u64 slot)
{
	__u32 i = 5;
	__u64 *p = bpf_map_lookup_elem(&stats, &i);
	if (p && (*p == 0 || *p > slot))
		*p = slot;
	i = 6;
	p = bpf_map_lookup_elem(&stats, &i);
	if (p && *p < slot)
		*p = slot;
}

static __always_inline struct ring_ctl *ring_control(void)
{
	__u32 c = ring_cpus * RING_SLOTS;
	return (struct ring_ctl *)bpf_map_lookup_elem(&ring, &c);
}

// The sums of `k` in this CPU's ring record for its slot, made room for; NULL when the record
// still holds an unread slot or RING_CG other cgroups.
static __always_inline struct slot_val *ring_entry(struct slot_key *k)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct ring_ctl *ctl = ring_control();
	// A charge for a slot user space has read already (this CPU was held up, by the
	// hypervisor say, between reading the clock and here) would be lost in the ring: the
	// hash keeps it for the next drain. Checked last thing before the sums are added.
	if (cpu >= ring_cpus || !ctl || k->slot < ctl->read_below)
		return NULL;
	__u32 i = cpu * RING_SLOTS + (__u32)(k->slot % RING_SLOTS);
	struct ring_slot *r = bpf_map_lookup_elem(&ring, &i);
	if (!r)
		return NULL;
	if (r->slot != k->slot) {
		if (r->n && r->slot >= ctl->read_below)
			return NULL;
		r->slot = k->slot;
		r->n = 0;
	}
	__u64 n = r->n;
	for (int j = 0; j < RING_CG; j++) {
		if (j < n) {
			if (r->e[j].cgid == k->cgid)
				return &r->e[j].s;
			continue;
		}
		r->e[j].cgid = k->cgid;
		__builtin_memset(&r->e[j].s, 0, sizeof(r->e[j].s));
		r->n = j + 1;
		return &r->e[j].s;
	}
	return NULL;
}

// A charge went to `acc`: user space empties it at its next drain.
static __always_inline void spilled(void)
{
	struct ring_ctl *ctl = ring_control();
	if (ctl)
		__sync_fetch_and_add(&ctl->spills, 1);
}

// The longest time without counting that estimate() fills at a rate (its product with a
// count then stays within 64 bits).
#define MAX_GAP_NS (1ULL << 32)

// The count of a charge during which the kernel counted event `i` for only `dr` of its `de`
// ns, because the PMU multiplexed it with other users' events: what it counted, plus the time
// it did not count at the rate this cgroup (rate entry `r`) last counted at on this CPU. A
// running task's charges are 1 ms slots and the kernel rotates events every few ms, so most
// such charges were counted for none or all of their time: scaling each by de / dr alone gave
// 0 to the first kind and nothing more to the second, and a walk under two counters read
// 50-80 % of its counts. The rate is taken from a charge counted for at least half its time:
// one counted for a few µs at a rotation holds little but an interrupt's work, and
// extrapolated it read instructions 15 % high. The rates are kept per cgroup: with one per
// CPU, whichever task ran between two of a container's charges (cachescope's drain, a
// neighbour) took it, and the container's next charge not counted at all read 0. Without a
// rate of this cgroup's (or `r` is RATES: none kept here yet), the charge is scaled by de / dr
// (0 if never counted).
static __always_inline __u64 estimate(struct cpu_state *st, __u32 r, int i, __u64 dc, __u64 de, __u64 dr)
{
	__u64 gap = de - dr;
	__u64 t = r < RATES ? st->rate_t[r & (RATES - 1)][i] : 0;

	if (t) {
		if (gap > MAX_GAP_NS)
			gap = MAX_GAP_NS;
		return dc + st->rate_n[r & (RATES - 1)][i] * gap / t;
	}
	return dr ? dc * de / dr : 0;
}

// The rate entry of cgroup `cgid` on this CPU: its own, or else the one used least recently,
// emptied for it.
static __always_inline __u32 rate_entry(struct cpu_state *st, __u64 cgid)
{
	__u32 found = RATES, oldest = 0;

	for (__u32 j = 0; j < RATES; j++) {
		if (st->rate_cg[j] == cgid && st->rate_used[j]) {
			found = j;
			break;
		}
		if (st->rate_used[j] < st->rate_used[oldest & (RATES - 1)])
			oldest = j;
	}
	if (found == RATES) {
		found = oldest & (RATES - 1);
		st->rate_cg[found] = cgid;
		for (int i = 0; i < NEV; i++) {
			st->rate_n[found][i] = 0;
			st->rate_t[found][i] = 0;
		}
	}
	found &= RATES - 1;
	st->rate_used[found] = ++st->rate_clock;
	return found;
}

#define READ(I, MAP)                                                                  \
	if (I < nev) {                                                                \
		struct bpf_perf_event_value v = {};                                   \
		if (bpf_perf_event_read_value(&MAP, BPF_F_CURRENT_CPU, &v, sizeof(v)) == 0) { \
			if (st->valid[I]) {                                           \
				__u64 dc = v.counter - st->last[I];                   \
				__u64 de = v.enabled - st->enabled[I];                \
				__u64 dr = v.running - st->running[I];                \
				__u64 counted = dc;                                   \
				if (dr < de) {                                        \
					mux = 1;                                      \
					st->muxed = 1;                                \
					dc = estimate(st, re, I, dc, de, dr);         \
				}                                                     \
				if (re < RATES && dr && dr * 2 >= de) {               \
					st->rate_n[re][I] = counted;                  \
					st->rate_t[re][I] = dr;                       \
				}                                                     \
				d[I] = dc;                                            \
			} else {                                                      \
				bump(3, 1);                                           \
			}                                                             \
			st->last[I] = v.counter;                                      \
			st->enabled[I] = v.enabled;                                   \
			st->running[I] = v.running;                                   \
			st->valid[I] = 1;                                             \
		} else {                                                              \
			bump(1, 1);                                                   \
		}                                                                     \
	}

// Returns the cgroup id charged (0: the idle task, or nothing could be charged).
static __always_inline __u64 charge_on(struct cpu_state *st, int is_switch)
{
	__u64 d[NEV] = {};
	__u64 mux = 0;
	__u64 cgid = bpf_get_current_pid_tgid() == 0 ? 0 : bpf_get_current_cgroup_id();
	// Rates cost a search a charge, so none are kept on a CPU where nothing was multiplexed.
	__u32 re = st->muxed ? rate_entry(st, cgid) : RATES;
	READ(0, ev0)
	READ(1, ev1)
	READ(2, ev2)
	READ(3, ev3)
	READ(4, ev4)
	struct slot_key k = {
		.slot = bpf_ktime_get_ns() / slot_ns,
		.cgid = cgid,
	};
	st->read_slot = k.slot;
	struct slot_val *a = ring_entry(&k);
	int in_ring = a != NULL;
	if (!a)
		a = bpf_map_lookup_elem(&acc, &k);
	if (!a) {
		struct slot_val z = {};
		bpf_map_update_elem(&acc, &k, &z, BPF_NOEXIST);
		a = bpf_map_lookup_elem(&acc, &k);
		if (!a) {
			struct ring_ctl *ctl = ring_control();
			if (ctl)
				__sync_fetch_and_add(&ctl->lost, 1);
			bump(2, d[0]);
			mark_lost(k.slot);
			return k.cgid;
		}
	}
	a->v[0] += d[0];
	a->v[1] += d[1];
	a->v[2] += d[2];
	a->v[3] += d[3];
	a->v[4] += d[4];
	a->switches += is_switch;
	a->multiplexed += mux;
	// After the sums: the count tells user space to empty `acc` once they are there.
	if (!in_ring)
		spilled();
	bump(4, 1);
	return k.cgid;
}

static __always_inline __u64 charge(int is_switch)
{
	__u32 zero = 0;
	struct cpu_state *st = bpf_map_lookup_elem(&state, &zero);
	if (!st)
		return 0;
	return charge_on(st, is_switch);
}

static __always_inline int followed_task(struct task_struct *t)
{
	struct cgroup *cg = BPF_CORE_READ(t, cgroups, dfl_cgrp);
	for (int i = 0; i < MAX_UP && cg; i++) {
		__u64 id = BPF_CORE_READ(cg, kn, id);
		if (bpf_map_lookup_elem(&followed, &id))
			return 1;
		// `self` is a cgroup's first member: its css's parent is the parent cgroup.
		cg = (struct cgroup *)BPF_CORE_READ(cg, self.parent);
	}
	return 0;
}

static __always_inline __u64 epoch_now(void)
{
	__u32 zero = 0;
	__u64 *ep = bpf_map_lookup_elem(&epoch, &zero);
	return ep ? *ep : 0;
}

// V_FOLLOWED and V_CHARGED for task `t` of cgroup `id` at epoch `e`, from the cache where it
// is current.
static __always_inline __u64 verdict_at(struct task_struct *t, __u64 id, __u64 e)
{
	struct verdict *v = bpf_map_lookup_elem(&verdicts, &id);
	if (v && v->epoch == e)
		return v->bits;
	// The epoch was read first: a change user space makes meanwhile bumps it again.
	struct verdict n = { .epoch = e };
	if (followed_task(t))
		n.bits = V_FOLLOWED | V_CHARGED;
	else if (!bpf_map_lookup_elem(&quiet, &id))
		n.bits = V_CHARGED;
	bpf_map_update_elem(&verdicts, &id, &n, BPF_ANY);
	return n.bits;
}

// The same for the current task. Its cgroup by the helper, not by walking its pointers: the
// verifier looks every pointer walked up by name in the kernel's BTF (a linear scan on 6.18)
// and checks this path again in on_timer for each program that arms a tick; loading both
// programs took 22 ms with the walk, 11 ms without (docs/cost.md). The switch keeps its
// loads: there the helper cost about 35 ns a switch more (scripts/bench-switches.sh).
static __always_inline __u64 verdict_of_current(void)
{
	struct task_struct *t = bpf_get_current_task_btf();
	if (t->pid == 0)
		return 0;
	return verdict_at(t, bpf_get_current_cgroup_id(), epoch_now());
}

// Start `tk` to fire just after the next slot boundary, so charges split there.
static __always_inline void start(struct tick *tk, __u64 now)
{
	__u64 wait = slot_ns - now % slot_ns + 1000;
	long r = -EINVAL;
	if (!no_pin) {
		r = bpf_timer_start(&tk->timer, wait, BPF_F_TIMER_CPU_PIN);
		if (r == -EINVAL)
			no_pin = 1;
	}
	if (r == -EINVAL)
		r = bpf_timer_start(&tk->timer, wait, 0);
	if (r) {
		tk->armed = 0;
		bump(9, 1);
	} else {
		tk->armed = 1;
	}
}

static int on_timer(void *map, __u32 *key, struct tick *tk)
{
	__u64 t0 = bpf_ktime_get_ns();
	if (bpf_get_smp_processor_id() != *key) {
		// Moved off its CPU (unpinned): that CPU re-arms at its next switch or tick.
		tk->armed = 0;
		return 0;
	}
	// The cgroup just charged is the current task's: most often followed itself.
	__u64 cg = charge(0);
	if (cg && (bpf_map_lookup_elem(&followed, &cg) ||
		   (verdict_of_current() & V_FOLLOWED)))
		start(tk, t0);
	else
		tk->armed = 0;
	bump(7, bpf_ktime_get_ns() - t0);
	bump(8, 1);
	return 0;
}

// This CPU's tick timer, if it is not running (NULL when it is).
static __always_inline struct tick *idle_tick(void)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct tick *tk = bpf_map_lookup_elem(&ticks, &cpu);
	return tk && !tk->armed ? tk : NULL;
}

static __always_inline void arm(struct tick *tk)
{
	if (!tk->ready) {
		long r = bpf_timer_init(&tk->timer, &ticks, CLOCK_MONOTONIC);
		if (r && r != -EBUSY) {
			bump(9, 1);
			return;
		}
		if (bpf_timer_set_callback(&tk->timer, on_timer)) {
			bump(9, 1);
			return;
		}
		tk->ready = 1;
	}
	start(tk, bpf_ktime_get_ns());
}

SEC("raw_tp/sched_switch")
int on_switch(void *ctx)
{
	charge(1);
	return 0;
}

// The followed mode's switch: charge the outgoing task unless it and the incoming one are
// both quiet, tick while a followed one runs.
SEC("tp_btf/sched_switch")
int on_switch_followed(__u64 *ctx)
{
	struct task_struct *prev = (struct task_struct *)ctx[1];
	struct task_struct *next = (struct task_struct *)ctx[2];
	__u32 zero = 0;
	struct cpu_state *st = bpf_map_lookup_elem(&state, &zero);
	if (!st)
		return 0;
	// The switch's task pointers are the kernel's (BTF): plain loads, not helper calls. Both
	// tasks are judged by the cgroup they are in now: a task moved to another cgroup while it
	// ran (a container's first process, written into cgroup.procs) is judged by its new one.
	__u64 e = epoch_now();
	__u64 vp = 0, v = 0, id;
	if (prev->pid) {
		id = prev->cgroups->dfl_cgrp->kn->id;
		// Most often the task this CPU switched in last, judged then.
		if (id == st->cur_id && e == st->cur_epoch)
			vp = st->cur_bits;
		else
			vp = verdict_at(prev, id, e);
	}
	st->cur_id = 0;
	if (next->pid) {
		id = next->cgroups->dfl_cgrp->kn->id;
		v = verdict_at(next, id, e);
		st->cur_id = id;
		st->cur_bits = v;
		st->cur_epoch = e;
	}
	// Between quiet tasks the counters are read once a slot at most: a lump never crosses a
	// slot boundary, and a quiet task moved into a charged cgroup while it runs (only its
	// switch out then reads) takes with it at most what its slot's quiet tasks ran before.
	if ((vp | v) & V_CHARGED || bpf_ktime_get_ns() / slot_ns != st->read_slot)
		charge_on(st, 1);
	// An armed timer keeps running while followed work runs.
	if (v & V_FOLLOWED) {
		struct tick *tk = idle_tick();
		if (tk)
			arm(tk);
	}
	return 0;
}

// Every hrtimer expiry, the scheduler tick's among them (HZ, on busy CPUs only): a task that
// became followed while it ran, without switching since, gets its ticks from here. A
// tracepoint, not the tick function itself: its name holds from 6.1 to 7.2 and it needs no
// ftrace. The hrtimer base's lock is not held here, so starting a timer is safe.
SEC("tp_btf/hrtimer_expire_entry")
int on_hrtimer(__u64 *ctx)
{
	struct tick *tk = idle_tick();
	if (!tk)
		return 0;
	if (verdict_of_current() & V_FOLLOWED)
		arm(tk);
	return 0;
}

SEC("perf_event")
int on_tick(void *ctx)
{
	charge(0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
