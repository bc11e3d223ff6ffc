//! `cachescope hook oci`: an OCI `createRuntime` hook. The runtime runs it once the container's
//! first process exists in its cgroup and before that process runs a single instruction of the
//! container's own; the hook puts it in the resctrl MON group cachescope's resctrl backend
//! will use for the container (named as the backend names groups), so the container's first
//! milliseconds are charged to it, not to the default group until a poll notices it. The
//! backend adopts the group when it attaches the container; children inherit it at fork.
//!
//! Podman and CRI-O read hooks from `hooks.d` (deploy/oci-hooks.d/cachescope.json); runc and
//! crun run those a bundle's config.json names. A failing createRuntime hook stops the
//! container, so problems are said on stderr and the hook exits 0; only input that is not an
//! OCI state is an error (exit 2).
//!
//! `cachescope hook nri`: the same tagging as an NRI plugin (containerd 1.7 and later, CRI-O),
//! for runtimes that run no hooks of ours (containerd's CRI): it registers on the runtime's NRI
//! socket and, at each container's StartContainer event (its first process exists and has not
//! run the container's program; the runtime waits for the plugin's answer), puts the process
//! in its group. It runs until the runtime closes the socket.

use crate::error::CliError;
use cachescope_cgroups::identity::{identify, Glob};
use cachescope_nri::api;
use cachescope_resctrl::Resctrl;
use std::io::Read;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct HookArgs {
    /// Which hook: `oci` reads the OCI state (JSON) on stdin, as runtimes give it to hooks;
    /// `nri` runs as an NRI plugin on the runtime's socket until the runtime closes it.
    #[arg(value_enum)]
    kind: HookKind,
    /// Containers to recognise beyond the runtimes cachescope knows by name: the run's own
    /// `--containers` globs over cgroup paths.
    #[arg(long, value_name = "GLOB", num_args = 1..)]
    containers: Vec<String>,
    /// nri: the runtime's NRI socket.
    #[arg(long, value_name = "PATH", default_value = "/var/run/nri/nri.sock")]
    socket: PathBuf,
    /// nri: the plugin's index among the runtime's plugins (two digits; lower runs first).
    #[arg(long, value_name = "NN", default_value = "10")]
    plugin_index: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum HookKind {
    Oci,
    Nri,
}

pub fn run(args: &HookArgs) -> Result<(), CliError> {
    let globs = args
        .containers
        .iter()
        .map(|g| Glob::new(g).map_err(|e| CliError::input(format!("--containers {g:?}: {e}"))))
        .collect::<Result<Vec<_>, _>>()?;
    if args.kind == HookKind::Nri {
        return nri(args, globs);
    }
    let mut text = String::new();
    std::io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| CliError::input(format!("hook oci: reading the OCI state on stdin: {e}")))?;
    let pid = oci_pid(&text).map_err(CliError::input)?;
    match tag(Path::new("/proc"), pid, &globs) {
        Ok(said) => cachescope_platform::say!("hook oci: {said}"),
        Err(why) => {
            cachescope_platform::say!("hook oci: pid {pid}: {why}; it is tagged at cachescope's next poll instead")
        }
    }
    Ok(())
}

/// `hook nri`: serve the runtime until it closes the socket or shuts the plugin down.
fn nri(args: &HookArgs, globs: Vec<Glob>) -> Result<(), CliError> {
    let mut t = NriTagger { proc_root: PathBuf::from("/proc"), cgroup_root: PathBuf::from("/sys/fs/cgroup"), globs };
    match cachescope_nri::run(&args.socket, "cachescope", &args.plugin_index, &mut t) {
        Ok(ended) => {
            cachescope_platform::say!("hook nri: the runtime ended the session ({ended:?})");
            Ok(())
        }
        Err(e @ cachescope_nri::NriError::Connect { .. }) => Err(CliError::unavailable(format!("hook nri: {e}"))),
        Err(e @ cachescope_nri::NriError::BadIndex(_)) => {
            Err(CliError::input(format!("hook nri: --plugin-index: {e}")))
        }
        Err(e) => Err(CliError::Failed(anyhow::anyhow!("hook nri: {e}"))),
    }
}

