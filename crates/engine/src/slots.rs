//! The RMID policy, one for every backend: who waits for an RMID and why, who gets one when
//! one frees up (the busiest first), and when a busy waiting container takes the RMID of an
//! idle monitored one. Backends only say whether an attach worked; the waiting list, the
//! `no_rmid` rows and the swaps live here.

pub use crate::backend::WaitReason;
use crate::backend::{Attach, CacheBackend};
use crate::containers::{Container, ContainerSource};
use crate::error::{PartError, PartResult};
use std::collections::BTreeMap;
use std::time::Duration;

/// Budget policy knobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// A waiting container replaces a monitored one only when it uses this much more CPU
    /// (relative) ...
    pub margin: f64,
    /// ... and at least this many more cores (absolute), so idle noise never causes churn.
    pub min_cpu_gap: f64,
    /// A container keeps its RMID at least this long once it has one.
    pub min_hold: Duration,
    /// At most this many replacements per upkeep round.
    pub max_swaps: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Policy { margin: 0.5, min_cpu_gap: 0.05, min_hold: Duration::from_secs(5), max_swaps: 4 }
    }
}

/// Which monitored containers to evict for which waiting ones: the busiest waiting replace the
/// least busy monitored (that have held their RMID for `min_hold`), while the gap is worth
/// it. Inputs: (id, cores used) and, for monitored, how long each has held its RMID.
pub fn swaps(monitored: &[(String, f64, Duration)], waiting: &[(String, f64)], p: &Policy) -> Vec<(String, String)> {
    let mut m: Vec<&(String, f64, Duration)> = monitored.iter().filter(|x| x.2 >= p.min_hold).collect();
    m.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut w: Vec<&(String, f64)> = waiting.iter().collect();
    w.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    m.iter()
        .zip(w.iter())
        .take(p.max_swaps)
        .take_while(|(m, w)| w.1 > m.1 * (1.0 + p.margin) + p.min_cpu_gap)
        .map(|(m, w)| (m.0.clone(), w.0.clone()))
        .collect()
}

/// A container without an RMID.
#[derive(Debug, Clone)]
pub struct Waiting {
    pub container: Container,
    pub reason: WaitReason,
    pub since: Duration,
}

#[derive(Debug, Clone)]
pub struct Held {
    pub container: Container,
    pub rmid: Option<u32>,
    pub since: Duration,
}

/// The containers a run follows, monitored or waiting.
#[derive(Default)]
pub struct Slots {
    pub policy: Policy,
    held: BTreeMap<String, Held>,
    waiting: BTreeMap<String, Waiting>,
    /// CPU use: last (usage µs, at) and the rate in cores.
    cpu_prev: BTreeMap<String, (u64, Duration)>,
    cpu_rate: BTreeMap<String, f64>,
    pub evictions: u64,
    /// Attaches a backend refused for the container's own trouble ([`PartError::Container`]):
    /// how many, and the last one's words (said at the end of the run).
    pub refused: u64,
    pub last_refusal: Option<String>,
}

impl Slots {
    pub fn held(&self) -> &BTreeMap<String, Held> {
        &self.held
    }

    pub fn waiting(&self) -> &BTreeMap<String, Waiting> {
        &self.waiting
    }

    pub fn count(&self) -> usize {
        self.held.len() + self.waiting.len()
    }

    fn wait(&mut self, c: Container, reason: WaitReason, now: Duration) {
        let since = self.waiting.get(c.id()).filter(|w| w.reason == reason).map_or(now, |w| w.since);
        self.waiting.insert(c.id().to_string(), Waiting { container: c, reason, since });
    }

    /// A container started: attach it now (before its first interval is sampled).
    pub fn start(
        &mut self,
        c: Container,
        backend: &mut dyn CacheBackend,
        src: &dyn ContainerSource,
        now: Duration,
    ) -> PartResult {
        if self.held.contains_key(c.id()) {
            return Ok(());
        }
        self.try_attach(c, backend, src, now).map(|_| ())
    }

    fn try_attach(
        &mut self,
        c: Container,
        backend: &mut dyn CacheBackend,
        src: &dyn ContainerSource,
        now: Duration,
    ) -> PartResult<bool> {
        let attached = match backend.attach(&c, src, now) {
            // That container's trouble, not the run's: it waits and is retried at upkeep
            // (its source reports its end if it is gone).
            Err(e @ PartError::Container { .. }) => {
                self.refused += 1;
                self.last_refusal = Some(e.to_string());
                self.wait(c, WaitReason::Lost, now);
                return Ok(false);
            }
            other => other?,
        };
        match attached {
            Attach::Monitored { rmid } => {
                self.waiting.remove(c.id());
                self.held.insert(c.id().to_string(), Held { container: c, rmid, since: now });
                Ok(true)
            }
            Attach::Waiting(reason) => {
                self.wait(c, reason, now);
                Ok(false)
            }
        }
    }

