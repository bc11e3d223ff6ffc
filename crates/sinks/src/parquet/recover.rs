//! The checkpoint journal of a file being written, and recovery from it after a crash.
//!
//! Beside `NAME.parquet.partial` the writer keeps `NAME.parquet.partial.footer`, a journal
//! with one entry per row group, appended (and synced) only after the row group's bytes are
//! synced: where the row group lies in the data file, a CRC-32 of those bytes, and its
//! metadata as a one-row-group Parquet footer. Each entry has its own length and CRC.
//!
//! Recovery trusts nothing it cannot check: an entry whose CRC fails, whose footer does not
//! decode, whose bytes lie past the end of the data file (what a power loss leaves when the
//! data did not reach the disk) or whose bytes no longer match their CRC is left out, and every
//! entry that verifies is kept, before and after a damaged one: after damage, even to an
//! entry's length, parsing resumes at the next offset where a whole entry verifies. The new footer is appended
//! after whatever the file holds, so no byte of it is destroyed; a file of which nothing
//! verifies is kept under another name ([`UNRECOVERABLE`]), never deleted.
//!
//! Journal: `CSJ1`, then entries `len:u32 crc:u32 body[len]`, body = `start:u64 end:u64
//! data_crc:u32 footer`, little-endian. Stop 33 and earlier wrote `len:u64 footer` (one
//! footer for all row groups, no CRC): such a checkpoint is still read, its row groups
//! checked against the file's length only.

use super::io;
use crate::SinkError;
use parquet::file::metadata::{
    FileMetaData, ParquetMetaData, ParquetMetaDataReader, ParquetMetaDataWriter, RowGroupMetaData,
};
use std::fs::{self, File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

pub(super) const PARTIAL: &str = ".parquet.partial";
pub(super) const FOOTER: &str = ".parquet.partial.footer";
/// A checkpoint being written by stop 33's writer (renamed over FOOTER when complete).
const TMP: &str = ".parquet.partial.tmp";
/// What a partial file of which nothing could be verified is renamed to (its journal, if any,
/// to this name + `.footer`).
pub const UNRECOVERABLE: &str = ".parquet.unrecoverable";
const MAGIC: &[u8; 4] = b"CSJ1";
/// start, end, data CRC.
const HEAD: usize = 20;
/// A journal entry larger than this is damage, not a footer of ours.
const MAX_ENTRY: usize = 64 << 20;

pub(super) fn footer_path(partial: &Path) -> PathBuf {
    let mut s = partial.as_os_str().to_owned();
    s.push(".footer");
    PathBuf::from(s)
}

pub(super) fn final_path(partial: &Path) -> PathBuf {
    let s = partial.to_string_lossy();
    PathBuf::from(s.strip_suffix(".partial").unwrap_or(&s).to_string())
}

/// Renames `from` to `to`, never over a file: where `to` exists, to the same name with the
/// next free sequence number (`...-SEQ.parquet`). Returns the name used. Two recorders with
/// PID 1 (PID namespaces, a restarted pod) in one second named their files alike, and the
/// second's rename replaced the first's.
pub(super) fn rename_unique(from: &Path, to: &Path) -> std::io::Result<PathBuf> {
    let mut target = to.to_path_buf();
    for _ in 0..10_000 {
        match rename_noreplace(from, &target) {
            Ok(()) => return Ok(target),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => target = next_seq(&target).ok_or(e)?,
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::AlreadyExists, format!("no free name near {}", to.display())))
}

fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<()> {
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidInput, "a NUL in a path"))
    };
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: renameat2 reads two NUL-terminated paths, alive for the call.
    let rc = unsafe { libc::renameat2(libc::AT_FDCWD, f.as_ptr(), libc::AT_FDCWD, t.as_ptr(), libc::RENAME_NOREPLACE) };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        // A filesystem without RENAME_NOREPLACE: a hard link fails as well where `to` exists.
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP) => {
            fs::hard_link(from, to).and_then(|()| fs::remove_file(from))
        }
        _ => Err(e),
    }
}

