//! The docs/data.md schema, and rows as Arrow batches of it.

use crate::SinkError;
use arrow_array::builder::{Int32Builder, Int64Builder, StringBuilder, TimestampNanosecondBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use cachescope_engine::row::Row;
use std::sync::Arc;

pub const SCHEMA_VERSION: &str = "4";
/// File metadata: PMU charges dropped while the file was open (absent: none).
pub const PMU_LOST: &str = "cachescope.pmu_lost_charges";

/// The time zone of the timestamp columns: instants, as CLOCK_REALTIME.
const UTC: &str = "UTC";

/// The docs/data.md schema, column for column (version 2: version 1's columns, then `time`
/// and `interval_start` as TIMESTAMP(ns, UTC); version 3: then `provenance`; version 4: then
/// `mbm_counter`).
pub fn schema() -> SchemaRef {
    let ts = |n: &str| Field::new(n, DataType::Timestamp(TimeUnit::Nanosecond, Some(UTC.into())), false);
    let i64n = |n: &str| Field::new(n, DataType::Int64, true);
    let strn = |n: &str| Field::new(n, DataType::Utf8, true);
    Arc::new(Schema::new(vec![
        Field::new("time_ns", DataType::Int64, false),
        Field::new("interval_ns", DataType::Int64, false),
        Field::new("host", DataType::Utf8, false),
        Field::new("container_id", DataType::Utf8, false),
        strn("container_name"),
        strn("pod_name"),
        strn("pod_namespace"),
        strn("pod_uid"),
        Field::new("cgroup_path", DataType::Utf8, false),
        Field::new("domain", DataType::Int32, false),
        Field::new("rmid", DataType::Int32, true),
        i64n("llc_occupancy_bytes"),
        i64n("mbm_total_bytes"),
        i64n("mbm_local_bytes"),
        i64n("cycles"),
        i64n("instructions"),
        i64n("llc_references"),
        i64n("llc_misses"),
        i64n("cpu_ns"),
        Field::new("status", DataType::Utf8, false),
        ts("time"),
        ts("interval_start"),
        Field::new("provenance", DataType::Utf8, false),
        strn("mbm_counter"),
    ]))
}

/// Where a row's values come from, in the `provenance` column: what travels with the rows when
/// a file is rewritten by a tool that drops the file metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Provenance {
    #[default]
    Measured,
    Emulated,
}

impl Provenance {
    pub fn of(emulated: bool) -> Provenance {
        if emulated {
            Provenance::Emulated
        } else {
            Provenance::Measured
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Provenance::Measured => "measured",
            Provenance::Emulated => "emulated",
        }
    }
}

fn i64v(v: Option<u64>) -> Option<i64> {
    v.map(|x| i64::try_from(x).unwrap_or(i64::MAX))
}

/// Rows to one Arrow batch of [`schema`].
pub fn to_batch(schema: &SchemaRef, host: &str, prov: Provenance, rows: &[Row]) -> Result<RecordBatch, SinkError> {
    let n = rows.len();
    let mut time = Int64Builder::with_capacity(n);
    let mut interval = Int64Builder::with_capacity(n);
    let mut hosts = StringBuilder::with_capacity(n, n * host.len());
    let mut strs: Vec<StringBuilder> = (0..6).map(|_| StringBuilder::with_capacity(n, n * 16)).collect();
    let mut domain = Int32Builder::with_capacity(n);
    let mut rmid = Int32Builder::with_capacity(n);
    let mut vals: Vec<Int64Builder> = (0..8).map(|_| Int64Builder::with_capacity(n)).collect();
    let mut status = StringBuilder::with_capacity(n, n * 2);
    let mut end = TimestampNanosecondBuilder::with_capacity(n).with_timezone(UTC);
    let mut start = TimestampNanosecondBuilder::with_capacity(n).with_timezone(UTC);
    let mut provenance = StringBuilder::with_capacity(n, n * 8);
    let mut counter = StringBuilder::with_capacity(n, 0);
    for r in rows {
        counter.append_option(r.mbm_counter.map(|c| c.as_str()));
        provenance.append_value(prov.as_str());
        end.append_value(r.time_ns);
        start.append_value(r.time_ns - r.interval_ns);
        time.append_value(r.time_ns);
        interval.append_value(r.interval_ns);
        hosts.append_value(host);
        let c = &r.container;
        strs[0].append_value(&c.id);
        strs[1].append_option(c.name());
        strs[2].append_option(c.pod_name());
        strs[3].append_option(c.pod_namespace());
        strs[4].append_option(c.pod_uid.as_deref());
        strs[5].append_value(&c.cgroup_path);
        domain.append_value(i32::try_from(r.domain).unwrap_or(i32::MAX));
        rmid.append_option(r.rmid.map(|x| i32::try_from(x).unwrap_or(i32::MAX)));
        for (b, x) in vals.iter_mut().zip(std::iter::once(r.llc_occupancy_bytes).chain(r.counters())) {
            b.append_option(i64v(x));
        }
        status.append_value(r.status.as_str());
    }
    let mut cols: Vec<ArrayRef> = vec![Arc::new(time.finish()), Arc::new(interval.finish()), Arc::new(hosts.finish())];
    for s in strs.iter_mut() {
        cols.push(Arc::new(s.finish()));
    }
    cols.push(Arc::new(domain.finish()));
    cols.push(Arc::new(rmid.finish()));
    for v in vals.iter_mut() {
        cols.push(Arc::new(v.finish()));
    }
    cols.push(Arc::new(status.finish()));
    cols.push(Arc::new(end.finish()));
    cols.push(Arc::new(start.finish()));
    cols.push(Arc::new(provenance.finish()));
    cols.push(Arc::new(counter.finish()));
    RecordBatch::try_new(schema.clone(), cols).map_err(|e| SinkError::Encode(e.to_string()))
}
