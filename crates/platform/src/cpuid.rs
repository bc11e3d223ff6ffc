//! CPUID from the running machine: the instruction itself, or the kernel's per-CPU
//! `/dev/cpu/N/cpuid` device (which runs the instruction on CPU N, so every CPU can be checked).

use cachescope_hw::cpuid::{CpuidError, CpuidSource, Regs};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The CPUID instruction on whichever CPU the calling thread runs on.
#[derive(Debug, Default, Clone, Copy)]
pub struct InstructionCpuid;

impl CpuidSource for InstructionCpuid {
    fn describe(&self) -> String {
        "CPUID instruction".into()
    }

    #[cfg(target_arch = "x86_64")]
    fn cpuid(&self, leaf: u32, subleaf: u32) -> Result<Regs, CpuidError> {
        #[allow(unused_unsafe)]
        // SAFETY: CPUID is available on every x86_64 processor and only writes the four
        // output registers; any leaf/subleaf value is architecturally allowed.
        let r = unsafe { core::arch::x86_64::__cpuid_count(leaf, subleaf) };
        Ok(Regs::new(r.eax, r.ebx, r.ecx, r.edx))
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn cpuid(&self, _leaf: u32, _subleaf: u32) -> Result<Regs, CpuidError> {
        Err(CpuidError::Unsupported("the CPUID instruction exists only on x86_64".into()))
    }
}

/// `/dev/cpu/N/cpuid`: pread of 16 bytes at offset `subleaf << 32 | leaf` returns
/// EAX, EBX, ECX, EDX executed on CPU N.
#[derive(Debug)]
pub struct DevCpuid {
    path: PathBuf,
    file: File,
}

impl DevCpuid {
    /// Open CPU `cpu`'s device under `dev_root` (normally `/dev`).
    pub fn of_cpu(dev_root: &Path, cpu: u32) -> Result<Self, CpuidError> {
        let path = dev_root.join(format!("cpu/{cpu}/cpuid"));
        let file = File::open(&path)
            .map_err(|e| CpuidError::Io { path: path.display().to_string(), error: explain_open_error(e, "cpuid") })?;
        Ok(DevCpuid { path, file })
    }
}

/// Give the errors people hit on `/dev/cpu/N/{cpuid,msr}` a message that says what to do.
pub fn explain_open_error(e: io::Error, driver: &str) -> io::Error {
    let hint = match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENXIO) | Some(libc::ENODEV) => {
            format!("{e} (the {driver} driver is not loaded, or this CPU is offline: try `modprobe {driver}`)")
        }
        Some(libc::EACCES) | Some(libc::EPERM) => {
            let cap = if driver == "msr" { "CAP_SYS_RAWIO" } else { "read access" };
            format!("{e} (needs root with {cap})")
        }
        _ => return e,
    };
    io::Error::new(e.kind(), hint)
}

impl CpuidSource for DevCpuid {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn cpuid(&self, leaf: u32, subleaf: u32) -> Result<Regs, CpuidError> {
        let mut buf = [0u8; 16];
        let offset = (u64::from(subleaf) << 32) | u64::from(leaf);
        let n = self
            .file
            .read_at(&mut buf, offset)
            .map_err(|error| CpuidError::Io { path: self.path.display().to_string(), error })?;
        if n != buf.len() {
            return Err(CpuidError::Io {
                path: self.path.display().to_string(),
                error: io::Error::new(io::ErrorKind::UnexpectedEof, format!("short read: {n} of 16 bytes")),
            });
        }
        let word = |i: usize| u32::from_le_bytes([buf[i], buf[i + 1], buf[i + 2], buf[i + 3]]);
        Ok(Regs::new(word(0), word(4), word(8), word(12)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachescope_hw::cpuid::CpuidSnapshot;
    use cachescope_hw::CpuInfo;

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn instruction_decodes_this_host() {
        let snap = CpuidSnapshot::capture(&InstructionCpuid).unwrap();
        let info = CpuInfo::decode(&snap);
        // Every x86_64 CPU has at least leaf 1 and a known or printable vendor.
        assert!(info.max_basic_leaf >= 1, "{info:?}");
        assert!(info.signature.family > 0, "{info:?}");
    }

    #[test]
    fn dev_cpuid_reads_file_layout() {
        // A regular file stands in for the device. pread at offset `subleaf << 32 | leaf`:
        // leaf 1, subleaf 0 reads bytes 1..17, so put its record there.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("cpu/0")).unwrap();
        let mut data = vec![0u8];
        for v in [1u32, 2, 3, 4] {
            data.extend_from_slice(&v.to_le_bytes());
        }
        std::fs::write(dir.path().join("cpu/0/cpuid"), &data).unwrap();
        let dev = DevCpuid::of_cpu(dir.path(), 0).unwrap();
        assert_eq!(dev.cpuid(1, 0).unwrap(), Regs::new(1, 2, 3, 4));
        // Leaf 2 would need bytes 2..18: a short read, reported as such.
        let e = dev.cpuid(2, 0).unwrap_err().to_string();
        assert!(e.contains("short read"), "{e}");
    }

    #[test]
    fn missing_driver_is_explained() {
        let dir = tempfile::tempdir().unwrap();
        let e = DevCpuid::of_cpu(dir.path(), 0).unwrap_err().to_string();
        assert!(e.contains("cpu/0/cpuid") && e.contains("modprobe cpuid"), "{e}");
    }
}
