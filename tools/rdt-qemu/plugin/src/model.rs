//! One L3 domain's last-level cache: set-associative, true LRU, write-back, every line tagged
//! with the RMID that filled it.
//!
//! What it charges, and to whom:
//! - a miss fills one line from memory: `filled(rmid, line)` for the RMID of the access, and
//!   the line now counts in that RMID's occupancy;
//! - a hit keeps the line's owner (occupancy belongs to whoever brought the line in, as on
//!   Intel's CMT), and a store makes the line dirty;
//! - an eviction takes the line from its owner's occupancy and, when dirty, writes it back:
//!   `written_back(owner, line)`;
//! - cache allocation (CAT): a miss fills only a way its class's capacity bitmask allows (bit i:
//!   way i), the victim being the least recently used of those; a hit finds a line in any way.
//!   A class whose mask allows no way (AMD permits an empty mask) does not allocate: its misses
//!   go to memory, loads charged as `filled`, stores as `written_back`, and nothing is held.
//!
//! - a flush (CLFLUSH, CLFLUSHOPT) takes the line out, written back first when dirty; CLWB
//!   writes a dirty line back and keeps it, clean; WBINVD writes back every dirty line and
//!   empties the cache, INVD empties it without writing anything back;
//! - a non-temporal store (MOVNT*) does not allocate: its bytes go to memory, charged as
//!   `written_back` to the storing RMID, and a cached copy of its line is flushed first.
//!
//! Not modelled: private L1/L2 caches in front (every access reaches this cache), prefetchers,
//! instruction fetches, non-inclusive victim caches, hashed set indexing, timing; write
//! combining (a partial line stored non-temporally costs its bytes, not a whole line).

/// Where the model reports what it charges. The plugin writes these into the device's
/// counters; tests keep them in vectors.
pub trait Sink {
    /// `lines` more (or fewer, when negative) lines of the cache are tagged with `rmid`.
    fn occupancy(&mut self, rmid: u16, lines: i64);
    /// `bytes` were read from memory for an access by `rmid`.
    fn filled(&mut self, rmid: u16, bytes: u64);
    /// `bytes` of a dirty line owned by `rmid` were written back to memory.
    fn written_back(&mut self, rmid: u16, bytes: u64);
}

/// The shape of a cache, as the device's properties give it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes.
    pub size: u64,
    pub ways: u32,
    /// Bytes, a power of two.
    pub line_size: u32,
}

/// Why a geometry cannot make a cache.
#[derive(Debug, PartialEq, Eq)]
pub struct BadGeometry(pub Geometry);

impl std::fmt::Display for BadGeometry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let g = self.0;
        write!(
            f,
            "cache of {} bytes, {} ways, {}-byte lines: size must be a non-zero multiple of \
             ways x line size, line size a power of two",
            g.size, g.ways, g.line_size
        )
    }
}

const INVALID: u64 = u64::MAX;

/// One way of a set. A set's ways lie side by side, 16 bytes each: a 16-way set is four host
/// cache lines, which an access reads together. With the tags, owners, dirty bits and uses in
/// four arrays, a miss in the model cost four or more dependent misses in the host's caches
/// (the model of a 4 MiB L3 is over a megabyte), most of the plugin's time.
#[derive(Clone, Copy)]
struct Way {
    /// The line address (physical address >> line_shift), or INVALID.
    tag: u64,
    /// Last use, for LRU: the cache's clock at the time.
    used: u32,
    owner: u16,
    dirty: bool,
}

const EMPTY: Way = Way { tag: INVALID, used: 0, owner: 0, dirty: false };

pub struct Llc {
    sets: u64,
    /// sets - 1 when sets is a power of two: the set without a division.
    set_mask: Option<u64>,
    ways: usize,
    line_shift: u32,
    line_size: u64,
    /// Every set's ways, set-major.
    way: Vec<Way>,
    /// Counts accesses; renumbered before it wraps (`tick`).
    clock: u32,
    /// The way the last access found or filled: most accesses touch the same line as the one
    /// before (a loop's loads within a line), and checking that way first skips the set's
    /// search.
    last: usize,
}