/// `HEAD-SEQ.parquet[SUFFIX]` with SEQ one more (the name's form stays: the uploader reads its
/// date from the right).
pub(super) fn next_seq(p: &Path) -> Option<PathBuf> {
    let name = p.file_name()?.to_str()?;
    let (stem, rest) = name.split_once(".parquet")?;
    let (head, seq) = stem.rsplit_once('-')?;
    let n: u64 = seq.parse().ok()?;
    Some(p.with_file_name(format!("{head}-{:04}.parquet{rest}", n + 1)))
}

/// Make a rename or a new file in `dir` survive a power loss.
pub(super) fn sync_dir(dir: &Path) -> Result<(), SinkError> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(format!("syncing {}", dir.display())))
}

fn parent(p: &Path) -> &Path {
    p.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// CRC-32 of `len` bytes of `f` from `start`, read in pieces.
fn crc_of(f: &File, start: u64, end: u64) -> std::io::Result<u32> {
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; (end - start).min(1 << 20) as usize];
    let mut at = start;
    while at < end {
        let n = (end - at).min(buf.len() as u64) as usize;
        f.read_exact_at(&mut buf[..n], at)?;
        h.update(&buf[..n]);
        at += n as u64;
    }
    Ok(h.finalize())
}

/// The writer's side: one journal per partial file, created at its first row group.
pub(super) struct Journal {
    file: File,
    path: PathBuf,
}

impl Journal {
    pub(super) fn create(partial: &Path) -> Result<Journal, SinkError> {
        let path = footer_path(partial);
        let mut file = new_file(&path, false).map_err(io(format!("creating {}", path.display())))?;
        file.write_all(MAGIC).and_then(|()| file.sync_all()).map_err(io(format!("writing {}", path.display())))?;
        sync_dir(parent(&path))?;
        Ok(Journal { file, path })
    }

    /// Record the row group that `data` holds in `start..end` (already synced), described by
    /// `footer` (a one-row-group Parquet footer, length and magic included).
    pub(super) fn append(&mut self, data: &File, start: u64, end: u64, footer: &[u8]) -> Result<(), SinkError> {
        let what = || format!("writing the checkpoint {}", self.path.display());
        let data_crc = crc_of(data, start, end).map_err(io(what()))?;
        let mut body = Vec::with_capacity(HEAD + footer.len());
        body.extend_from_slice(&start.to_le_bytes());
        body.extend_from_slice(&end.to_le_bytes());
        body.extend_from_slice(&data_crc.to_le_bytes());
        body.extend_from_slice(footer);
        let len = u32::try_from(body.len()).map_err(|_| SinkError::Parquet(format!("{}: footer too large", what())))?;
        let mut entry = Vec::with_capacity(8 + body.len());
        entry.extend_from_slice(&len.to_le_bytes());
        entry.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        entry.extend_from_slice(&body);
        // One write: an entry is never interleaved, and a crash leaves at most its prefix. One
        // that could not be synced is taken back: the caller keeps its rows in memory, and a
        // recovery that found it would write them twice.
        let at = self.file.stream_position().map_err(io(what()))?;
        let r = self.file.write_all(&entry).and_then(|()| self.file.sync_data());
        if r.is_err() {
            let _ = self.file.set_len(at).and_then(|()| self.file.seek(SeekFrom::Start(at)).map(drop));
        }
        r.map_err(io(what()))
    }
}

/// One row group a journal claims.
struct Claim {
    start: u64,
    end: u64,
    /// None for stop 33's checkpoints, which had none.
    data_crc: Option<u32>,
    meta: ParquetMetaData,
}

