//! `sessiontree compact` and `sessiontree sql`: keeping an archive small,
//! and reading it with SQL now that its text is stored compressed.

use super::{Cli, Report};
use clap::Args;
use rusqlite::types::ValueRef;
use serde_json::{json, Value};
use sessiontree::backend::sqlite::{CompactOptions, QueryEnd, QueryLimits, StorageSplit};
use sessiontree::{Error, Result};

/// Arguments of `compact`.
#[derive(Debug, Args)]
pub struct CompactArgs {
    /// Do not draw a progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// The zstd level to re-encode at, 1 to 19 (default 3): higher is
    /// smaller and slower.
    #[arg(long, conflicts_with = "best")]
    pub level: Option<i32>,
    /// The smallest archive compact makes (level 19, a searched
    /// dictionary), several times slower than the default.
    #[arg(long)]
    pub best: bool,
}

/// Arguments of `sql`.
#[derive(Debug, Args)]
pub struct SqlArgs {
    /// One SQL statement, run read-only. `entry_text(entry_key)` gives an
    /// entry's exact text; `decode_entry(json)` decodes a stored value.
    pub query: String,
    /// Stop after this many rows (the rows before are printed).
    #[arg(long, default_value_t = 1_000_000)]
    pub max_rows: u64,
    /// Stop the query after this many seconds.
    #[arg(long, default_value_t = 60.0)]
    pub max_seconds: f64,
    /// Stop once the rows printed hold this many MB of text and blobs.
    #[arg(long, default_value_t = 1024)]
    pub max_output_mb: u64,
    /// Stop at a value (one text or blob) larger than this many MB.
    #[arg(long, default_value_t = 64)]
    pub max_value_mb: u64,
    /// SQLite's memory for the query, in MB (sorting beyond it fails the query).
    #[arg(long, default_value_t = 512)]
    pub max_memory_mb: u64,
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
pub fn compact(cli: &Cli, args: &CompactArgs) -> Result<Report> {
    let options = match (args.best, args.level) {
        (true, _) => CompactOptions::best(),
        (false, Some(level)) => CompactOptions::at_level(level)?,
        (false, None) => CompactOptions::default(),
    };
    let archive = super::open_existing_archive(cli)?;
    let bar = super::progress_bar(cli, "compacting {bar:30} {pos}/{len} entries");
    let report = archive.compact_with(options, &mut |done, total| {
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
        "{refused}{}: {:.2} MB -> {:.2} MB ({} of {} entries re-encoded, {} compressed again; dictionary {} KB{}; {} unused dictionaries and {} unused blobs removed)\n{split_text}",
        archive.path().display(),
        mb(report.bytes_before),
        mb(report.bytes_after),
        report.reencoded,
        report.entries,
        report.entries_encoded,
        report.dictionary_bytes / 1024,
        if report.dictionary_kept { ", kept" } else { ", new" },
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
            "compressed": report.entries_encoded,
            "dictionaryKept": report.dictionary_kept,
            "dictionaryBytes": report.dictionary_bytes,
            "dictionariesRemoved": report.dictionaries_removed,
            "blobsRemoved": report.blobs_removed,
            "blocksRefused": report.blocks_refused,
            "split": split_json,
        }),
        text,
    ))
}

fn cell_json(v: ValueRef<'_>) -> Value {
    match v {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(i) => json!(i),
        ValueRef::Real(f) => json!(f),
        ValueRef::Text(t) => json!(String::from_utf8_lossy(t)),
        ValueRef::Blob(b) => json!({"blobBytes": b.len()}),
    }
}

fn cell_text(v: ValueRef<'_>) -> String {
    match v {
        ValueRef::Null => "NULL".to_owned(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(f) => f.to_string(),
        ValueRef::Text(t) => super::field(&String::from_utf8_lossy(t)),
        ValueRef::Blob(b) => format!("<{} bytes>", b.len()),
    }
}

/// Rows read before the table's column widths are fixed: the rest of the
/// rows are printed as they come, so memory holds this many at most.
const WIDTH_SAMPLE_ROWS: usize = 256;

/// The human table, written as rows come: widths from the first
/// [`WIDTH_SAMPLE_ROWS`] rows (a later, longer value widens its line only).
struct Table {
    columns: Vec<String>,
    widths: Vec<usize>,
    held: Vec<Vec<String>>,
    started: bool,
}

impl Table {
    fn line(&self, values: &[String]) -> String {
        let mut out = values
            .iter()
            .zip(&self.widths)
            .map(|(v, w)| {
                let v: String = v.chars().take(80).collect();
                format!("{v:<w$}")
            })
            .collect::<Vec<_>>()
            .join(" | ");
        out.truncate(out.trim_end().len());
        out.push('\n');
        out
    }

    /// Writes the header and the rows held, fixing the widths.
    fn start(&mut self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        self.widths = self.columns.iter().map(|c| c.chars().count()).collect();
        for row in &self.held {
            for (w, c) in self.widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count().min(80));
            }
        }
        let mut text = self.line(&self.columns);
        let rule: Vec<String> = self.widths.iter().map(|w| "-".repeat(*w)).collect();
        text.push_str(&self.line(&rule));
        for row in std::mem::take(&mut self.held) {
            text.push_str(&self.line(&row));
        }
        self.started = true;
        out.write_all(super::terminal_safe(&text).as_bytes())
    }

    fn row(&mut self, row: Vec<String>, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        if self.started {
            return out.write_all(super::terminal_safe(&self.line(&row)).as_bytes());
        }
        self.held.push(row);
        if self.held.len() >= WIDTH_SAMPLE_ROWS {
            self.start(out)?;
        }
        Ok(())
    }
}

