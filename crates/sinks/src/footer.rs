//! A check of a Parquet file's footer (and of its page headers) before the parquet crate
//! decodes them. That decoder allocates a list's declared length up front: a 6 KiB file whose
//! footer declares 2^28 schema elements made it ask for 19.7 GB (found by fuzzing `report`; on
//! a node with less memory than that, the process aborts). And it reads each field as the
//! type the format gives its id, whatever type the bytes declare: a key/value list declared
//! as an i64 was read as a list of 205 million (fuzzing again, 9.8 GB). So here every field
//! the crate reads must have the format's type (the tables below, from parquet.thrift), and
//! every list, set, map and binary is walked without allocating, refused when it declares
//! more elements than the bytes that remain could hold (each needs at least one). What is
//! left is bounded by the footer: at most its length in elements per list.

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
    r.typed(FILE_META, 0).map_err(|why| format!("malformed footer at byte {}: {why}", r.at))
}

/// A field's type as parquet.thrift declares it (enums are i32, unions structs).
#[derive(Debug, Clone, Copy)]
enum T {
    Bool,
    I8,
    I16,
    I32,
    I64,
    F64,
    Bin,
    List(&'static T),
    Struct(&'static [(i64, T)]),
}

impl T {
    /// Whether the compact protocol's type code `ty` is this type.
    fn is(self, ty: u8) -> bool {
        ty == match self {
            T::Bool => return ty == 1 || ty == 2,
            T::I8 => 3,
            T::I16 => 4,
            T::I32 => 5,
            T::I64 => 6,
            T::F64 => 7,
            T::Bin => 8,
            T::List(_) => 9,
            T::Struct(_) => 12,
        }
    }
}

const EMPTY: T = T::Struct(&[]);
const KEY_VALUE: T = T::Struct(&[(1, T::Bin), (2, T::Bin)]);
const TIME_UNIT: T = T::Struct(&[(1, EMPTY), (2, EMPTY), (3, EMPTY)]);
const TIME: T = T::Struct(&[(1, T::Bool), (2, TIME_UNIT)]);
const LOGICAL_TYPE: T = T::Struct(&[
    (1, EMPTY),
    (2, EMPTY),
    (3, EMPTY),
    (4, EMPTY),
    (5, T::Struct(&[(1, T::I32), (2, T::I32)])),
    (6, EMPTY),
    (7, TIME),
    (8, TIME),
    (10, T::Struct(&[(1, T::I8), (2, T::Bool)])),
    (11, EMPTY),
    (12, EMPTY),
    (13, EMPTY),
    (14, EMPTY),
    (15, EMPTY),
    (16, T::Struct(&[(1, T::I8)])),
    (17, T::Struct(&[(1, T::Bin)])),
    (18, T::Struct(&[(1, T::Bin), (2, T::I32)])),
]);
const SCHEMA_ELEMENT: T = T::Struct(&[
    (1, T::I32),
    (2, T::I32),
    (3, T::I32),
    (4, T::Bin),
    (5, T::I32),
    (6, T::I32),
    (7, T::I32),
    (8, T::I32),
    (9, T::I32),
    (10, LOGICAL_TYPE),
]);
const STATISTICS: T = T::Struct(&[
    (1, T::Bin),
    (2, T::Bin),
    (3, T::I64),
    (4, T::I64),
    (5, T::Bin),
    (6, T::Bin),
    (7, T::Bool),
    (8, T::Bool),
]);
const BOUNDING_BOX: T = T::Struct(&[
    (1, T::F64),
    (2, T::F64),
    (3, T::F64),
    (4, T::F64),
    (5, T::F64),
    (6, T::F64),
    (7, T::F64),
    (8, T::F64),
]);
const COLUMN_META: T = T::Struct(&[
    (1, T::I32),
    (2, T::List(&T::I32)),
    (3, T::List(&T::Bin)),
    (4, T::I32),
    (5, T::I64),
    (6, T::I64),
    (7, T::I64),
    (8, T::List(&KEY_VALUE)),
    (9, T::I64),
    (10, T::I64),
    (11, T::I64),
    (12, STATISTICS),
    (13, T::List(&T::Struct(&[(1, T::I32), (2, T::I32), (3, T::I32)]))),
    (14, T::I64),
    (15, T::I32),
    (16, T::Struct(&[(1, T::I64), (2, T::List(&T::I64)), (3, T::List(&T::I64))])),
    (17, T::Struct(&[(1, BOUNDING_BOX), (2, T::List(&T::I32))])),
]);
const COLUMN_CHUNK: T = T::Struct(&[
    (1, T::Bin),
    (2, T::I64),
    (3, COLUMN_META),
    (4, T::I64),
    (5, T::I32),
    (6, T::I64),
    (7, T::I32),
    (8, T::Struct(&[(1, EMPTY), (2, T::Struct(&[(1, T::List(&T::Bin)), (2, T::Bin)]))])),
    (9, T::Bin),
]);
const ROW_GROUP: T = T::Struct(&[
    (1, T::List(&COLUMN_CHUNK)),
    (2, T::I64),
    (3, T::I64),
    (4, T::List(&T::Struct(&[(1, T::I32), (2, T::Bool), (3, T::Bool)]))),
    (5, T::I64),
    (6, T::I64),
    (7, T::I16),
]);
const AES: T = T::Struct(&[(1, T::Bin), (2, T::Bin), (3, T::Bool)]);
/// FileMetaData.
const FILE_META: T = T::Struct(&[
    (1, T::I32),
    (2, T::List(&SCHEMA_ELEMENT)),
    (3, T::I64),
    (4, T::List(&ROW_GROUP)),
    (5, T::List(&KEY_VALUE)),
    (6, T::Bin),
    (7, T::List(&T::Struct(&[(1, EMPTY)]))),
    (8, T::Struct(&[(1, AES), (2, AES)])),
    (9, T::Bin),
]);
/// PageHeader.
const PAGE_HEADER: T = T::Struct(&[
    (1, T::I32),
    (2, T::I32),
    (3, T::I32),
    (4, T::I32),
    (5, T::Struct(&[(1, T::I32), (2, T::I32), (3, T::I32), (4, T::I32), (5, STATISTICS)])),
    (6, EMPTY),
    (7, T::Struct(&[(1, T::I32), (2, T::I32), (3, T::Bool)])),
    (
        8,
        T::Struct(&[
            (1, T::I32),
            (2, T::I32),
            (3, T::I32),
            (4, T::I32),
            (5, T::I32),
            (6, T::I32),
            (7, T::Bool),
            (8, STATISTICS),
        ]),
    ),
]);

/// What a page header says of the page's size (Thrift `PageHeader`, parquet.thrift).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PageHead {
    /// 0 data (v1), 1 index, 2 dictionary, 3 data (v2).
    pub kind: i32,
    pub uncompressed: i32,
    pub compressed: i32,
    /// The values a dictionary page declares (its `DictionaryPageHeader.num_values`).
    pub dictionary_values: Option<i32>,
}

/// The page header at the start of `b`. `Err` when it is malformed or does not end in `b`.
pub(crate) fn page_head(b: &[u8]) -> Result<PageHead, &'static str> {
    // Types first: then the fields below are read as the parquet crate will read them.
    Reader { b, at: 0 }.typed(PAGE_HEADER, 0)?;
    let mut r = Reader { b, at: 0 };
    let mut head = PageHead::default();
    r.fields(0, &mut |r, id, ty| match (id, ty) {
        (1..=3, 5) => {
            let v = r.zigzag_i32()?;
            match id {
                1 => head.kind = v,
                2 => head.uncompressed = v,
                _ => head.compressed = v,
            }
            Ok(true)
        }
        (7, 12) => {
            r.fields(1, &mut |r, id, ty| {
                if (id, ty) == (1, 5) {
                    head.dictionary_values = Some(r.zigzag_i32()?);
                    return Ok(true);
                }
                Ok(false)
            })?;
            Ok(true)
        }
        _ => Ok(false),
    })?;
    Ok(head)
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
        self.fields(depth, &mut |_, _, _| Ok(false))
    }

    /// A value the format says is of type `t`: each known field must have its type, each
    /// list its element type; fields the format does not know are walked as declared.
    fn typed(&mut self, t: T, depth: usize) -> Result<(), &'static str> {
        match t {
            T::Struct(known) => self.fields(depth, &mut |r, id, ty| {
                let Some(&(_, want)) = known.iter().find(|(k, _)| *k == id) else { return Ok(false) };
                if !want.is(ty) {
                    return Err("a field's type is not the format's");
                }
                r.typed_value(want, ty, depth + 1)?;
                Ok(true)
            }),
            _ => Err("not a struct"),
        }
    }

    /// The value of a field declared `ty`, already known to be of type `t`.
    fn typed_value(&mut self, t: T, ty: u8, depth: usize) -> Result<(), &'static str> {
        match t {
            T::Struct(_) => self.typed(t, depth),
            T::List(elem) => {
                if depth > MAX_DEPTH {
                    return Err("nested too deep");
                }
                let h = self.byte()?;
                if h == 0 {
                    return Ok(()); // an empty list, as some writers put it
                }
                let n = if h >> 4 == 15 { self.varint()? } else { u64::from(h >> 4) };
                let n = self.count(n, 1)?;
                let ety = h & 0x0f;
                // Booleans in a list take a byte each (type 1 or 2 there).
                if !elem.is(ety) {
                    return Err("a list's element type is not the format's");
                }
                for _ in 0..n {
                    match elem {
                        T::Bool => self.skip(1)?,
                        _ => self.typed_value(*elem, ety, depth + 1)?,
                    }
                }
                Ok(())
            }
            _ => self.value(ty, depth),
        }
    }

    fn zigzag_i32(&mut self) -> Result<i32, &'static str> {
        let v = self.varint()?;
        i32::try_from((v >> 1) as i64 ^ -((v & 1) as i64)).map_err(|_| "i32 out of range")
    }

    /// A struct's fields to its end, each offered to `take` with its id and type; what
    /// `take` does not read (it says false) is skipped.
    fn fields(
        &mut self,
        depth: usize,
        take: &mut dyn FnMut(&mut Self, i64, u8) -> Result<bool, &'static str>,
    ) -> Result<(), &'static str> {
        if depth > MAX_DEPTH {
            return Err("nested too deep");
        }
        let mut id = 0i64;
        loop {
            let h = self.byte()?;
            let ty = h & 0x0f;
            if ty == 0 {
                return Ok(());
            }
            id = match h >> 4 {
                // The id in full (a zigzag i16), else a delta from the previous one.
                0 => {
                    let v = self.varint()?;
                    (v >> 1) as i64 ^ -((v & 1) as i64)
                }
                d => id + i64::from(d),
            };
            if !take(self, id, ty)? {
                self.value(ty, depth)?;
            }
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
        // field 1: i32 1; field 2: a list of 2 structs (schema elements), each empty; stop.
        assert_eq!(check(&[0x15, 0x02, 0x19, 0x2c, 0x00, 0x00, 0x00]), Ok(()));
        // field 2: a list of structs whose declared length is 2^28 (varint), then nothing.
        let huge = [0x29, 0xfc, 0x80, 0x80, 0x80, 0x80, 0x01, 0x00];
        assert!(check(&huge).unwrap_err().contains("more elements than the bytes left"));
        // A binary longer than the footer (field 6), a map too large and a struct that never
        // ends (unknown fields 20 and 21).
        assert!(check(&[0x68, 0x7f, 0x00]).is_err());
        assert!(check(&[0x0b, 0x28, 0x7f, 0x55, 0x00]).unwrap_err().contains("more elements"));
        assert!(check(&[0x0c, 0x2a, 0x15, 0x02]).unwrap_err().contains("ends early"));
        // Unknown fields nested 100 deep.
        let deep: Vec<u8> =
            [0x0c, 0x28].into_iter().chain(std::iter::repeat_n(0x1c, 99)).chain(std::iter::repeat_n(0, 101)).collect();
        assert!(check(&deep).unwrap_err().contains("nested too deep"));
    }

    #[test]
    fn fields_must_have_the_formats_types() {
        // The fuzzer's file: field 5 (key/value metadata, a list) declared an i64, whose
        // bytes read as a list header declare 205 million elements.
        assert!(check(&[0x56, 0xfc, 0xff, 0xff, 0xff, 0x07, 0x00]).unwrap_err().contains("type is not the format's"));
        // A list of the wrong element: field 2 holds schema elements (structs), not i32.
        assert!(check(&[0x29, 0x35, 0x00, 0x02, 0x04, 0x00]).unwrap_err().contains("element type"));
        // Deeper: row group 1's column chunk's meta data (field 3) declared a binary.
        assert!(check(&[0x49, 0x1c, 0x19, 0x1c, 0x38, 0x01, 0x41, 0x00, 0x00, 0x00]).unwrap_err().contains("type"));
        // Fields the format does not know are walked as declared.
        assert_eq!(check(&[0x15, 0x02, 0x0c, 0x28, 0x16, 0x02, 0x00, 0x00]), Ok(()));
        // A page header whose dictionary header (7) is declared an i32 is not read for counts.
        assert_eq!(page_head(&[0x15, 0x04, 0x75, 0x0a, 0x00]), Err("a field's type is not the format's"));
    }
}