/// A footer (metadata, length, `PAR1`) decoded, after the checks that keep the decoder from
/// allocating what a damaged length declares.
fn decode(footer: &[u8]) -> Result<ParquetMetaData, String> {
    let body = footer.len().checked_sub(8).ok_or("too short")?;
    if &footer[body + 4..] != b"PAR1" {
        return Err("no PAR1".into());
    }
    let n = u32::from_le_bytes([footer[body], footer[body + 1], footer[body + 2], footer[body + 3]]) as usize;
    if n != body {
        return Err(format!("footer length {n}, {body} bytes present"));
    }
    crate::footer::check_meta(&footer[..body])?;
    ParquetMetaDataReader::decode_metadata(&footer[..body]).map_err(|e| e.to_string())
}

/// The claims of a journal, and how many entries were damaged (unreadable or failing their
/// CRC; a torn last entry, what a kill while appending leaves, counts too).
fn claims(raw: &[u8]) -> (Vec<Claim>, usize) {
    let (mut out, mut damaged) = (Vec::new(), 0);
    let Some(rest) = raw.strip_prefix(MAGIC) else {
        // Stop 33's format: the data length, then one footer for every row group.
        let Some((len, footer)) = raw.split_first_chunk::<8>() else { return (out, usize::from(!raw.is_empty())) };
        match decode(footer) {
            Ok(meta) => {
                let end = u64::from_le_bytes(*len);
                for rg in meta.row_groups() {
                    let one = ParquetMetaData::new(meta.file_metadata().clone(), vec![rg.clone()]);
                    if let Some((s, e)) = chunk_span(rg) {
                        out.push(Claim { start: s, end: e.max(s).min(end), data_crc: None, meta: one });
                    }
                }
            }
            Err(_) => damaged += 1,
        }
        return (out, damaged);
    };
    let mut at = 0;
    while at < rest.len() {
        let found = entry_at(rest, at).or_else(|| {
            // Damaged (its length, its CRC, its footer) or torn: resynchronise on the next
            // offset where a whole entry verifies. Its CRC-32 over its body makes a false match
            // a 2^-32 chance per candidate, and a damaged length no longer costs every entry
            // after it.
            damaged += 1;
            (at + 1..rest.len()).find_map(|q| entry_at(rest, q))
        });
        let Some((claim, next)) = found else { break };
        out.push(claim);
        at = next;
    }
    (out, damaged)
}

/// The entry framed at `at` of a journal's entries, if it verifies (its length in bounds, its
/// CRC, a footer of one row group), and where the next one starts.
fn entry_at(rest: &[u8], at: usize) -> Option<(Claim, usize)> {
    let (head, after) = rest.get(at..)?.split_first_chunk::<8>()?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if !(HEAD + 8..=MAX_ENTRY).contains(&len) || len > after.len() {
        return None;
    }
    let body = &after[..len];
    if crc32fast::hash(body) != crc {
        return None;
    }
    let word = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&body[i..i + 8]);
        u64::from_le_bytes(b)
    };
    let data_crc = u32::from_le_bytes([body[16], body[17], body[18], body[19]]);
    match decode(&body[HEAD..]) {
        Ok(meta) if meta.num_row_groups() == 1 => {
            Some((Claim { start: word(0), end: word(8), data_crc: Some(data_crc), meta }, at + 8 + len))
        }
        _ => None,
    }
}

/// The metadata of one whole journal entry (length and CRC first), for tests.
#[cfg(test)]
pub(super) fn decode_entry(entry: &[u8]) -> Result<ParquetMetaData, String> {
    decode(entry.get(8 + HEAD..).ok_or("too short")?)
}

/// The bytes a row group's column chunks take: (first, end).
fn chunk_span(rg: &RowGroupMetaData) -> Option<(u64, u64)> {
    // byte_range() asserts what a damaged footer may deny (offsets and sizes not negative):
    // such a row group has no span.
    let sound = |c: &parquet::file::metadata::ColumnChunkMetaData| {
        c.data_page_offset() >= 0 && c.dictionary_page_offset().is_none_or(|d| d >= 0) && c.compressed_size() >= 0
    };
    if rg.num_rows() < 0 || !rg.columns().iter().all(sound) {
        return None;
    }
    let spans = rg.columns().iter().map(|c| c.byte_range());
    let first = spans.clone().map(|(s, _)| s).min()?;
    let end = spans.map(|(s, l)| s.saturating_add(l)).max()?;
    Some((first, end))
}

