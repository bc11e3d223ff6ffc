//! The sample row of docs/data.md: one (interval, container, L3 domain). Every backend
//! produces these and every sink consumes them.

use std::sync::{Arc, OnceLock};

/// Who a row is about. Shared by all of a container's rows (cheap to clone).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContainerMeta {
    /// Runtime id, or the cgroup path where there is none; scenario containers use their name.
    pub id: String,
    pub name: Option<String>,
    pub pod_name: Option<String>,
    pub pod_namespace: Option<String>,
    pub pod_uid: Option<String>,
    /// Relative to the cgroup v2 root (empty for scenario containers and core groups).
    pub cgroup_path: String,
    /// What the container's runtime says of it through its API, once it has answered, and
    /// again when that changes (`docker rename`). Set off the sampling path; a row shows what
    /// was known when it is written.
    pub runtime: RuntimeCell,
}

/// A name as it may reach a terminal: control characters (escape sequences, newlines) shown
/// escaped, never emitted raw.
pub fn printable(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A container's runtime metadata, set from another thread while rows read it: append-only
/// (each change is a new node, kept until the container's meta goes), so a reader borrows
/// the latest without a lock. Changes are rare (a first answer, the odd rename).
#[derive(Default)]
pub struct RuntimeCell {
    /// Boxed: most containers never get an answer (plain cgroups), and the node inline took
    /// 144 of a meta's 300 bytes.
    first: OnceLock<Box<RuntimeNode>>,
}

struct RuntimeNode {
    meta: RuntimeMeta,
    next: OnceLock<Box<RuntimeNode>>,
}

impl RuntimeCell {
    pub fn new(m: RuntimeMeta) -> RuntimeCell {
        let c = RuntimeCell::default();
        c.set(m);
        c
    }

    fn last(&self) -> Option<&RuntimeNode> {
        let mut n = self.first.get()?;
        while let Some(next) = n.next.get() {
            n = next;
        }
        Some(n)
    }

    /// The latest answer.
    pub fn get(&self) -> Option<&RuntimeMeta> {
        self.last().map(|n| &n.meta)
    }

    /// Record an answer; false when it says nothing new. One writer at a time (the resolver
    /// thread): a second racing one may lose its update, never corrupt the cell.
    pub fn set(&self, m: RuntimeMeta) -> bool {
        let Some(last) = self.last() else {
            return self.first.set(Box::new(RuntimeNode { meta: m, next: OnceLock::new() })).is_ok();
        };
        if last.meta == m {
            return false;
        }
        last.next.set(Box::new(RuntimeNode { meta: m, next: OnceLock::new() })).is_ok()
    }
}

impl Clone for RuntimeCell {
    fn clone(&self) -> RuntimeCell {
        self.get().cloned().map_or_else(RuntimeCell::default, RuntimeCell::new)
    }
}

impl PartialEq for RuntimeCell {
    fn eq(&self, other: &RuntimeCell) -> bool {
        self.get() == other.get()
    }
}

impl Eq for RuntimeCell {}

impl std::fmt::Debug for RuntimeCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// A container as its runtime's API describes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuntimeMeta {
    pub name: Option<String>,
    pub image: Option<String>,
    /// From the `io.kubernetes.*` labels, where a kubelet made the container: its pod, and
    /// its name in the pod's spec.
    pub pod_name: Option<String>,
    pub pod_namespace: Option<String>,
    pub pod_container: Option<String>,
}

/// A map key that is a container's id without a copy of it: its shared meta, hashed,
/// compared and ordered by the id, so a map keyed by it is looked up by `&str` as one keyed
/// by `String` is. Ten thousand containers' ids, copied into each per-container map, took
/// megabytes.
#[derive(Debug, Clone)]
pub struct ById(pub Arc<ContainerMeta>);

impl ById {
    pub fn id(&self) -> &str {
        &self.0.id
    }

    /// [`addr`] of its meta.
    pub fn addr(&self) -> usize {
        addr(&self.0)
    }
}

/// A container's key where a map holds its meta alive: the meta's address (an integer key,
/// no id hashed or compared; not reused while the map holds the meta).
pub fn addr(meta: &Arc<ContainerMeta>) -> usize {
    Arc::as_ptr(meta) as usize
}

impl std::hash::Hash for ById {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        // As `str` hashes: `Borrow<str>` needs the same hash for the same id.
        self.id().hash(h);
    }
}

