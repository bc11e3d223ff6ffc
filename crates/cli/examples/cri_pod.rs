//! The kubelet of the RDT machine's guest (tools/rdt-qemu/guest/modern.sh, cs_mode=nri): makes
//! the pod `shop/web-0` and starts its container `app` through containerd's CRI, as a kubelet
//! with the cgroupfs driver does, and prints the container's id. Debian has no crictl; this is
//! the CRI client of tests/kubernetes.rs, built by `cargo test` with the other examples.
//!
//!   cri_pod SOCKET IMAGE LOG_DIR SCRIPT
//!
//! The container runs `sh -c SCRIPT` in IMAGE; its output goes to LOG_DIR/app/0.log.

#![allow(clippy::unwrap_used)] // test tooling: a panic is the failure report

#[path = "../tests/common/cri.rs"]
mod kubelet;

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [socket, image, logs, script] = args.as_slice() else {
        eprintln!("usage: cri_pod SOCKET IMAGE LOG_DIR SCRIPT");
        return ExitCode::from(2);
    };
    let cri = match kubelet::Cri::connect(Path::new(socket)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("cri_pod: {e}");
            return ExitCode::from(1);
        }
    };
    let logs = Path::new(logs);
    if let Err(e) = std::fs::create_dir_all(logs.join("app")) {
        eprintln!("cri_pod: {}: {e}", logs.display());
        return ExitCode::from(1);
    }
    cri.version();
    let uid = format!("0c5e7a11-0000-4000-8002-{:012}", std::process::id());
    let pod = cri.run_pod(&uid, logs);
    let id = cri.start_container(&pod, &uid, logs, image, script);
    println!("{id}");
    ExitCode::SUCCESS
}