/// Whether `c` holds: inside the file, after the magic and the row groups kept before it,
/// its column chunks within its bytes, its bytes those it was written with.
fn verify(c: &Claim, data: &File, len: u64, after: u64) -> bool {
    let Some((first, end)) = chunk_span(&c.meta.row_groups()[0]) else { return false };
    let placed = c.start >= after.max(4) && c.start < c.end && c.end <= len && first >= c.start && end <= c.end;
    placed && c.data_crc.is_none_or(|want| crc_of(data, c.start, c.end).is_ok_and(|got| got == want))
}

/// What recovery did with a partial file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// Made readable under `path`: `rows` rows in `row_groups` row groups; `lost` row groups
    /// the journal named could not be verified and were left out (their bytes stay in the file);
    /// `shed` rows of the last row groups were cut to make room for the footer on a full disk
    /// (only when the writer closes: [`Cause::Abandoned`]'s `shed`).
    Recovered { path: PathBuf, rows: u64, row_groups: usize, lost: usize, shed: u64 },
    /// It held no row group and no byte beyond the magic: removed.
    Empty { partial: PathBuf },
    /// Nothing in it could be verified: kept, renamed to `path`.
    Kept { path: PathBuf, lost: usize },
    /// Recovery could not be done now (a full disk, a FIFO or a symlink where the journal
    /// should be, a directory with a partial file's name): passed over as it is, and tried
    /// again by the next run. It never stops a recording from starting.
    Left { partial: PathBuf, why: String },
}

impl std::fmt::Display for Recovery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Recovery::Recovered { path, rows, row_groups, lost, shed } => {
                write!(f, "recovered {} after a crash: {rows} rows in {row_groups} row groups", path.display())?;
                if *lost > 0 {
                    write!(f, "; {lost} row groups failed their checks and were left out")?;
                }
                if *shed > 0 {
                    write!(f, "; {shed} rows cut to make room for the footer")?;
                }
                Ok(())
            }
            Recovery::Empty { partial } => write!(f, "removed {}: a crash left it without rows", partial.display()),
            Recovery::Kept { path, lost } => write!(
                f,
                "kept {}: a crash left no row group that could be verified ({lost} failed their checks)",
                path.display()
            ),
            Recovery::Left { partial, why } => write!(
                f,
                "left {} as it is, not recovered now ({why}); recording goes on, and the next record into the directory tries again",
                partial.display()
            ),
        }
    }
}

/// How recovery treats the bytes nothing vouches for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Cause {
    /// After a crash: they may be all that is left of something, so they are kept.
    Crash,
    /// Abandoned by this process after a failed write: bytes past `keep` belong to a batch
    /// still held in memory, so they are cut (freeing the room a full disk needs). With
    /// `shed` (the writer is closing: there is no later try), a footer the disk has no room
    /// for is made to fit by cutting the last row groups, whose rows are then counted lost:
    /// a file whose every row group was journaled before the disk filled has only its
    /// footer's bytes to free.
    Abandoned { keep: u64, shed: bool },
}

/// Make a crashed partial file readable from its journal (see the module's comment).
pub fn recover_file(partial: &Path) -> Result<Recovery, SinkError> {
    recover(partial, Cause::Crash)
}

/// Opens `path` if it is a regular file, without following a symlink or waiting on a FIFO:
/// what an output directory holds is ours only as files (a FIFO named like a journal blocked
/// `record` in open() for good; a journal linked to /dev/zero was read without end).
pub(super) fn open_regular(path: &Path, write: bool) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => std::io::Error::new(std::io::ErrorKind::InvalidInput, "is a symbolic link; remove it"),
            _ => e,
        })?;
    if !f.metadata()?.file_type().is_file() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "is not a regular file; remove it"));
    }
    Ok(f)
}

