//! Who holds an assignable bandwidth counter (AMD ABMC, resctrl's `mbm_event` mode), decided
//! without I/O. A kernel in that mode counts a group's bandwidth only while a counter is
//! assigned to it; there are 32–64 per L3, often fewer than containers. The plan:
//! - every container keeps a counter when there are enough;
//! - else pinned containers (the user's flag) keep one, then half of what is left goes to the
//!   busiest containers by occupancy (chosen again at each turn), and the rest rotate through
//!   everyone else in id order, one turn of `rotate_every` each: each gets a bandwidth figure
//!   for one turn in every `ceil(others / rotating)` turns;
//! - the local event gets counters only when every container can have both.
//!
//! Counters are per L3 domain; the plan uses the fewest any domain offers, so a container holds
//! its counter in every domain alike.

use std::collections::BTreeMap;
use std::time::Duration;

pub use cachescope_engine::MbmCounter as Holding;

/// A container as the plan sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: String,
    pub pinned: bool,
    /// Bytes it holds in the LLC (all domains), from the last read.
    pub occupancy: u64,
}

/// What one turn decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    /// Who holds a counter (for the total event) and how.
    pub holders: BTreeMap<String, Holding>,
    /// Whether the local event gets counters too (only when everyone can have both).
    pub local: bool,
    /// Containers rotating through `rotating` counters this turn.
    pub pool: usize,
    pub rotating: usize,
}

impl Plan {
    /// Turns between two of a rotating container's turns (1: it always holds one).
    pub fn cycle(&self) -> usize {
        if self.rotating == 0 {
            1
        } else {
            self.pool.div_ceil(self.rotating).max(1)
        }
    }
}

/// The longest a turn waits for its holders to be measured, in turns.
pub const MAX_TURN: u32 = 4;

/// The rotation's state between turns.
#[derive(Debug, Clone)]
pub struct Planner {
    rotate_every: Duration,
    /// Where the next turn starts in the pool (ids in order, so a newcomer does not shift
    /// everyone's turn).
    next: Option<String>,
    turn_started: Option<Duration>,
    last: Plan,
}

impl Planner {
    pub fn new(rotate_every: Duration) -> Planner {
        Planner {
            rotate_every: rotate_every.max(Duration::from_millis(1)),
            next: None,
            turn_started: None,
            last: Plan::default(),
        }
    }

    pub fn rotate_every(&self) -> Duration {
        self.rotate_every
    }

    /// The plan last made.
    pub fn last(&self) -> &Plan {
        &self.last
    }

    /// The plan at `now` for `candidates` with `capacity` counters per domain (the fewest any
    /// domain has for us). A new turn starts when the last one is `rotate_every` old and
    /// `measured` (every rotating holder was read at least twice since it got its counter: a
    /// baseline and one figure; an overloaded collector reads less often than turns pass), or
    /// at the latest when it is [`MAX_TURN`] turns old. Between turns the holders stay, except
    /// that a container that left gives its counter up and a newcomer takes a free one.
    pub fn plan(&mut self, now: Duration, capacity: u32, candidates: &[Candidate], measured: bool) -> &Plan {
        let cap = capacity as usize;
        let n = candidates.len();
        if n <= cap {
            let holders = candidates.iter().map(|c| (c.id.clone(), Holding::Kept)).collect();
            self.last = Plan { holders, local: 2 * n <= cap, pool: 0, rotating: 0 };
            self.turn_started = None;
            return &self.last;
        }
        let new_turn = self.turn_started.is_none_or(|t| {
            let age = now.saturating_sub(t);
            age >= self.rotate_every && (measured || age >= self.rotate_every * MAX_TURN)
        });
        if !new_turn {
            self.between_turns(cap, candidates);
            return &self.last;
        }
        self.turn_started = Some(now);
        let mut pinned: Vec<&Candidate> = candidates.iter().filter(|c| c.pinned).collect();
        pinned.sort_by(|a, b| a.id.cmp(&b.id));
        pinned.truncate(cap);
        let mut holders: BTreeMap<String, Holding> = pinned.iter().map(|c| (c.id.clone(), Holding::Kept)).collect();
        let left = cap - holders.len();
        let mut others: Vec<&Candidate> = candidates.iter().filter(|c| !holders.contains_key(&c.id)).collect();
        // The busiest keep theirs: half of what is left, at least one when two are left.
        let busiest = left / 2;
        others.sort_by(|a, b| b.occupancy.cmp(&a.occupancy).then_with(|| a.id.cmp(&b.id)));
        for c in others.iter().take(busiest) {
            holders.insert(c.id.clone(), Holding::Kept);
        }
        let mut pool: Vec<&str> = others.iter().skip(busiest).map(|c| c.id.as_str()).collect();
        pool.sort_unstable();
        let rotating = left - busiest;
        let start = self.next.as_deref().map_or(0, |id| pool.iter().position(|p| *p >= id).unwrap_or(0));
        for i in 0..rotating.min(pool.len()) {
            holders.insert(pool[(start + i) % pool.len()].to_string(), Holding::Rotating);
        }
        self.next = (!pool.is_empty()).then(|| pool[(start + rotating) % pool.len()].to_string());
        self.last = Plan { holders, local: false, pool: pool.len(), rotating };
        &self.last
    }

