//! Rows waiting for their row group, held compactly.
//!
//! At 10,000 followed containers a 5 s row group holds about 60,000 rows. Held as engine
//! [`Row`]s and then converted to one Arrow batch, they took 17 MB and then 14 MB more while the
//! batch was built (docs/cost.md). Here a row waiting costs [`Staged`]'s size (the container's
//! names stay shared behind their `Arc`), rows are kept in chunks of [`CHUNK`], and a row group
//! goes to the encoder a column at a time and, within it, a chunk at a time ([`column`]), so
//! only one small Arrow array exists at once.

use super::schema::{Provenance, UTC};
use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder, TimestampNanosecondBuilder};
use arrow_array::ArrayRef;
use cachescope_engine::row::{ContainerMeta, MbmCounter, Row, Status, COUNTERS};
use std::sync::Arc;

/// Rows per Arrow batch handed to the encoder.
pub const CHUNK: usize = 4_096;

/// The values a row carries beyond its times and container: occupancy, then the per-interval
/// counters in column order ([`Row::counters`]).
const VALUES: usize = 1 + COUNTERS;
/// `Staged::present`'s bit for the RMID (bits 0..VALUES: the values).
const RMID: u16 = 1 << VALUES;

/// One row, as the file will hold it: no `Option` padding, presence in a bit set.
pub struct Staged {
    time_ns: i64,
    interval_ns: i64,
    container: Arc<ContainerMeta>,
    values: [u64; VALUES],
    domain: u32,
    rmid: u32,
    present: u16,
    status: Status,
    mbm_counter: Option<MbmCounter>,
}

impl From<Row> for Staged {
    fn from(r: Row) -> Staged {
        let mut values = [0; VALUES];
        let mut present = 0;
        for (i, v) in std::iter::once(r.llc_occupancy_bytes).chain(r.counters()).enumerate() {
            if let Some(v) = v {
                values[i] = v;
                present |= 1 << i;
            }
        }
        if r.rmid.is_some() {
            present |= RMID;
        }
        Staged {
            time_ns: r.time_ns,
            interval_ns: r.interval_ns,
            container: r.container,
            values,
            domain: r.domain,
            rmid: r.rmid.unwrap_or(0),
            present,
            status: r.status,
            mbm_counter: r.mbm_counter,
        }
    }
}

impl Staged {
    fn value(&self, i: usize) -> Option<i64> {
        (self.present & (1 << i) != 0).then(|| i64::try_from(self.values[i]).unwrap_or(i64::MAX))
    }

    fn rmid(&self) -> Option<i32> {
        (self.present & RMID != 0).then(|| i32::try_from(self.rmid).unwrap_or(i32::MAX))
    }
}

/// What a waiting row costs in memory.
pub const STAGED_BYTES: usize = std::mem::size_of::<Staged>();

/// The rows of one row group, in chunks of at most [`CHUNK`]: it grows without copying what it
/// holds, and its spare room is at most one chunk's (one Vec of 65,536 rows held up to twice its
/// rows' room: 13 MB at 10,000 containers).
#[derive(Default)]
pub struct Block {
    chunks: Vec<Vec<Staged>>,
    rows: usize,
}

impl Block {
    pub fn extend(&mut self, rows: impl IntoIterator<Item = Row>) {
        for r in rows {
            match self.chunks.last_mut() {
                Some(c) if c.len() < CHUNK => c.push(r.into()),
                _ => self.chunks.push(vec![r.into()]),
            }
            self.rows += 1;
        }
    }

