//! A fleet's data off the node: every finished Parquet file of a recording directory is
//! uploaded to S3-compatible object storage, at `PREFIX/host=HOST/date=YYYY-MM-DD/NAME`
//! (partitions that DuckDB, Spark and Athena read as columns).
//!
//! Nothing lost, nothing duplicated: a file is uploaded once it is closed (no `.partial`
//! suffix), by one PUT whose key is fixed by its name; the directory's journal
//! (`.cachescope-uploaded`) lists what the store acknowledged. While the store is down or slow
//! the files wait on disk and are retried with backoff (1 s doubling to 60 s), across runs: a
//! file whose upload was cut short (a crash between the store's answer and the journal) is put
//! again under the same key, which replaces it with the same bytes.
//!
//! Requests are signed with AWS SigV4 by `rusty-s3` (presigned, so no SDK or async runtime)
//! and sent with `ureq` from a thread of its own, never on the sampling path.

use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The journal of what the store acknowledged, in the recording directory.
pub const JOURNAL: &str = ".cachescope-uploaded";
const SIGNED_FOR: Duration = Duration::from_secs(15 * 60);
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// A request that cannot connect in this long fails (and is retried later).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A request whose reads or writes make no progress for this long fails: a store that takes
/// connections and never answers holds nothing longer than this, while a large file on a slow
/// link still goes.
pub const STALL_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("--upload {0}: expected s3://BUCKET or s3://BUCKET/PREFIX")]
    Url(String),
    #[error("--s3-endpoint {0}: {1}")]
    Endpoint(String, String),
    #[error("--upload: {0} is not set (the S3 credentials come from the environment)")]
    Credentials(&'static str),
    #[error("{key}: {why}")]
    Put { key: String, why: String },
    #[error("{path}: {error}")]
    Io { path: PathBuf, error: std::io::Error },
}

/// Where files go.
#[derive(Debug, Clone)]
pub struct Target {
    bucket: Bucket,
    credentials: Credentials,
    prefix: String,
    /// `s3://BUCKET/PREFIX` as given, for people.
    pub url: String,
}

impl Target {
    /// `url`: `s3://BUCKET[/PREFIX]`; `endpoint`: the store's address (default AWS's for the
    /// region, `https://s3.REGION.amazonaws.com`). Credentials from `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN`), the region from `AWS_REGION`
    /// (default us-east-1). `env` reads the environment (a parameter, for tests).
    pub fn new(url: &str, endpoint: Option<&str>, env: impl Fn(&str) -> Option<String>) -> Result<Target, UploadError> {
        let rest = url.strip_prefix("s3://").ok_or_else(|| UploadError::Url(url.into()))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let bucket_ok = (3..=63).contains(&bucket.len())
            && bucket.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
        if !bucket_ok || prefix.split('/').any(|p| p == "." || p == "..") {
            return Err(UploadError::Url(url.into()));
        }
        let region = env("AWS_REGION").unwrap_or_else(|| "us-east-1".into());
        let endpoint_text = endpoint.map_or_else(|| format!("https://s3.{region}.amazonaws.com"), String::from);
        let parsed =
            url::Url::parse(&endpoint_text).map_err(|e| UploadError::Endpoint(endpoint_text.clone(), e.to_string()))?;
        // Path style works with every S3-compatible store (MinIO, Ceph, moto) and AWS.
        let bucket = Bucket::new(parsed, UrlStyle::Path, bucket.to_string(), region)
            .map_err(|e| UploadError::Endpoint(endpoint_text.clone(), e.to_string()))?;
        let key = env("AWS_ACCESS_KEY_ID").ok_or(UploadError::Credentials("AWS_ACCESS_KEY_ID"))?;
        let secret = env("AWS_SECRET_ACCESS_KEY").ok_or(UploadError::Credentials("AWS_SECRET_ACCESS_KEY"))?;
        let credentials = match env("AWS_SESSION_TOKEN") {
            Some(t) => Credentials::new_with_token(key, secret, t),
            None => Credentials::new(key, secret),
        };
        Ok(Target { bucket, credentials, prefix: prefix.trim_matches('/').to_string(), url: url.to_string() })
    }

    /// The object key of a recorded file.
    pub fn key(&self, host: &str, file: &str) -> String {
        let date = date_of(file).unwrap_or_else(|| "unknown".into());
        let host = host.replace('/', "_");
        if self.prefix.is_empty() {
            format!("host={host}/date={date}/{file}")
        } else {
            format!("{}/host={host}/date={date}/{file}", self.prefix)
        }
    }

