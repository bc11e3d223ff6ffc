//! A check of a Parquet file's footer before the parquet crate decodes it. That decoder
//! allocates a list's declared length up front: a 6 KiB file whose footer declares 2^28
//! schema elements made it ask for 19.7 GB (found by fuzzing `report`; on a node with less
//! memory than that, the process aborts). Here every list, set, map and binary of the Thrift
//! compact encoding is walked without allocating, and refused when it declares more elements
//! than the bytes that remain could hold (each needs at least one).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Largest footer read: ours are tens of KiB; the format allows more, nothing sane needs it.
const MAX_FOOTER: u64 = 64 << 20;
/// Deepest nesting of structs and containers (Parquet's footer needs under 10).
const MAX_DEPTH: usize = 64;

/// Why a footer is refused.
pub fn check_file(path: &Path) -> Result<(), String> {
    let mut f = File::open(path).map_err(|e| e.to_string())?;
    let len = f.metadata().map_err(|e| e.to_string())?.len();
    if len < 12 {
        return Err("too short for Parquet".into());
    }
    let mut tail = [0u8; 8];
    f.seek(SeekFrom::End(-8)).map_err(|e| e.to_string())?;
    f.read_exact(&mut tail).map_err(|e| e.to_string())?;
    if &tail[4..] != b"PAR1" {
        return Err("no Parquet footer (PAR1)".into());
    }
    let n = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
    if n > len - 12 || n > MAX_FOOTER {
        return Err(format!("footer length {n} does not fit the file ({len} bytes)"));
    }
    let mut meta = vec![0u8; n as usize];
    f.seek(SeekFrom::Start(len - 8 - n)).map_err(|e| e.to_string())?;
    f.read_exact(&mut meta).map_err(|e| e.to_string())?;
    check_meta(&meta)
}

/// Why the Thrift-encoded file metadata `meta` (a footer without its length and magic) is
/// refused.
pub fn check_meta(meta: &[u8]) -> Result<(), String> {
    let mut r = Reader { b: meta, at: 0 };
    r.structure(0).map_err(|why| format!("malformed footer at byte {}: {why}", r.at))
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn left(&self) -> usize {
        self.b.len() - self.at
    }

    fn byte(&mut self) -> Result<u8, &'static str> {
        let v = *self.b.get(self.at).ok_or("ends early")?;
        self.at += 1;
        Ok(v)
    }

    fn skip(&mut self, n: usize) -> Result<(), &'static str> {
        if n > self.left() {
            return Err("ends early");
        }
        self.at += n;
        Ok(())
    }

    fn varint(&mut self) -> Result<u64, &'static str> {
        let mut v = 0u64;
        for i in 0..10 {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint too long")
    }

    /// A declared count of things that each take at least `min` bytes.
    fn count(&mut self, n: u64, min: usize) -> Result<usize, &'static str> {
        let n = usize::try_from(n).map_err(|_| "count too large")?;
        if n.saturating_mul(min) > self.left() {
            return Err("declares more elements than the bytes left can hold");
        }
        Ok(n)
    }

    fn structure(&mut self, depth: usize) -> Result<(), &'static str> {
        if depth > MAX_DEPTH {
            return Err("nested too deep");
        }
        loop {
            let h = self.byte()?;
            let ty = h & 0x0f;
            if ty == 0 {
                return Ok(());
            }
            if h >> 4 == 0 {
                self.varint()?; // the field id, in full
            }
            self.value(ty, depth)?;
        }
    }

    fn value(&mut self, ty: u8, depth: usize) -> Result<(), &'static str> {
        match ty {
            1 | 2 => Ok(()), // a boolean field: the value is in the type
            3 => self.skip(1),
            4..=6 => self.varint().map(drop),
            7 => self.skip(8),
            8 => {
                let n = self.varint()?;
                let n = self.count(n, 1)?;
                self.skip(n)
            }
            9 | 10 => {
                let h = self.byte()?;
                let n = if h >> 4 == 15 { self.varint()? } else { u64::from(h >> 4) };
                let n = self.count(n, 1)?;
                let elem = h & 0x0f;
                for _ in 0..n {
                    // Booleans in a list take a byte each.
                    if elem == 1 || elem == 2 {
                        self.skip(1)?;
                    } else {
                        self.value(elem, depth + 1)?;
                    }
                }
                Ok(())
            }
            11 => {
                let n = self.varint()?;
                let n = self.count(n, 2)?;
                if n == 0 {
                    return Ok(());
                }
                let kv = self.byte()?;
                for _ in 0..n {
                    self.value(kv >> 4, depth + 1)?;
                    self.value(kv & 0x0f, depth + 1)?;
                }
                Ok(())
            }
            12 => self.structure(depth + 1),
            _ => Err("unknown Thrift type"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(meta: &[u8]) -> Result<(), String> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.parquet");
        let mut bytes = b"PAR1".to_vec();
        bytes.extend_from_slice(meta);
        bytes.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        bytes.extend_from_slice(b"PAR1");
        std::fs::write(&p, bytes).unwrap();
        check_file(&p)
    }

    #[test]
    fn lists_must_fit_what_is_left() {
        // field 1: i32 1; field 2: a list of 3 i32 (0, 1, 2); stop.
        assert_eq!(check(&[0x15, 0x02, 0x19, 0x35, 0x00, 0x02, 0x04, 0x00]), Ok(()));
        // field 2: a list of structs whose declared length is 2^28 (varint), then nothing.
        let huge = [0x19, 0xfc, 0x80, 0x80, 0x80, 0x80, 0x01, 0x00];
        assert!(check(&huge).unwrap_err().contains("more elements than the bytes left"));
        // A binary longer than the footer, a map too large, a struct that never ends.
        assert!(check(&[0x18, 0x7f, 0x00]).is_err());
        assert!(check(&[0x1b, 0x7f, 0x55, 0x00]).is_err());
        assert!(check(&[0x1c, 0x15, 0x02]).is_err());
        let deep: Vec<u8> = std::iter::repeat_n(0x1c, 100).chain(std::iter::repeat_n(0, 101)).collect();
        assert!(check(&deep).unwrap_err().contains("nested too deep"));
    }
}
