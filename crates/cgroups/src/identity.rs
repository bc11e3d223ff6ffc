//! Container identity from a cgroup path, pure.
//!
//! Runtimes name cgroups recognisably (DESIGN.md §1 "Container identity"): Docker
//! `docker-<64hex>.scope` or `/docker/<64hex>`, containerd CRI `cri-containerd-<64hex>.scope`,
//! CRI-O `crio-<64hex>.scope`, Podman `libpod-<64hex>.scope`, Kubernetes pods
//! `kubepods[-qos]-pod<uid>.slice` (systemd driver, `_` for `-` in the uid) or
//! `kubepods/<qos>/pod<uid>/<id>` (cgroupfs driver). systemd services are a fallback kind, and
//! user globs match anything. Every id produced is safe as a path component.

/// Longest id or name accepted as a path component.
pub const MAX_ID_LEN: usize = 128;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Runtime {
    Docker,
    Containerd,
    CriO,
    Podman,
    /// A Kubernetes container under the cgroupfs driver, where the runtime is not in the name.
    Kubernetes,
    Systemd,
    /// Matched a user glob.
    Custom,
}

impl Runtime {
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Docker => "docker",
            Runtime::Containerd => "containerd",
            Runtime::CriO => "cri-o",
            Runtime::Podman => "podman",
            Runtime::Kubernetes => "kubernetes",
            Runtime::Systemd => "systemd",
            Runtime::Custom => "custom",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn name(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "guaranteed",
            QosClass::Burstable => "burstable",
            QosClass::BestEffort => "besteffort",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Identity {
    /// Runtime id (64 hex), service unit name, or for globs a path-safe form of the cgroup path.
    pub id: String,
    pub runtime: Runtime,
    pub pod_uid: Option<String>,
    pub qos: Option<QosClass>,
}

fn is_hex_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// A pod UID: 36 characters of hex and dashes (systemd escapes the dashes as `_`).
fn pod_uid(s: &str) -> Option<String> {
    let uid = s.replace('_', "-");
    let ok = uid.len() == 36
        && uid
            .bytes()
            .enumerate()
            .all(|(i, b)| if [8, 13, 18, 23].contains(&i) { b == b'-' } else { b.is_ascii_hexdigit() });
    ok.then_some(uid)
}

fn qos_of(s: &str) -> Option<QosClass> {
    match s {
        "burstable" => Some(QosClass::Burstable),
        "besteffort" => Some(QosClass::BestEffort),
        _ => None,
    }
}

/// Pod context from the path components above a container: (uid, qos).
fn pod_context(parts: &[&str]) -> (Option<String>, Option<QosClass>) {
    let mut uid = None;
    let mut qos = None;
    let mut in_kubepods = false;
    for p in parts {
        if let Some(rest) = p.strip_suffix(".slice") {
            // kubepods.slice / kubepods-burstable.slice / kubepods-burstable-pod<uid>.slice
            if let Some(r) = rest.strip_prefix("kubepods") {
                in_kubepods = true;
                let mut r = r.strip_prefix('-').unwrap_or(r);
                for q in ["burstable", "besteffort"] {
                    if let Some(t) = r.strip_prefix(q) {
                        qos = qos_of(q);
                        r = t.strip_prefix('-').unwrap_or(t);
                    }
                }
                if let Some(u) = r.strip_prefix("pod") {
                    uid = pod_uid(u);
                }
            }
        } else if *p == "kubepods" {
            in_kubepods = true;
        } else if in_kubepods {
            if let Some(q) = qos_of(p) {
                qos = Some(q);
            } else if let Some(u) = p.strip_prefix("pod") {
                uid = pod_uid(u);
            }
        }
    }
    if uid.is_some() && qos.is_none() {
        qos = Some(QosClass::Guaranteed);
    }
    (uid, qos)
}

/// Identify the cgroup at `rel` (relative to the cgroup v2 root, `/`-separated). Returns None
/// for cgroups that are not containers (slices, the root, runtime helpers).
pub fn identify(rel: &str, globs: &[Glob]) -> Option<Identity> {
    let rel = rel.trim_matches('/');
    let parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    let last = *parts.last()?;
    let (uid, qos) = pod_context(&parts[..parts.len() - 1]);
    let with_pod = |id: &str, runtime: Runtime| Identity { id: id.to_string(), runtime, pod_uid: uid.clone(), qos };

    for (prefix, runtime) in [
        ("docker-", Runtime::Docker),
        ("cri-containerd-", Runtime::Containerd),
        ("crio-", Runtime::CriO),
        ("libpod-", Runtime::Podman),
    ] {
        // `.scope` under systemd's cgroup driver; bare under cgroupfs (Podman's
        // `libpod_parent/libpod-<id>`, containerd's and CRI-O's with cgroupfs).
        if let Some(rest) = last.strip_prefix(prefix) {
            let id = rest.strip_suffix(".scope").unwrap_or(rest);
            if is_hex_id(id) {
                return Some(with_pod(id, runtime));
            }
        }
    }
    if is_hex_id(last) && parts.len() >= 2 {
        let parent = parts[parts.len() - 2];
        if parent == "docker" {
            return Some(with_pod(last, Runtime::Docker));
        }
        if uid.is_some() && parent.starts_with("pod") {
            return Some(with_pod(last, Runtime::Kubernetes));
        }
    }
    if globs.iter().any(|g| g.matches(rel)) {
        return Some(Identity { id: path_safe(rel), runtime: Runtime::Custom, pod_uid: uid, qos });
    }
    if let Some(unit) = last.strip_suffix(".service") {
        if !unit.is_empty() && parts.len() >= 2 && parts[parts.len() - 2].ends_with(".slice") {
            return Some(Identity { id: path_safe(last), runtime: Runtime::Systemd, pod_uid: None, qos: None });
        }
    }
    None
}

/// A form of `s` usable as one path component: `[A-Za-z0-9._-]` only, `/` becomes `_`, no
/// leading dot (so never `.` or `..`), at most [`MAX_ID_LEN`] bytes (long inputs keep a hash
/// suffix so distinct inputs stay distinct), never empty.
pub fn path_safe(s: &str) -> String {
    let mut out: String =
        s.chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect();
    while out.starts_with('.') {
        out.replace_range(0..1, "_");
    }
    if out.is_empty() {
        out.push('_');
    }
    if out.len() > MAX_ID_LEN || out != s {
        // Different inputs can sanitize alike ("a/b" and "a_b"): a hash keeps them apart.
        let h = fnv1a(s.as_bytes());
        let keep = out.len().min(MAX_ID_LEN - 17);
        out.truncate(keep);
        out.push('-');
        out.push_str(&format!("{h:016x}"));
    }
    out
}

fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| (h ^ u64::from(x)).wrapping_mul(0x100_0000_01b3))
}

