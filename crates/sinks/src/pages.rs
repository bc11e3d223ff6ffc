//! Page headers checked before the parquet crate acts on them. Its decoder sizes a
//! dictionary by the count its page header declares (`DictDecoder::set_dict` resizes to it)
//! and reads a header's fields by id whatever their declared types, as it does the footer's
//! (crate::footer, where fuzzing found that). Here every page header the reader is about to
//! read is parsed first with the format's types, and a page larger than any writer of ours
//! makes, or a dictionary declaring more values than its bytes can hold, is an error of that
//! file instead.

use crate::footer::{page_head, PageHead};
use parquet::basic::Type as Physical;
use parquet::errors::ParquetError;
use parquet::file::metadata::ParquetMetaData;
use parquet::file::reader::{ChunkReader, Length};
use std::fs::File;
use std::io::BufReader;
use std::os::unix::fs::FileExt;

/// Largest page accepted, compressed or not. Ours are about 1 MiB (the writer's page limit);
/// this bounds what one page can make the reader allocate.
pub(crate) const MAX_PAGE: i32 = 64 << 20;
/// Longest page header read: statistics make them tens of bytes to a few KiB.
const MAX_HEAD: usize = 1 << 20;

/// A column chunk's bytes and the fewest bytes a PLAIN value of its type takes, in eighths
/// of a byte (booleans take one bit).
#[derive(Debug, Clone, Copy)]
struct Chunk {
    start: u64,
    end: u64,
    min_bits: u64,
}

/// A Parquet file whose page headers are checked as the reader reaches them.
pub struct Checked {
    file: File,
    chunks: Vec<Chunk>,
}

impl Checked {
    /// `file`, whose metadata (already checked by crate::footer and decoded) is `meta`.
    pub fn new(file: File, meta: &ParquetMetaData) -> Self {
        let mut chunks = Vec::new();
        for rg in meta.row_groups() {
            for c in rg.columns() {
                let (start, len) = c.byte_range();
                let min_bits = match c.column_type() {
                    Physical::BOOLEAN => 1,
                    Physical::INT32 | Physical::FLOAT | Physical::BYTE_ARRAY => 32,
                    Physical::INT64 | Physical::DOUBLE => 64,
                    Physical::INT96 => 96,
                    Physical::FIXED_LEN_BYTE_ARRAY => 8 * c.column_descr().type_length().max(1) as u64,
                };
                chunks.push(Chunk { start, end: start.saturating_add(len), min_bits });
            }
        }
        chunks.sort_by_key(|c| c.start);
        Checked { file, chunks }
    }

    fn chunk_at(&self, offset: u64) -> Option<Chunk> {
        let i = self.chunks.partition_point(|c| c.start <= offset);
        i.checked_sub(1).map(|i| self.chunks[i]).filter(|c| offset < c.end)
    }

    /// The header at `offset`, read and judged. One that cannot be parsed as the format says
    /// is refused too: the crate would read its fields by their ids whatever their types.
    fn check_head(&self, offset: u64, chunk: Chunk) -> Result<(), String> {
        let mut size = 4096;
        loop {
            let mut buf = vec![0u8; size];
            let n = read_at_most(&self.file, &mut buf, offset).map_err(|e| e.to_string())?;
            match page_head(&buf[..n]) {
                Ok(h) => return judge(&h, chunk.min_bits).map_err(|why| format!("page at byte {offset}: {why}")),
                Err("ends early") if n == size && size < MAX_HEAD => size *= 16,
                Err("ends early") if n == size => return Err(format!("page header at byte {offset} is over 1 MiB")),
                Err(why) => return Err(format!("page header at byte {offset}: {why}")),
            }
        }
    }
}

/// Why a page's header is refused.
fn judge(h: &PageHead, min_bits: u64) -> Result<(), String> {
    if !(0..=MAX_PAGE).contains(&h.uncompressed) || !(0..=MAX_PAGE).contains(&h.compressed) {
        return Err(format!(
            "implausible page size ({} bytes, {} compressed; at most {MAX_PAGE})",
            h.uncompressed, h.compressed
        ));
    }
    if let Some(n) = h.dictionary_values {
        let bits = u64::try_from(n).map_err(|_| format!("dictionary of {n} values"))?.saturating_mul(min_bits);
        if bits > 8 * h.uncompressed as u64 {
            return Err(format!("dictionary declares {n} values in {} bytes", h.uncompressed));
        }
    }
    Ok(())
}

fn read_at_most(f: &File, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], offset + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

impl Length for Checked {
    fn len(&self) -> u64 {
        self.file.len()
    }
}

impl ChunkReader for Checked {
    type T = BufReader<File>;

    /// The reader reads each page header through here, and the page's bytes with get_bytes.
    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        if let Some(chunk) = self.chunk_at(start) {
            self.check_head(start, chunk).map_err(ParquetError::General)?;
        }
        self.file.get_read(start)
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<bytes::Bytes> {
        self.file.get_bytes(start, length)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(kind: i32, size: i32, dict: Option<i32>) -> PageHead {
        PageHead { kind, uncompressed: size, compressed: size, dictionary_values: dict }
    }

    #[test]
    fn dictionaries_must_fit_their_bytes() {
        // An INT64 dictionary declaring 528,482,292 values in a small page (4.2 GB).
        assert!(judge(&head(2, 40, Some(528_482_292)), 64).unwrap_err().contains("528482292 values in 40 bytes"));
        assert_eq!(judge(&head(2, 40, Some(5)), 64), Ok(()));
        assert!(judge(&head(2, 40, Some(6)), 64).is_err());
        // Strings: a 4-byte length each at least; booleans a bit.
        assert_eq!(judge(&head(2, 40, Some(10)), 32), Ok(()));
        assert_eq!(judge(&head(2, 1, Some(8)), 1), Ok(()));
        assert!(judge(&head(2, 40, Some(-1)), 32).is_err());
        assert_eq!(judge(&head(0, 1 << 20, None), 64), Ok(()));
        assert!(judge(&head(0, MAX_PAGE + 1, None), 64).unwrap_err().contains("implausible page size"));
        assert!(judge(&head(0, -3, None), 64).is_err());
    }

    #[test]
    fn a_page_header_is_parsed_as_thrift_writes_it() {
        // type 2 (dictionary), uncompressed 40, compressed 40, field 7: { num_values 5,
        // encoding 0 }, stop. Zigzag: 2 -> 4, 40 -> 80, 5 -> 10.
        let b = [0x15, 0x04, 0x15, 0x50, 0x15, 0x50, 0x4c, 0x15, 0x0a, 0x15, 0x00, 0x00, 0x00];
        assert_eq!(page_head(&b), Ok(head(2, 40, Some(5))));
        // The same with field 7's id in full (delta 0, zigzag i16 14) and a crc (field 4).
        let b = [0x15, 0x04, 0x15, 0x50, 0x15, 0x50, 0x15, 0x02, 0x0c, 0x0e, 0x15, 0x0a, 0x00, 0x00];
        assert_eq!(page_head(&b), Ok(head(2, 40, Some(5))));
        assert_eq!(page_head(&b[..8]), Err("ends early"));
    }
}
