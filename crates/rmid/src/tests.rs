use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

const MS: Duration = Duration::from_millis(1);

fn alloc(max: Rmid) -> Allocator<String> {
    Allocator::new(&[0, 2], Config { max_rmid: max, threshold_bytes: 1000, min_limbo: 10 * MS })
}

#[test]
fn rmid_zero_never_handed_out_and_exhaustion_is_typed() {
    let mut a = alloc(3);
    let got: Vec<Rmid> = (0..3).map(|i| a.allocate(format!("c{i}"), &[0, 2]).unwrap()).collect();
    assert_eq!(got, vec![1, 2, 3]);
    assert_eq!(a.allocate("c9".into(), &[0]), Err(AllocError::Exhausted { domain: 0, held: 3 }));
    a.free(&"c1".to_string(), 5 * MS);
    assert_eq!(a.allocate("c9".into(), &[0]), Err(AllocError::OnlyLimbo { domain: 0, limbo: 1 }));
    assert_eq!(a.allocate("c9".into(), &[7]), Err(AllocError::UnknownDomain(7)));
    assert_eq!(a.allocate("c9".into(), &[]), Err(AllocError::NoDomains));
}

#[test]
fn limbo_until_clean_in_every_domain_and_min_time() {
    let mut a = alloc(1);
    assert_eq!(a.allocate("x".into(), &[0, 2]).unwrap(), 1);
    assert_eq!(a.free(&"x".to_string(), 100 * MS), vec![(0, 1), (2, 1)]);
    assert_eq!(a.limbo(0), vec![1]);
    // Dirty: stays.
    assert!(!a.report_occupancy(0, 1, 5000, 200 * MS));
    // Clean but too soon: stays.
    assert!(!a.report_occupancy(0, 1, 10, 105 * MS));
    // Clean in domain 0 only: usable on domain 0 alone, not across both.
    assert!(a.report_occupancy(0, 1, 10, 120 * MS));
    assert!(matches!(a.allocate("y".into(), &[0, 2]), Err(AllocError::OnlyLimbo { domain: 2, .. })));
    assert!(a.report_occupancy(2, 1, 999, 130 * MS));
    assert_eq!(a.allocate("y".into(), &[0, 2]).unwrap(), 1);
    // Reports for RMIDs not in limbo are ignored.
    assert!(!a.report_occupancy(0, 1, 0, 1000 * MS));
}

#[test]
fn oldest_clean_reused_first_and_owner_gets_same_rmid() {
    let mut a = alloc(4);
    for i in 0..4 {
        a.allocate(format!("c{i}"), &[0]).unwrap();
    }
    assert_eq!(a.allocate("c2".into(), &[0]).unwrap(), 3, "re-asking returns the held RMID");
    a.free(&"c2".into(), 10 * MS); // RMID 3
    a.free(&"c0".into(), 11 * MS); // RMID 1
    assert!(a.report_occupancy(0, 1, 0, 30 * MS));
    assert!(a.report_occupancy(0, 3, 0, 40 * MS));
    assert_eq!(a.allocate("n1".into(), &[0]).unwrap(), 1, "clean since 30 ms beats clean since 40 ms");
    assert_eq!(a.allocate("n2".into(), &[0]).unwrap(), 3);
    assert_eq!(a.stats(0), PoolStats { held: 4, limbo: 0, free: 0 });
}

#[derive(Debug, Clone)]
enum Op {
    Alloc { owner: u8, both: bool },
    Free { owner: u8 },
    Report { domain: bool, pick: usize, bytes: u64 },
    Tick(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..12, any::<bool>()).prop_map(|(owner, both)| Op::Alloc { owner, both }),
        (0u8..12).prop_map(|owner| Op::Free { owner }),
        (any::<bool>(), any::<usize>(), 0u64..2000).prop_map(|(domain, pick, bytes)| Op::Report {
            domain,
            pick,
            bytes
        }),
        (0u64..20).prop_map(Op::Tick),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// No RMID held by two owners; a freed RMID never returns while dirty or too early;
    /// held + limbo + free always accounts for every RMID (nothing leaks).
    #[test]
    fn allocator_invariants(ops in proptest::collection::vec(op(), 1..300)) {
        let max = 6;
        let mut a = alloc(max);
        let mut now = Duration::ZERO;
        // Model: per (domain, rmid) when freed and whether a clean report made it free.
        let mut freed_at: BTreeMap<(DomainId, Rmid), Duration> = BTreeMap::new();
        let mut clean_ok: BTreeSet<(DomainId, Rmid)> = BTreeSet::new();
        for op in ops {
            match op {
                Op::Alloc { owner, both } => {
                    let doms: &[DomainId] = if both { &[0, 2] } else { &[2] };
                    if let Ok(r) = a.allocate(format!("o{owner}"), doms) {
                        prop_assert!(r >= 1 && r <= max);
                        for &d in doms {
                            // If it was ever freed, it must have been reported clean since.
                            if freed_at.remove(&(d, r)).is_some() {
                                prop_assert!(clean_ok.remove(&(d, r)), "RMID {r} reused in domain {d} while dirty");
                            }
                            prop_assert_eq!(a.holder(d, r), Some(&format!("o{owner}")));
                        }
                    }
                }
                Op::Free { owner } => {
                    for (d, r) in a.free(&format!("o{owner}"), now) {
                        freed_at.insert((d, r), now);
                        clean_ok.remove(&(d, r));
                    }
                }
                Op::Report { domain, pick, bytes } => {
                    let d = if domain { 0 } else { 2 };
                    let limbo = a.limbo(d);
                    if !limbo.is_empty() {
                        let r = limbo[pick % limbo.len()];
                        let became_free = a.report_occupancy(d, r, bytes, now);
                        let should = bytes < 1000 && now - freed_at[&(d, r)] >= 10 * MS;
                        prop_assert_eq!(became_free, should);
                        if became_free {
                            clean_ok.insert((d, r));
                        }
                    }
                }
                Op::Tick(ms) => now += Duration::from_millis(ms),
            }
            for d in [0, 2] {
                let s = a.stats(d);
                prop_assert_eq!(s.held + s.limbo + s.free, max as usize, "leak in domain {}", d);
                // Each held RMID has exactly one owner, and an owner holds at most one RMID.
                let mut owners = BTreeSet::new();
                for r in 1..=max {
                    if let Some(o) = a.holder(d, r) {
                        prop_assert!(owners.insert(o.clone()), "{} holds two RMIDs in domain {}", o, d);
                    }
                }
            }
        }
    }
}
