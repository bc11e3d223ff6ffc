//! Helpers the CLI's test binaries share.
#![allow(dead_code)] // each test binary uses its own part

pub mod rdt;

use arrow_array::RecordBatch;
use cachescope_cgroups::sandbox::Sandbox;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The cachescope binary under test, as a command.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_cachescope"))
}

/// The bundled scenario (scenarios/noisy-neighbour.toml).
pub fn scenario() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/noisy-neighbour.toml")
}

/// The files in `dir` whose extension is `ext`, sorted.
pub fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

/// The finished Parquet files in `dir`, sorted.
pub fn parquet_files(dir: &Path) -> Vec<PathBuf> {
    files_with_ext(dir, "parquet")
}

/// `docker`, as a command; its output when it succeeds.
pub fn docker(args: &[&str]) -> Option<String> {
    let out = Command::new("docker").args(args).stderr(Stdio::null()).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// A sandbox cgroup on this host's v2 tree, or None after saying why the test skips.
pub fn sandbox(prefix: &str) -> Option<Sandbox> {
    match Sandbox::for_host(prefix) {
        Ok(s) => Some(s),
        Err(why) => {
            cachescope_testkit::skip(why);
            None
        }
    }
}

/// Whether `cmd` is on the PATH.
pub fn have(cmd: &str) -> bool {
    Command::new("sh").arg("-c").arg(format!("command -v {cmd}")).output().is_ok_and(|o| o.status.success())
}

/// The "CS-RESULT key=value" lines a QEMU guest printed (scripts/guest-qemu.sh), by key.
pub fn guest_results(said: &str) -> std::collections::HashMap<String, String> {
    said.lines()
        .filter_map(|l| l.strip_prefix("CS-RESULT "))
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A run whose stderr is read as it goes: `started` is what came up to and with the first line
/// holding the marker (or all of it, if none did: the run ended first); [`Started::finish`]
/// waits for the end and adds the rest.
pub struct Started {
    pub child: std::process::Child,
    pub started: String,
    /// Whether the marker came.
    pub seen: bool,
    rest: std::thread::JoinHandle<String>,
}

impl Started {
    /// Spawn `cmd` (its stderr piped) and return once its stderr says `marker`.
    pub fn spawn(cmd: &mut Command, marker: &str) -> Started {
        use std::io::BufRead;
        let mut child = cmd.stderr(Stdio::piped()).spawn().unwrap();
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let (mut started, mut seen) = (String::new(), false);
        for line in lines.by_ref() {
            let line = line.unwrap();
            started.push_str(&line);
            started.push('\n');
            if line.contains(marker) {
                seen = true;
                break;
            }
        }
        let rest = std::thread::spawn(move || lines.map(|l| l.unwrap() + "\n").collect::<String>());
        Started { child, started, seen, rest }
    }

    /// Wait for the run's end: its status and all it said on stderr.
    pub fn finish(mut self) -> (std::process::ExitStatus, String) {
        let status = self.child.wait().unwrap();
        (status, self.started + &self.rest.join().unwrap())
    }
}

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// scripts/package.sh run on the binary under test, into `dir`: the paths of the two
/// packages it printed last (cachescope_<version>_amd64.deb, cachescope-dkms_<version>_all.deb),
/// checked to be named after the workspace's version.
pub fn packages(dir: &Path) -> (String, String) {
    let o = Command::new(repo().join("scripts/package.sh"))
        .arg(dir)
        .env("CACHESCOPE_PACKAGE_BIN", env!("CARGO_BIN_EXE_cachescope"))
        .output()
        .unwrap();
    assert!(o.status.success(), "package.sh: {}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let paths: Vec<&str> = stdout.lines().collect();
    let version = env!("CARGO_PKG_VERSION");
    let [deb, dkms] = paths[paths.len().saturating_sub(2)..] else { panic!("{stdout}") };
    assert!(deb.ends_with(&format!("/cachescope_{version}_amd64.deb")), "{stdout}");
    assert!(dkms.ends_with(&format!("/cachescope-dkms_{version}_all.deb")), "{stdout}");
    (deb.to_string(), dkms.to_string())
}

/// The release build of cachescope, for the tests that measure costs (a debug build is 5-10×
/// slower: 1,000 containers at 1 ms overload it). Built once per test process into a target
/// directory outside the clone (CACHESCOPE_RELEASE_TARGET, default
/// /var/cache/cachescope/target-release), where cargo keeps what did not change.
pub fn release_bin() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| release_build(&[]).join("cachescope")).clone()
}

/// The release build of the cli crate's example `name` (crates/cli/examples), built as
/// [`release_bin`] is.
pub fn release_example(name: &str) -> PathBuf {
    release_build(&["--example", name]).join("examples").join(name)
}

/// `cargo build --release` of the cli crate with `more` arguments, in the release target
/// directory kept between runs; that build's directory.
fn release_build(more: &[&str]) -> PathBuf {
    let target = std::env::var("CACHESCOPE_RELEASE_TARGET")
        .unwrap_or_else(|_| "/var/cache/cachescope/target-release".to_string());
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let o = Command::new(cargo)
        .current_dir(repo())
        .args(["build", "--release", "--locked", "-q", "-p", "cachescope", "--target-dir", &target])
        .args(more)
        .output()
        .unwrap();
    assert!(o.status.success(), "release build {more:?}: {}", String::from_utf8_lossy(&o.stderr));
    Path::new(&target).join("release")
}

/// The record batches of Parquet `files`, and their key-value metadata.
pub fn read(files: &[PathBuf]) -> (Vec<RecordBatch>, BTreeMap<String, String>) {
    let mut out = Vec::new();
    let mut md = BTreeMap::new();
    for f in files {
        let b = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(f).unwrap()).unwrap();
        for kv in b.metadata().file_metadata().key_value_metadata().unwrap() {
            md.insert(kv.key.clone(), kv.value.clone().unwrap_or_default());
        }
        out.extend(b.build().unwrap().map(|r| r.unwrap()));
    }
    (out, md)
}

