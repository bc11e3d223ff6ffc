//! What the RDT machine's PMU counts from the cache model (`-device rdt,pmu=on`): each vCPU's
//! private cache in front of the L3, and the rule that turns an access into L3 references and
//! misses.
//!
//! A line an access touches is an L3 *reference* when the vCPU's private cache does not hold
//! it, and an L3 *miss* when the L3 does not either. The L3 still sees every access, as it did
//! before the private cache existed, so occupancy and bandwidth are what they were; a line the
//! private cache holds but the L3 lost (another vCPU evicted it) counts as a reference and a
//! miss, as an inclusive L3's back-invalidation would make it. Non-temporal stores are not
//! references. The cycle model built on these counts is the device's (rdt-pmu.c).

const INVALID: u64 = u64::MAX;

/// A vCPU's private cache (what L1 and L2 are together on silicon): set-associative, true
/// LRU, tags only.
pub struct Private {
    sets: u64,
    ways: usize,
    /// Per way of every set (set-major), a set's ways side by side: the line, or INVALID, and
    /// its last use.
    way: Vec<(u64, u64)>,
    clock: u64,
    /// The way the last access found or filled, checked first (as the L3 model does).
    last: usize,
}

impl Private {
    /// `size` bytes in `ways` ways of `line_size`-byte lines; None unless the sets are a
    /// power of two (the device checks the same).
    pub fn new(size: u64, ways: u32, line_size: u32) -> Option<Private> {
        let way_bytes = u64::from(ways) * u64::from(line_size);
        if ways == 0 || way_bytes == 0 || size == 0 || !size.is_multiple_of(way_bytes) {
            return None;
        }
        let sets = size / way_bytes;
        if !sets.is_power_of_two() {
            return None;
        }
        let lines = usize::try_from(size / u64::from(line_size)).ok()?;
        Some(Private { sets, ways: ways as usize, way: vec![(INVALID, 0); lines], clock: 0, last: 0 })
    }

    fn set(&self, line: u64) -> std::ops::Range<usize> {
        // Below `lines`, which fits in usize (new()).
        let base = (line & (self.sets - 1)) as usize * self.ways;
        base..base + self.ways
    }

    /// An access to `line` (a line address): true when it hit; a miss fills it.
    pub fn touch(&mut self, line: u64) -> bool {
        self.clock += 1;
        let now = self.clock;
        if self.way[self.last].0 == line {
            self.way[self.last].1 = now;
            return true;
        }
        let range = self.set(line);
        let base = range.start;
        let set = &mut self.way[range];
        if let Some(i) = set.iter().position(|w| w.0 == line) {
            set[i].1 = now;
            self.last = base + i;
            return true;
        }
        let victim = set
            .iter()
            .position(|w| w.0 == INVALID)
            .or_else(|| set.iter().enumerate().min_by_key(|(_, w)| w.1).map(|(i, _)| i))
            .unwrap_or(0);
        set[victim] = (line, now);
        self.last = base + victim;
        false
    }

    /// CLFLUSH, CLFLUSHOPT or a non-temporal store of `line`.
    pub fn invalidate(&mut self, line: u64) {
        for i in self.set(line) {
            if self.way[i].0 == line {
                self.way[i].0 = INVALID;
            }
        }
    }

    /// WBINVD or INVD.
    pub fn clear(&mut self) {
        self.way.iter_mut().for_each(|w| w.0 = INVALID);
    }
}

/// The private cache's lookups, and L3 references and misses, of one access.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counted {
    pub lookups: u64,
    pub references: u64,
    pub misses: u64,
}