    /// Within a turn: holders that left give up their counters; free counters go to
    /// candidates without one, pinned first.
    fn between_turns(&mut self, cap: usize, candidates: &[Candidate]) {
        let live: std::collections::HashSet<&str> = candidates.iter().map(|c| c.id.as_str()).collect();
        self.last.holders.retain(|id, _| live.contains(id.as_str()));
        let mut waiting: Vec<&Candidate> =
            candidates.iter().filter(|c| !self.last.holders.contains_key(&c.id)).collect();
        waiting.sort_by(|a, b| b.pinned.cmp(&a.pinned).then_with(|| a.id.cmp(&b.id)));
        for c in waiting {
            if self.last.holders.len() >= cap {
                break;
            }
            let how = if c.pinned { Holding::Kept } else { Holding::Rotating };
            self.last.holders.insert(c.id.clone(), how);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cands(n: usize) -> Vec<Candidate> {
        (0..n).map(|i| Candidate { id: format!("c{i:03}"), pinned: false, occupancy: i as u64 }).collect()
    }

    fn count(p: &Plan, h: Holding) -> usize {
        p.holders.values().filter(|x| **x == h).count()
    }

    #[test]
    fn enough_counters_everyone_keeps_one_and_local_too_when_both_fit() {
        let mut pl = Planner::new(Duration::from_secs(1));
        let p = pl.plan(Duration::ZERO, 8, &cands(4), true).clone();
        assert_eq!(count(&p, Holding::Kept), 4);
        assert!(p.local);
        let p = pl.plan(Duration::ZERO, 6, &cands(4), true).clone();
        assert_eq!(count(&p, Holding::Kept), 4);
        assert!(!p.local, "4 containers x 2 events do not fit 6");
        assert_eq!(p.cycle(), 1);
    }

    #[test]
    fn hundred_containers_on_thirty_counters_all_get_turns_pinned_and_busiest_always() {
        let mut c = cands(100);
        c[7].pinned = true;
        c[8].pinned = true;
        let mut pl = Planner::new(Duration::from_secs(1));
        let mut turns: BTreeMap<String, usize> = BTreeMap::new();
        let mut cycle = 0;
        for t in 0..20 {
            let p = pl.plan(Duration::from_secs(t), 30, &c, true).clone();
            assert_eq!(p.holders.len(), 30, "every counter in use");
            assert_eq!(p.holders.get("c007"), Some(&Holding::Kept));
            assert_eq!(p.holders.get("c008"), Some(&Holding::Kept));
            // 28 left: 14 to the busiest (the highest occupancy), 14 rotate among 84.
            assert_eq!(count(&p, Holding::Kept), 16);
            assert_eq!(p.holders.get("c099"), Some(&Holding::Kept));
            assert_eq!((p.pool, p.rotating), (84, 14));
            cycle = p.cycle();
            for (id, h) in &p.holders {
                if *h == Holding::Rotating {
                    *turns.entry(id.clone()).or_default() += 1;
                }
            }
        }
        assert_eq!(cycle, 6);
        // 20 turns of 14 over 84: everyone in the pool had 3 or 4 turns.
        assert_eq!(turns.len(), 84);
        assert!(turns.values().all(|n| (3..=4).contains(n)), "{turns:?}");
    }

    #[test]
    fn within_a_turn_holders_stay_and_a_leaver_frees_its_counter_for_a_newcomer() {
        let mut pl = Planner::new(Duration::from_secs(10));
        let c = cands(10);
        let first = pl.plan(Duration::ZERO, 4, &c, true).clone();
        let again = pl.plan(Duration::from_secs(1), 4, &c, true).clone();
        assert_eq!(first, again, "no churn between turns");
        let gone = first.holders.keys().next().unwrap().clone();
        let mut c2: Vec<Candidate> = c.into_iter().filter(|x| x.id != gone).collect();
        c2.push(Candidate { id: "new".into(), pinned: true, occupancy: 0 });
        let p = pl.plan(Duration::from_secs(2), 4, &c2, true).clone();
        assert!(!p.holders.contains_key(&gone));
        assert_eq!(p.holders.get("new"), Some(&Holding::Kept), "a pinned newcomer takes the freed counter");
        assert_eq!(p.holders.len(), 4);
    }

    #[test]
    fn a_turn_waits_until_its_holders_are_measured_or_four_turns_pass() {
        let mut pl = Planner::new(Duration::from_secs(1));
        let c = cands(10);
        let first = pl.plan(Duration::ZERO, 4, &c, true).clone();
        let t = |s: u64| Duration::from_secs(s);
        assert_eq!(&first, pl.plan(t(2), 4, &c, false), "not measured yet: the turn goes on");
        assert_ne!(&first, pl.plan(t(2), 4, &c, true), "measured: the next turn");
        let second = pl.last().clone();
        assert_eq!(&second, pl.plan(t(5), 4, &c, false));
        assert_ne!(&second, pl.plan(t(6), 4, &c, false), "four turns at the most");
    }

    /// docs/counters.md's table: (usable counters, containers) → (kept, rotating, pool, cycle).
    #[test]
    fn the_docs_table() {
        for (usable, n, kept, rotating, pool, cycle) in [
            (30, 30, 30, 0, 0, 1),
            (30, 50, 15, 15, 35, 3),
            (30, 100, 15, 15, 85, 6),
            (30, 200, 15, 15, 185, 13),
            (30, 500, 15, 15, 485, 33),
            (62, 100, 31, 31, 69, 3),
            (62, 200, 31, 31, 169, 6),
            (62, 500, 31, 31, 469, 16),
        ] {
            let p = Planner::new(Duration::from_secs(2)).plan(Duration::ZERO, usable, &cands(n), true).clone();
            assert_eq!(count(&p, Holding::Kept), kept, "{usable} counters, {n} containers");
            assert_eq!((p.rotating, p.pool, p.cycle()), (rotating, pool, cycle), "{usable} counters, {n} containers");
        }
    }

    #[test]
    fn no_counters_no_holders_and_pinned_beyond_capacity_are_cut_in_id_order() {
        let mut pl = Planner::new(Duration::from_secs(1));
        assert!(pl.plan(Duration::ZERO, 0, &cands(3), true).holders.is_empty());
        let mut c = cands(5);
        for x in &mut c {
            x.pinned = true;
        }
        let p = pl.plan(Duration::from_secs(5), 2, &c, true).clone();
        assert_eq!(p.holders.keys().cloned().collect::<Vec<_>>(), ["c000", "c001"]);
    }
}
