//! RMID allocation, pure.
//!
//! RMIDs are scoped per L3 domain, so each domain has its own pool. An owner (a container, a
//! core group) asks for one RMID across the domains it may run on; it gets a number that is
//! free in all of them. A freed RMID goes to *limbo* in each domain it was held in: cache lines
//! tagged with it are still resident, and handing it out at once would charge that stale
//! occupancy to the next owner. It returns to the free pool of a domain only once its measured
//! occupancy there is below a threshold (default: L3 size / number of RMIDs, Linux's
//! `max_threshold_occupancy`) and a minimum time has passed. Among clean RMIDs the one clean
//! longest is reused first. RMID 0 is everybody's default and is never handed out.
//!
//! Time is passed in (`Duration` since any fixed origin), so the allocator has no clock.

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

pub type Rmid = u32;
pub type DomainId = u32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Highest usable RMID: the minimum over the events in use (CPUID.0xF.1:ECX for L3).
    pub max_rmid: Rmid,
    /// Occupancy below which a freed RMID counts as clean.
    pub threshold_bytes: u64,
    /// Minimum time an RMID stays in limbo even when already clean.
    pub min_limbo: Duration,
}

impl Config {
    /// Linux's default threshold: L3 size divided by the number of RMIDs.
    pub fn default_threshold(l3_bytes: u64, max_rmid: Rmid) -> u64 {
        l3_bytes / (u64::from(max_rmid) + 1)
    }