    /// One PUT of the file's bytes under `key`.
    pub fn put(&self, agent: &ureq::Agent, key: &str, path: &Path) -> Result<u64, UploadError> {
        let body = std::fs::read(path).map_err(|error| UploadError::Io { path: path.to_path_buf(), error })?;
        let url = self.bucket.put_object(Some(&self.credentials), key).sign(SIGNED_FOR);
        let fail = |why: String| UploadError::Put { key: key.to_string(), why };
        match agent.put(url.as_str()).send_bytes(&body) {
            Ok(r) if (200..300).contains(&r.status()) => Ok(body.len() as u64),
            Ok(r) => Err(fail(format!("HTTP {}", r.status()))),
            Err(ureq::Error::Status(code, r)) => {
                let text = r.into_string().unwrap_or_default();
                Err(fail(format!("HTTP {code}: {}", text.chars().take(200).collect::<String>())))
            }
            // Not the error's Display: it carries the presigned URL, a credential for 15 minutes.
            Err(ureq::Error::Transport(t)) => {
                Err(fail(format!("{}{}", t.kind(), t.message().map(|m| format!(": {m}")).unwrap_or_default())))
            }
        }
    }
}

/// `YYYY-MM-DD` from `cachescope-HOST-YYYYmmddTHHMMSSZ-PID-SEQ.parquet` (the host may hold
/// dashes: read from the right).
pub fn date_of(file: &str) -> Option<String> {
    let stem = file.strip_suffix(".parquet")?;
    let stamp = stem.rsplit('-').nth(2)?;
    let d = stamp.get(..8).filter(|d| d.bytes().all(|b| b.is_ascii_digit()))?;
    stamp.get(8..9).filter(|t| *t == "T")?;
    Some(format!("{}-{}-{}", &d[..4], &d[4..6], &d[6..8]))
}

/// What the uploader did.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    pub uploaded: u64,
    pub bytes: u64,
    pub failures: u64,
    /// Finished files not yet acknowledged.
    pub pending: usize,
    pub last_error: Option<String>,
}

/// The uploading thread of one recording directory.
pub struct Uploader {
    stop: Arc<AtomicBool>,
    /// Asked to drain: keep going until nothing is pending (or stopped).
    draining: Arc<AtomicBool>,
    stats: Arc<Mutex<Stats>>,
    handle: Option<JoinHandle<()>>,
    url: String,
    dir: PathBuf,
}

struct Work {
    dir: PathBuf,
    host: String,
    target: Target,
    agent: ureq::Agent,
    done: BTreeSet<String>,
}

impl Work {
    fn journal(&self) -> PathBuf {
        self.dir.join(JOURNAL)
    }

    /// Finished files not yet uploaded, oldest first (names sort by time).
    fn pending(&self) -> Vec<String> {
        pending(&self.dir, &self.done)
    }

    /// Upload what is pending; Err at the first failure (the rest waits for the retry).
    fn pass(&mut self, stats: &Mutex<Stats>) -> Result<(), UploadError> {
        let pending = self.pending();
        set(stats, |s| s.pending = pending.len());
        for name in pending {
            let key = self.target.key(&self.host, &name);
            let bytes = self.target.put(&self.agent, &key, &self.dir.join(&name))?;
            let mut j = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(self.journal())
                .map_err(|error| UploadError::Io { path: self.journal(), error })?;
            writeln!(j, "{}", journal_line(&name, &key))
                .map_err(|error| UploadError::Io { path: self.journal(), error })?;
            self.done.insert(name);
            set(stats, |s| {
                s.uploaded += 1;
                s.bytes += bytes;
                s.pending = s.pending.saturating_sub(1);
            });
        }
        Ok(())
    }
}

/// The finished files of `dir` that `done` does not list, oldest first (names sort by time).
fn pending(dir: &Path, done: &BTreeSet<String>) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<String> = rd
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".parquet") && !done.contains(n))
        .collect();
    v.sort();
    v
}

/// A journal line: the file and the key the store acknowledged it under, as one JSON object,
/// which holds any name (spaces, newlines: the first format, "NAME KEY", split at the first
/// space, so `old run.parquet` was uploaded again by every run).
fn journal_line(name: &str, key: &str) -> String {
    serde_json::json!({ "file": name, "key": key }).to_string()
}

