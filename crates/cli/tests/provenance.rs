//! Provenance that survives a rewrite: a recording rewritten by a tool that drops the file
//! metadata (as `pq.write_table(pq.read_table(f))` does) is still reported as emulated, from
//! its rows; a file that says nothing of itself is "unknown", never "measured".

#![allow(clippy::unwrap_used)] // tests: a panic is the report

mod common;

use arrow_array::RecordBatch;
use common::{bin, parquet_files};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use serde_json::Value;
use std::path::Path;

/// `src`'s rows into `dst` with no key-value metadata, without the columns in `drop`.
fn rewrite(src: &Path, dst: &Path, drop: &[&str]) {
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(src).unwrap()).unwrap().build().unwrap();
    let mut writer = None;
    for b in reader {
        let b = b.unwrap();
        let keep: Vec<usize> =
            (0..b.num_columns()).filter(|&i| !drop.contains(&b.schema().field(i).name().as_str())).collect();
        let b: RecordBatch = b.project(&keep).unwrap();
        // No writer properties: none of cachescope's key-value metadata, as another tool writes.
        let w = writer.get_or_insert_with(|| {
            ArrowWriter::try_new(std::fs::File::create(dst).unwrap(), b.schema(), None).unwrap()
        });
        w.write(&b).unwrap();
    }
    writer.unwrap().close().unwrap();
}

fn report(path: &Path) -> (Value, String) {
    let o = bin().arg("report").arg(path).arg("--json").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = bin().arg("report").arg(path).output().unwrap();
    (serde_json::from_slice(&o.stdout).unwrap(), String::from_utf8_lossy(&text.stdout).into_owned())
}

#[test]
fn emulated_values_stay_emulated_after_a_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("rec");
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/noisy-neighbour.toml");
    let o = bin()
        .args(["record", "--fast", "--duration", "3s", "--scenario"])
        .arg(&scenario)
        .arg("--output")
        .arg(&rec)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let files = parquet_files(&rec);
    let (v, text) = report(&rec);
    assert_eq!(v["run"]["values"], "emulated");
    assert!(text.contains("EMULATED (emulated): llc_occupancy_bytes and mbm_* are emulated"), "{text}");

    // The metadata gone: the rows still say so.
    let plain = dir.path().join("rewritten.parquet");
    rewrite(&files[0], &plain, &[]);
    let (v, text) = report(&plain);
    assert_eq!(v["run"]["values"], "emulated", "{v:#}");
    assert_eq!(v["run"]["schema_versions"], serde_json::json!([]));
    assert!(text.contains("EMULATED (emulated): the rows' provenance column says so"), "{text}");

    // Neither metadata nor the column: nothing says, and the report says it does not know.
    let bare = dir.path().join("bare.parquet");
    rewrite(&files[0], &bare, &["provenance"]);
    let (v, text) = report(&bare);
    assert_eq!(v["run"]["values"], "unknown", "{v:#}");
    assert!(text.contains("values") && text.contains("unknown: no cachescope metadata"), "{text}");
    assert!(!text.contains("measured"), "{text}");
}