impl Llc {
    pub fn new(g: Geometry) -> Result<Llc, BadGeometry> {
        let way_bytes = u64::from(g.ways) * u64::from(g.line_size);
        if g.ways == 0 || !g.line_size.is_power_of_two() || way_bytes == 0 || g.size == 0 {
            return Err(BadGeometry(g));
        }
        if !g.size.is_multiple_of(way_bytes) {
            return Err(BadGeometry(g));
        }
        let sets = g.size / way_bytes;
        let lines = usize::try_from(g.size / u64::from(g.line_size)).map_err(|_| BadGeometry(g))?;
        Ok(Llc {
            sets,
            set_mask: sets.is_power_of_two().then_some(sets - 1),
            ways: g.ways as usize,
            line_shift: g.line_size.trailing_zeros(),
            line_size: u64::from(g.line_size),
            way: vec![EMPTY; lines],
            clock: 0,
            last: 0,
        })
    }

    /// An access of `size` bytes at physical address `addr` by `rmid`, whose class of service
    /// may fill the ways set in `cbm` (u64::MAX: all): every line it touches.
    pub fn access(&mut self, addr: u64, size: u64, store: bool, rmid: u16, cbm: u64, sink: &mut impl Sink) {
        for line in self.lines(addr, size) {
            self.access_line(line, store, rmid, cbm, sink);
        }
    }

    /// One line of an access (a line address, as [`Llc::lines`] gives them): true when it hit.
    pub fn access_line(&mut self, line: u64, store: bool, rmid: u16, cbm: u64, sink: &mut impl Sink) -> bool {
        let all = if self.ways >= 64 { u64::MAX } else { (1u64 << self.ways) - 1 };
        self.touch(line, store, rmid, cbm & all, sink)
    }

    /// The first way of `line`'s set.
    fn base(&self, line: u64) -> usize {
        // The set index fits in usize: sets <= lines, which new() checked.
        let set = match self.set_mask {
            Some(m) => line & m,
            None => line % self.sets,
        };
        set as usize * self.ways
    }

    /// The clock's next value. Before it wraps, each set's uses are renumbered by their order
    /// (a pass over the cache every 4 billion accesses), which is all LRU compares.
    fn tick(&mut self) -> u32 {
        if self.clock == u32::MAX {
            let mut order: Vec<usize> = Vec::with_capacity(self.ways);
            for set in self.way.chunks_mut(self.ways) {
                order.clear();
                order.extend(0..set.len());
                order.sort_by_key(|&i| set[i].used);
                for (rank, &i) in order.iter().enumerate() {
                    // Below ways, which new() took from a u32.
                    set[i].used = rank as u32;
                }
            }
            self.clock = self.ways as u32;
        }
        self.clock += 1;
        self.clock
    }

    fn touch(&mut self, line: u64, store: bool, rmid: u16, cbm: u64, sink: &mut impl Sink) -> bool {
        let now = self.tick();
        // A line is in one way at most, so a hit there is the hit the search would find.
        let last = &mut self.way[self.last];
        if last.tag == line {
            last.used = now;
            last.dirty |= store;
            return true;
        }
        let base = self.base(line);
        let set = &mut self.way[base..base + self.ways];
        if let Some(i) = set.iter().position(|w| w.tag == line) {
            set[i].used = now;
            set[i].dirty |= store;
            self.last = base + i;
            return true;
        }
        if cbm == 0 {
            if store {
                sink.written_back(rmid, self.line_size);
            } else {
                sink.filled(rmid, self.line_size);
            }
            return false;
        }
        // Miss: an invalid way the class may fill, else the least recently used of those. Ways
        // past the 64th (only where a cache has more) are always allowed.
        let allowed = |(i, _): &(usize, &Way)| *i >= 64 || cbm >> *i & 1 == 1;
        let victim = set
            .iter()
            .enumerate()
            .filter(allowed)
            .find(|(_, w)| w.tag == INVALID)
            .or_else(|| set.iter().enumerate().filter(allowed).min_by_key(|(_, w)| w.used))
            .map_or(0, |(i, _)| i);
        let v = &mut set[victim];
        if v.tag != INVALID {
            sink.occupancy(v.owner, -1);
            if v.dirty {
                sink.written_back(v.owner, self.line_size);
            }
        }
        *v = Way { tag: line, used: now, owner: rmid, dirty: store };
        self.last = base + victim;
        sink.occupancy(rmid, 1);
        sink.filled(rmid, self.line_size);
        false
    }

    /// The line addresses an access of `size` bytes at `addr` touches.
    pub fn lines(&self, addr: u64, size: u64) -> std::ops::RangeInclusive<u64> {
        (addr >> self.line_shift)..=(addr.saturating_add(size.max(1) - 1) >> self.line_shift)
    }