    /// RMIDs 1..=`max_rmid` of an L3 of `l3_bytes`, clean below Linux's default threshold.
    pub fn with_default_threshold(max_rmid: Rmid, l3_bytes: u64, min_limbo: Duration) -> Config {
        Config { max_rmid, threshold_bytes: Config::default_threshold(l3_bytes, max_rmid), min_limbo }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// Every RMID is held (resctrl's ENOSPC).
    #[error("RMIDs exhausted in L3 domain {domain}: all {held} are held")]
    Exhausted { domain: DomainId, held: usize },
    /// Nothing free now, but RMIDs in limbo will come back once clean (resctrl's EBUSY).
    #[error("no clean RMID in L3 domain {domain}: {limbo} are in limbo waiting for their occupancy to decay")]
    OnlyLimbo { domain: DomainId, limbo: usize },
    #[error("unknown L3 domain {0}")]
    UnknownDomain(DomainId),
    /// The owner holds `rmid` in `held_in`, and that number is not free in `domain`.
    #[error("owner holds RMID {rmid} in L3 domain {held_in}, which is not free in domain {domain}")]
    HeldElsewhere { rmid: Rmid, held_in: DomainId, domain: DomainId },
    #[error("no L3 domain given")]
    NoDomains,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    pub held: usize,
    pub limbo: usize,
    pub free: usize,
}

#[derive(Debug, Clone)]
struct Pool<O> {
    /// Clean RMIDs with the time they became clean, oldest first.
    free: VecDeque<(Rmid, Duration)>,
    held: BTreeMap<Rmid, O>,
    /// RMID → time it was freed.
    limbo: BTreeMap<Rmid, Duration>,
}

#[derive(Debug, Clone)]
pub struct Allocator<O> {
    cfg: Config,
    pools: BTreeMap<DomainId, Pool<O>>,
}

impl<O: Clone + PartialEq> Allocator<O> {
    /// A pool per domain holding RMIDs 1..=max_rmid, all clean at time zero.
    pub fn new(domains: &[DomainId], cfg: Config) -> Self {
        let pools = domains
            .iter()
            .map(|&d| {
                let free = (1..=cfg.max_rmid).map(|r| (r, Duration::ZERO)).collect();
                (d, Pool { free, held: BTreeMap::new(), limbo: BTreeMap::new() })
            })
            .collect();
        Allocator { cfg, pools }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Change the threshold or minimum limbo time (resctrl's `max_threshold_occupancy` is
    /// writable). The RMID range is fixed at construction and is kept.
    pub fn set_config(&mut self, cfg: Config) {
        self.cfg = Config { max_rmid: self.cfg.max_rmid, ..cfg };
    }

    pub fn domains(&self) -> impl Iterator<Item = DomainId> + '_ {
        self.pools.keys().copied()
    }

    /// The RMID `owner` holds in `domain`.
    pub fn rmid_of(&self, owner: &O, domain: DomainId) -> Option<Rmid> {
        self.pools.get(&domain)?.held.iter().find(|(_, o)| *o == owner).map(|(r, _)| *r)
    }

    pub fn holder(&self, domain: DomainId, rmid: Rmid) -> Option<&O> {
        self.pools.get(&domain)?.held.get(&rmid)
    }

    /// One RMID for `owner`, free in every domain of `domains`; the one clean longest wins.
    /// An owner that already holds an RMID in one of those domains keeps that number.
    pub fn allocate(&mut self, owner: O, domains: &[DomainId]) -> Result<Rmid, AllocError> {
        let first = *domains.first().ok_or(AllocError::NoDomains)?;
        for d in domains {
            if !self.pools.contains_key(d) {
                return Err(AllocError::UnknownDomain(*d));
            }
        }
        // An owner holds at most one RMID per domain: if it already holds one in any of the
        // requested domains, that number is extended to the others (when free there).
        if let Some((d0, r)) = domains.iter().find_map(|d| self.rmid_of(&owner, *d).map(|r| (*d, r))) {
            for d in domains {
                let pool = &self.pools[d];
                let ok = pool.held.get(&r) == Some(&owner) || pool.free.iter().any(|(x, _)| *x == r);
                if !ok {
                    return Err(AllocError::HeldElsewhere { rmid: r, held_in: d0, domain: *d });
                }
            }
            for d in domains {
                let pool = self.pools.get_mut(d).ok_or(AllocError::UnknownDomain(*d))?;
                pool.free.retain(|(x, _)| *x != r);
                pool.held.insert(r, owner.clone());
            }
            return Ok(r);
        }
        // Candidate: free in every requested domain; key = the latest of its clean times.
        let mut best: Option<(Duration, usize, Rmid)> = None;
        for (pos, &(r, since)) in self.pools[&first].free.iter().enumerate() {
            let mut latest = since;
            let mut everywhere = true;
            for d in &domains[1..] {
                match self.pools[d].free.iter().find(|(x, _)| *x == r) {
                    Some(&(_, t)) => latest = latest.max(t),
                    None => {
                        everywhere = false;
                        break;
                    }
                }
            }
            if everywhere && best.is_none_or(|(t, p, _)| (latest, pos) < (t, p)) {
                best = Some((latest, pos, r));
            }
        }
        let Some((_, _, rmid)) = best else {
            // Name a domain with nothing free; say whether waiting for limbo would help.
            let d = domains.iter().copied().find(|d| self.pools[d].free.is_empty()).unwrap_or(first);
            let p = &self.pools[&d];
            return Err(if p.limbo.is_empty() {
                AllocError::Exhausted { domain: d, held: p.held.len() }
            } else {
                AllocError::OnlyLimbo { domain: d, limbo: p.limbo.len() }
            });
        };
        for d in domains {
            let pool = self.pools.get_mut(d).ok_or(AllocError::UnknownDomain(*d))?;
            pool.free.retain(|(r, _)| *r != rmid);
            pool.held.insert(rmid, owner.clone());
        }
        Ok(rmid)
    }

    /// Release everything `owner` holds into limbo; returns the (domain, RMID) pairs released.
    pub fn free(&mut self, owner: &O, now: Duration) -> Vec<(DomainId, Rmid)> {
        let mut released = Vec::new();
        for (&d, pool) in self.pools.iter_mut() {
            let rmids: Vec<Rmid> = pool.held.iter().filter(|(_, o)| *o == owner).map(|(r, _)| *r).collect();
            for r in rmids {
                pool.held.remove(&r);
                pool.limbo.insert(r, now);
                released.push((d, r));
            }
        }
        released
    }

    /// RMIDs in limbo in `domain`: the ones whose occupancy the caller should read.
    pub fn limbo(&self, domain: DomainId) -> Vec<Rmid> {
        self.pools.get(&domain).map(|p| p.limbo.keys().copied().collect()).unwrap_or_default()
    }

    /// Feed a measured occupancy of a limbo RMID. It becomes free in that domain when the value
    /// is below the threshold and the minimum limbo time has passed; returns whether it did.
    pub fn report_occupancy(&mut self, domain: DomainId, rmid: Rmid, bytes: u64, now: Duration) -> bool {
        let (threshold, min) = (self.cfg.threshold_bytes, self.cfg.min_limbo);
        let Some(pool) = self.pools.get_mut(&domain) else { return false };
        let Some(&freed_at) = pool.limbo.get(&rmid) else { return false };
        if bytes >= threshold || now.saturating_sub(freed_at) < min {
            return false;
        }
        pool.limbo.remove(&rmid);
        pool.free.push_back((rmid, now));
        true
    }

    pub fn stats(&self, domain: DomainId) -> PoolStats {
        self.pools
            .get(&domain)
            .map(|p| PoolStats { held: p.held.len(), limbo: p.limbo.len(), free: p.free.len() })
            .unwrap_or_default()
    }

    /// Totals over all domains.
    pub fn totals(&self) -> PoolStats {
        self.pools.keys().map(|d| self.stats(*d)).fold(PoolStats::default(), |a, s| PoolStats {
            held: a.held + s.held,
            limbo: a.limbo + s.limbo,
            free: a.free + s.free,
        })
    }
}

#[cfg(test)]
mod tests;
