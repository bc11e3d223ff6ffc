// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// Per-cgroup attribution of per-CPU counter deltas, aggregated in-kernel per time slot.
//
// At every context switch (raw_tp/sched_switch, where `current` is still the outgoing task)
// and at every per-CPU tick (a perf_event program on a cpu-clock timer, so a task that never
// switches is still split at slot boundaries) the program reads this CPU's counters
// (bpf_perf_event_read_value on PERF_EVENT_ARRAY maps), takes the delta since the previous
// read on this CPU, scales it if the PMU multiplexed, and adds it to (slot, cgroup id) in a
// per-CPU hash. The idle task is charged to cgroup id 0. Userspace drains completed slots in
// batches: no event per context switch crosses to userspace. What cannot be charged (hash
// full, counter unreadable) is counted in `stats`, never silently dropped.

#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define NEV 4

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

// 0: charges lost (hash full), 1: counter reads failed, 2: counts of event 0 lost,
// 3: baselines taken (first read of an event on a CPU), 4: charges made,
// 5: the first slot a charge was lost in since user space last cleared it, 6: the last one.
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 7);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

const volatile __u64 slot_ns = 1000000;
const volatile __u32 nev = 1;

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

#define READ(I, MAP)                                                                  \
	if (I < nev) {                                                                \
		struct bpf_perf_event_value v = {};                                   \
		if (bpf_perf_event_read_value(&MAP, BPF_F_CURRENT_CPU, &v, sizeof(v)) == 0) { \
			if (st->valid[I]) {                                           \
				__u64 dc = v.counter - st->last[I];                   \
				__u64 de = v.enabled - st->enabled[I];                \
				__u64 dr = v.running - st->running[I];                \
				if (dr < de) {                                        \
					mux = 1;                                      \
					dc = dr ? dc * de / dr : 0;                   \
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

static __always_inline void charge(int is_switch)
{
	__u32 zero = 0;
	struct cpu_state *st = bpf_map_lookup_elem(&state, &zero);
	if (!st)
		return;
	__u64 d[NEV] = {};
	__u64 mux = 0;
	READ(0, ev0)
	READ(1, ev1)
	READ(2, ev2)
	READ(3, ev3)
	struct slot_key k = {
		.slot = bpf_ktime_get_ns() / slot_ns,
		.cgid = bpf_get_current_pid_tgid() == 0 ? 0 : bpf_get_current_cgroup_id(),
	};
	struct slot_val *a = bpf_map_lookup_elem(&acc, &k);
	if (!a) {
		struct slot_val z = {};
		bpf_map_update_elem(&acc, &k, &z, BPF_NOEXIST);
		a = bpf_map_lookup_elem(&acc, &k);
		if (!a) {
			bump(0, 1);
			bump(2, d[0]);
			mark_lost(k.slot);
			return;
		}
	}
	a->v[0] += d[0];
	a->v[1] += d[1];
	a->v[2] += d[2];
	a->v[3] += d[3];
	a->switches += is_switch;
	a->multiplexed += mux;
	bump(4, 1);
}

SEC("raw_tp/sched_switch")
int on_switch(void *ctx)
{
	charge(1);
	return 0;
}

SEC("perf_event")
int on_tick(void *ctx)
{
	charge(0);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