impl PartialEq for ById {
    fn eq(&self, other: &ById) -> bool {
        self.id() == other.id()
    }
}

impl Eq for ById {}

impl PartialOrd for ById {
    fn partial_cmp(&self, other: &ById) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ById {
    fn cmp(&self, other: &ById) -> std::cmp::Ordering {
        self.id().cmp(other.id())
    }
}

impl std::borrow::Borrow<str> for ById {
    fn borrow(&self) -> &str {
        self.id()
    }
}

impl ContainerMeta {
    /// A container known only by a name (scenario containers, core groups).
    pub fn named(name: &str) -> Arc<ContainerMeta> {
        Arc::new(ContainerMeta { id: name.into(), name: Some(name.into()), ..Default::default() })
    }

    /// The best label for people: the name when known, else the id.
    pub fn label(&self) -> &str {
        self.name().unwrap_or(&self.id)
    }

    /// What the live view calls it: `namespace/pod/container` for a container a kubelet made
    /// (as kubectl names a pod, then the container's name in the pod's spec), else [`label`].
    ///
    /// [`label`]: ContainerMeta::label
    pub fn view_label(&self) -> String {
        match (self.pod_namespace(), self.pod_name()) {
            (ns, Some(pod)) => {
                let c = self.pod_container().or(self.name()).unwrap_or(&self.id);
                ns.map_or_else(|| format!("{pod}/{c}"), |ns| format!("{ns}/{pod}/{c}"))
            }
            _ => self.label().to_string(),
        }
    }

    /// Its name: the runtime's latest answer (it follows renames), else the cgroup side's (a
    /// scenario, Docker's local state when the container was found).
    pub fn name(&self) -> Option<&str> {
        self.runtime.get().and_then(|r| r.name.as_deref()).or(self.name.as_deref())
    }

    pub fn pod_name(&self) -> Option<&str> {
        self.pod_name.as_deref().or_else(|| self.runtime.get()?.pod_name.as_deref())
    }

    pub fn pod_namespace(&self) -> Option<&str> {
        self.pod_namespace.as_deref().or_else(|| self.runtime.get()?.pod_namespace.as_deref())
    }

    /// Its name in its pod's spec (Kubernetes), where the runtime says.
    pub fn pod_container(&self) -> Option<&str> {
        self.runtime.get()?.pod_container.as_deref()
    }

    pub fn image(&self) -> Option<&str> {
        self.runtime.get()?.image.as_deref()
    }
}

/// What stands behind a row's cache values. Absence is a value, never a silent 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    Ok,
    Unavailable,
    Error,
    Unassigned,
    NoRmid,
    Unsupported,
    /// The container stopped: the last row of its (container, domain), every value null, so
    /// that readers carrying occupancy forward stop there (recorded files only).
    Stopped,
}

impl Status {
    pub const ALL: [Status; 7] = [
        Status::Ok,
        Status::Unavailable,
        Status::Error,
        Status::Unassigned,
        Status::NoRmid,
        Status::Unsupported,
        Status::Stopped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Unavailable => "unavailable",
            Status::Error => "error",
            Status::Unassigned => "unassigned",
            Status::NoRmid => "no_rmid",
            Status::Unsupported => "unsupported",
            Status::Stopped => "stopped",
        }
    }

    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// How a row's bandwidth was counted where the kernel counts it only through assignable
/// counters (AMD ABMC, resctrl's `mbm_event` mode); None elsewhere (every RMID counts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MbmCounter {
    /// A counter the container keeps from turn to turn: continuous bandwidth.
    Kept,
    /// One of the counters rotating through containers: bandwidth for this turn only.
    Rotating,
}

impl MbmCounter {
    pub fn as_str(self) -> &'static str {
        match self {
            MbmCounter::Kept => "kept",
            MbmCounter::Rotating => "rotating",
        }
    }

    pub fn parse(s: &str) -> Option<MbmCounter> {
        [MbmCounter::Kept, MbmCounter::Rotating].into_iter().find(|x| x.as_str() == s)
    }
}

/// PMU counts of one container over one interval; `None` where the event is not counted here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pmu {
    pub cycles: Option<u64>,
    pub instructions: Option<u64>,
    pub llc_references: Option<u64>,
    pub llc_misses: Option<u64>,
    /// The source dropped counts of this interval (the collector fell behind): every PMU value
    /// and the CPU time are unknown, and the row is kept however sparse the output (a reader
    /// must not take the interval for one where nothing moved).
    pub lost: bool,
}