    /// Move `other`'s rows to the end of these, filling a last chunk that has room for a
    /// whole chunk of `other` (a recorder's 50 ms sends would otherwise leave many small ones).
    pub fn append(&mut self, other: Block) {
        self.rows += other.rows;
        for c in other.chunks {
            match self.chunks.last_mut() {
                Some(last) if last.len() + c.len() <= CHUNK => last.extend(c),
                _ => self.chunks.push(c),
            }
        }
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// The memory it holds, for the bound on rows kept while the disk refuses them.
    pub fn bytes(&self) -> usize {
        self.chunks.iter().map(|c| c.capacity() * STAGED_BYTES).sum()
    }

    pub(crate) fn chunks(&self) -> impl Iterator<Item = &[Staged]> {
        self.chunks.iter().map(Vec::as_slice)
    }
}

/// The schema's columns (docs/data.md's, in order): times, host, the container's six names,
/// domain, RMID, the values, status, the interval's end and start, provenance, MBM counter.
pub const COLUMNS: usize = 11 + VALUES + 5;

/// Column `c` of `rows`, as `schema`'s field `c` types it. A row group is encoded a column at a
/// time: only one column's encoder and one chunk's array exist at once (docs/cost.md).
pub fn column<'a>(c: usize, host: &'a str, prov: Provenance, rows: &'a [Staged]) -> ArrayRef {
    fn ints(rows: &[Staged], f: impl Fn(&Staged) -> Option<i64>) -> ArrayRef {
        let mut b = Int64Builder::with_capacity(rows.len());
        rows.iter().for_each(|r| b.append_option(f(r)));
        Arc::new(b.finish())
    }
    fn int32s(rows: &[Staged], f: impl Fn(&Staged) -> Option<i32>) -> ArrayRef {
        let mut b = Int32Builder::with_capacity(rows.len());
        rows.iter().for_each(|r| b.append_option(f(r)));
        Arc::new(b.finish())
    }
    fn strs<'a>(rows: &'a [Staged], per: usize, f: impl Fn(&'a Staged) -> Option<&'a str>) -> ArrayRef {
        let mut b = StringBuilder::with_capacity(rows.len(), rows.len() * per);
        rows.iter().for_each(|r| b.append_option(f(r)));
        Arc::new(b.finish())
    }
    fn stamps(rows: &[Staged], f: impl Fn(&Staged) -> i64) -> ArrayRef {
        let mut b = TimestampNanosecondBuilder::with_capacity(rows.len()).with_timezone(UTC);
        rows.iter().for_each(|r| b.append_value(f(r)));
        Arc::new(b.finish())
    }
    const V: usize = 11;
    match c {
        0 => ints(rows, |r| Some(r.time_ns)),
        1 => ints(rows, |r| Some(r.interval_ns)),
        2 => strs(rows, host.len(), |_| Some(host)),
        3 => strs(rows, 16, |r| Some(&r.container.id)),
        4 => strs(rows, 16, |r| r.container.name()),
        5 => strs(rows, 16, |r| r.container.pod_name()),
        6 => strs(rows, 16, |r| r.container.pod_namespace()),
        7 => strs(rows, 16, |r| r.container.pod_uid.as_deref()),
        8 => strs(rows, 16, |r| Some(&r.container.cgroup_path)),
        9 => int32s(rows, |r| Some(i32::try_from(r.domain).unwrap_or(i32::MAX))),
        10 => int32s(rows, |r| r.rmid()),
        v if v < V + VALUES => ints(rows, |r| r.value(v - V)),
        v if v == V + VALUES => strs(rows, 2, |r| Some(r.status.as_str())),
        v if v == V + VALUES + 1 => stamps(rows, |r| r.time_ns),
        v if v == V + VALUES + 2 => stamps(rows, |r| r.time_ns - r.interval_ns),
        v if v == V + VALUES + 3 => strs(rows, 8, |_| Some(prov.as_str())),
        _ => strs(rows, 0, |r| r.mbm_counter.map(|c| c.as_str())),
    }
}

