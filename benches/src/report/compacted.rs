//! The archive after `sessiontree compact` beside the import-only archive
//! (issue 9), measured in the same run: each data set's archive is copied
//! (`VACUUM INTO`) and compacted, then both are measured for bytes ÷ JSONL
//! (with the split per table) and for what blocks may make dearer: cold
//! resume, a path from a random entry (the path query, kept paths
//! forgotten) and search.

use super::{fmt_ratio, fmt_s, measure, progress, target, Budget, Row};
use crate::ops::{self, Backend, Dataset, SqlitePaths};
use serde_json::{json, Value};
use sessiontree::backend::sqlite::Archive;
use sessiontree::{Durability, Error, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The two archives compared, in column order.
const KINDS: [&str; 2] = ["imported", "compacted"];

/// The speed rows: (op, what the report calls it).
const SPEED: [(&str, &str); 3] = [
    ("compact_resume", "cold resume (forked session)"),
    (
        "compact_path",
        "path from a random entry (path query, per read)",
    ),
    (
        "compact_search",
        "search one word, best 20 (archive of size/100 sessions)",
    ),
];

/// `src`'s archive copied to a fresh file under `work` (tag `tag`).
fn copy_archive(work: &Path, tag: &str, src: &Path) -> Result<PathBuf> {
    let copy = ops::scratch(work, tag)?.join("archive.db");
    let conn = rusqlite::Connection::open_with_flags(
        src,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .and_then(|c| {
        c.execute("VACUUM INTO ?1", [copy.to_string_lossy()])?;
        Ok(c)
    })
    .map_err(|e| Error::sqlite("copying an archive", e))?;
    drop(conn);
    Ok(copy)
}

/// Compacts the archive at `path`; the seconds it took.
fn compact(path: &Path) -> Result<f64> {
    let started = Instant::now();
    Archive::open(path, Durability::Full)?.compact(&mut |_, _| {})?;
    Ok(started.elapsed().as_secs_f64())
}

/// The size row of one archive: bytes in use, ÷ JSONL, the split per table.
fn size_row(
    kind: &str,
    size: usize,
    data: &str,
    path: &Path,
    jsonl: u64,
    secs: f64,
) -> Result<Row> {
    let (bytes, _) = ops::archive_bytes(path)?;
    let split = Archive::open(path, Durability::Full)?.storage_split()?;
    let parts: serde_json::Map<String, Value> = split
        .parts
        .iter()
        .map(|(part, b)| ((*part).to_owned(), json!(b)))
        .collect();
    Ok(Row {
        op: "compact_bytes",
        backend: kind.to_owned(),
        size,
        samples: vec![secs],
        per_sample: 1.0,
        extra: json!({"data": data, "bytes": bytes, "jsonl_bytes": jsonl,
            "ratio": bytes as f64 / jsonl.max(1) as f64, "split": parts,
            "secs_are": if kind == "compacted" { "compact" } else { "import" }}),
    })
}

/// Both archives of the `forked` and `archive_set` data sets of one size:
/// sizes, resume, path and search.
pub(super) fn measure_size(
    work: &Path,
    forked: &Dataset,
    archive_set: &Dataset,
    budget: &Budget,
    path_samples: usize,
    seed: u64,
) -> Result<Vec<Row>> {
    let size = forked.entries;
    let mut rows = Vec::new();
    progress(&format!("compact @ {size}"));
    let mut compacted_forked = forked.clone();
    compacted_forked.archive = copy_archive(work, "compacted-forked", &forked.archive)?;
    let forked_secs = compact(&compacted_forked.archive)?;
    let mut compacted_set = archive_set.clone();
    compacted_set.archive = copy_archive(work, "compacted-archive", &archive_set.archive)?;
    let set_secs = compact(&compacted_set.archive)?;
    for (kind, f, s, fs, ss) in [
        (
            "imported",
            forked,
            archive_set,
            forked.archive_import_secs,
            archive_set.archive_import_secs,
        ),
        (
            "compacted",
            &compacted_forked,
            &compacted_set,
            forked_secs,
            set_secs,
        ),
    ] {
        rows.push(size_row(
            kind,
            size,
            "forked session",
            &f.archive,
            f.bytes(),
            fs,
        )?);
        rows.push(size_row(
            kind,
            size,
            "archive of sessions",
            &s.archive,
            s.bytes(),
            ss,
        )?);
        progress(&format!("compact: {kind} resume, path, search @ {size}"));
        let n = ops::resume(Backend::Sqlite, f, None)?;
        let samples = measure(budget, || ops::resume(Backend::Sqlite, f, None).map(drop))?;
        rows.push(Row {
            op: "compact_resume",
            backend: kind.to_owned(),
            size,
            samples,
            per_sample: 1.0,
            extra: json!({"context_messages": n}),
        });
        let paths = SqlitePaths::new(f, path_samples, seed ^ 0x5eed)?;
        let samples = measure(budget, || {
            for i in 0..paths.ids.len() {
                paths.read_query(i)?;
            }
            Ok(())
        })?;
        rows.push(Row {
            op: "compact_path",
            backend: kind.to_owned(),
            size,
            samples,
            per_sample: paths.ids.len() as f64,
            extra: json!({"mean_path_len": paths.mean_length()}),
        });
        let archive = Archive::open(&s.archive, Durability::Full)?;
        let search = || archive.search(ops::SEARCH_TERM, None, None, None, 20);
        let hits = search()?.len();
        let samples = measure(budget, || search().map(drop))?;
        rows.push(Row {
            op: "compact_search",
            backend: kind.to_owned(),
            size,
            samples,
            per_sample: 1.0,
            extra: json!({"term": ops::SEARCH_TERM, "hits": hits}),
        });
    }
    let _ = std::fs::remove_dir_all(work.join("scratch/compacted-forked"));
    let _ = std::fs::remove_dir_all(work.join("scratch/compacted-archive"));
    Ok(rows)
}

/// The real pi `files` imported into a fresh archive (as `sessiontree
/// import` does), then compacted: both size rows (size 0).
pub(super) fn measure_real_files(work: &Path, files: &[PathBuf]) -> Result<Vec<Row>> {
    progress("compact: the real pi files");
    let db = ops::scratch(work, "compacted-real")?.join("archive.db");
    let jsonl: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    let started = Instant::now();
    {
        let archive = Archive::open(&db, Durability::Full)?;
        for f in files {
            sessiontree::convert::import_jsonl(&archive, f)?;
        }
    }
    let import_secs = started.elapsed().as_secs_f64();
    let imported = size_row("imported", 0, "the real pi files", &db, jsonl, import_secs)?;
    let secs = compact(&db)?;
    let compacted = size_row("compacted", 0, "the real pi files", &db, jsonl, secs)?;
    let _ = std::fs::remove_dir_all(work.join("scratch/compacted-real"));
    Ok(vec![imported, compacted])
}

fn find<'a>(rows: &'a [Row], op: &str, kind: &str, size: usize, data: &str) -> Option<&'a Row> {
    rows.iter().find(|r| {
        r.op == op
            && r.backend == kind
            && r.size == size
            && (data.is_empty() || r.extra["data"] == data)
    })
}

