/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * cachescope kernel module: the interface user space sees through /dev/cachescope.
 *
 * Versioned: user space reads struct cachescope_info first and refuses an abi_version or a
 * record_size it does not know. Fields are only ever added at the end of the structures,
 * with a version bump.
 */
#ifndef _CACHESCOPE_ABI_H
#define _CACHESCOPE_ABI_H

#include <linux/types.h>
#include <linux/ioctl.h>

#define CACHESCOPE_ABI_VERSION	2	/* 2: CS_REC_NO_RMID says why */
#define CACHESCOPE_MAX_DOMAINS	64
#define CACHESCOPE_MAX_RULES	32
#define CACHESCOPE_RULE_LEN	256

/* What a record is. */
enum cachescope_kind {
	CS_REC_SAMPLE	= 1,	/* counters of an RMID in a domain, read at time_ns */
	CS_REC_ATTACH	= 2,	/* the cgroup got rmid; mbm_* are the baseline in domain */
	CS_REC_DETACH	= 3,	/* the last counters of the cgroup's rmid in domain */
	CS_REC_NO_RMID	= 4,	/* the cgroup matched but runs untagged; occupancy = why */
	CS_REC_OVERRUN	= 5,	/* occupancy = records lost since the last one read */
	CS_REC_FREED	= 6,	/* rmid left limbo (clean in every domain) */
};

/* Why a CS_REC_NO_RMID record's cgroup runs untagged (its occupancy field). */
enum cachescope_no_rmid {
	CS_NO_RMID_EXHAUSTED	= 0,	/* every RMID is in use */
	CS_NO_RMID_LIMBO	= 1,	/* none free: released ones wait in limbo */
	CS_NO_RMID_TABLE_FULL	= 2,	/* max_cgroups are watched: this one is not */
};

/* Per-counter status bits, as the hardware reports them (QM_CTR bits 63 and 62). */
#define CS_F_OCC_ERROR		0x01
#define CS_F_OCC_UNAVAIL	0x02
#define CS_F_TOTAL_ERROR	0x04
#define CS_F_TOTAL_UNAVAIL	0x08
#define CS_F_LOCAL_ERROR	0x10
#define CS_F_LOCAL_UNAVAIL	0x20
#define CS_F_OCC_NONE		0x40	/* occupancy not read in this record */
#define CS_F_MBM_NONE		0x80	/* MBM not read (or no baseline known) */

/* 48 bytes, naturally aligned, little-endian on x86. */
struct cachescope_record {
	__u64 time_ns;		/* CLOCK_MONOTONIC */
	__u64 cgroup_id;	/* the owning cgroup's id (its cgroupfs inode number) */
	__u64 occupancy;	/* counts; bytes = occupancy * upscale */
	__u64 mbm_total;	/* raw counter, ctr_width bits, counts of upscale bytes */
	__u64 mbm_local;
	__u32 rmid;
	__u16 domain;		/* L3 domain id */
	__u8 kind;		/* enum cachescope_kind */
	__u8 flags;		/* CS_F_* */
};

struct cachescope_info {
	__u32 abi_version;
	__u32 record_size;
	__u32 emulate;		/* 1: counters come from the software model */
	__u32 num_rmids;	/* RMIDs 1 .. num_rmids - 1 are handed out */
	__u32 nr_domains;
	__u32 ctr_width;	/* MBM counter width, bits */
	__u64 upscale;		/* bytes per count */
	__u64 interval_ns;	/* sampling period */
	__u64 l3_bytes;		/* per domain */
	__u64 limbo_bytes;	/* an RMID below this in every domain is clean */
	__u32 domain_ids[CACHESCOPE_MAX_DOMAINS];
	__u32 ring_records;
	__u32 local_pct;	/* emulation: share of bytes counted local */
	__u32 has_total;	/* MBM total / local events available */
	__u32 has_local;
};

struct cachescope_rules {
	__u32 count;
	__u32 pad;
	/* Globs over cgroup v2 paths relative to the root: '*' within a component, '**' across,
	 * '?' one character; a leading '!' excludes. */
	char rule[CACHESCOPE_MAX_RULES][CACHESCOPE_RULE_LEN];
};

struct cachescope_stats {
	__u64 rmids_in_use;
	__u64 rmids_limbo;
	__u64 rmids_free;
	__u64 cgroups;		/* watched cgroups (nested ones included) */
	__u64 waiting;		/* matched cgroups without an RMID */
	__u64 overruns;		/* records lost to a full ring */
	__u64 switches;		/* sched_switch probe calls */
	__u64 pqr_writes;	/* of which changed PQR_ASSOC */
	__u64 ticks;		/* sampling timer runs, all domains */
	__u64 tick_ns;		/* time spent in them */
	__u64 tick_ns_max;
	__u64 misplaced;	/* ticks run off their domain (CPU hotplug) */
};

#define CS_IOC_MAGIC	0xCE
#define CS_IOC_INFO	_IOR(CS_IOC_MAGIC, 1, struct cachescope_info)
#define CS_IOC_RULES	_IOW(CS_IOC_MAGIC, 2, struct cachescope_rules)
/* Give the cgroup v2 directory open at this fd an RMID: returns it, or -ENOSPC. */
#define CS_IOC_ATTACH	_IOW(CS_IOC_MAGIC, 3, __s32)
/* Take its RMID back (to limbo); the cgroup runs untagged until attached again. */
#define CS_IOC_DETACH	_IOW(CS_IOC_MAGIC, 4, __s32)
#define CS_IOC_STATS	_IOR(CS_IOC_MAGIC, 5, struct cachescope_stats)

#endif /* _CACHESCOPE_ABI_H */