    /// A container stopped.
    pub fn stop(&mut self, id: &str, backend: &mut dyn CacheBackend, now: Duration) -> PartResult<bool> {
        self.waiting.remove(id);
        self.cpu_prev.remove(id);
        self.cpu_rate.remove(id);
        let known = self.held.remove(id).is_some();
        if known {
            backend.detach(id, now)?;
        }
        Ok(known)
    }

    /// Measure CPU use, let the backend do its upkeep, give free RMIDs to the busiest waiting
    /// containers, and swap idle monitored containers for busy waiting ones.
    ///
    /// `cpu` gives a container's CPU time so far in µs: the PMU source's, where it counts
    /// CPU time, else the cgroup's `cpu.stat` ([`ContainerSource::cpu_usage_usec`]).
    pub fn upkeep(
        &mut self,
        backend: &mut dyn CacheBackend,
        src: &dyn ContainerSource,
        now: Duration,
        cpu: &dyn Fn(&str) -> Option<u64>,
    ) -> PartResult {
        // CPU use only decides who of the waiting gets an RMID, and whom they replace: with
        // no one waiting it is not read (a file per container, 10,000 of them each upkeep).
        let followed = if self.waiting.is_empty() { 0 } else { self.held.len() + self.waiting.len() };
        for id in self.held.keys().chain(self.waiting.keys()).take(followed) {
            if let Some(u) = cpu(id) {
                if let Some((pu, pt)) = self.cpu_prev.insert(id.clone(), (u, now)) {
                    let dt = now.saturating_sub(pt).as_secs_f64();
                    if dt > 0.0 {
                        self.cpu_rate.insert(id.clone(), u.saturating_sub(pu) as f64 / 1e6 / dt);
                    }
                }
            }
        }
        for (id, reason) in backend.upkeep(now, src)? {
            if let Some(h) = self.held.remove(&id) {
                self.wait(h.container, reason, now);
            }
        }
        let cpu = |s: &Self, id: &str| s.cpu_rate.get(id).copied().unwrap_or(0.0);
        let mut order: Vec<(String, f64)> =
            self.waiting.iter().filter(|(_, w)| w.reason.retry()).map(|(k, _)| (k.clone(), cpu(self, k))).collect();
        order.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        let mut blocked = false;
        for (id, _) in &order {
            let Some(w) = self.waiting.get(id) else { continue };
            let c = w.container.clone();
            if !self.try_attach(c, backend, src, now)? {
                blocked = true;
                break;
            }
        }
        if !blocked {
            return Ok(());
        }
        // Free RMIDs are gone: should a busier waiting container replace an idle one?
        let monitored: Vec<(String, f64, Duration)> =
            self.held.iter().map(|(k, h)| (k.clone(), cpu(self, k), now.saturating_sub(h.since))).collect();
        let waiting: Vec<(String, f64)> = self
            .waiting
            .iter()
            .filter(|(_, w)| matches!(w.reason, WaitReason::Exhausted | WaitReason::Evicted))
            .map(|(k, _)| (k.clone(), cpu(self, k)))
            .collect();
        for (evict, admit) in swaps(&monitored, &waiting, &self.policy) {
            if let Some(h) = self.held.remove(&evict) {
                backend.detach(&evict, now)?;
                self.evictions += 1;
                self.wait(h.container, WaitReason::Evicted, now);
            }
            // Usually the freed RMID is in limbo now: the admitted one waits as Limbo and,
            // being the busiest, wins the next retry.
            if let Some(w) = self.waiting.get(&admit) {
                let c = w.container.clone();
                self.try_attach(c, backend, src, now)?;
            }
        }
        Ok(())
    }

    /// Detach everything (at the end of a run).
    pub fn stop_all(&mut self, backend: &mut dyn CacheBackend, now: Duration) -> PartResult {
        let ids: Vec<String> = self.held.keys().cloned().collect();
        for id in ids {
            self.stop(&id, backend, now)?;
        }
        self.waiting.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_swaps_busiest_for_idlest() {
        let p = Policy::default();
        let held = Duration::from_secs(10);
        let m = vec![
            ("idle".to_string(), 0.01, held),
            ("busy".to_string(), 1.5, held),
            ("new".to_string(), 0.0, Duration::ZERO),
        ];
        let w = vec![("hot".to_string(), 0.9), ("cold".to_string(), 0.02)];
        // hot replaces idle; cold is not worth a swap; "new" is protected by min_hold.
        assert_eq!(swaps(&m, &w, &p), vec![("idle".to_string(), "hot".to_string())]);
        assert!(swaps(&m, &[], &p).is_empty());
        let p1 = Policy { max_swaps: 0, ..Policy::default() };
        assert!(swaps(&m, &w, &p1).is_empty());
    }
}