/// Issue 9's targets: archive ÷ JSONL after `compact` on the largest
/// generated session and on the real pi files, and each read on the
/// compacted archive within 10 % of the import-only one.
pub(super) fn targets(rows: &[Row]) -> Vec<Value> {
    let mut out = Vec::new();
    let Some(largest) = rows
        .iter()
        .filter(|r| r.op == "compact_bytes")
        .map(|r| r.size)
        .max()
    else {
        return out;
    };
    let ratio = |kind: &str, size: usize, data: &str| {
        find(rows, "compact_bytes", kind, size, data).and_then(|r| r.extra["ratio"].as_f64())
    };
    for (size, data) in [(largest, "forked session"), (0, "the real pi files")] {
        if size == 0 && largest == 0 {
            continue;
        }
        let name = if size == 0 {
            "archive ÷ JSONL after `compact`, the real pi files (search index included)".to_owned()
        } else {
            format!("archive ÷ JSONL after `compact`, the generated {size}-entry forked session (search index included)")
        };
        out.push(target(
            &name,
            "≤ 0.4",
            ratio("compacted", size, data),
            |x| x <= 0.4,
            format!(
                "{} after `compact`, {} import only",
                ratio("compacted", size, data).map_or("-".to_owned(), |r| format!("{r:.3}")),
                ratio("imported", size, data).map_or("-".to_owned(), |r| format!("{r:.3}"))
            ),
        ));
    }
    for (op, what) in SPEED {
        let median = |kind| find(rows, op, kind, largest, "").map(Row::median);
        let (Some(a), Some(b)) = (median("compacted"), median("imported")) else {
            continue;
        };
        out.push(target(
            &format!("{what} on the compacted archive vs the import-only one, {largest} entries"),
            "≤ 1.1×",
            Some(a / b),
            |x| x <= 1.1,
            format!("{} vs {}", fmt_s(a), fmt_s(b)),
        ));
    }
    out
}

