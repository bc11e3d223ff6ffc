//! `/dev/cpu/N/msr`: pread/pwrite of 8 bytes at offset = MSR index, on CPU N.

use cachescope_hw::msr::{MsrDevice, MsrError, MsrOp};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The kernel's msr driver. Device files are opened on first use and kept open.
#[derive(Debug)]
pub struct DevMsr {
    dev_root: PathBuf,
    files: Mutex<BTreeMap<u32, std::sync::Arc<File>>>,
}

impl DevMsr {
    pub fn new(dev_root: &Path) -> Self {
        DevMsr { dev_root: dev_root.to_path_buf(), files: Mutex::new(BTreeMap::new()) }
    }

    fn path(&self, cpu: u32) -> PathBuf {
        self.dev_root.join(format!("cpu/{cpu}/msr"))
    }

    fn file(&self, cpu: u32) -> Result<std::sync::Arc<File>, MsrError> {
        let mut files = self.files.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = files.get(&cpu) {
            return Ok(f.clone());
        }
        let path = self.path(cpu);
        let f = OpenOptions::new().read(true).write(true).open(&path).map_err(|e| map_open_error(&e, &path, cpu))?;
        let f = std::sync::Arc::new(f);
        files.insert(cpu, f.clone());
        Ok(f)
    }
}

/// Errors opening the device: missing driver/CPU, or missing privilege.
pub fn map_open_error(e: &io::Error, path: &Path, cpu: u32) -> MsrError {
    let path_s = path.display().to_string();
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::ENXIO) | Some(libc::ENODEV) => MsrError::NoDevice { path: path_s, cpu },
        Some(libc::EACCES) | Some(libc::EPERM) => MsrError::Permission { path: path_s },
        _ => MsrError::Other { context: path_s, message: e.to_string() },
    }
}

/// Errors of a read or write: EIO is the CPU's #GP (invalid MSR, or a value the MSR refuses).
pub fn map_access_error(e: &io::Error, path: &Path, cpu: u32, msr: u32, op: MsrOp) -> MsrError {
    match e.raw_os_error() {
        Some(libc::EIO) => MsrError::GeneralProtection { cpu, msr, op },
        Some(libc::EACCES) | Some(libc::EPERM) => MsrError::Permission { path: path.display().to_string() },
        Some(libc::ENXIO) | Some(libc::ENODEV) => MsrError::NoDevice { path: path.display().to_string(), cpu },
        _ => MsrError::Other { context: format!("{} {op} of MSR {msr:#x}", path.display()), message: e.to_string() },
    }
}

impl MsrDevice for DevMsr {
    fn read(&self, cpu: u32, msr: u32) -> Result<u64, MsrError> {
        let f = self.file(cpu)?;
        let mut buf = [0u8; 8];
        match f.read_at(&mut buf, u64::from(msr)) {
            Ok(8) => Ok(u64::from_le_bytes(buf)),
            Ok(n) => Err(MsrError::Other {
                context: format!("{} read of MSR {msr:#x}", self.path(cpu).display()),
                message: format!("short read: {n} of 8 bytes"),
            }),
            Err(e) => Err(map_access_error(&e, &self.path(cpu), cpu, msr, MsrOp::Read)),
        }
    }

    fn write(&self, cpu: u32, msr: u32, value: u64) -> Result<(), MsrError> {
        let f = self.file(cpu)?;
        match f.write_at(&value.to_le_bytes(), u64::from(msr)) {
            Ok(8) => Ok(()),
            Ok(n) => Err(MsrError::Other {
                context: format!("{} write of MSR {msr:#x}", self.path(cpu).display()),
                message: format!("short write: {n} of 8 bytes"),
            }),
            Err(e) => Err(map_access_error(&e, &self.path(cpu), cpu, msr, MsrOp::Write)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_mapping() {
        let p = Path::new("/dev/cpu/3/msr");
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(
            map_access_error(&e(libc::EIO), p, 3, 0xC8F, MsrOp::Write),
            MsrError::GeneralProtection { cpu: 3, msr: 0xC8F, op: MsrOp::Write }
        );
        assert!(map_access_error(&e(libc::EIO), p, 3, 0xC8F, MsrOp::Write).to_string().contains("#GP"));
        assert!(matches!(map_open_error(&e(libc::EACCES), p, 3), MsrError::Permission { .. }));
        assert!(map_open_error(&e(libc::EPERM), p, 3).to_string().contains("CAP_SYS_RAWIO"));
        assert!(map_open_error(&e(libc::ENOENT), p, 3).to_string().contains("modprobe msr"));
        assert!(matches!(map_open_error(&e(libc::EBUSY), p, 3), MsrError::Other { .. }));
    }

    #[test]
    fn fake_device_file_layout_and_missing_driver() {
        // A sparse regular file stands in for the device: offset = MSR index.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("cpu/1")).unwrap();
        std::fs::write(dir.path().join("cpu/1/msr"), b"").unwrap();
        let dev = DevMsr::new(dir.path());
        dev.write(1, 0xC8F, 0x0000_0002_0000_0007).unwrap();
        assert_eq!(dev.read(1, 0xC8F).unwrap(), 0x0000_0002_0000_0007);
        let raw = std::fs::read(dir.path().join("cpu/1/msr")).unwrap();
        assert_eq!(&raw[0xC8F..0xC8F + 8], &0x0000_0002_0000_0007u64.to_le_bytes());
        // Past the end of the file: a short read, reported.
        assert!(dev.read(1, 0xFFFF).unwrap_err().to_string().contains("short read"));
        assert!(matches!(dev.read(0, 0xC8F), Err(MsrError::NoDevice { cpu: 0, .. })));
    }
}
