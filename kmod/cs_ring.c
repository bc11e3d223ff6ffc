// SPDX-License-Identifier: GPL-2.0
/* cachescope: the ring user space reads, and the watch rules' globs. */
#include "cs_internal.h"

/* ---- the ring ---- */

static void cs_push_locked(const struct cachescope_record *r)
{
	ring[ring_head & (ring_records - 1)] = *r;
	ring_head++;
}

/* Never sleeps; a full ring drops the record and counts it. */
void cs_push(const struct cachescope_record *r)
{
	unsigned long flags;

	raw_spin_lock_irqsave(&ring_lock, flags);
	if (ring_lost && ring_head - ring_tail < ring_records) {
		struct cachescope_record o = {
			.time_ns = r->time_ns, .occupancy = ring_lost,
			.kind = CS_REC_OVERRUN, .flags = CS_F_MBM_NONE,
		};

		cs_push_locked(&o);
		ring_lost = 0;
	}
	if (ring_head - ring_tail < ring_records) {
		cs_push_locked(r);
	} else {
		ring_overruns++;
		ring_lost++;
	}
	raw_spin_unlock_irqrestore(&ring_lock, flags);
}

u32 cs_ring_count(void)
{
	return READ_ONCE(ring_head) - READ_ONCE(ring_tail);
}

void cs_ring_wake(struct irq_work *w)
{
	wake_up_interruptible(&ring_wait);
}

/* ---- rules: the same globs as `cachescope --containers` ---- */

/*
 * Whether pattern p matches all of s: '*' within a component, '**' across, '?' one byte
 * other than '/'. Dynamic programming over pattern suffixes, O(|p| * |s|) whatever the
 * pattern (backtracking is exponential in the stars); rows are bitmaps on the stack.
 */
static bool cs_glob(const char *p, size_t pl, const char *s, size_t sl)
{
	unsigned long rows[3][BITS_TO_LONGS(CS_PATH_MAX + 1)];
	unsigned long *next2 = rows[0], *next = rows[1], *cur = rows[2], *tmp;
	size_t i, j;

	if (sl > CS_PATH_MAX)
		return false;
	bitmap_zero(next2, sl + 1);
	bitmap_zero(next, sl + 1);
	__set_bit(sl, next);
	for (i = pl; i-- > 0;) {
		bool dbl = p[i] == '*' && i + 1 < pl && p[i + 1] == '*';

		for (j = sl + 1; j-- > 0;) {
			bool more = j < sl, m;

			if (dbl)
				m = test_bit(j, next2) || (more && test_bit(j + 1, cur));
			else if (p[i] == '*')
				m = test_bit(j, next) || (more && s[j] != '/' && test_bit(j + 1, cur));
			else if (p[i] == '?')
				m = more && s[j] != '/' && test_bit(j + 1, next);
			else
				m = more && s[j] == p[i] && test_bit(j + 1, next);
			__assign_bit(j, cur, m);
		}
		tmp = next2;
		next2 = next;
		next = cur;
		cur = tmp;
	}
	return test_bit(0, next);
}

/* path: absolute, as cgroupfs names it. ru: NULL (no session) matches nothing. */
bool cs_rules_match(const struct cs_rules *ru, const char *path)
{
	size_t len;
	bool yes = false;
	u32 i;

	while (*path == '/')
		path++;
	len = strlen(path);
	while (len && path[len - 1] == '/')
		len--;
	for (i = 0; ru && i < ru->n; i++) {
		const char *r = ru->rule[i];
		bool not = r[0] == '!';

		if (not)
			r++;
		if (cs_glob(r, strlen(r), path, len)) {
			if (not)
				return false;
			yes = true;
		}
	}
	return yes;
}
