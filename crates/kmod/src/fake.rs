//! A module in user space, for tests and the collector's benchmark: records are queued by the
//! test (or generated at a rate), attach answers come from a table.

use crate::abi::{Info, Record, Stats, ABI_VERSION, MAX_DOMAINS, RECORD_SIZE};
use crate::device::{KernelDevice, KmodError};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Fills the queue at each drain, as the kernel's timer would have between two reads.
pub type Generator = Box<dyn FnMut(&mut VecDeque<Record>) + Send>;

#[derive(Default)]
pub struct FakeState {
    pub info: Info,
    pub stats: Stats,
    pub queue: VecDeque<Record>,
    /// cgroup directory → the RMID attach returns (None: ENOSPC).
    pub answers: HashMap<PathBuf, Option<u32>>,
    pub rules: Vec<String>,
    pub detached: Vec<PathBuf>,
    /// Called at every drain: lets a benchmark generate what the kernel would have.
    pub generator: Option<Generator>,
    /// Waits for records so far (a test tells whether the backend waited, without a clock).
    pub waits: u64,
}

/// The test keeps a clone of the handle; the backend owns the device.
#[derive(Clone)]
pub struct FakeKernel(pub Arc<Mutex<FakeState>>);

impl FakeKernel {
    /// `domains` L3 domains, `num_rmids` RMIDs, counters of `width` bits in units of `upscale`.
    pub fn new(domains: &[u32], num_rmids: u32, width: u32, upscale: u64) -> FakeKernel {
        let mut info = Info {
            abi_version: ABI_VERSION,
            record_size: RECORD_SIZE as u32,
            emulate: 1,
            num_rmids,
            nr_domains: domains.len() as u32,
            ctr_width: width,
            upscale,
            interval_ns: 1_000_000,
            l3_bytes: 32 << 20,
            limbo_bytes: 1 << 20,
            ring_records: 65536,
            local_pct: 80,
            has_total: 1,
            has_local: 1,
            ..Info::default()
        };
        for (i, d) in domains.iter().enumerate().take(MAX_DOMAINS) {
            info.domain_ids[i] = *d;
        }
        FakeKernel(Arc::new(Mutex::new(FakeState { info, ..FakeState::default() })))
    }

    pub fn state(&self) -> MutexGuard<'_, FakeState> {
        match self.0.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    pub fn push(&self, r: Record) {
        self.state().queue.push_back(r);
    }
}

impl KernelDevice for FakeKernel {
    fn path(&self) -> &Path {
        Path::new("/dev/fake-cachescope")
    }
    fn info(&self) -> Result<Info, KmodError> {
        Ok(self.state().info)
    }
    fn stats(&self) -> Result<Stats, KmodError> {
        Ok(self.state().stats)
    }
    fn set_rules(&self, rules: &[String]) -> Result<u64, KmodError> {
        self.state().rules = rules.to_vec();
        Ok(0)
    }
    fn attach(&self, dir: &Path) -> Result<Option<u32>, KmodError> {
        Ok(self.state().answers.get(dir).copied().unwrap_or(Some(1)))
    }
    fn detach(&self, dir: &Path) -> Result<(), KmodError> {
        self.state().detached.push(dir.to_path_buf());
        Ok(())
    }
    fn drain(&mut self, out: &mut Vec<Record>) -> Result<usize, KmodError> {
        let mut s = self.state();
        let s = &mut *s;
        if let Some(g) = s.generator.as_mut() {
            g(&mut s.queue);
        }
        let n = s.queue.len();
        out.extend(s.queue.drain(..));
        Ok(n)
    }
    fn wait(&self, timeout: Duration) -> Result<bool, KmodError> {
        self.state().waits += 1;
        if self.state().queue.is_empty() {
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
        }
        Ok(!self.state().queue.is_empty())
    }
}