/// A shell-style glob over cgroup paths: `*` matches within one path component, `**` across
/// components, `?` one character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Glob(String);

impl Glob {
    pub fn new(pattern: &str) -> Result<Glob, String> {
        let p = pattern.trim_matches('/');
        if p.is_empty() {
            return Err(format!("empty container glob {pattern:?}"));
        }
        if p.chars().any(char::is_control) {
            return Err(format!("container glob {pattern:?} contains control characters"));
        }
        Ok(Glob(p.to_string()))
    }

    /// A glob as a user may write it for the hierarchy mounted at `mount`: relative to its
    /// root (`system.slice/*`, or `/system.slice/*` as /proc/PID/cgroup writes paths), or as a
    /// file system path under the mount (`/sys/fs/cgroup/system.slice/*`), which is made
    /// relative (it would otherwise match nothing).
    pub fn under(pattern: &str, mount: &std::path::Path) -> Result<Glob, String> {
        let mount = mount.to_string_lossy();
        let mount = mount.trim_end_matches('/');
        match pattern.strip_prefix(mount).filter(|rest| !mount.is_empty() && rest.starts_with('/')) {
            Some(rest) => Glob::new(rest).map_err(|e| format!("{e} (below the cgroup mount {mount})")),
            None => Glob::new(pattern),
        }
    }