/// A file of ours, made now (`exclusive`: only if none is there), 0640 whatever the umask,
/// never through a symlink.
pub fn new_file(path: &Path, exclusive: bool) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = OpenOptions::new();
    o.read(true).write(true).mode(0o640).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    if exclusive {
        o.create_new(true);
    } else {
        o.create(true).truncate(true);
    }
    o.open(path)
}

/// A journal's bytes: a regular file's, as long as it was when opened.
fn read_journal(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let f = open_regular(path, false)?;
    let len = f.metadata()?.len();
    let mut raw = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    f.take(len).read_to_end(&mut raw)?;
    Ok(raw)
}

pub(super) fn recover(partial: &Path, cause: Cause) -> Result<Recovery, SinkError> {
    let jpath = footer_path(partial);
    let raw = match read_journal(&jpath) {
        Ok(raw) => Some(raw),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(format!("reading {}", jpath.display()))(e)),
    };
    let (claims, mut lost) = raw.as_deref().map(claims).unwrap_or_default();
    let mut data = open_regular(partial, true).map_err(io(format!("opening {}", partial.display())))?;
    let mut len = data.metadata().map_err(io(format!("reading {}", partial.display())))?.len();
    let mut kept: Vec<&Claim> = Vec::new();
    for c in &claims {
        let after = kept.last().map_or(0, |k| k.end);
        let same_schema =
            kept.first().is_none_or(|k| k.meta.file_metadata().schema() == c.meta.file_metadata().schema());
        if same_schema && verify(c, &data, len, after) {
            kept.push(c);
        } else {
            lost += 1;
        }
    }
    if kept.is_empty() {
        // Abandoned with nothing journaled: its bytes are a batch still in memory. Anything
        // else that does not verify is kept.
        let empty = matches!(cause, Cause::Abandoned { keep, .. } if keep <= 4) || len <= 4;
        drop(data);
        if empty {
            fs::remove_file(partial).map_err(io(format!("removing {}", partial.display())))?;
            let _ = fs::remove_file(&jpath);
            return Ok(Recovery::Empty { partial: partial.to_path_buf() });
        }
        let path = PathBuf::from(format!("{}{UNRECOVERABLE}", strip(partial)));
        let path = rename_unique(partial, &path).map_err(io(format!("renaming {}", partial.display())))?;
        if raw.is_some() {
            let _ = fs::rename(&jpath, footer_path(&path));
        }
        sync_dir(parent(partial))?;
        return Ok(Recovery::Kept { path, lost });
    }
    if let Cause::Abandoned { keep, .. } = cause {
        let keep = keep.max(kept.last().map_or(4, |k| k.end));
        if keep < len {
            data.set_len(keep).map_err(io(format!("truncating {}", partial.display())))?;
            len = keep;
        }
    }
    let shed_allowed = matches!(cause, Cause::Abandoned { shed: true, .. });
    let mut shed = 0u64;
    // The schema's source should every row group be shed.
    let template = kept.first().copied();
    loop {
        match write_footer(&mut data, len, &footer_of(&kept, template, partial)?) {
            Ok(()) => break,
            Err(e) if shed_allowed && !kept.is_empty() && e.raw_os_error() == Some(libc::ENOSPC) => {
                // The last row group goes: its bytes (and the footer's part written) make room.
                // Its only one too: a file of one row group (each file's, under a rotation of a
                // second) whose footer did not fit ended "could not be finished", exit 1 where
                // the run's losses were due (CI28, CI51); it ends a finished file of no rows.
                let Some(last) = kept.pop() else { break };
                shed += u64::try_from(last.meta.row_groups()[0].num_rows()).unwrap_or(0);
                len = kept.last().map_or(4, |k| k.end);
                data.set_len(len).map_err(io(format!("truncating {}", partial.display())))?;
            }
            Err(e) => {
                // What was written of the footer goes: the file is as the journal describes it.
                let _ = data.set_len(len);
                return Err(io(format!("writing the footer of {}", partial.display()))(e));
            }
        }
    }
    let (rows, row_groups) =
        (kept.iter().map(|k| u64::try_from(k.meta.row_groups()[0].num_rows()).unwrap_or(0)).sum(), kept.len());
    drop(data);
    let done = rename_unique(partial, &final_path(partial)).map_err(io(format!("renaming {}", partial.display())))?;
    sync_dir(parent(partial))?;
    let _ = fs::remove_file(&jpath);
    Ok(Recovery::Recovered { path: done, rows, row_groups, lost, shed })
}