/// Runs `sql`, writing its rows as SQLite makes them (JSON: `{"columns",
/// "rows"}`, with `"stopped"` when a limit ended it; text: a table). A
/// limit reached keeps what was printed valid, says which limit on stderr
/// and exits 2 (`usage`).
pub fn print_sql(cli: &Cli, args: &SqlArgs) -> i32 {
    let archive = match super::open_existing_archive(cli) {
        Ok(a) => a,
        Err(e) => return super::report_error(cli, &e),
    };
    let mb = |n: u64| n.saturating_mul(1 << 20);
    let limits = QueryLimits {
        max_rows: args.max_rows,
        max_time: std::time::Duration::try_from_secs_f64(args.max_seconds)
            .unwrap_or(std::time::Duration::MAX),
        max_bytes: mb(args.max_output_mb),
        max_value_bytes: mb(args.max_value_mb),
    };
    // The process's SQLite heap (this command runs nothing else): a sort or
    // a grouping over a huge result fails instead of growing without bound.
    set_sqlite_heap_limit(mb(args.max_memory_mb));
    let mut outcome: Result<QueryEnd> = Ok(QueryEnd::Complete { rows: 0 });
    let mut began = false;
    let mut write_failed = false;
    let written = super::write_stdout_with(|out| {
        /// What both callbacks write to.
        struct Sink<'o> {
            out: &'o mut dyn std::io::Write,
            table: Table,
            names: Vec<String>,
            rows: u64,
            failed: Option<std::io::Error>,
        }
        impl Sink<'_> {
            fn keep(&mut self, r: std::io::Result<()>) -> Result<()> {
                r.map_err(|e| {
                    let err = Error::io(
                        "writing output",
                        std::io::Error::new(e.kind(), e.to_string()),
                    );
                    self.failed.get_or_insert(e);
                    err
                })
            }
        }
        let sink = std::cell::RefCell::new(Sink {
            out,
            table: Table {
                columns: Vec::new(),
                widths: Vec::new(),
                held: Vec::new(),
                started: false,
            },
            names: Vec::new(),
            rows: 0,
            failed: None,
        });
        let json_out = cli.json;
        outcome = archive.query_read_only_each(
            &args.query,
            &limits,
            &mut |columns| {
                let sink = &mut *sink.borrow_mut();
                sink.names = columns.to_vec();
                sink.table.columns = columns.iter().map(|c| super::field(c)).collect();
                Ok(())
            },
            &mut |row| {
                let sink = &mut *sink.borrow_mut();
                let r = if json_out {
                    let object: serde_json::Map<String, Value> = sink
                        .names
                        .iter()
                        .cloned()
                        .zip(row.iter().map(|v| cell_json(*v)))
                        .collect();
                    if sink.rows == 0 {
                        let r = open_json(&mut *sink.out, &sink.names);
                        sink.keep(r)?;
                    }
                    let comma = if sink.rows == 0 { "" } else { "," };
                    write!(sink.out, "{comma}{}", Value::Object(object))
                } else {
                    sink.table
                        .row(row.iter().map(|v| cell_text(*v)).collect(), &mut *sink.out)
                };
                sink.rows += 1;
                sink.keep(r)
            },
        );
        let Sink {
            out,
            mut table,
            names,
            rows,
            failed,
        } = sink.into_inner();
        if let Some(e) = failed {
            // The output was cut (`| head`, say): nothing more to tell.
            write_failed = true;
            return Err(e);
        }
        // An error before any row is the command's error, printed as every
        // command prints one; after rows, it ends what was printed.
        if rows == 0 && outcome.is_err() {
            return Ok(());
        }
        began = true;
        if json_out && rows == 0 {
            open_json(out, &names)?;
        }
        let stopped = match &outcome {
            Ok(QueryEnd::Stopped { why, .. }) => Some(why.clone()),
            Err(e) => Some(e.to_string()),
            Ok(QueryEnd::Complete { .. }) => None,
        };
        if json_out {
            match &stopped {
                Some(why) => writeln!(out, "],\"stopped\":{}}}", json!(why)),
                None => out.write_all(b"]}\n"),
            }
        } else {
            if !table.started {
                table.start(out)?;
            }
            let more = if stopped.is_some() { ", stopped" } else { "" };
            writeln!(out, "({rows} rows{more})")
        }
    });
    if written != super::exit::OK || write_failed {
        return written;
    }
    match outcome {
        Ok(QueryEnd::Complete { .. }) => super::exit::OK,
        Ok(QueryEnd::Stopped { why, .. }) => {
            eprintln!("sessiontree: error [usage]: sql: {why}");
            super::exit::USAGE
        }
        // Failed before any output: the one JSON error object, as every command.
        Err(e) if !began => super::report_error(cli, &e),
        Err(e) => {
            eprintln!(
                "sessiontree: error [{}]: {}",
                e.code(),
                super::terminal_safe(&e.to_string())
            );
            super::exit_status(&e)
        }
    }
}

/// The start of `sql`'s JSON, up to its first row.
fn open_json(out: &mut dyn std::io::Write, names: &[String]) -> std::io::Result<()> {
    write!(out, "{{\"columns\":{},\"rows\":[", json!(names))
}

/// Sets SQLite's hard heap limit for this process (`PRAGMA hard_heap_limit`).
fn set_sqlite_heap_limit(bytes: u64) {
    if let Ok(conn) = rusqlite::Connection::open_in_memory() {
        let _ = conn.pragma_update(
            None,
            "hard_heap_limit",
            i64::try_from(bytes).unwrap_or(i64::MAX),
        );
    }
}