/// Tags each container at its StartContainer event.
struct NriTagger {
    proc_root: PathBuf,
    cgroup_root: PathBuf,
    globs: Vec<Glob>,
}

impl cachescope_nri::Handler for NriTagger {
    fn configured(&mut self, runtime: &str, version: &str) {
        cachescope_platform::say!("hook nri: registered with {runtime} {version}");
    }

    fn start_container(&mut self, pod: &api::PodSandbox, c: &api::Container) {
        let who =
            if pod.name.is_empty() { c.name.clone() } else { format!("{}/{}/{}", pod.namespace, pod.name, c.name) };
        let cgroups_path = c.linux.as_ref().map_or("", |l| l.cgroups_path.as_str());
        let pid = match c.pid {
            0 => first_pid(&self.cgroup_root, cgroups_path),
            p => Ok(p),
        };
        let said = pid.and_then(|pid| {
            // What the process is now: the runtime's init, not yet the container's program.
            let comm = std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("comm")).unwrap_or_default();
            let what = format!("pid {pid} ({})", comm.trim());
            tag(&self.proc_root, pid, &self.globs).map(|s| format!("{what}: {s}")).map_err(|e| format!("{what}: {e}"))
        });
        match said {
            Ok(s) => cachescope_platform::say!("hook nri: StartContainer {who}: {s}"),
            Err(why) => cachescope_platform::say!(
                "hook nri: StartContainer {who}: {why}; it is tagged at cachescope's next poll instead"
            ),
        }
    }
}

/// The cgroup (v2) directory of an OCI `cgroupsPath` under `root`: a cgroupfs path, or
/// systemd's `slice:prefix:name` (the slice's ancestors are the dash-separated prefixes of its
/// name, the unit `prefix-name.scope`).
fn cgroup_dir(root: &Path, cgroups_path: &str) -> PathBuf {
    let parts: Vec<&str> = cgroups_path.split(':').collect();
    let [slice, prefix, name] = parts[..] else { return root.join(cgroups_path.trim_start_matches('/')) };
    let mut dir = root.to_path_buf();
    if let Some(stem) = slice.strip_suffix(".slice").filter(|s| !s.is_empty() && *s != "-") {
        let mut acc = String::new();
        for word in stem.split('-') {
            acc = if acc.is_empty() { word.to_string() } else { format!("{acc}-{word}") };
            dir.push(format!("{acc}.slice"));
        }
    }
    dir.join(if prefix.is_empty() { format!("{name}.scope") } else { format!("{prefix}-{name}.scope") })
}

/// The first process in the container's cgroup (its init, at StartContainer).
fn first_pid(cgroup_root: &Path, cgroups_path: &str) -> Result<u32, String> {
    if cgroups_path.is_empty() {
        return Err("the runtime gave neither a pid nor a cgroup".into());
    }
    let p = cgroup_dir(cgroup_root, cgroups_path).join("cgroup.procs");
    let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    text.lines().find_map(|l| l.trim().parse().ok()).ok_or_else(|| format!("{}: no process", p.display()))
}

/// The `pid` of an OCI state document.
fn oci_pid(text: &str) -> Result<u32, String> {
    let state: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("hook oci: stdin is not an OCI state (JSON): {e}"))?;
    state["pid"]
        .as_u64()
        .and_then(|p| u32::try_from(p).ok())
        .filter(|&p| p > 0)
        .ok_or_else(|| format!("hook oci: the OCI state has no pid: {}", text.chars().take(200).collect::<String>()))
}

/// The container of `pid`: its cgroup (v2) or the nearest ancestor cachescope recognises, and
/// the id the backend gives it.
fn container_of(proc_root: &Path, pid: u32, globs: &[Glob]) -> Result<(String, String), String> {
    let p = proc_root.join(pid.to_string()).join("cgroup");
    let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    let rel = text.lines().find_map(|l| l.strip_prefix("0::")).ok_or("no cgroup v2 line in /proc/PID/cgroup")?;
    let mut at = rel.trim().trim_matches('/');
    loop {
        if let Some(id) = identify(at, globs) {
            return Ok((at.to_string(), id.id));
        }
        match at.rsplit_once('/') {
            Some((parent, _)) => at = parent,
            None => {
                return Err(format!("cgroup {rel} is no container cachescope recognises (give the run's --containers)"))
            }
        }
    }
}