impl Pmu {
    pub fn values(&self) -> [Option<u64>; 4] {
        [self.cycles, self.instructions, self.llc_references, self.llc_misses]
    }

    pub fn from_values(v: [Option<u64>; 4]) -> Pmu {
        Pmu { cycles: v[0], instructions: v[1], llc_references: v[2], llc_misses: v[3], lost: false }
    }
}

/// Instructions per cycle, where both were counted and cycles ran.
pub fn ipc(instructions: Option<u64>, cycles: Option<u64>) -> Option<f64> {
    match (instructions, cycles) {
        (Some(i), Some(c)) if c > 0 => Some(i as f64 / c as f64),
        _ => None,
    }
}

/// LLC misses per thousand instructions, where both were counted and instructions ran.
pub fn mpki(misses: Option<u64>, instructions: Option<u64>) -> Option<f64> {
    match (misses, instructions) {
        (Some(m), Some(i)) if i > 0 => Some(m as f64 * 1000.0 / i as f64),
        _ => None,
    }
}

/// One row of docs/data.md.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// End of the interval, CLOCK_REALTIME ns.
    pub time_ns: i64,
    /// Length of the interval actually measured.
    pub interval_ns: i64,
    pub container: Arc<ContainerMeta>,
    pub domain: u32,
    pub rmid: Option<u32>,
    pub llc_occupancy_bytes: Option<u64>,
    /// Bytes during the interval.
    pub mbm_total_bytes: Option<u64>,
    pub mbm_local_bytes: Option<u64>,
    pub pmu: Pmu,
    /// CPU time the container used during the interval on this domain's CPUs, ns.
    pub cpu_ns: Option<u64>,
    pub status: Status,
    /// Where bandwidth needs an assigned counter: whether this row's was kept or rotating.
    pub mbm_counter: Option<MbmCounter>,
}

/// How many per-interval counters a row has ([`Row::counters`]).
pub const COUNTERS: usize = 7;

impl Row {
    /// The per-interval counters in docs/data.md column order: MBM total, MBM local, cycles,
    /// instructions, LLC references, LLC misses, CPU ns.
    pub fn counters(&self) -> [Option<u64>; COUNTERS] {
        let [c, i, r, m] = self.pmu.values();
        [self.mbm_total_bytes, self.mbm_local_bytes, c, i, r, m, self.cpu_ns]
    }
}

#[cfg(test)]
mod runtime_cell_tests {
    use super::*;

    fn named(n: &str) -> RuntimeMeta {
        RuntimeMeta { name: Some(n.into()), image: Some("img".into()), ..Default::default() }
    }

    #[test]
    fn a_rename_is_seen_by_every_holder_and_the_runtime_wins_over_local_state() {
        let meta = Arc::new(ContainerMeta { id: "abc".into(), name: Some("web".into()), ..Default::default() });
        let holder = meta.clone();
        assert_eq!(holder.name(), Some("web"), "Docker's local state before the API answers");
        assert!(meta.runtime.set(named("web")));
        assert!(!meta.runtime.set(named("web")), "the same answer is no change");
        assert!(meta.runtime.set(named("web-renamed")));
        assert_eq!(holder.name(), Some("web-renamed"));
        assert_eq!(holder.image(), Some("img"));
        let copy = (*holder).clone();
        assert_eq!(copy.name(), Some("web-renamed"));
        assert_eq!(copy, *holder);
    }

    #[test]
    fn the_live_view_names_a_pods_container_as_kubectl_would() {
        let plain = ContainerMeta { id: "abc".into(), name: Some("web".into()), ..Default::default() };
        assert_eq!(plain.view_label(), "web");
        let kube = ContainerMeta { id: "abc".into(), name: Some("k8s_app_web-0".into()), ..Default::default() };
        kube.runtime.set(RuntimeMeta {
            name: Some("k8s_app_web-0".into()),
            pod_name: Some("web-0".into()),
            pod_namespace: Some("shop".into()),
            pod_container: Some("app".into()),
            ..Default::default()
        });
        assert_eq!(kube.view_label(), "shop/web-0/app");
        let no_ns = ContainerMeta { id: "abc".into(), pod_name: Some("web-0".into()), ..Default::default() };
        assert_eq!(no_ns.view_label(), "web-0/abc");
    }
}
