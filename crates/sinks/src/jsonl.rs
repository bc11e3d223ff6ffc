//! JSON lines for scripts: one object per row with the docs/data.md column names; absent values are
//! `null`, never 0.

use crate::parquet::Provenance;
use cachescope_engine::row::Row;
use serde::Serialize;
use std::io::Write;

#[derive(Serialize)]
struct Line<'a> {
    time_ns: i64,
    interval_ns: i64,
    host: &'a str,
    container_id: &'a str,
    container_name: Option<&'a str>,
    pod_name: Option<&'a str>,
    pod_namespace: Option<&'a str>,
    pod_uid: Option<&'a str>,
    cgroup_path: &'a str,
    domain: u32,
    rmid: Option<u32>,
    llc_occupancy_bytes: Option<u64>,
    mbm_total_bytes: Option<u64>,
    mbm_local_bytes: Option<u64>,
    cycles: Option<u64>,
    instructions: Option<u64>,
    llc_references: Option<u64>,
    llc_misses: Option<u64>,
    cpu_ns: Option<u64>,
    status: &'static str,
    provenance: &'static str,
    mbm_counter: Option<&'static str>,
}

/// Write `rows` as JSON lines.
pub fn write_rows(out: &mut impl Write, host: &str, prov: Provenance, rows: &[Row]) -> std::io::Result<()> {
    for r in rows {
        let c = &r.container;
        let line = Line {
            time_ns: r.time_ns,
            interval_ns: r.interval_ns,
            host,
            container_id: &c.id,
            container_name: c.name(),
            pod_name: c.pod_name(),
            pod_namespace: c.pod_namespace(),
            pod_uid: c.pod_uid.as_deref(),
            cgroup_path: &c.cgroup_path,
            domain: r.domain,
            rmid: r.rmid,
            llc_occupancy_bytes: r.llc_occupancy_bytes,
            mbm_total_bytes: r.mbm_total_bytes,
            mbm_local_bytes: r.mbm_local_bytes,
            cycles: r.pmu.cycles,
            instructions: r.pmu.instructions,
            llc_references: r.pmu.llc_references,
            llc_misses: r.pmu.llc_misses,
            cpu_ns: r.cpu_ns,
            status: r.status.as_str(),
            provenance: prov.as_str(),
            mbm_counter: r.mbm_counter.map(|c| c.as_str()),
        };
        serde_json::to_writer(&mut *out, &line)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}