/// The report's section: sizes, then the reads, imported beside compacted.
pub(super) fn render(rows: &[Row]) -> String {
    let mut t = String::new();
    if rows.is_empty() {
        return t;
    }
    let _ = writeln!(
        t,
        "\nThe archive after `sessiontree compact` beside the import-only archive (the same data; `compact` packs parent chains into zstd blocks at level 18):\n"
    );
    let _ = writeln!(
        t,
        "| entries | data | JSONL | imported | ÷ JSONL | compacted | ÷ JSONL | compact took |\n|---:|---|---:|---:|---:|---:|---:|---:|"
    );
    let mb = |b: f64| format!("{:.2} MB", b / 1e6);
    for r in rows
        .iter()
        .filter(|r| r.op == "compact_bytes" && r.backend == "imported")
    {
        let data = r.extra["data"].as_str().unwrap_or_default();
        let Some(c) = find(rows, "compact_bytes", "compacted", r.size, data) else {
            continue;
        };
        let entries = if r.size == 0 {
            "-".to_owned()
        } else {
            r.size.to_string()
        };
        let _ = writeln!(
            t,
            "| {entries} | {data} | {} | {} | {:.3} | {} | {:.3} | {} |",
            mb(r.extra["jsonl_bytes"].as_f64().unwrap_or(f64::NAN)),
            mb(r.extra["bytes"].as_f64().unwrap_or(f64::NAN)),
            r.extra["ratio"].as_f64().unwrap_or(f64::NAN),
            mb(c.extra["bytes"].as_f64().unwrap_or(f64::NAN)),
            c.extra["ratio"].as_f64().unwrap_or(f64::NAN),
            fmt_s(c.median()),
        );
    }
    let parts = [
        "entries",
        "search index",
        "branch cache",
        "dictionaries",
        "blobs",
        "sessions and the rest",
    ];
    let _ = write!(
        t,
        "\nWhere the bytes are (MB, from `dbstat`):\n\n| entries | data | archive |"
    );
    for part in parts {
        let _ = write!(t, " {part} |");
    }
    let _ = writeln!(t, "\n|---:|---|---|{}", "---:|".repeat(parts.len()));
    for r in rows.iter().filter(|r| r.op == "compact_bytes") {
        let entries = if r.size == 0 {
            "-".to_owned()
        } else {
            r.size.to_string()
        };
        let data = r.extra["data"].as_str().unwrap_or_default();
        let _ = write!(t, "| {entries} | {data} | {} |", r.backend);
        for part in parts {
            let b = r.extra["split"][part].as_f64().unwrap_or(0.0);
            let _ = write!(t, " {:.2} |", b / 1e6);
        }
        t.push('\n');
    }
    let _ = writeln!(
        t,
        "\n| entries | operation | imported | compacted | compacted ÷ imported |\n|---:|---|---:|---:|---:|"
    );
    let mut sizes: Vec<usize> = rows.iter().map(|r| r.size).filter(|&s| s > 0).collect();
    sizes.sort_unstable();
    sizes.dedup();
    for size in sizes {
        for (op, what) in SPEED {
            let [Some(a), Some(b)] = KINDS.map(|k| find(rows, op, k, size, "").map(Row::median))
            else {
                continue;
            };
            let _ = writeln!(
                t,
                "| {size} | {what} | {} | {} | {} |",
                fmt_s(a),
                fmt_s(b),
                fmt_ratio(b / a)
            );
        }
    }
    t
}