/// Append `footer` to `data` at `len` and sync. A damaged magic at the start is restored:
/// readers that check it would refuse the file.
fn write_footer(data: &mut File, len: u64, footer: &[u8]) -> std::io::Result<()> {
    let mut magic = [0u8; 4];
    data.read_exact_at(&mut magic, 0)?;
    if &magic != b"PAR1" {
        data.write_all_at(b"PAR1", 0)?;
    }
    data.seek(SeekFrom::Start(len))?;
    data.write_all(footer)?;
    data.sync_all()
}

/// The footer of a file holding the row groups `kept` (one per journal entry, in order), its
/// schema from the first of them, or from `template` when none is kept (all of them shed).
fn footer_of(kept: &[&Claim], template: Option<&Claim>, partial: &Path) -> Result<Vec<u8>, SinkError> {
    let Some(first) = kept.first().copied().or(template) else {
        return Err(SinkError::Parquet(format!("{}: no row group", partial.display())));
    };
    let rgs: Vec<RowGroupMetaData> = kept.iter().map(|c| c.meta.row_groups()[0].clone()).collect();
    let rows = rgs.iter().fold(0i64, |a, r| a.saturating_add(r.num_rows()));
    let fm = first.meta.file_metadata();
    // The newest entry's key-value metadata: each carries the run-level figures as they stood
    // (the PMU charges dropped so far), the last one kept what a finished file would have said.
    let newest = kept.last().copied().unwrap_or(first).meta.file_metadata();
    let meta = FileMetaData::new(
        fm.version(),
        rows,
        fm.created_by().map(str::to_string),
        newest.key_value_metadata().cloned(),
        fm.schema_descr_ptr(),
        fm.column_orders().cloned(),
    );
    let mut footer = Vec::new();
    ParquetMetaDataWriter::new(&mut footer, &ParquetMetaData::new(meta, rgs))
        .finish()
        .map_err(|e| SinkError::Parquet(format!("footer for {}: {e}", partial.display())))?;
    Ok(footer)
}

fn strip(partial: &Path) -> String {
    let s = partial.to_string_lossy();
    s.strip_suffix(PARTIAL).unwrap_or(&s).to_string()
}

/// Recover every partial file in `dir` (see [`recover_file`]), in name order. A file that
/// cannot be recovered now is [`Recovery::Left`]: one leftover never blocks a recording.
pub fn recover_dir(dir: &Path) -> Result<Vec<Recovery>, SinkError> {
    let rd = fs::read_dir(dir).map_err(io(format!("reading {}", dir.display())))?;
    let mut names: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    names.sort();
    let mut out = Vec::new();
    for p in names {
        let name = p.to_string_lossy();
        if name.ends_with(PARTIAL) {
            out.push(recover_file(&p).unwrap_or_else(|e| Recovery::Left { partial: p.clone(), why: e.to_string() }));
        } else if name.ends_with(TMP) {
            // A checkpoint stop 33's writer was writing when the process died.
            let _ = fs::remove_file(&p);
        } else if name.ends_with(FOOTER) {
            // A journal whose data file is gone (renamed when finished, before the journal
            // was removed).
            let data = PathBuf::from(name.trim_end_matches(".footer").to_string());
            if !data.exists() {
                let _ = fs::remove_file(&p);
            }
        }
    }
    Ok(out)
}
