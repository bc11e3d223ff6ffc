//! Core-pinned monitoring: without OS support an RMID can only follow a core, not a thread, so
//! each group of cores gets an RMID in IA32_PQR_ASSOC (the class of service is kept). The
//! original values come back on restore (and on drop); a core whose association someone else
//! changed meanwhile is reported and left alone, never overwritten.

use cachescope_engine::PartResult;
use cachescope_hw::cpulist;
use cachescope_hw::msr::{MsrDevice, MsrError, PqrAssoc, RegisterError, IA32_PQR_ASSOC};

#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("CPU {cpu}: {error}")]
    Msr { cpu: u32, error: MsrError },
    #[error("CPU {cpu}: {error}")]
    Register { cpu: u32, error: RegisterError },
    #[error("invalid core groups {input:?}: {why}")]
    Groups { input: String, why: String },
}

/// A core whose PQR_ASSOC no longer holds what we wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tampered {
    pub cpu: u32,
    pub expected: u64,
    pub found: u64,
}

#[derive(Debug, Clone, Copy)]
struct PinnedCore {
    cpu: u32,
    original: u64,
    written: u64,
}

/// Restoration outcome.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    pub restored: usize,
    pub left_alone: Vec<Tampered>,
}

pub struct CorePinning<D: MsrDevice> {
    dev: D,
    cores: Vec<PinnedCore>,
    done: bool,
}

impl<D: MsrDevice> CorePinning<D> {
    /// Write `rmid` of each group into PQR_ASSOC of its cores. On failure, the cores already
    /// written are restored before the error returns.
    pub fn apply(dev: D, groups: &[(Vec<u32>, u32)], max_rmid: u32, max_rmid_any: u32) -> Result<Self, PinError> {
        let mut pin = CorePinning { dev, cores: Vec::new(), done: false };
        for (cpus, rmid) in groups {
            for &cpu in cpus {
                let original = pin.dev.read(cpu, IA32_PQR_ASSOC).map_err(|error| PinError::Msr { cpu, error })?;
                let new = PqrAssoc::new(original, max_rmid_any)
                    .with_rmid(*rmid, max_rmid)
                    .map_err(|error| PinError::Register { cpu, error })?;
                pin.dev.write(cpu, IA32_PQR_ASSOC, new.raw).map_err(|error| PinError::Msr { cpu, error })?;
                pin.cores.push(PinnedCore { cpu, original, written: new.raw });
            }
        }
        Ok(pin)
    }

    /// Cores whose association changed behind our back.
    pub fn verify(&self) -> Result<Vec<Tampered>, PinError> {
        let mut out = Vec::new();
        for c in &self.cores {
            let found = self.dev.read(c.cpu, IA32_PQR_ASSOC).map_err(|error| PinError::Msr { cpu: c.cpu, error })?;
            if found != c.written {
                out.push(Tampered { cpu: c.cpu, expected: c.written, found });
            }
        }
        Ok(out)
    }

    /// Put the original values back where ours are still in place.
    pub fn restore(&mut self) -> Result<RestoreReport, PinError> {
        let mut report = RestoreReport::default();
        for c in &self.cores {
            let found = self.dev.read(c.cpu, IA32_PQR_ASSOC).map_err(|error| PinError::Msr { cpu: c.cpu, error })?;
            if found != c.written {
                report.left_alone.push(Tampered { cpu: c.cpu, expected: c.written, found });
                continue;
            }
            self.dev.write(c.cpu, IA32_PQR_ASSOC, c.original).map_err(|error| PinError::Msr { cpu: c.cpu, error })?;
            report.restored += 1;
        }
        self.done = true;
        Ok(report)
    }

    pub fn device(&self) -> &D {
        &self.dev
    }
}

impl<D: MsrDevice> Drop for CorePinning<D> {
    fn drop(&mut self) {
        if !self.done {
            // Best effort: an error here has nowhere to go but the cores stay as they are.
            let _ = self.restore();
        }
    }
}

/// Parse `--cores`: groups separated by commas, each a CPU or range (`0-3,4-7`), or a
/// bracketed CPU list for non-contiguous groups (`[0,2],[1,3]`). No CPU may be in two groups.
pub fn parse_core_groups(input: &str) -> Result<Vec<Vec<u32>>, PinError> {
    let err = |why: String| PinError::Groups { input: input.to_string(), why };
    let mut groups = Vec::new();
    let mut rest = input.trim();
    while !rest.is_empty() {
        let (group, tail) = if let Some(r) = rest.strip_prefix('[') {
            let end = r.find(']').ok_or_else(|| err("unclosed '['".into()))?;
            (&r[..end], r[end + 1..].trim_start())
        } else {
            match rest.find(',') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, ""),
            }
        };
        let cpus = cpulist::parse(group).map_err(|e| err(e.why))?;
        if cpus.is_empty() {
            return Err(err("empty group".into()));
        }
        groups.push(cpus);
        rest = match tail.strip_prefix(',') {
            Some(t) => t.trim_start(),
            None if tail.is_empty() => "",
            None => return Err(err(format!("unexpected {tail:?}"))),
        };
    }
    if groups.is_empty() {
        return Err(err("no groups".into()));
    }
    let mut seen = std::collections::BTreeSet::new();
    for g in &groups {
        for c in g {
            if !seen.insert(*c) {
                return Err(err(format!("CPU {c} is in two groups")));
            }
        }
    }
    Ok(groups)
}

/// Core groups (`--cores`) as the engine's containers: each group, named `cores 0-3`, starts
/// with the run and carries its CPUs, so the backend pins an RMID on them.
pub struct CoreGroups {
    groups: Vec<Vec<u32>>,
    started: bool,
}

impl CoreGroups {
    pub fn new(groups: Vec<Vec<u32>>) -> CoreGroups {
        CoreGroups { groups, started: false }
    }
}

impl cachescope_engine::ContainerSource for CoreGroups {
    fn poll(&mut self, _: std::time::Duration, out: &mut Vec<cachescope_engine::Change>) -> PartResult {
        if std::mem::replace(&mut self.started, true) {
            return Ok(());
        }
        for g in &self.groups {
            out.push(cachescope_engine::Change::Started(cachescope_engine::Container {
                meta: cachescope_engine::ContainerMeta::named(&format!("cores {}", cpulist::format(g))),
                cpus: Some(g.clone()),
                ..Default::default()
            }));
        }
        Ok(())
    }

    fn describe(&self) -> String {
        format!("{} core groups", self.groups.len())
    }
}
