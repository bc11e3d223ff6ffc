//! Small filesystem walks shared by the readers of kernel trees (cgroupfs, resctrl).

use std::ffi::OsString;
use std::io;
use std::path::Path;

/// Names of the sub-directories of `dir`, sorted; none when `dir` does not exist (cgroups and
/// resctrl groups vanish while we walk: a normal event, not an error). Names that are not
/// UTF-8 are skipped.
pub fn subdirs(dir: &Path) -> io::Result<Vec<String>> {
    Ok(subdirs_os(dir)?.into_iter().filter_map(|n| n.into_string().ok()).collect())
}

/// As [`subdirs`], with names that are not UTF-8 too (any bytes make a directory name).
pub fn subdirs_os(dir: &Path) -> io::Result<Vec<OsString>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut names: Vec<OsString> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.file_name())
        .collect();
    names.sort();
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_dirs_only_and_missing_is_empty() {
        let d = tempfile::tempdir().unwrap();
        for n in ["b", "a", "c"] {
            std::fs::create_dir(d.path().join(n)).unwrap();
        }
        std::fs::write(d.path().join("file"), "").unwrap();
        assert_eq!(subdirs(d.path()).unwrap(), vec!["a", "b", "c"]);
        assert!(subdirs(&d.path().join("gone")).unwrap().is_empty());
        assert!(subdirs(&d.path().join("file")).is_err(), "not a directory is an error");
    }
}