/// `GET path` over HTTP/1.0 from `addr`: the whole answer, headers included.
pub fn get(addr: &str, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body)
}

/// A local image holding busybox (no registry: `docker import` / `podman import` of a
/// one-binary root), for the runtime `cli` (docker or podman).
pub fn busybox_image(cli: &str) -> Option<&'static str> {
    const IMAGE: &str = "localhost/cachescope-test-busybox:1";
    let ok = |args: &[&str]| Command::new(cli).args(args).stdout(Stdio::null()).stderr(Stdio::null()).status();
    if ok(&["image", "inspect", IMAGE]).is_ok_and(|s| s.success()) {
        return Some(IMAGE);
    }
    let root = tempfile::tempdir().ok()?;
    std::fs::create_dir(root.path().join("bin")).ok()?;
    std::fs::copy("/usr/bin/busybox", root.path().join("bin/busybox")).ok()?;
    for c in ["sh", "sleep"] {
        std::os::unix::fs::symlink("busybox", root.path().join("bin").join(c)).ok()?;
    }
    let ok = Command::new("sh")
        .arg("-c")
        .arg(format!("tar -C {} -c . | {cli} import - {IMAGE}", root.path().display()))
        .stdout(Stdio::null())
        .status()
        .ok()?
        .success();
    ok.then_some(IMAGE)
}

/// `tmux ARGS`: what it printed.
pub fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux").args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// The last ~2,000 bytes of a guest's console (cut at a character boundary), for a failure
/// or a retried boot.
pub fn console_tail(console: &Path) -> String {
    let text = std::fs::read_to_string(console).unwrap_or_default();
    let mut from = text.len().saturating_sub(2000);
    while !text.is_char_boundary(from) {
        from += 1;
    }
    text[from..].to_string()
}