/// The file a journal line names: a JSON object's `file`, or in a line of the first format
/// ("NAME KEY", KEY ending in "/NAME") the NAME that KEY ends with, spaces and all.
fn journaled_file(line: &str) -> Option<String> {
    if line.starts_with('{') {
        let v: serde_json::Value = serde_json::from_str(line).ok()?;
        return v.get("file")?.as_str().map(String::from);
    }
    line.match_indices(' ')
        .map(|(i, _)| (&line[..i], &line[i + 1..]))
        .find(|(name, key)| key.strip_suffix(name).is_some_and(|k| k.is_empty() || k.ends_with('/')))
        .map(|(name, _)| name.to_string())
        .or_else(|| line.split(' ').next().filter(|n| !n.is_empty()).map(String::from))
}

/// What `dir`'s journal says the store acknowledged.
fn acknowledged(dir: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(dir.join(JOURNAL)).unwrap_or_default().lines().filter_map(journaled_file).collect()
}

fn set(stats: &Mutex<Stats>, f: impl FnOnce(&mut Stats)) {
    f(&mut stats.lock().unwrap_or_else(|p| p.into_inner()));
}

impl Uploader {
    /// Start uploading `dir`'s finished files (those of earlier runs too) for `host`.
    pub fn start(dir: PathBuf, host: String, target: Target) -> Uploader {
        let done = acknowledged(&dir);
        let url = target.url.clone();
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(CONNECT_TIMEOUT)
            .timeout_read(STALL_TIMEOUT)
            .timeout_write(STALL_TIMEOUT)
            .build();
        let mut work = Work { dir: dir.clone(), host, target, agent, done };
        let stop = Arc::new(AtomicBool::new(false));
        let draining = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(Mutex::new(Stats::default()));
        let (stop2, draining2, stats2) = (stop.clone(), draining.clone(), stats.clone());
        let handle = std::thread::Builder::new()
            .name("upload".into())
            .spawn(move || {
                let mut backoff = Duration::from_secs(1);
                let mut next = Instant::now();
                let mut drain_tried = false;
                while !stop2.load(Ordering::Relaxed) {
                    // Asked to drain: try at once, whatever the backoff said.
                    if draining2.load(Ordering::Relaxed) && !drain_tried {
                        drain_tried = true;
                        next = Instant::now();
                    }
                    if Instant::now() >= next {
                        match work.pass(&stats2) {
                            Ok(()) => {
                                backoff = Duration::from_secs(1);
                                next = Instant::now() + Duration::from_secs(1);
                                if draining2.load(Ordering::Relaxed) {
                                    break;
                                }
                            }
                            Err(e) => {
                                set(&stats2, |s| {
                                    s.failures += 1;
                                    s.last_error = Some(e.to_string());
                                });
                                next = Instant::now() + backoff;
                                backoff = (backoff * 2).min(MAX_BACKOFF);
                            }
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
            .ok();
        Uploader { stop, draining, stats, handle, url, dir }
    }

    pub fn stats(&self) -> Stats {
        self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Upload what is left (the files the run just closed) for up to `deadline`, or until
    /// `interrupt` is set (a second SIGINT/SIGTERM), then stop; one line for people. What is
    /// not uploaded stays on disk for the next run. A request still under way then is left to
    /// the process's exit, so the wait is bounded by `deadline`, not by the store.
    pub fn finish(mut self, deadline: Duration, interrupt: &AtomicBool) -> String {
        self.draining.store(true, Ordering::Relaxed);
        let until = Instant::now() + deadline;
        while self.handle.as_ref().is_some_and(|h| !h.is_finished())
            && Instant::now() < until
            && !interrupt.load(Ordering::Relaxed)
        {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.stop.store(true, Ordering::Relaxed);
        if self.handle.as_ref().is_some_and(|h| h.is_finished()) {
            if let Some(h) = self.handle.take() {
                let _ = h.join();
            }
        }
        // Detached if still in a request: its journal line, if the store answers before the
        // process ends, is still true.
        self.handle = None;
        let s = self.stats();
        // Counted now, from the directory and the journal: files closed after the thread's
        // last look wait too.
        let waiting = pending(&self.dir, &acknowledged(&self.dir)).len();
        let mut line = format!("uploaded {} files ({} bytes) to {}", s.uploaded, s.bytes, self.url);
        if waiting > 0 {
            let why = match s.last_error.as_deref() {
                Some(e) => e.to_string(),
                None if interrupt.load(Ordering::Relaxed) => "interrupted".into(),
                None => "out of time".into(),
            };
            line.push_str(&format!(
                "; {waiting} not yet (kept on disk, uploaded by the next run into this directory): {why}"
            ));
        } else if s.failures > 0 {
            line.push_str(&format!(" after {} failed attempts", s.failures));
        }
        line
    }
}

impl Drop for Uploader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests;