    /// The way holding `line`, if cached.
    fn find(&self, line: u64) -> Option<usize> {
        let base = self.base(line);
        (base..base + self.ways).find(|&i| self.way[i].tag == line)
    }

    /// Takes way `i` out: from its owner's occupancy, written back first when dirty.
    fn evict(&mut self, i: usize, sink: &mut impl Sink) {
        let w = &mut self.way[i];
        sink.occupancy(w.owner, -1);
        if w.dirty {
            sink.written_back(w.owner, self.line_size);
        }
        w.tag = INVALID;
        w.dirty = false;
    }

    /// CLFLUSH, CLFLUSHOPT (`keep` false) or CLWB (`keep` true) of the line holding physical
    /// address `addr`: a dirty line is written back, charged to its owner; a flushed one
    /// leaves its owner's occupancy, a written-back one stays, clean.
    pub fn flush_line(&mut self, addr: u64, keep: bool, sink: &mut impl Sink) {
        let Some(i) = self.find(addr >> self.line_shift) else { return };
        if !keep {
            self.evict(i, sink);
        } else if self.way[i].dirty {
            sink.written_back(self.way[i].owner, self.line_size);
            self.way[i].dirty = false;
        }
    }

    /// WBINVD (`write_back`) or INVD: every line out, the dirty ones written back first
    /// (WBINVD) or dropped (INVD).
    pub fn flush_all(&mut self, write_back: bool, sink: &mut impl Sink) {
        for i in 0..self.way.len() {
            if self.way[i].tag != INVALID {
                self.way[i].dirty &= write_back;
                self.evict(i, sink);
            }
        }
    }

    /// A non-temporal store of `size` bytes at `addr` by `rmid`: nothing is allocated, a cached
    /// copy of each line it touches is flushed, and its bytes go to memory.
    pub fn store_nt(&mut self, addr: u64, size: u64, rmid: u16, sink: &mut impl Sink) {
        for line in self.lines(addr, size) {
            if let Some(i) = self.find(line) {
                self.evict(i, sink);
            }
        }
        sink.written_back(rmid, size);
    }

    /// Lines tagged with each RMID below `rmids` (for tests and checks).
    pub fn lines_by_rmid(&self, rmids: usize) -> Vec<u64> {
        let mut n = vec![0u64; rmids];
        for w in self.way.iter().filter(|w| w.tag != INVALID) {
            if let Some(c) = n.get_mut(usize::from(w.owner)) {
                *c += 1;
            }
        }
        n
    }

