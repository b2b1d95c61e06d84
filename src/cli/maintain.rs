//! `sessiontree compact` and `sessiontree sql`: keeping an archive small,
//! and reading it with SQL now that its text is stored compressed.

use super::{Cli, Report};
use clap::Args;
use rusqlite::types::Value as SqlValue;
use serde_json::{json, Value};
use sessiontree::backend::sqlite::StorageSplit;
use sessiontree::Result;

/// Arguments of `compact`.
#[derive(Debug, Args)]
pub struct CompactArgs {
    /// Do not draw a progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// Arguments of `sql`.
#[derive(Debug, Args)]
pub struct SqlArgs {
    /// One SQL statement, run read-only. `entry_text(entry_key)` gives an
    /// entry's exact text; `decode_entry(json)` decodes a stored value.
    pub query: String,
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// The split as text lines and JSON.
fn split_report(split: &StorageSplit) -> (String, Value) {
    let mut text = String::new();
    for (part, bytes) in &split.parts {
        text.push_str(&format!("  {part:<24} {:>10.2} MB\n", mb(*bytes)));
    }
    let json = split
        .parts
        .iter()
        .map(|(part, bytes)| json!({"part": part, "bytes": bytes}))
        .collect::<Vec<_>>();
    (text, Value::Array(json))
}

/// Runs `compact` (its `--quiet` is read where the bar is made, [`super::progress_bar`]).
pub fn compact(cli: &Cli, _args: &CompactArgs) -> Result<Report> {
    let archive = super::open_existing_archive(cli)?;
    let bar = super::progress_bar(cli, "compacting {bar:30} {pos}/{len} entries");
    let report = archive.compact(&mut |done, total| {
        bar.set_length(total);
        bar.set_position(done);
    });
    // Cleared before any error is printed, so the message stands alone.
    bar.finish_and_clear();
    let report = report?;
    let split = archive.storage_split()?;
    let (split_text, split_json) = split_report(&split);
    let refused = match report.blocks_refused {
        0 => String::new(),
        n => format!("warning: {n} blocks did not decode to their entries' texts and were not written (their entries are stored one by one); please report this\n"),
    };
    let text = format!(
        "{refused}{}: {:.2} MB -> {:.2} MB ({} of {} entries re-encoded; dictionary {} KB; {} unused dictionaries and {} unused blobs removed)\n{split_text}",
        archive.path().display(),
        mb(report.bytes_before),
        mb(report.bytes_after),
        report.reencoded,
        report.entries,
        report.dictionary_bytes / 1024,
        report.dictionaries_removed,
        report.blobs_removed,
    );
    Ok(Report::new(
        json!({
            "archive": archive.path().display().to_string(),
            "bytesBefore": report.bytes_before,
            "bytesAfter": report.bytes_after,
            "entries": report.entries,
            "reencoded": report.reencoded,
            "dictionaryBytes": report.dictionary_bytes,
            "dictionariesRemoved": report.dictionaries_removed,
            "blobsRemoved": report.blobs_removed,
            "blocksRefused": report.blocks_refused,
            "split": split_json,
        }),
        text,
    ))
}

fn cell_json(v: &SqlValue) -> Value {
    match v {
        SqlValue::Null => Value::Null,
        SqlValue::Integer(i) => json!(i),
        SqlValue::Real(f) => json!(f),
        SqlValue::Text(t) => json!(t),
        SqlValue::Blob(b) => json!({"blobBytes": b.len()}),
    }
}

fn cell_text(v: &SqlValue) -> String {
    match v {
        SqlValue::Null => "NULL".to_owned(),
        SqlValue::Integer(i) => i.to_string(),
        SqlValue::Real(f) => f.to_string(),
        SqlValue::Text(t) => t.replace('\n', "\\n"),
        SqlValue::Blob(b) => format!("<{} bytes>", b.len()),
    }
}

/// Runs `sql`.
pub fn sql(cli: &Cli, args: &SqlArgs) -> Result<Report> {
    let archive = super::open_existing_archive(cli)?;
    let result = archive.query_read_only(&args.query)?;
    let rows_json: Vec<Value> = result
        .rows
        .iter()
        .map(|row| {
            Value::Object(
                result
                    .columns
                    .iter()
                    .cloned()
                    .zip(row.iter().map(cell_json))
                    .collect(),
            )
        })
        .collect();
    let cells: Vec<Vec<String>> = result
        .rows
        .iter()
        .map(|row| row.iter().map(cell_text).collect())
        .collect();
    let mut widths: Vec<usize> = result.columns.iter().map(|c| c.chars().count()).collect();
    for row in &cells {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count().min(80));
        }
    }
    let line = |values: &[String]| -> String {
        let mut out = values
            .iter()
            .zip(&widths)
            .map(|(v, w)| {
                let v: String = v.chars().take(80).collect();
                format!("{v:<w$}")
            })
            .collect::<Vec<_>>()
            .join(" | ");
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    };
    let mut text = line(&result.columns);
    text.push_str(&line(
        &widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>(),
    ));
    for row in &cells {
        text.push_str(&line(row));
    }
    text.push_str(&format!("({} rows)\n", cells.len()));
    Ok(Report::new(
        json!({"columns": result.columns, "rows": rows_json}),
        text,
    ))
}