    /// The pattern, relative to the hierarchy's root.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn matches(&self, path: &str) -> bool {
        let (p, s) = (self.0.as_bytes(), path.trim_matches('/').as_bytes());
        // What comes before the first wildcard must begin the path: most of a host's cgroups
        // fail here, without the matcher's rows (100 globs over 10,000 cgroups took 0.14 s
        // of a run's start).
        let literal = p.iter().position(|&b| b == b'*' || b == b'?').unwrap_or(p.len());
        if !s.starts_with(&p[..literal]) {
            return false;
        }
        literal < p.len() && glob_match(p, s) || literal == p.len() && s.len() == p.len()
    }
}

/// Whether `p` matches all of `s`, in O(len(p) × len(s)) time whatever the pattern (a
/// backtracking matcher is exponential in the stars: `*x*x*x*x*y` against a long name never
/// returns). `dp[j]` for pattern suffix `i` says whether `p[i..]` matches `s[j..]`; rows are
/// computed from the end, keeping the two that `**` and one-byte steps look back on.
fn glob_match(p: &[u8], s: &[u8]) -> bool {
    let n = s.len();
    // Rows for pattern suffixes i+2, i+1 and i.
    let mut next2 = vec![false; n + 1];
    let mut next = vec![false; n + 1];
    next[n] = true; // the empty pattern matches only the empty string
    let mut cur = vec![false; n + 1];
    for i in (0..p.len()).rev() {
        let double = p[i] == b'*' && p.get(i + 1) == Some(&b'*');
        for j in (0..=n).rev() {
            let more = j < n;
            cur[j] = if double {
                // `**`: skip it (p[i+2..]), or let it eat one more byte of any kind.
                next2[j] || (more && cur[j + 1])
            } else {
                match p[i] {
                    b'*' => next[j] || (more && s[j] != b'/' && cur[j + 1]),
                    b'?' => more && s[j] != b'/' && next[j + 1],
                    c => more && s[j] == c && next[j + 1],
                }
            };
        }
        std::mem::swap(&mut next2, &mut next);
        std::mem::swap(&mut next, &mut cur);
    }
    next[0]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ID: &str = "4f1c2e3d5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d";
    const UID: &str = "8e2f6a3c-1b4d-4e5f-9a0b-1c2d3e4f5a6b";

    type Answer = Option<(String, Runtime, Option<String>, Option<QosClass>)>;

    fn id(p: &str) -> Answer {
        identify(p, &[]).map(|i| (i.id, i.runtime, i.pod_uid, i.qos))
    }

    #[test]
    fn real_world_paths() {
        let u_ = UID.replace('-', "_");
        let table: Vec<(String, Answer)> = vec![
            (format!("system.slice/docker-{ID}.scope"), Some((ID.into(), Runtime::Docker, None, None))),
            (format!("docker/{ID}"), Some((ID.into(), Runtime::Docker, None, None))),
            (format!("system.slice/crio-{ID}.scope"), Some((ID.into(), Runtime::CriO, None, None))),
            (format!("machine.slice/libpod-{ID}.scope"), Some((ID.into(), Runtime::Podman, None, None))),
            (format!("user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"), Some((ID.into(), Runtime::Podman, None, None))),
            (
                format!("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u_}.slice/cri-containerd-{ID}.scope"),
                Some((ID.into(), Runtime::Containerd, Some(UID.into()), Some(QosClass::Burstable))),
            ),
            (
                format!("kubepods.slice/kubepods-pod{u_}.slice/crio-{ID}.scope"),
                Some((ID.into(), Runtime::CriO, Some(UID.into()), Some(QosClass::Guaranteed))),
            ),
            (
                format!("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{u_}.slice/docker-{ID}.scope"),
                Some((ID.into(), Runtime::Docker, Some(UID.into()), Some(QosClass::BestEffort))),
            ),
            (
                format!("kubepods/besteffort/pod{UID}/{ID}"),
                Some((ID.into(), Runtime::Kubernetes, Some(UID.into()), Some(QosClass::BestEffort))),
            ),
            (format!("kubepods/pod{UID}/{ID}"), Some((ID.into(), Runtime::Kubernetes, Some(UID.into()), Some(QosClass::Guaranteed)))),
            ("system.slice/nginx.service".into(), Some(("nginx.service".into(), Runtime::Systemd, None, None))),
            // Not containers: slices, pods themselves, conmon helpers, short or uppercase ids.
            ("kubepods.slice".into(), None),
            (format!("kubepods.slice/kubepods-pod{u_}.slice"), None),
            (format!("machine.slice/libpod-conmon-{ID}.scope"), None),
            (format!("libpod_parent/libpod-{ID}"), Some((ID.into(), Runtime::Podman, None, None))),
            ("libpod_parent/conmon".to_string(), None),
            ("system.slice/docker-abc.scope".into(), None),
            (format!("system.slice/docker-{}.scope", ID.to_uppercase()), None),
            ("".into(), None),
            ("init.scope".into(), None),
        ];
        for (path, want) in table {
            assert_eq!(id(&path), want, "{path}");
        }
    }

    /// The backtracking matcher this replaced: the reference for small inputs.
    fn naive(p: &[u8], s: &[u8]) -> bool {
        naive_steps(p, s, &mut 0)
    }

    /// The backtracking matcher this replaced, counting its calls in `steps`.
    fn naive_steps(p: &[u8], s: &[u8], steps: &mut u64) -> bool {
        *steps += 1;
        match p.first() {
            None => s.is_empty(),
            Some(b'*') if p.get(1) == Some(&b'*') => (0..=s.len()).any(|i| naive_steps(&p[2..], &s[i..], steps)),
            Some(b'*') => {
                (0..=s.len()).take_while(|&i| i == 0 || s[i - 1] != b'/').any(|i| naive_steps(&p[1..], &s[i..], steps))
            }
            Some(b'?') => !s.is_empty() && s[0] != b'/' && naive_steps(&p[1..], &s[1..], steps),
            Some(c) => s.first() == Some(c) && naive_steps(&p[1..], &s[1..], steps),
        }
    }

    proptest! {
        #[test]
        fn glob_matches_as_the_backtracking_reference(p in "[ab/*?]{0,8}", s in "[ab/]{0,10}") {
            prop_assert_eq!(glob_match(p.as_bytes(), s.as_bytes()), naive(p.as_bytes(), s.as_bytes()), "{} {}", p, s);
        }

        /// With its shortcut for the literal part before the first wildcard.
        #[test]
        fn a_globs_match_is_the_references(p in "[ab/*?]{0,8}", s in "[ab/]{0,10}") {
            let Ok(g) = Glob::new(&p) else { return Ok(()) };
            let (pt, st) = (p.trim_matches('/'), s.trim_matches('/'));
            prop_assert_eq!(g.matches(&s), naive(pt.as_bytes(), st.as_bytes()), "{} {}", p, s);
        }
    }

    /// Patterns against names where a backtracking matcher tries every way to place the stars:
    /// `*` cannot cross a `/`, so the first needs a name without one.
    fn blowups(len: usize) -> [(&'static str, String); 3] {
        let x = "x".repeat(len);
        [
            ("*x*x*x*x*x*y", x.clone()),
            ("**x**x**x**x**x**y", format!("csrel/{x}")),
            ("csrel/*x*x*x*x*x*x*x*x*x*x*", format!("csrel/{x}")),
        ]
    }

    /// The inputs of `glob_time_is_polynomial` are a trap: a backtracking matcher's calls grow
    /// as the name's length to the power of its stars (counted here, not timed), where
    /// `glob_match` fills one table cell per pattern byte and name byte.
    #[test]
    fn the_blowup_patterns_are_a_trap_for_backtracking() {
        let (short, long) = (blowups(10), blowups(20));
        for ((pat, s), (_, l)) in short.iter().zip(&long).take(2) {
            let (mut a, mut b) = (0, 0);
            assert!(!naive_steps(pat.as_bytes(), s.as_bytes(), &mut a));
            assert!(!naive_steps(pat.as_bytes(), l.as_bytes(), &mut b));
            println!("{pat}: backtracking makes {a} calls at {} bytes, {b} at {}", s.len(), l.len());
            // Twice the name: 49 times the calls (degree 5 or more, 32); a table's cells, 2.
            assert!(b > 32 * a, "{pat}: {a} -> {b} calls");
        }
    }

    #[test]
    fn glob_time_is_polynomial() {
        // By the count above, a backtracking matcher makes some 10^11 calls here (it never
        // returned: killed at 20 s); the table, 5,000-7,000 cells. Run in a thread so that a hang
        // fails the test instead of stopping it; the ceiling is for a hang only, the time is
        // printed.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let t = std::time::Instant::now();
            let got: Vec<bool> = blowups(255).iter().map(|(pat, s)| Glob::new(pat).unwrap().matches(s)).collect();
            let _ = tx.send((got, t.elapsed()));
        });
        let (got, took) = match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(r) => r,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("the matcher hangs"),
            Err(e) => panic!("the matcher panicked: {e}"),
        };
        println!("3 patterns against 255-261 byte names in {took:?}");
        for ((pat, _), m) in blowups(255).iter().zip(got) {
            assert_eq!(m, pat.ends_with('*'), "{pat}");
        }
    }

    #[test]
    fn globs() {
        let g = vec![Glob::new("batch/*").unwrap(), Glob::new("jobs/**/task-?").unwrap()];
        let i = identify("batch/job 7", &g).unwrap();
        assert_eq!(i.runtime, Runtime::Custom);
        assert!(!i.id.contains('/') && !i.id.contains(' '));
        assert!(identify("batch/a/b", &g).is_none(), "* stays within a component");
        assert!(identify("jobs/x/y/task-3", &g).is_some());
        assert!(identify("jobs/task-33", &g).is_none());
        assert!(Glob::new("").is_err());
        // A file system path under the mount is made relative; a leading slash alone is the root.
        let m = std::path::Path::new("/sys/fs/cgroup");
        assert_eq!(Glob::under("/sys/fs/cgroup/batch/*", m).unwrap(), Glob::new("batch/*").unwrap());
        assert_eq!(Glob::under("/batch/*", m).unwrap(), Glob::new("batch/*").unwrap());
        assert_eq!(Glob::under("/sys/fs/cgroupx/*", m).unwrap().as_str(), "sys/fs/cgroupx/*");
        assert!(Glob::under("/sys/fs/cgroup/", m).is_err(), "the root itself is no container glob");
    }

    #[test]
    fn path_safety() {
        for s in ["..", ".", "../../etc", "a/b", "", "\u{0}x", &"x".repeat(500)] {
            let p = path_safe(s);
            assert!(
                !p.is_empty() && !p.contains('/') && !p.starts_with('.') && p.len() <= MAX_ID_LEN,
                "{s:?} -> {p:?}"
            );
        }
        assert_ne!(path_safe("a/b"), path_safe("a_b"));
        assert_eq!(path_safe("nginx.service"), "nginx.service");
    }

    proptest! {
        #[test]
        fn arbitrary_paths_never_panic_and_ids_are_safe(parts in proptest::collection::vec("\\PC{0,80}", 0..8), glob in any::<bool>()) {
            let path = parts.join("/");
            let globs = if glob { vec![Glob::new("**").unwrap()] } else { vec![] };
            if let Some(i) = identify(&path, &globs) {
                prop_assert!(!i.id.is_empty() && i.id.len() <= MAX_ID_LEN);
                prop_assert!(!i.id.contains('/') && !i.id.contains('\0') && i.id != "." && i.id != "..");
                prop_assert!(!i.id.starts_with('.'));
                prop_assert!(i.id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')));
            }
        }
    }
}
