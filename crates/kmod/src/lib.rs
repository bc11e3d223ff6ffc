//! The kernel module's backend (`--backend kmod`): `kmod/cachescope.ko` assigns RMIDs to
//! cgroups as they are created and samples their counters every millisecond in the kernel;
//! this crate talks to its device ([`device`]), decodes its versioned records ([`abi`]) and
//! turns them into the engine's samples ([`backend`]).

pub mod abi;
pub mod backend;
pub mod device;
/// A module in user space for tests and the collector's benchmark: not in the product.
#[cfg(feature = "fake")]
pub mod fake;

pub use backend::KmodBackend;
pub use device::{Device, KernelDevice, KmodError};

/// The rules that make the kernel tag the runtimes' container cgroups at creation, the same
/// cgroups `cachescope_cgroups::identity` recognises by name (helpers such as conmon are
/// excluded), then the user's `--containers` globs.
pub fn rules(extra: &[String]) -> Vec<String> {
    // `**/x` needs a component before x (as in `--containers`), so each comes at the root too.
    let mut v: Vec<String> = Vec::new();
    for p in ["docker-*.scope", "cri-containerd-*.scope", "crio-*.scope", "libpod-*.scope"] {
        v.push(p.to_string());
        v.push(format!("**/{p}"));
    }
    v.extend(["!libpod-conmon-*.scope", "!**/libpod-conmon-*.scope", "docker/*", "kubepods/pod*/*"].map(String::from));
    v.push("kubepods/**/pod*/*".into());
    v.extend(extra.iter().cloned());
    v
}