/// Put `pid`'s threads in its container's group, made if missing; what was done, in words.
fn tag(proc_root: &Path, pid: u32, globs: &[Glob]) -> Result<String, String> {
    let (cgroup, id) = container_of(proc_root, pid, globs)?;
    let rc = Resctrl::find(proc_root).map_err(|e| e.to_string())?;
    let _lock = rc.lock().map_err(|e| e.to_string())?;
    let (ctrl, _) = rc.groups_of_thread(pid);
    let g = rc.ensure_group(&ctrl, &id).map_err(|e| e.to_string())?;
    let task = proc_root.join(pid.to_string()).join("task");
    let mut list = || -> std::io::Result<Vec<u32>> {
        Ok(std::fs::read_dir(&task)?.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect())
    };
    let a = rc.assign_tasks(&g, &mut list).map_err(|e| e.to_string())?;
    Ok(format!("{} thread(s) of {cgroup} ({id}) in {} before the container's first instruction", a.moved, g.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oci_state_gives_the_pid_and_nothing_else_passes() {
        assert_eq!(oci_pid(r#"{"ociVersion":"1.0.2","id":"x","status":"created","pid":4242,"bundle":"/b"}"#), Ok(4242));
        assert!(oci_pid("not json").unwrap_err().contains("not an OCI state"));
        assert!(oci_pid(r#"{"id":"x"}"#).unwrap_err().contains("no pid"));
        assert!(oci_pid(r#"{"pid":0}"#).is_err());
    }

    #[test]
    fn cgroups_paths_of_both_drivers_name_the_containers_directory() {
        let r = Path::new("/sys/fs/cgroup");
        assert_eq!(cgroup_dir(r, "/kubepods/besteffort/podU/abc"), r.join("kubepods/besteffort/podU/abc"));
        assert_eq!(
            cgroup_dir(r, "kubepods-besteffort-podU.slice:cri-containerd:abc"),
            r.join("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-podU.slice/cri-containerd-abc.scope")
        );
        assert_eq!(cgroup_dir(r, "system.slice:docker:abc"), r.join("system.slice/docker-abc.scope"));
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("k/c")).unwrap();
        std::fs::write(d.path().join("k/c/cgroup.procs"), "4242\n4250\n").unwrap();
        assert_eq!(first_pid(d.path(), "/k/c"), Ok(4242));
        std::fs::write(d.path().join("k/c/cgroup.procs"), "").unwrap();
        assert!(first_pid(d.path(), "/k/c").unwrap_err().contains("no process"));
        assert!(first_pid(d.path(), "").unwrap_err().contains("neither a pid nor a cgroup"));
    }

    #[test]
    fn the_container_is_the_nearest_recognised_cgroup() {
        let d = tempfile::tempdir().unwrap();
        let id = "a".repeat(64);
        std::fs::create_dir_all(d.path().join("7")).unwrap();
        std::fs::write(d.path().join("7/cgroup"), format!("0::/machine.slice/libpod-{id}.scope/container\n")).unwrap();
        assert_eq!(container_of(d.path(), 7, &[]).unwrap(), (format!("machine.slice/libpod-{id}.scope"), id));
        std::fs::create_dir_all(d.path().join("8")).unwrap();
        std::fs::write(d.path().join("8/cgroup"), "0::/ctr/hooked\n").unwrap();
        assert!(container_of(d.path(), 8, &[]).unwrap_err().contains("no container cachescope recognises"));
        let g = [Glob::new("ctr/*").unwrap()];
        let (cg, id) = container_of(d.path(), 8, &g).unwrap();
        assert_eq!(cg, "ctr/hooked");
        assert!(id.starts_with("ctr_hooked-"), "{id}");
    }
}