/// `rows` as one Arrow batch of `schema` (docs/data.md's columns, in order).
#[cfg(test)]
fn batch(
    schema: &arrow_schema::SchemaRef,
    host: &str,
    prov: Provenance,
    rows: &[Staged],
) -> Result<arrow_array::RecordBatch, arrow_schema::ArrowError> {
    let cols = (0..COLUMNS).map(|c| column(c, host, prov, rows)).collect();
    arrow_array::RecordBatch::try_new(schema.clone(), cols)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cachescope_engine::row::Pmu;

    #[test]
    fn a_staged_row_stays_smaller_than_an_engine_row() {
        // 104 against Row's 176 bytes when written; if Row shrinks below this, stage Rows.
        let row = std::mem::size_of::<Row>();
        assert!(STAGED_BYTES <= 104 && STAGED_BYTES < row, "{STAGED_BYTES} vs {row}");
    }

    /// A row with no values, ending at `t`.
    fn empty(t: i64) -> Row {
        Row {
            time_ns: t,
            interval_ns: 1,
            container: ContainerMeta::named("a"),
            domain: 0,
            rmid: None,
            llc_occupancy_bytes: None,
            mbm_total_bytes: None,
            mbm_local_bytes: None,
            pmu: Pmu::default(),
            cpu_ns: None,
            status: Status::NoRmid,
            mbm_counter: None,
        }
    }

    #[test]
    fn a_block_keeps_every_row_in_order_in_full_chunks() {
        let row = empty;
        let mut b = Block::default();
        assert!(b.is_empty() && b.bytes() == 0);
        b.extend((0..CHUNK as i64).map(row));
        b.extend((CHUNK as i64..2 * CHUNK as i64 + 3).map(row));
        assert_eq!(b.len(), 2 * CHUNK + 3);
        let lens: Vec<usize> = b.chunks().map(<[Staged]>::len).collect();
        assert_eq!(lens, [CHUNK, CHUNK, 3]);
        let times: Vec<i64> = b.chunks().flatten().map(|s| s.time_ns).collect();
        assert_eq!(times, (0..2 * CHUNK as i64 + 3).collect::<Vec<_>>());
        // Full chunks hold no spare room; the last one little.
        assert!(b.bytes() <= (2 * CHUNK + 4) * STAGED_BYTES, "{}", b.bytes());
        // Small blocks appended fill the last chunk; a full chunk is moved as it is.
        let mut c = Block::default();
        for t in 0..3 {
            let mut small = Block::default();
            small.extend((10 * t..10 * t + 10).map(row));
            c.append(small);
        }
        c.append(b);
        let lens: Vec<usize> = c.chunks().map(<[Staged]>::len).collect();
        assert_eq!(lens, [30, CHUNK, CHUNK, 3]);
        assert_eq!(c.len(), 30 + 2 * CHUNK + 3);
    }

    #[test]
    fn every_value_and_every_absence_survives_staging() {
        let full = Row {
            time_ns: 5_000,
            interval_ns: 1_000,
            container: ContainerMeta::named("a"),
            domain: 3,
            rmid: Some(7),
            llc_occupancy_bytes: Some(1),
            mbm_total_bytes: Some(2),
            mbm_local_bytes: Some(3),
            pmu: Pmu {
                cycles: Some(4),
                instructions: Some(5),
                llc_references: Some(6),
                llc_misses: Some(7),
                lost: false,
            },
            cpu_ns: Some(u64::MAX),
            status: Status::Ok,
            mbm_counter: Some(MbmCounter::Rotating),
        };
        let empty = Row { time_ns: full.time_ns, interval_ns: full.interval_ns, domain: full.domain, ..empty(0) };
        let want = |r: &Row| {
            let mut v = vec![r.llc_occupancy_bytes.map(|x| i64::try_from(x).unwrap_or(i64::MAX))];
            v.extend(r.counters().map(|x| x.map(|x| i64::try_from(x).unwrap_or(i64::MAX))));
            (v, r.rmid.map(|x| x as i32), r.status, r.mbm_counter)
        };
        for r in [full, empty] {
            let w = want(&r);
            let s = Staged::from(r);
            let got: Vec<_> = (0..VALUES).map(|i| s.value(i)).collect();
            assert_eq!((got, s.rmid(), s.status, s.mbm_counter), w);
        }
    }

    #[test]
    fn each_column_is_typed_as_the_schema_says_and_in_its_place() {
        let schema = super::super::schema();
        assert_eq!(schema.fields().len(), COLUMNS);
        let rows: Vec<Staged> = (0..3).map(|t| Staged::from(empty(t * 1_000 + 1_000))).collect();
        // try_new checks each column's type and length against its field.
        let b = batch(&schema, "h", Provenance::Measured, &rows).expect("a batch the schema accepts");
        assert_eq!(b.num_rows(), 3);
        let col = |name: &str| b.column_by_name(name).unwrap_or_else(|| panic!("no column {name}"));
        let time = col("time_ns").as_any().downcast_ref::<arrow_array::Int64Array>().expect("time_ns is Int64");
        assert_eq!(time.values().to_vec(), vec![1_000, 2_000, 3_000]);
        let host = col("host").as_any().downcast_ref::<arrow_array::StringArray>().expect("host is a string");
        assert_eq!(host.value(2), "h");
    }
}