impl Counted {
    /// One line: whether the private cache and the L3 held it.
    pub fn line(&mut self, private_hit: bool, l3_hit: bool) {
        self.lookups += 1;
        if !private_hit || !l3_hit {
            self.references += 1;
        }
        if !l3_hit {
            self.misses += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Geometry, Llc, Sink};

    struct Nothing;
    impl Sink for Nothing {
        fn occupancy(&mut self, _: u16, _: i64) {}
        fn filled(&mut self, _: u16, _: u64) {}
        fn written_back(&mut self, _: u16, _: u64) {}
    }

    const KIB: u64 = 1024;

    /// Private 32 KiB 8-way in front of a 1 MiB 16-way L3; `passes` sweeps over `bytes`, one
    /// 8-byte load per line.
    fn sweep(bytes: u64, passes: u32) -> Vec<Counted> {
        let mut p = Private::new(32 * KIB, 8, 64).expect("private geometry");
        let mut l3 = Llc::new(Geometry { size: 1024 * KIB, ways: 16, line_size: 64 }).expect("l3 geometry");
        (0..passes)
            .map(|_| {
                let mut n = Counted::default();
                for a in (0..bytes).step_by(64) {
                    for line in l3.lines(a, 8) {
                        let hit = p.touch(line);
                        n.line(hit, l3.access_line(line, false, 1, u64::MAX, &mut Nothing));
                    }
                }
                n
            })
            .collect()
    }

    #[test]
    fn a_set_the_private_cache_holds_references_the_l3_once() {
        let n = sweep(16 * KIB, 3);
        assert_eq!(n[0], Counted { lookups: 256, references: 256, misses: 256 });
        assert_eq!(n[1], Counted { lookups: 256, ..Counted::default() });
        assert_eq!(n[2], Counted { lookups: 256, ..Counted::default() });
    }

    #[test]
    fn a_set_between_the_two_references_every_line_and_misses_only_at_first() {
        let n = sweep(512 * KIB, 3);
        assert_eq!(n[0], Counted { lookups: 8192, references: 8192, misses: 8192 });
        assert_eq!(n[1], Counted { lookups: 8192, references: 8192, misses: 0 });
        assert_eq!(n[2], Counted { lookups: 8192, references: 8192, misses: 0 });
    }

    #[test]
    fn a_stream_larger_than_the_l3_misses_on_every_line() {
        let n = sweep(2048 * KIB, 2);
        assert_eq!(n[1], Counted { lookups: 32768, references: 32768, misses: 32768 });
    }

    #[test]
    fn a_line_the_l3_lost_is_a_reference_and_a_miss_though_the_private_cache_holds_it() {
        let mut n = Counted::default();
        n.line(true, false);
        assert_eq!(n, Counted { lookups: 1, references: 1, misses: 1 });
    }

    #[test]
    fn invalidated_lines_are_references_again() {
        let mut p = Private::new(32 * KIB, 8, 64).expect("geometry");
        assert!(!p.touch(7));
        assert!(p.touch(7));
        p.invalidate(7);
        assert!(!p.touch(7));
        p.clear();
        assert!(!p.touch(7));
    }

    #[test]
    fn geometries_the_device_refuses_are_refused() {
        assert!(Private::new(0, 8, 64).is_none());
        assert!(Private::new(32 * KIB, 0, 64).is_none());
        assert!(Private::new(24 * KIB, 8, 64).is_none(), "48 sets");
        assert!(Private::new(1000, 8, 64).is_none());
    }

    proptest::proptest! {
        /// As the L3's: the remembered way changes which accesses hit in no way.
        #[test]
        fn the_remembered_way_is_only_a_shortcut(lines in proptest::collection::vec((0u64..4096, 0u8..20), 1..4000)) {
            let mut fast = Private::new(4 * KIB, 4, 64).expect("geometry");
            let mut slow = Private::new(4 * KIB, 4, 64).expect("geometry");
            for (line, op) in lines {
                slow.last = (line as usize * 5) % slow.way.len();
                match op {
                    0 => {
                        fast.invalidate(line);
                        slow.invalidate(line);
                    }
                    1 if line % 64 == 0 => {
                        fast.clear();
                        slow.clear();
                    }
                    _ => proptest::prop_assert_eq!(fast.touch(line), slow.touch(line)),
                }
            }
        }
    }
}