    pub fn capacity_lines(&self) -> u64 {
        self.way.len() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Per-RMID totals, as the device keeps them.
    #[derive(Default, Debug)]
    struct Tally {
        lines: Vec<i64>,
        filled: Vec<u64>,
        written_back: Vec<u64>,
    }

    impl Tally {
        fn new(rmids: usize) -> Tally {
            Tally { lines: vec![0; rmids], filled: vec![0; rmids], written_back: vec![0; rmids] }
        }
    }

    impl Sink for Tally {
        fn occupancy(&mut self, rmid: u16, lines: i64) {
            self.lines[usize::from(rmid)] += lines;
        }
        fn filled(&mut self, rmid: u16, bytes: u64) {
            self.filled[usize::from(rmid)] += bytes;
        }
        fn written_back(&mut self, rmid: u16, bytes: u64) {
            self.written_back[usize::from(rmid)] += bytes;
        }
    }

    const KIB: u64 = 1024;

    fn llc(size: u64, ways: u32) -> Llc {
        Llc::new(Geometry { size, ways, line_size: 64 }).expect("geometry")
    }

    /// Touches every line of [base, base + bytes) once, in order.
    fn sweep(c: &mut Llc, t: &mut Tally, base: u64, bytes: u64, store: bool, rmid: u16) {
        for a in (base..base + bytes).step_by(64) {
            c.access(a, 8, store, rmid, u64::MAX, t);
        }
    }

    /// As [`sweep`], for a class of service that may fill the ways in `cbm`.
    fn sweep_cbm(c: &mut Llc, t: &mut Tally, base: u64, bytes: u64, rmid: u16, cbm: u64) {
        for a in (base..base + bytes).step_by(64) {
            c.access(a, 8, false, rmid, cbm, t);
        }
    }

    #[test]
    fn a_working_set_smaller_than_the_cache_is_held_whole_and_filled_once() {
        let mut c = llc(1024 * KIB, 16);
        let mut t = Tally::new(4);
        for _ in 0..5 {
            sweep(&mut c, &mut t, 1 << 30, 256 * KIB, false, 1);
        }
        assert_eq!(t.lines[1] as u64 * 64, 256 * KIB);
        assert_eq!(t.filled[1], 256 * KIB, "later passes hit");
        assert_eq!(t.written_back[1], 0);
    }

    #[test]
    fn a_stream_larger_than_the_cache_misses_on_every_line() {
        let mut c = llc(256 * KIB, 8);
        let mut t = Tally::new(2);
        for _ in 0..3 {
            sweep(&mut c, &mut t, 0, 1024 * KIB, false, 1);
        }
        assert_eq!(t.filled[1], 3 * 1024 * KIB, "LRU on a cyclic sweep larger than the cache");
        assert_eq!(t.lines[1] as u64, c.capacity_lines());
    }

    #[test]
    fn a_thrasher_takes_the_victims_lines_and_dirty_lines_are_written_back_by_their_owner() {
        let mut c = llc(512 * KIB, 16);
        let mut t = Tally::new(3);
        sweep(&mut c, &mut t, 0, 128 * KIB, true, 1);
        assert_eq!(t.lines[1] as u64 * 64, 128 * KIB);
        sweep(&mut c, &mut t, 64 << 20, 2048 * KIB, false, 2);
        assert_eq!(t.lines[1], 0, "the victim's lines were all evicted");
        assert_eq!(t.written_back[1], 128 * KIB, "its dirty lines went back, charged to it");
        assert_eq!(t.written_back[2], 0);
        assert_eq!(t.lines[2] as u64, c.capacity_lines());
    }

    #[test]
    fn a_hit_by_another_rmid_leaves_the_line_with_its_owner() {
        let mut c = llc(64 * KIB, 4);
        let mut t = Tally::new(3);
        sweep(&mut c, &mut t, 0, 16 * KIB, false, 1);
        sweep(&mut c, &mut t, 0, 16 * KIB, false, 2);
        assert_eq!(t.lines[1] as u64 * 64, 16 * KIB);
        assert_eq!(t.lines[2], 0);
        assert_eq!(t.filled[2], 0);
    }

    #[test]
    fn an_access_across_a_line_boundary_touches_both_lines() {
        let mut c = llc(64 * KIB, 4);
        let mut t = Tally::new(1);
        c.access(60, 8, false, 0, u64::MAX, &mut t);
        assert_eq!(t.lines[0], 2);
        c.access(u64::MAX - 3, 8, false, 0, u64::MAX, &mut t);
        assert_eq!(t.lines[0], 3, "an access at the top of the address space does not wrap");
    }

    #[test]
    fn a_class_fills_only_its_ways_so_a_thrasher_confined_to_a_quarter_leaves_the_rest() {
        let mut c = llc(512 * KIB, 16);
        let mut t = Tally::new(3);
        // RMID 1 may fill ways 0-11, the thrasher (RMID 2) ways 12-15: a quarter of the cache.
        sweep_cbm(&mut c, &mut t, 0, 256 * KIB, 1, 0x0fff);
        sweep_cbm(&mut c, &mut t, 64 << 20, 2048 * KIB, 2, 0xf000);
        assert_eq!(t.lines[1] as u64 * 64, 256 * KIB, "nothing of the confined thrasher's reached 1's ways");
        assert_eq!(t.lines[2] as u64 * 64, 128 * KIB, "the thrasher holds its four ways of 16");
        // A class confined to fewer ways than its working set needs misses again on a second pass.
        let before = t.filled[1];
        sweep_cbm(&mut c, &mut t, 0, 256 * KIB, 1, 0x000f);
        assert_eq!(t.filled[1], before, "hits find its lines in any way");
        sweep_cbm(&mut c, &mut t, 1 << 30, 256 * KIB, 1, 0x000f);
        assert_eq!(t.lines[1] as u64 * 64, 256 * KIB, "the new lines replaced its own, in ways 0-3");
        assert_eq!(t.lines[2] as u64 * 64, 128 * KIB, "and none of the thrasher's");
    }

    #[test]
    fn a_class_with_no_ways_allocates_nothing_and_reads_memory_every_time() {
        let mut c = llc(64 * KIB, 4);
        let mut t = Tally::new(2);
        sweep_cbm(&mut c, &mut t, 0, 16 * KIB, 1, 0xf0);
        sweep_cbm(&mut c, &mut t, 0, 16 * KIB, 1, 0xf0);
        assert_eq!(t.lines[1], 0);
        assert_eq!(t.filled[1], 32 * KIB, "both passes missed");
        c.access(1 << 20, 8, true, 1, 0, &mut t);
        assert_eq!((t.lines[1], t.written_back[1]), (0, 64), "a store goes to memory");
    }

    #[test]
    fn impossible_geometries_are_refused() {
        for g in [
            Geometry { size: 0, ways: 4, line_size: 64 },
            Geometry { size: 4096, ways: 0, line_size: 64 },
            Geometry { size: 4096, ways: 4, line_size: 48 },
            Geometry { size: 5000, ways: 4, line_size: 64 },
        ] {
            let e = Llc::new(g).err().expect("refused");
            assert!(e.to_string().contains("ways x line size"), "{e}");
        }
        // Non-power-of-two set counts are fine (real L3s have them).
        assert!(Llc::new(Geometry { size: 3 * 64 * 4, ways: 4, line_size: 64 }).is_ok());
    }

    /// The kernel's CMT selftest: a buffer filled under one RMID, every line flushed, then read
    /// under another: the second owns it all (on the model before flushes: 4 KiB of 1 MiB).
    #[test]
    fn flushed_lines_leave_their_owner_and_the_next_reader_fills_them() {
        let mut c = llc(4096 * KIB, 16);
        let mut t = Tally::new(3);
        sweep(&mut c, &mut t, 0, 1024 * KIB, true, 1);
        assert_eq!(t.lines[1], 16384);
        for a in (0..1024 * KIB).step_by(64) {
            c.flush_line(a, false, &mut t);
        }
        assert_eq!((t.lines[1], t.written_back[1]), (0, 1024 * KIB), "dirty lines written back by their owner");
        sweep(&mut c, &mut t, 0, 1024 * KIB, false, 2);
        assert_eq!((t.lines[1], t.lines[2], t.filled[2]), (0, 16384, 1024 * KIB));
        // A flush of a line not cached, or of a clean one, writes nothing back.
        c.flush_line(8192 * KIB, false, &mut t);
        c.flush_line(0, false, &mut t);
        assert_eq!((t.lines[2], t.written_back[2]), (16383, 0));
    }

    #[test]
    fn clwb_writes_back_and_keeps_the_line_clean() {
        let mut c = llc(64 * KIB, 4);
        let mut t = Tally::new(2);
        sweep(&mut c, &mut t, 0, 4 * KIB, true, 1);
        for a in (0..4 * KIB).step_by(64) {
            c.flush_line(a, true, &mut t);
        }
        assert_eq!((t.lines[1], t.written_back[1]), (64, 4 * KIB));
        // Clean now: a second write-back writes nothing, an eviction neither.
        c.flush_line(0, true, &mut t);
        c.flush_line(0, false, &mut t);
        assert_eq!((t.lines[1], t.written_back[1]), (63, 4 * KIB));
    }

    #[test]
    fn wbinvd_writes_back_and_empties_invd_drops() {
        let mut c = llc(64 * KIB, 4);
        let mut t = Tally::new(3);
        sweep(&mut c, &mut t, 0, 8 * KIB, true, 1);
        sweep(&mut c, &mut t, 8 * KIB, 8 * KIB, false, 2);
        c.flush_all(true, &mut t);
        assert_eq!((t.lines[1], t.lines[2], t.written_back[1], t.written_back[2]), (0, 0, 8 * KIB, 0));
        assert_eq!(c.lines_by_rmid(3), vec![0, 0, 0]);
        sweep(&mut c, &mut t, 0, 8 * KIB, true, 1);
        c.flush_all(false, &mut t);
        assert_eq!((t.lines[1], t.written_back[1]), (0, 8 * KIB), "INVD writes nothing back");
    }

    /// glibc's memset above its non-temporal threshold: bandwidth, no occupancy.
    #[test]
    fn non_temporal_stores_go_to_memory_and_take_cached_copies_out() {
        let mut c = llc(64 * KIB, 4);
        let mut t = Tally::new(3);
        for a in (0..2048 * KIB).step_by(32) {
            c.store_nt(a, 32, 1, &mut t);
        }
        assert_eq!((t.lines[1], t.filled[1], t.written_back[1]), (0, 0, 2048 * KIB));
        // A line cached (dirty, by another RMID) and then stored over non-temporally.
        sweep(&mut c, &mut t, 0, 4 * KIB, true, 2);
        c.store_nt(60, 8, 1, &mut t);
        assert_eq!((t.lines[2], t.written_back[2]), (62, 128), "both lines it spans flushed, written back");
        assert_eq!(t.written_back[1], 2048 * KIB + 8);
    }

    proptest! {
        /// Whatever the accesses: occupancy per RMID equals the lines tagged with it, never
        /// exceeds the cache, and every line filled is either held or was evicted.
        #[test]
        fn occupancy_is_conserved(
            ops in proptest::collection::vec((0u64..1 << 20, 1u64..64, any::<bool>(), 0u16..4, 0u64..16), 1..2000)
        ) {
            let mut c = llc(16 * KIB, 4);
            let mut t = Tally::new(4);
            let mut nt_bytes = 0;
            for (addr, size, store, rmid, cbm) in ops {
                // Every 16th operation a flush or a non-temporal store instead.
                match cbm {
                    13 => c.flush_line(addr, store, &mut t),
                    14 => {
                        c.store_nt(addr, size, rmid, &mut t);
                        nt_bytes += size;
                    }
                    15 if addr % 97 == 0 => c.flush_all(store, &mut t),
                    _ => c.access(addr, size, store, rmid, cbm, &mut t),
                }
            }
            let held = c.lines_by_rmid(4);
            let all_filled: u64 = t.filled.iter().sum();
            for (r, &h) in held.iter().enumerate() {
                prop_assert_eq!(t.lines[r], h as i64);
            }
            // Written back: each line filled at most once, and the non-temporal stores' bytes.
            prop_assert!(t.written_back.iter().sum::<u64>() <= all_filled + nt_bytes);
            prop_assert!(held.iter().sum::<u64>() <= c.capacity_lines());
            let filled_lines: u64 = t.filled.iter().sum::<u64>() / 64;
            prop_assert!(filled_lines >= held.iter().sum::<u64>());
        }

        /// The way remembered from the last access changes nothing but the time an access
        /// takes: the same accesses with it forgotten before each give the same hits and
        /// charges.
        #[test]
        fn the_remembered_way_is_only_a_shortcut(
            ops in proptest::collection::vec((0u64..1 << 16, 1u64..64, any::<bool>(), 0u16..4, 0u64..16), 1..1500)
        ) {
            let (mut fast, mut slow) = (llc(16 * KIB, 4), llc(16 * KIB, 4));
            let (mut tf, mut ts) = (Tally::new(4), Tally::new(4));
            for (addr, size, store, rmid, cbm) in ops {
                slow.last = (addr as usize * 7) % slow.way.len();
                for line in fast.lines(addr, size) {
                    let hit = fast.access_line(line, store, rmid, cbm, &mut tf);
                    prop_assert_eq!(hit, slow.access_line(line, store, rmid, cbm, &mut ts));
                }
                if cbm == 13 {
                    fast.flush_line(addr, store, &mut tf);
                    slow.flush_line(addr, store, &mut ts);
                }
            }
            prop_assert_eq!(fast.lines_by_rmid(4), slow.lines_by_rmid(4));
            prop_assert_eq!((tf.lines, tf.filled, tf.written_back), (ts.lines, ts.filled, ts.written_back));
        }

        /// The clock's renumbering before it wraps keeps every set's order: a cache whose
        /// clock wraps in the middle of the accesses hits and charges as one whose does not.
        #[test]
        fn the_clock_wrapping_changes_nothing(
            ops in proptest::collection::vec((0u64..1 << 16, 1u64..64, any::<bool>(), 0u16..4, 1u64..16), 1..1500),
            before in 0u32..3000,
        ) {
            let (mut wraps, mut plain) = (llc(16 * KIB, 4), llc(16 * KIB, 4));
            wraps.clock = u32::MAX - before;
            let (mut tw, mut tp) = (Tally::new(4), Tally::new(4));
            for (addr, size, store, rmid, cbm) in ops {
                for line in wraps.lines(addr, size) {
                    let hit = wraps.access_line(line, store, rmid, cbm, &mut tw);
                    prop_assert_eq!(hit, plain.access_line(line, store, rmid, cbm, &mut tp));
                }
            }
            prop_assert_eq!((tw.lines, tw.filled, tw.written_back), (tp.lines, tp.filled, tp.written_back));
        }
    }
}
