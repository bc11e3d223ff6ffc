//! The docs/data.md schema (rows become Arrow batches of it in `staged`).

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use std::sync::Arc;

pub const SCHEMA_VERSION: &str = "4";
/// File metadata: PMU charges dropped while the file was open (absent: none).
pub const PMU_LOST: &str = "cachescope.pmu_lost_charges";

/// The time zone of the timestamp columns: instants, as CLOCK_REALTIME.
pub(super) const UTC: &str = "UTC";

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
