//! `sessiontree-bench report`: the storage comparison as one command. SQLite against
//! the JSONL and in-memory backends and two naive SQL designs, on the same
//! generated data, at several sizes; medians and ratios, the physical floor,
//! peak RSS of a resume measured in a child process, pi itself as an anchor
//! (`--pi`), and the issue's targets as measured ratios. Writes `report.json`
//! (every number), `report.md` (the tables) and `scaling.svg` (cost against
//! entries, log–log) to `--out`.
//!
//! The operations and the naive designs live in [`crate::ops`] and are
//! shared with the criterion benches, so both measure the same code.

mod compacted;

use crate::gen::Shape;
use crate::ops::{self, ArchiveFixture, Backend, Dataset, PathFixture, WriteFixture};
use crate::peers::{self, Cmd, Node24};
use crate::Report;
use clap::Args;
use serde_json::{json, Value};
use sessiontree::{Durability, Error, Result};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Arguments of `bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Session sizes (entries) to compare at, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
    /// Small and fast: sizes 1000 unless given, short time budgets (< 1 min).
    #[arg(long)]
    pub quick: bool,
    /// Extra sizes at which only the resume (time and peak RSS, in a child
    /// process) is measured, e.g. 1000000.
    #[arg(long, value_delimiter = ',')]
    pub rss_sizes: Vec<usize>,
    /// Only these operations (resume, path, leaf_move, append, import, list, search, shapes).
    #[arg(long, value_delimiter = ',')]
    pub ops: Vec<String>,
    /// Where the report goes.
    #[arg(long, default_value = "bench-report")]
    pub out: PathBuf,
    /// Where generated data sets are kept between runs (default:
    /// `$TMPDIR/sessiontree-bench`; 100,000 entries take about 1.5 GB, 1,000,000 about 6 GB).
    #[arg(long)]
    pub work: Option<PathBuf>,
    /// Seconds to spend measuring each (operation, backend, size).
    #[arg(long)]
    pub budget: Option<f64>,
    /// Seed of the generated data.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Also time pi itself (node + `@earendil-works/pi-agent-core`) on the same
    /// files, pi's SQLite store, and the Node binding (`bindings/node`, its
    /// `npm run bench` beside pi's JSONL and SQLite storages).
    #[arg(long)]
    pub pi: bool,
    /// The pi anchor's directory (default: this crate's `benches/pi-anchor`).
    #[arg(long)]
    pub pi_dir: Option<PathBuf>,
    /// A Node ≥ 22.19 for pi's SQLite store (default: the one `npm ci` puts in
    /// `<pi-dir>/sqlite`, installed by a full `--pi` report, else `node` on PATH).
    #[arg(long)]
    pub node24: Option<PathBuf>,
    /// The largest pi home of the `home` part (e.g. `5G`, `500M`): it is
    /// generated in pi's layout under `--work` at a hundredth, a tenth and
    /// all of this size, each put through import, ls, search, stats, check,
    /// compact (and sync with `--pg`), then deleted. Default: 500M, 4M with
    /// `--quick`.
    #[arg(long, value_parser = crate::home::parse_size)]
    pub home_size: Option<u64>,
    /// A PostgreSQL server for the home's `sync` (a URL such as
    /// `.ci/pg-cluster` prints); a fresh database is made on it per home.
    #[arg(long)]
    pub pg: Option<String>,
    /// Keep the generated homes (default: deleted once measured).
    #[arg(long)]
    pub keep_home: bool,
    /// Run `compact` only on homes up to this size (e.g. `200M`; default:
    /// every home): it re-encodes every entry, the slowest command by far.
    #[arg(long, value_parser = crate::home::parse_size)]
    pub home_compact_max: Option<u64>,
    /// Entries of the `avail` part's session (default 1,000,000; 10,000 with `--quick`; 0: PostgreSQL only).
    #[arg(long)]
    pub avail_entries: Option<usize>,
    /// Entries of the `avail` part's session on PostgreSQL (`--pg`; default 100,000).
    #[arg(long)]
    pub avail_pg_entries: Option<usize>,
    /// Seconds a command of the `home` part may run (`600`, per command
    /// `compact=300,sync=300`, or both): one still running then is killed
    /// and its row says so, how far it got and the MB/s it stayed below
    /// (default: no limit).
    #[arg(long, value_parser = crate::home::parse_budget)]
    pub home_budget: Option<crate::home::Budget>,
    /// Internal: print the text of this many rows of the data set's main
    /// session (a rowid range scan), the floor of printing a context.
    #[arg(long, hide = true)]
    pub child_floor_rows: Option<usize>,
    /// Internal: the first rowid of `--child-floor-rows` in the naive log
    /// (with `--child-floor-decoded`: the first entry key in the archive).
    #[arg(long, hide = true)]
    pub child_floor_start: Option<i64>,
    /// Internal: `--child-floor-rows` reads the archive's own rows, decoded.
    #[arg(long, hide = true)]
    pub child_floor_decoded: bool,
    /// Internal: run one resume in this process and print its time and peak RSS.
    #[arg(long, hide = true)]
    pub child_resume: Option<String>,
    /// Internal: the data set directory of `--child-resume`.
    #[arg(long, hide = true)]
    pub child_dataset: Option<PathBuf>,
}

/// Every operation, in report order.
const OPS: [&str; 15] = [
    "pi16",
    "home",
    "avail",
    "resume",
    "path",
    "path_long",
    "leaf_move",
    "append",
    "import",
    "import_files",
    "list",
    "search",
    "compact",
    "shapes",
    "process",
];

/// The tree shapes compared side by side on SQLite: the linear shape is the
/// baseline; "regenerate the last reply" puts a fork on the active path every
/// few entries, the caterpillar at every entry of it.
const SHAPES: [Shape; 3] = [Shape::Linear, Shape::Regenerate, Shape::Caterpillar];

/// What each operation measures (for the report).
fn op_doc(op: &str) -> &'static str {
    match op {
        "resume" => "cold resume: open the store, read the current leaf's path, build the context (forked session; memory = store already loaded)",
        "path" => "path from a random entry to the root or compaction stop (forked session, mean per read over fixed samples, read again and again through one open handle: sqlite answers from the paths the handle keeps, as JSONL and memory answer from the whole log they hold; sqlite-query = the same reads with the kept paths forgotten first, i.e. the path query with the decoded-entry cache warm); floors = rowid range scan of as many rows",
        "leaf_move" => "move the leaf to an entry deep in a linear session (depth ≈ 0.9–1.0 × size), no fsync (relaxed) so the algorithm shows",
        "append" => "durable append of a ~900 B message at the leaf (fsync / synchronous=FULL; memory has no durability)",
        "import" => "bulk import of the forked session's pi JSONL into a fresh store (sqlite maintains branch cache + FTS index; jsonl = open/parse only)",
        "import_files" => "bulk import of the archive data set's pi files (size/100 sessions of ~90 KB in pi's layout, as a first `sessiontree import` of a sessions directory meets them) into a fresh store: sqlite as the CLI imports them (small files several to a transaction; one_at_a_time = each in its own transaction, as before, in the row's extra); jsonl = opening every file",
        "list" => "first page (50) of sessions, newest first, in an archive of size/100 sessions",
        "search" => "all messages mentioning one word across the archive (sqlite FTS5; others scan)",
        "path_long" => "the active path of a linear session without compactions, from its leaf (every entry of the session), whole read through one open handle (sqlite: answered from the path the handle keeps; sqlite-query: that path forgotten first, so the query runs, and its decoded-entry cache of 24 MB serves the 10k path, while the 100k path does not fit and is decoded each time); floors = rowid range scan of as many rows (floor-decoded: of the archive's own rows, each decompressed); compacted-query / compacted-floor = the same read and decompressed scan on a compacted copy (entries in blocks)",
        "compact" => "the archive after `sessiontree compact` beside the import-only archive of the same data (copied with VACUUM INTO, then compacted): bytes ÷ JSONL with the split per table (forked session, archive of size/100 sessions, the real pi files), and cold resume, path from a random entry (path query, kept paths forgotten) and search on both",
        "pi16" => "pi 1.6 (pi-coding-agent 1.6.0 under Node 22, `--pi`): SessionManager.open + buildSessionContext, getBranch, branch + append, listAll over 300 and 3,000 files, against the CLI and `rpc --contract app` (whole processes) and the binding's archive.sessionManager (in process)",
        "home" => "a pi home in pi's layout (thousands of sessions, two of 20 % each made of inline images) at three sizes up to --home-size: import, ls, search, stats, check, compact, sync (with --pg), each a whole process with MB/s and peak RSS",
        "avail" => "availability (issue 40.1): a session of --avail-entries entries imported, forked, the fork deleted and the archive compacted, each a `sessiontree` process, while another session is appended to every 3 ms: time, appends that got in, p50/p99/max wait, failures (with --pg also sync, fork, delete of --avail-pg-entries on PostgreSQL)",
        "process" => "whole process, as a user runs one command (spawn to exit, stdout to /dev/null, median of alternating runs): see the whole-process table",
        "shapes" => "SQLite only, one session per tree shape (linear, regenerate: a fork at the tip every ~4 entries, caterpillar: a fork at every entry of the active path): import MB/s and archive bytes per entry, cold resume, path from a random entry, leaf move near the tip",
        _ => "",
    }
}

/// One measured (operation, backend, size).
#[derive(Debug, Clone)]
struct Row {
    op: &'static str,
    backend: String,
    size: usize,
    samples: Vec<f64>,
    /// Work per sample (e.g. path reads), so per-unit times divide by it.
    per_sample: f64,
    extra: Value,
}

/// A row of bulk imports of `mb` megabytes: `more` with the size and MB/s.
fn import_row(
    op: &'static str,
    backend: Backend,
    size: usize,
    samples: Vec<f64>,
    mb: f64,
    mut more: Value,
) -> Row {
    more["mb"] = json!(mb);
    more["mb_per_s"] = json!(mb / crate::median(samples.clone()));
    Row {
        op,
        backend: backend.name().to_owned(),
        size,
        samples,
        per_sample: 1.0,
        extra: more,
    }
}

impl Row {
    fn sorted(&self) -> Vec<f64> {
        let mut s: Vec<f64> = self.samples.iter().map(|x| x / self.per_sample).collect();
        s.sort_by(f64::total_cmp);
        s
    }
    fn median(&self) -> f64 {
        crate::median(self.sorted())
    }
    fn min(&self) -> f64 {
        self.sorted().first().copied().unwrap_or(f64::NAN)
    }
    fn p90(&self) -> f64 {
        let s = self.sorted();
        if s.is_empty() {
            return f64::NAN;
        }
        s[((s.len() as f64 * 0.9).ceil() as usize).clamp(1, s.len()) - 1]
    }
}

struct Budget {
    secs: f64,
    min: usize,
    max: usize,
}

impl Budget {
    /// The budget for a bulk import: a 100,000-entry import takes seconds,
    /// so two runs are enough there.
    fn for_import(&self, size: usize) -> Budget {
        Budget {
            secs: self.secs,
            min: if size >= 100_000 { 2 } else { self.min },
            max: self.max,
        }
    }
}

/// Runs `f` until the budget is spent (at least `min`, at most `max` times);
/// the first run is a warm-up unless it alone took more than a quarter of the budget.
fn measure(budget: &Budget, mut f: impl FnMut() -> Result<()>) -> Result<Vec<f64>> {
    let mut samples = Vec::new();
    let t = Instant::now();
    f()?;
    let first = t.elapsed().as_secs_f64();
    if first > budget.secs / 4.0 {
        samples.push(first);
    }
    let start = Instant::now();
    while samples.len() < budget.max
        && (samples.len() < budget.min || start.elapsed().as_secs_f64() < budget.secs)
    {
        let t = Instant::now();
        f()?;
        samples.push(t.elapsed().as_secs_f64());
    }
    Ok(samples)
}

/// [`measure`] with `setup` run before each sample, untimed.
fn measure_prepared(
    budget: &Budget,
    mut setup: impl FnMut() -> Result<()>,
    mut f: impl FnMut() -> Result<()>,
) -> Result<Vec<f64>> {
    let mut samples = Vec::new();
    let start = Instant::now();
    while samples.len() < budget.max
        && (samples.len() < budget.min.max(1) || start.elapsed().as_secs_f64() < budget.secs)
    {
        setup()?;
        let t = Instant::now();
        f()?;
        samples.push(t.elapsed().as_secs_f64());
    }
    Ok(samples)
}

fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

/// Human time.
fn fmt_s(s: f64) -> String {
    if !s.is_finite() {
        "-".to_owned()
    } else if s >= 1.0 {
        format!("{s:.2} s")
    } else if s >= 1e-3 {
        format!("{:.2} ms", s * 1e3)
    } else if s >= 1e-6 {
        format!("{:.1} µs", s * 1e6)
    } else {
        format!("{:.0} ns", s * 1e9)
    }
}

fn fmt_ratio(r: f64) -> String {
    if !r.is_finite() {
        "-".to_owned()
    } else if r >= 100.0 {
        format!("{r:.0}×")
    } else if r >= 10.0 {
        format!("{r:.1}×")
    } else {
        format!("{r:.2}×")
    }
}

/// `/proc/self/status` fields in kB.
fn proc_status_kb(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Runs `bench`.
pub fn run(args: &BenchArgs) -> Result<Report> {
    if let Some(backend) = &args.child_resume {
        return child_resume(backend, args.child_dataset.as_deref());
    }
    if let Some(rows) = args.child_floor_rows {
        return child_floor(
            rows,
            args.child_floor_start,
            args.child_dataset.as_deref(),
            args.child_floor_decoded,
        );
    }
    let started = Instant::now();
    let load_start = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let sizes: Vec<usize> = if !args.sizes.is_empty() {
        args.sizes.clone()
    } else if args.quick {
        vec![1000]
    } else {
        vec![1000, 10_000, 100_000]
    };
    let ops: Vec<&'static str> = if args.ops.is_empty() {
        OPS.to_vec()
    } else {
        let mut v = Vec::new();
        for o in &args.ops {
            let op = OPS
                .iter()
                .find(|x| **x == o.as_str())
                .ok_or_else(|| Error::Usage(format!("unknown operation {o:?}; one of {OPS:?}")))?;
            v.push(*op);
        }
        v
    };
    let budget = Budget {
        secs: args.budget.unwrap_or(if args.quick { 0.15 } else { 1.5 }),
        min: 3,
        max: if args.quick { 12 } else { 40 },
    };
    std::fs::create_dir_all(&args.out)
        .map_err(|e| Error::io(format!("creating {}", args.out.display()), e))?;
    let work = args
        .work
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("sessiontree-bench"));
    std::fs::create_dir_all(&work)
        .map_err(|e| Error::io(format!("creating {}", work.display()), e))?;
    let work = std::fs::canonicalize(&work)
        .map_err(|e| Error::io(format!("resolving {}", work.display()), e))?;
    let path_samples = if args.quick { 16 } else { 32 };

    let mut rows: Vec<Row> = Vec::new();
    let mut datasets: Vec<Value> = Vec::new();
    let mut checks: Vec<Value> = Vec::new();
    let mut path_ids: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    let mut forked_sets: BTreeMap<usize, Dataset> = BTreeMap::new();
    let mut shape_rows: Vec<Row> = Vec::new();
    let mut compact_rows: Vec<Row> = Vec::new();
    let mut linear_sets: BTreeMap<usize, Dataset> = BTreeMap::new();
    // Linear sessions without compactions: the active path is the whole session.
    let mut long_sets: BTreeMap<usize, Dataset> = BTreeMap::new();

    for &size in &sizes {
        let forked = ops::prepare(&work, Shape::Forked, size, args.seed, &mut |m| progress(m))?;
        datasets.push(dataset_json(&forked));
        let needs = |op: &str| ops.contains(&op);

        if needs("resume") {
            let memory = ops::load_memory(&forked.main().path)?;
            let mut counts = BTreeMap::new();
            for b in Backend::ALL {
                progress(&format!("resume {} @ {size}", b.name()));
                let n = ops::resume(b, &forked, Some(&memory))?;
                counts.insert(b.name(), n);
                let samples =
                    measure(&budget, || ops::resume(b, &forked, Some(&memory)).map(drop))?;
                rows.push(Row {
                    op: "resume",
                    backend: b.name().to_owned(),
                    size,
                    samples,
                    per_sample: 1.0,
                    extra: json!({"context_messages": n}),
                });
            }
            let same = counts.values().all(|v| Some(v) == counts.values().next());
            checks.push(json!({"op": "resume", "size": size, "context_messages": counts, "all_equal": same}));
        }

        if needs("path") {
            progress(&format!("path @ {size}"));
            let fx = PathFixture::new(&forked, path_samples, args.seed ^ 0x5eed)?;
            path_ids.insert(size, fx.ids.clone());
            // Every backend must return the same entries.
            let mut same = true;
            for i in 0..fx.ids.len() {
                let reference = fx.ids_of(Backend::Sqlite, i)?;
                for b in [Backend::Jsonl, Backend::Memory, Backend::SqlCte] {
                    if fx.ids_of(b, i)? != reference {
                        same = false;
                    }
                }
            }
            checks.push(json!({"op": "path", "size": size, "samples": fx.ids.len(), "same_entries_everywhere": same}));
            let k = fx.ids.len();
            let mean_len = fx.mean_length();
            for b in [
                Backend::Sqlite,
                Backend::Jsonl,
                Backend::Memory,
                Backend::SqlCte,
            ] {
                let samples = measure(&budget, || {
                    for i in 0..k {
                        fx.read(b, i)?;
                    }
                    Ok(())
                })?;
                rows.push(Row {
                    op: "path",
                    backend: b.name().to_owned(),
                    size,
                    samples,
                    per_sample: k as f64,
                    extra: json!({"mean_path_len": mean_len, "reads_per_sample": k}),
                });
            }
            let samples = measure(&budget, || {
                for i in 0..k {
                    fx.read_query(i)?;
                }
                Ok(())
            })?;
            rows.push(Row {
                op: "path",
                backend: "sqlite-query".to_owned(),
                size,
                samples,
                per_sample: k as f64,
                extra: json!({"mean_path_len": mean_len, "reads_per_sample": k,
                    "what": "the same reads with the handle's kept paths forgotten first: the path query, decoded-entry cache warm"}),
            });
            for (name, parse) in [("floor-raw", false), ("floor-parsed", true)] {
                let samples = measure(&budget, || {
                    for i in 0..k {
                        fx.floor(i, parse)?;
                    }
                    Ok(())
                })?;
                rows.push(Row {
                    op: "path",
                    backend: name.to_owned(),
                    size,
                    samples,
                    per_sample: k as f64,
                    extra: json!({"mean_path_len": mean_len, "reads_per_sample": k,
                        "what": if parse { "rowid range scan of as many rows, each parsed into an Entry (the output a path read returns)" } else { "rowid range scan of as many rows, text only" }}),
                });
            }
            // Diagnostics: the same reads without the per-entry parse, so the
            // SQL cost of each design shows on its own.
            for (name, b) in [
                ("sqlite-sql-only", Backend::Sqlite),
                ("sql-cte-sql-only", Backend::SqlCte),
            ] {
                let samples = measure(&budget, || {
                    for i in 0..k {
                        fx.read_sql_only(b, i)?;
                    }
                    Ok(())
                })?;
                rows.push(Row {
                    op: "path",
                    backend: name.to_owned(),
                    size,
                    samples,
                    per_sample: k as f64,
                    extra: json!({"mean_path_len": mean_len, "reads_per_sample": k, "diagnostic": true,
                        "what": if b == Backend::Sqlite { "the library's path SQL (replicated in the harness), text only, no Entry parse" } else { "the recursive CTE, text only, no Entry parse" }}),
                });
            }
        }

        if needs("path_long") {
            let linear =
                ops::prepare_uncompacted(&work, Shape::Linear, size, args.seed, &mut |m| {
                    progress(m)
                })?;
            datasets.push(dataset_json(&linear));
            progress(&format!("path_long @ {size}"));
            let main = linear.main();
            let st =
                sessiontree::backend::sqlite::Archive::open(&linear.archive, Durability::Full)?
                    .open_session(&main.id)?;
            let leaf = sessiontree::SessionStorage::leaf_id(&st)?;
            let len =
                sessiontree::SessionStorage::path_to_root_or_compaction(&st, leaf.as_deref())?
                    .len();
            let naive = crate::naive::Naive::open(&linear.naive, true)?;
            let (lo, _) = naive.rowid_range(naive.session_key(&main.id)?)?;
            let long_budget = Budget {
                secs: budget.secs,
                min: budget.min,
                max: budget.max.min(15),
            };
            let extra = json!({"mean_path_len": len, "from": "the leaf of the linear session without compactions"});
            let row = |backend: &str, samples: Vec<f64>| Row {
                op: "path_long",
                backend: backend.into(),
                size,
                samples,
                per_sample: 1.0,
                extra: extra.clone(),
            };
            // The path query on a handle's storage, its kept paths forgotten.
            let query = |storage: &sessiontree::backend::sqlite::SqliteStorage| {
                measure(&long_budget, || {
                    storage.forget_paths();
                    sessiontree::SessionStorage::path_to_root_or_compaction(
                        storage,
                        leaf.as_deref(),
                    )
                    .map(drop)
                })
            };
            // The rowid scan of as many of the archive's own rows, each decompressed.
            let decoded_floor = |storage: &sessiontree::backend::sqlite::SqliteStorage| {
                let first = ops::archive_first_key(storage.archive(), &main.id)?;
                measure(&long_budget, || {
                    let mut kept = Vec::with_capacity(len);
                    ops::archive_floor_scan(storage.archive(), first, len as i64, &mut |t| {
                        kept.push(t);
                        Ok(())
                    })
                    .map(drop)
                })
            };
            let samples = measure(&long_budget, || {
                sessiontree::SessionStorage::path_to_root_or_compaction(&st, leaf.as_deref())
                    .map(drop)
            })?;
            rows.push(row("sqlite", samples));
            rows.push(row("sqlite-query", query(&st)?));
            for (name, parse) in [("floor-raw", false), ("floor-parsed", true)] {
                let samples = measure(&long_budget, || {
                    naive.floor_scan(lo, len as i64, parse).map(drop)
                })?;
                rows.push(row(name, samples));
            }
            rows.push(row("floor-decoded", decoded_floor(&st)?));
            // The same read and floor on the layout `compact` leaves (entries
            // packed into blocks along their parent chains).
            progress(&format!("path_long @ {size}: compacting a copy"));
            let packed = compacted::compacted_copy(
                &work,
                &format!("linear-{size}-compacted"),
                &linear.archive,
            )?;
            let packed = sessiontree::backend::sqlite::Archive::open(&packed, Durability::Full)?
                .open_session(&main.id)?;
            rows.push(row("compacted-query", query(&packed)?));
            rows.push(row("compacted-floor", decoded_floor(&packed)?));
            long_sets.insert(size, linear);
        }

        if needs("leaf_move") {
            let linear = ops::prepare(&work, Shape::Linear, size, args.seed, &mut |m| progress(m))?;
            datasets.push(dataset_json(&linear));
            linear_sets.insert(size, linear.clone());
            let lo = size * 9 / 10;
            for b in Backend::ALL {
                progress(&format!("leaf_move {} @ {size}", b.name()));
                let dir = ops::scratch(&work, &format!("leaf-{}", b.name()))?;
                let mut fx = WriteFixture::new(
                    b,
                    &linear,
                    &dir,
                    Durability::Relaxed,
                    (lo, size),
                    args.seed,
                )?;
                let samples = measure(&budget, || fx.move_leaf())?;
                drop(fx);
                let _ = std::fs::remove_dir_all(&dir);
                rows.push(Row {
                    op: "leaf_move",
                    backend: b.name().to_owned(),
                    size,
                    samples,
                    per_sample: 1.0,
                    extra: json!({"target_depth_from": lo, "target_depth_to": size - 1}),
                });
            }
        }

        if needs("append") {
            for b in Backend::ALL {
                progress(&format!("append {} @ {size}", b.name()));
                let dir = ops::scratch(&work, &format!("append-{}", b.name()))?;
                let mut fx =
                    WriteFixture::new(b, &forked, &dir, Durability::Full, (0, 1), args.seed)?;
                let samples = measure(&budget, || fx.append())?;
                drop(fx);
                let _ = std::fs::remove_dir_all(&dir);
                rows.push(Row {
                    op: "append",
                    backend: b.name().to_owned(),
                    size,
                    samples,
                    per_sample: 1.0,
                    extra: json!({"durable": b != Backend::Memory}),
                });
            }
        }

        if needs("import") {
            let file = forked.main().path.clone();
            let mb = forked.main().bytes as f64 / 1e6;
            for b in [
                Backend::Sqlite,
                Backend::Jsonl,
                Backend::SqlCte,
                Backend::SqlPathCopy,
            ] {
                progress(&format!("import {} @ {size}", b.name()));
                let dir = ops::scratch(&work, &format!("import-{}", b.name()))?;
                let samples = measure(&budget.for_import(size), || {
                    ops::import(b, &file, &dir).map(drop)
                })?;
                let _ = std::fs::remove_dir_all(&dir);
                rows.push(import_row(
                    "import",
                    b,
                    size,
                    samples,
                    mb,
                    json!({"search_index": b == Backend::Sqlite, "writes": b != Backend::Jsonl}),
                ));
            }
        }

        if needs("import_files") {
            let set = ops::prepare(&work, Shape::Archive, size, args.seed, &mut |m| progress(m))?;
            let files: Vec<PathBuf> = set.sessions.iter().map(|s| s.path.clone()).collect();
            let mb = set.sessions.iter().map(|s| s.bytes).sum::<u64>() as f64 / 1e6;
            let dir = ops::scratch(&work, "import-files")?;
            let budget = budget.for_import(size);
            progress(&format!(
                "import of {} files, one at a time @ {size}",
                files.len()
            ));
            let one_at_a_time = crate::median(measure(&budget, || {
                ops::import_files(&files, &dir, false).map(drop)
            })?);
            for b in [Backend::Sqlite, Backend::Jsonl] {
                progress(&format!(
                    "import of {} files {} @ {size}",
                    files.len(),
                    b.name()
                ));
                let samples = measure(&budget, || match b {
                    Backend::Sqlite => ops::import_files(&files, &dir, true).map(drop),
                    _ => files
                        .iter()
                        .try_for_each(|f| ops::import(b, f, &dir).map(drop)),
                })?;
                let mut more = json!({"files": files.len()});
                if b == Backend::Sqlite {
                    more["one_at_a_time_s"] = json!(one_at_a_time);
                    more["one_at_a_time_mb_per_s"] = json!(mb / one_at_a_time);
                }
                rows.push(import_row("import_files", b, size, samples, mb, more));
            }
            let _ = std::fs::remove_dir_all(&dir);
        }

        if needs("shapes") {
            shape_rows.extend(measure_shapes(
                &work,
                size,
                args.seed,
                &budget,
                path_samples,
                &mut datasets,
            )?);
        }

        if needs("list") || needs("search") {
            let archive =
                ops::prepare(&work, Shape::Archive, size, args.seed, &mut |m| progress(m))?;
            datasets.push(dataset_json(&archive));
            let fx = ArchiveFixture::new(&archive)?;
            for b in [
                Backend::Sqlite,
                Backend::Jsonl,
                Backend::Memory,
                Backend::SqlCte,
            ] {
                if needs("list") {
                    progress(&format!("list {} @ {size}", b.name()));
                    let n = fx.list(b)?;
                    let samples = measure(&budget, || fx.list(b).map(drop))?;
                    rows.push(Row {
                        op: "list",
                        backend: b.name().to_owned(),
                        size,
                        samples,
                        per_sample: 1.0,
                        extra: json!({"rows": n, "sessions": archive.sessions.len()}),
                    });
                }
                if needs("search") {
                    progress(&format!("search {} @ {size}", b.name()));
                    let n = fx.search(b, ops::SEARCH_TERM)?;
                    let samples = measure(&budget, || fx.search(b, ops::SEARCH_TERM).map(drop))?;
                    rows.push(Row {
                        op: "search",
                        backend: b.name().to_owned(),
                        size,
                        samples,
                        per_sample: 1.0,
                        extra: json!({"term": ops::SEARCH_TERM, "hits_seen": n}),
                    });
                }
            }
        }
        if needs("compact") {
            let archive_set =
                ops::prepare(&work, Shape::Archive, size, args.seed, &mut |m| progress(m))?;
            compact_rows.extend(compacted::measure_size(
                &work,
                &forked,
                &archive_set,
                &budget,
                path_samples,
                args.seed,
            )?);
        }
        forked_sets.insert(size, forked);
    }
    if ops.contains(&"compact") {
        let files = real_pi_files();
        if !files.is_empty() {
            compact_rows.extend(compacted::measure_real_files(&work, &files)?);
        }
        // Issue 9's case: 1,000 copies of one 1 MB image (1.4 GB of JSONL).
        let (copies, image_bytes) = if args.quick {
            (20, 1 << 20)
        } else {
            (1000, 1 << 20)
        };
        compact_rows.extend(compacted::measure_one_image(&work, copies, image_bytes)?);
    }

    // Peak RSS of a resume, each backend in its own child process.
    let mut rss: Vec<Value> = Vec::new();
    let mut rss_sizes: Vec<usize> = sizes.clone();
    for s in &args.rss_sizes {
        if !rss_sizes.contains(s) {
            rss_sizes.push(*s);
        }
    }
    let exe = std::env::current_exe().map_err(|e| Error::io("finding this program", e))?;
    if ops.contains(&"resume") {
        for &size in &rss_sizes {
            let ds = match forked_sets.get(&size) {
                Some(d) => d.clone(),
                None => {
                    let d =
                        ops::prepare(&work, Shape::Forked, size, args.seed, &mut |m| progress(m))?;
                    datasets.push(dataset_json(&d));
                    forked_sets.insert(size, d.clone());
                    d
                }
            };
            for name in ["none", "sqlite", "jsonl", "sql-cte", "sql-pathcopy"] {
                progress(&format!("resume RSS {name} @ {size} (child process)"));
                let out = Command::new(&exe)
                    .args(["report", "--child-resume", name, "--child-dataset"])
                    .arg(&ds.dir)
                    .output()
                    .map_err(|e| Error::io("running the child", e))?;
                let text = String::from_utf8_lossy(&out.stdout);
                let v: Value = serde_json::from_str(text.trim()).unwrap_or_else(
                    |_| json!({"error": String::from_utf8_lossy(&out.stderr).trim().to_owned()}),
                );
                rss.push(json!({"backend": name, "size": size, "child": v}));
            }
        }
    }

    // pi itself, on the same files.
    let mut pi: Vec<Value> = Vec::new();
    if args.pi {
        let dir = args
            .pi_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("pi-anchor"));
        match pi_ready(&dir) {
            Err(why) => pi.push(json!({"error": why})),
            Ok(()) => {
                for &size in &rss_sizes {
                    let Some(ds) = forked_sets.get(&size) else {
                        continue;
                    };
                    progress(&format!("pi (node) resume @ {size}"));
                    let repeat = if size >= 1_000_000 {
                        2
                    } else if args.quick {
                        3
                    } else {
                        5
                    };
                    let ids = path_ids.get(&size).map(|v| v.join(",")).unwrap_or_default();
                    let mut cmd = Command::new("node");
                    cmd.current_dir(&dir)
                        .arg("resume.mjs")
                        .arg(&ds.main().path)
                        .args(["--repeat", &repeat.to_string()]);
                    if !ids.is_empty() {
                        cmd.args(["--ids", &ids]);
                    }
                    let out = cmd.output().map_err(|e| Error::io("running node", e))?;
                    let text = String::from_utf8_lossy(&out.stdout);
                    let v: Value = serde_json::from_str(text.trim()).unwrap_or_else(|_| {
                        let err = String::from_utf8_lossy(&out.stderr);
                        // The thrown error's own line, else the last line said.
                        let line = err
                            .lines()
                            .find(|l| l.contains("Error:"))
                            .or_else(|| err.lines().rev().find(|l| !l.trim().is_empty()))
                            .unwrap_or("node failed without a message");
                        json!({"error": line.trim(), "exit": out.status.code()})
                    });
                    if let Some(ms) = v["resume_ms"].as_array() {
                        let samples: Vec<f64> = ms
                            .iter()
                            .filter_map(Value::as_f64)
                            .map(|m| m / 1e3)
                            .collect();
                        if sizes.contains(&size) {
                            rows.push(Row {
                                op: "resume",
                                backend: "pi-node".to_owned(),
                                size,
                                samples,
                                per_sample: 1.0,
                                extra: json!({"context_messages": v["messages"]}),
                            });
                        }
                    }
                    if let Some(ms) = v["median_path_ms"].as_f64() {
                        rows.push(Row {
                            op: "path",
                            backend: "pi-node".to_owned(),
                            size,
                            samples: vec![ms / 1e3],
                            per_sample: 1.0,
                            extra: json!({"mean_path_len": v["mean_path_rows"], "note": "median over the same start entries, one pass"}),
                        });
                    }
                    pi.push(json!({"size": size, "result": v}));
                }
            }
        }
    }

    // pi's own SQLite store, on the same sessions, through its own API.
    let mut pi_sqlite: Vec<Value> = Vec::new();
    let mut node24 = None;
    if args.pi {
        let dir = args
            .pi_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("pi-anchor"));
        // The quick report never downloads Node 24 (CI time); it uses one already there.
        match peers::find_node24(&dir.join("sqlite"), args.node24.as_deref(), !args.quick) {
            Err(why) => {
                progress(&format!("pi SQLite peer skipped: {why}"));
                pi_sqlite.push(json!({"skipped": why}));
            }
            Ok(n) => {
                let repeat = if args.quick { 3 } else { 7 };
                // At the compared sizes only (not the RSS-only ones: a load
                // of 1,000,000 entries through its API takes many minutes).
                for (&size, ds) in forked_sets.iter().filter(|(s, _)| sizes.contains(s)) {
                    pi_sqlite.extend(measure_pi_sqlite(
                        &n,
                        &work,
                        size,
                        ds,
                        linear_sets.get(&size),
                        long_sets.get(&size),
                        &ops,
                        path_ids.get(&size).map(Vec::as_slice).unwrap_or(&[]),
                        repeat,
                        &mut rows,
                    ));
                }
                node24 = Some(n);
                for v in pi_sqlite.iter().filter(|v| v["step"] == "resume_rss") {
                    let r = &v["result"];
                    let child = match r["error"].as_str() {
                        Some(e) => json!({"error": e}),
                        None => json!({"secs": r["median_resume_ms"].as_f64().map(|m| m / 1e3),
                            "vmhwm_kb": r["vmhwm_kb"], "context_messages": r["messages"],
                            "note": "node process: module import not in secs, in the RSS"}),
                    };
                    rss.push(json!({"backend": "pi-sqlite", "size": v["size"], "child": child}));
                }
            }
        }
        if pi_ready(&dir).is_ok() {
            for (&size, linear) in &long_sets {
                progress(&format!("pi (node) path_long @ {size}"));
                let Some(leaf) = linear.main().leaf_id.clone() else {
                    continue;
                };
                let out = Command::new("node")
                    .current_dir(&dir)
                    .arg("resume.mjs")
                    .arg(&linear.main().path)
                    .args(["--repeat", "1", "--ids", &leaf])
                    .output()
                    .map_err(|e| Error::io("running node", e))?;
                let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
                if let Some(ms) = v["median_path_ms"].as_f64() {
                    rows.push(Row {
                        op: "path_long",
                        backend: "pi-node".to_owned(),
                        size,
                        samples: vec![ms / 1e3],
                        per_sample: 1.0,
                        extra: json!({"mean_path_len": v["mean_path_rows"], "note": "one read (pi 0.83 getPathToRootOrCompaction)"}),
                    });
                }
            }
        }
    }

    // Every peer's resume must build the same context.
    for &size in &sizes {
        let count =
            |b: &str| find(&rows, "resume", b, size).map(|r| r.extra["context_messages"].clone());
        if let Some(reference) = count("sqlite") {
            for peer in ["pi-node", "pi-sqlite"] {
                if let Some(c) = count(peer) {
                    checks.push(json!({"op": "resume", "size": size, "peer": peer,
                        "context_messages": c, "sessiontree": reference, "equal": c == reference}));
                }
            }
        }
    }

    // The Node binding from Node, beside pi's storages, in its own run.
    let node_binding = if args.pi {
        crate::node_binding::run(node24.as_ref(), &sizes, args.quick)
    } else {
        json!({"skipped": "no --pi"})
    };
    if let Some(why) = node_binding["skipped"]
        .as_str()
        .or(node_binding["error"].as_str())
    {
        progress(&format!("Node binding: {why}"));
    }

    // Import of the real pi files (`../shared/fixtures/pi-sessions` beside the repository).
    let mut import_real = Value::Null;
    if ops.contains(&"import") {
        let files = real_pi_files();
        if files.is_empty() {
            import_real =
                json!({"skipped": format!("no pi files in {}", fixtures_dir().display())});
        } else {
            progress("import of the real pi files");
            let dir = ops::scratch(&work, "import-real")?;
            let mut per_file = Vec::new();
            let (mut bytes, mut secs) = (0u64, 0.0);
            for f in &files {
                let b = std::fs::metadata(f).map(|m| m.len()).unwrap_or(0);
                let mut r = Row {
                    op: "import",
                    backend: "sqlite".into(),
                    size: 0,
                    per_sample: 1.0,
                    extra: Value::Null,
                    samples: measure(&budget, || ops::import(Backend::Sqlite, f, &dir).map(drop))?,
                };
                r.extra = json!({"file": f.file_name().map(|n| n.to_string_lossy().into_owned()), "bytes": b,
                    "median_s": r.median(), "mb_per_s": b as f64 / 1e6 / r.median()});
                bytes += b;
                secs += r.median();
                per_file.push(r.extra);
            }
            // Each file again into an archive that already holds the other
            // files (its schema made, its dictionary trained on them): what a
            // user's later imports cost.
            progress("import of the real pi files into an archive holding the others");
            let mut existing_secs = 0.0;
            let mut existing_files = Vec::new();
            for (i, f) in files.iter().enumerate() {
                let base = dir.join(format!("base-{i}.db"));
                ops::remove_db(&base);
                {
                    let archive =
                        sessiontree::backend::sqlite::Archive::open(&base, Durability::Full)?;
                    for other in files.iter().filter(|o| *o != f) {
                        sessiontree::convert::import_jsonl(&archive, other)?;
                    }
                }
                let db = dir.join("existing.db");
                let samples = measure_prepared(
                    &budget,
                    || {
                        ops::remove_db(&db);
                        std::fs::copy(&base, &db)
                            .map(drop)
                            .map_err(|e| Error::io(format!("copying {}", base.display()), e))
                    },
                    || {
                        let archive =
                            sessiontree::backend::sqlite::Archive::open(&db, Durability::Full)?;
                        ops::import_file_into(&archive, f).map(drop)
                    },
                )?;
                let median = crate::median(samples);
                let b = std::fs::metadata(f).map(|m| m.len()).unwrap_or(0);
                existing_secs += median;
                existing_files.push(json!({"file": f.file_name().map(|n| n.to_string_lossy().into_owned()), "bytes": b, "median_s": median, "mb_per_s": b as f64 / 1e6 / median}));
            }
            let _ = std::fs::remove_dir_all(&dir);
            import_real = json!({"files": per_file, "bytes": bytes, "secs": secs, "mb_per_s": bytes as f64 / 1e6 / secs,
                "into_existing": {"files": existing_files, "secs": existing_secs, "mb_per_s": bytes as f64 / 1e6 / existing_secs}});
        }
    }

    // Whole processes, as a user runs them.
    let mut proc_rows: Vec<Row> = Vec::new();
    let mut proc_notes: Vec<Value> = Vec::new();
    if ops.contains(&"process") {
        let pi_dir = args
            .pi_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("pi-anchor"));
        let pi_node = args.pi && pi_ready(&pi_dir).is_ok();
        match peers::sessiontree_binary() {
            Err(why) => {
                progress(&format!("whole-process figures skipped: {why}"));
                proc_notes.push(json!({"skipped": why}));
            }
            Ok(bin) => {
                for &size in &sizes {
                    let rounds = if args.quick {
                        3
                    } else if size >= 100_000 {
                        7
                    } else {
                        11
                    };
                    let forked = forked_sets.get(&size).cloned();
                    let linear = match long_sets.get(&size) {
                        Some(d) => d.clone(),
                        None => ops::prepare_uncompacted(
                            &work,
                            Shape::Linear,
                            size,
                            args.seed,
                            &mut |m| progress(m),
                        )?,
                    };
                    let archive =
                        ops::prepare(&work, Shape::Archive, size, args.seed, &mut |m| progress(m))?;
                    let Some(forked) = forked else { continue };
                    progress(&format!("whole processes @ {size}"));
                    proc_rows.extend(measure_processes(
                        &exe,
                        &bin,
                        &forked,
                        &linear,
                        &archive,
                        size,
                        rounds,
                        pi_node.then_some(pi_dir.as_path()),
                        node24.as_ref(),
                        &work,
                        &mut proc_notes,
                    )?);
                }
            }
        }
    }

    // pi 1.6, what pi users run, beside the CLI, the rpc and the binding.
    let mut pi16_section = json!({"skipped": "run with --pi"});
    if args.pi && ops.contains(&"pi16") {
        pi16_section = measure_pi16(args, &work, &sizes)?;
    }
    // A pi home at a user's scale.
    let mut home_section = json!({"skipped": "not among --ops"});
    if ops.contains(&"home") {
        let max = args
            .home_size
            .unwrap_or(if args.quick { 4_000_000 } else { 500_000_000 });
        home_section = match peers::sessiontree_binary() {
            Err(why) => json!({"skipped": why}),
            Ok(bin) => {
                let opts = crate::home::HomeOptions {
                    sizes: crate::home::points(max),
                    seed: args.seed,
                    pg: args.pg.clone(),
                    keep: args.keep_home,
                    // The quick report compacts its smallest home only (CI time).
                    compact_max: args.home_compact_max.unwrap_or(if args.quick {
                        1_500_000
                    } else {
                        u64::MAX
                    }),
                    budget: args.home_budget.clone().unwrap_or_default(),
                };
                let mut v = crate::home::measure(&bin, &work, &opts)?;
                v["targets"] = json!(crate::home::targets(&v));
                v
            }
        };
    }

    // Writers of other sessions during long operations.
    let mut avail_section = json!({"skipped": "not among --ops"});
    if ops.contains(&"avail") {
        avail_section = match peers::sessiontree_binary() {
            Err(why) => json!({"skipped": why}),
            Ok(bin) => crate::avail::measure(
                &bin,
                &work,
                args.avail_entries
                    .unwrap_or(if args.quick { 10_000 } else { 1_000_000 }),
                args.pg
                    .as_deref()
                    .map(|u| (u, args.avail_pg_entries.unwrap_or(100_000))),
                args.seed,
            )?,
        };
    }

    let targets = targets(
        &rows,
        &rss,
        &shape_rows,
        &compact_rows,
        &proc_rows,
        &pi_sqlite,
        &import_real,
    );
    let elapsed = started.elapsed().as_secs_f64();
    let report = json!({
        "tool": "sessiontree-bench report",
        "version": env!("CARGO_PKG_VERSION"),
        "profile": if cfg!(debug_assertions) { "debug" } else { "release" },
        "machine": machine(),
        "loadavg_at_start": load_start.trim(),
        "config": {
            "sizes": sizes, "rss_sizes": rss_sizes, "ops": ops, "seed": args.seed,
            "quick": args.quick, "budget_secs": budget.secs, "min_samples": budget.min,
            "max_samples": budget.max, "path_samples": path_samples,
            "generator_version": crate::gen::GENERATOR_VERSION,
        },
        "operations": ops.iter().map(|o| json!({"op": o, "what": op_doc(o)})).collect::<Vec<_>>(),
        "datasets": datasets,
        "results": rows.iter().map(row_json).collect::<Vec<_>>(),
        "shapes": shape_rows.iter().map(row_json).collect::<Vec<_>>(),
        "compacted": compact_rows.iter().map(row_json).collect::<Vec<_>>(),
        "ratios": ratios_json(&rows),
        "checks": checks,
        "rss": rss,
        "pi": pi,
        "pi_sqlite": pi_sqlite,
        "node_binding": node_binding,
        "import_real": import_real,
        "processes": proc_rows.iter().map(row_json).collect::<Vec<_>>(),
        "process_notes": proc_notes,
        "peers": peers_json(&rows, &proc_rows),
        "targets": targets,
        "pi16": pi16_section,
        "home": home_section,
        "avail": avail_section,
        "elapsed_secs": elapsed,
    });
    let mut text = String::new();
    if args.pi {
        text.push_str(&crate::pi16::render(&report["pi16"]));
    }
    if ops.contains(&"home") {
        text.push_str(&crate::home::render(&report["home"]));
    }
    if ops.contains(&"avail") {
        text.push_str(&crate::avail::render(&report["avail"]));
    }
    text.push_str(&render_text(&report, &rows));
    text.push_str(&render_shapes(&shape_rows));
    text.push_str(&compacted::render(&compact_rows));
    text.push_str(&render_peers(&report, &proc_rows));
    if args.pi {
        text.push_str(&crate::node_binding::render(&report["node_binding"]));
    }
    let write = |name: &str, body: &str| -> Result<()> {
        let p = args.out.join(name);
        std::fs::write(&p, body).map_err(|e| Error::io(format!("writing {}", p.display()), e))
    };
    write(
        "report.json",
        &serde_json::to_string_pretty(&report).unwrap_or_default(),
    )?;
    write("report.md", &text)?;
    write("scaling.svg", &svg(&rows))?;
    if ops.contains(&"home") {
        write("home.svg", &crate::home::svg(&report["home"]))?;
    }
    let _ = writeln!(
        text,
        "\nwrote {0}/report.json, {0}/report.md, {0}/scaling.svg (and home.svg) in {1:.0} s",
        args.out.display(),
        elapsed
    );
    Ok(Report::new(report, text))
}

/// The pi 1.6 part: per size, the forked session through pi 1.6 and the
/// binding (in process) and the CLI and rpc (whole processes); the listing
/// over 300 and 3,000 files (`--quick`: 300 small ones).
fn measure_pi16(args: &BenchArgs, work: &Path, sizes: &[usize]) -> Result<Value> {
    let pi = match crate::pi16::find() {
        Ok(p) => p,
        Err(why) => {
            progress(&format!("pi 1.6 peer skipped: {why}"));
            return Ok(json!({"skipped": why}));
        }
    };
    if let Err(why) = crate::pi16::binding_ready() {
        progress(&format!("pi 1.6 peer skipped: {why}"));
        return Ok(json!({"skipped": why}));
    }
    let st = match peers::sessiontree_binary() {
        Ok(b) => b,
        Err(why) => return Ok(json!({"skipped": why})),
    };
    let mut rows = Vec::new();
    for &size in sizes {
        progress(&format!("pi 1.6 session @ {size}"));
        let (file, archive, id) = crate::pi16::app_dataset(&st, work, size, args.seed, false)?;
        rows.extend(crate::pi16::measure_session(
            &pi, &st, work, &file, &archive, &id, size, args.quick,
        )?);
        progress(&format!("binding read path @ {size}"));
        let (_, long, long_id) = crate::pi16::app_dataset(&st, work, size, args.seed, true)?;
        rows.extend(crate::pi16::measure_read(
            &pi, &long, &long_id, size, args.quick,
        )?);
    }
    // 300 files of ~420 entries (~125 MB, the issue's home); 3,000 of them.
    let lists: &[(usize, usize)] = if args.quick {
        &[(300, 8)]
    } else {
        &[(300, 420), (3000, 420)]
    };
    for &(files, per_file) in lists {
        progress(&format!("pi 1.6 listAll over {files} files"));
        rows.extend(crate::pi16::measure_list(
            &pi, &st, work, files, per_file, args.seed, args.quick,
        )?);
    }
    crate::pi16::with_ratios(&mut rows);
    let targets = crate::pi16::targets(&rows);
    Ok(json!({"node": pi.version, "rows": rows, "targets": targets}))
}

/// Where the real pi session files are: `../shared/fixtures/pi-sessions`
/// beside the repository.
fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures/pi-sessions")
}

/// The real pi session files, sorted (none when the fixtures are absent).
fn real_pi_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    files
}

fn dataset_json(d: &Dataset) -> Value {
    let m = d.main();
    json!({
        "shape": d.shape.as_str(), "entries": d.entries, "sessions": d.sessions.len(),
        "bytes": d.bytes(), "bytes_per_entry": d.bytes() as f64 / d.entries.max(1) as f64,
        "main_session": {"id": m.id, "entries": m.entries, "forks": m.forks,
            "compactions": m.compactions, "leaf_depth": m.leaf_depth, "max_depth": m.max_depth},
        "dir": d.dir.to_string_lossy(),
        "archive_bytes": std::fs::metadata(&d.archive).map(|m| m.len()).unwrap_or(0),
        "naive_bytes": std::fs::metadata(&d.naive).map(|m| m.len()).unwrap_or(0),
        "prepare_import_secs": d.archive_import_secs,
    })
}

fn row_json(r: &Row) -> Value {
    json!({
        "op": r.op, "backend": r.backend, "size": r.size,
        "median_s": r.median(), "min_s": r.min(), "p90_s": r.p90(),
        "samples": r.samples.len(), "per_sample": r.per_sample, "extra": r.extra,
    })
}

fn find<'a>(rows: &'a [Row], op: &str, backend: &str, size: usize) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.op == op && r.backend == backend && r.size == size)
}

fn ratios_json(rows: &[Row]) -> Vec<Value> {
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r.backend == "sqlite") {
        let mut vs = serde_json::Map::new();
        for o in rows
            .iter()
            .filter(|o| o.op == r.op && o.size == r.size && o.backend != "sqlite")
        {
            vs.insert(o.backend.clone(), json!(o.median() / r.median()));
        }
        out.push(
            json!({"op": r.op, "size": r.size, "sqlite_median_s": r.median(),
            "other_over_sqlite": vs}),
        );
    }
    out
}

fn target(
    name: &str,
    goal: &str,
    measured: Option<f64>,
    ok: impl Fn(f64) -> bool,
    detail: String,
) -> Value {
    let status = match measured {
        None => "not measured",
        Some(m) if ok(m) => "met",
        Some(_) => "missed",
    };
    json!({"target": name, "goal": goal, "measured": measured, "status": status, "detail": detail})
}

fn targets(
    rows: &[Row],
    rss: &[Value],
    shape_rows: &[Row],
    compact_rows: &[Row],
    proc_rows: &[Row],
    pi_sqlite: &[Value],
    import_real: &Value,
) -> Vec<Value> {
    let med = |op: &str, b: &str, size: usize| find(rows, op, b, size).map(Row::median);
    let ratio =
        |op: &str, a: &str, b: &str, size: usize| Some(med(op, a, size)? / med(op, b, size)?);
    let mut out = Vec::new();
    let r = ratio("resume", "jsonl", "sqlite", 100_000);
    out.push(target(
        "cold resume, 100,000 entries with compactions: SQLite vs JSONL",
        "≥ 100× faster",
        r,
        |x| x >= 100.0,
        format!(
            "jsonl {} / sqlite {}",
            fmt_s(med("resume", "jsonl", 100_000).unwrap_or(f64::NAN)),
            fmt_s(med("resume", "sqlite", 100_000).unwrap_or(f64::NAN))
        ),
    ));
    let r = ratio("path", "sql-cte", "sqlite", 100_000);
    out.push(target(
        "path from a random entry (depth ≤ 100,000, 1,000 forks): SQLite vs recursive CTE",
        "≥ 4× faster",
        r,
        |x| x >= 4.0,
        format!(
            "sql-cte {} / sqlite {} per read",
            fmt_s(med("path", "sql-cte", 100_000).unwrap_or(f64::NAN)),
            fmt_s(med("path", "sqlite", 100_000).unwrap_or(f64::NAN))
        ),
    ));
    let sql_only = ratio("path", "sql-cte-sql-only", "sqlite-sql-only", 100_000);
    if let Some(v) = out.last_mut() {
        v["detail"] = json!(format!(
            "{}; without the per-entry parse (SQL only) the ratio is {}",
            v["detail"].as_str().unwrap_or(""),
            sql_only.map_or("-".to_owned(), fmt_ratio)
        ));
    }
    let r = ratio("path", "sqlite-query", "floor-parsed", 100_000);
    let raw = ratio("path", "sqlite-query", "floor-raw", 100_000);
    let sql_only_floor = ratio("path", "sqlite-sql-only", "floor-raw", 100_000);
    out.push(target(
        "path read vs the physical floor (same rows, same output: parsed entries)",
        "≤ 1.5× the floor",
        r,
        |x| x <= 1.5,
        format!(
            "sqlite-query (the path query, kept paths forgotten) / floor-parsed; against the text-only scan (floor-raw) it is {}, and its SQL alone (no parse) is {} the text-only floor",
            raw.map_or("-".to_owned(), fmt_ratio),
            sql_only_floor.map_or("-".to_owned(), fmt_ratio)
        ),
    ));
    let r = match (
        med("leaf_move", "sqlite", 100_000),
        med("leaf_move", "sqlite", 1000),
    ) {
        (Some(a), Some(b)) => Some(a / b),
        _ => None,
    };
    out.push(target(
        "leaf move at depth 100,000 vs depth 1,000 (SQLite)",
        "≤ 1.5×",
        r,
        |x| x <= 1.5,
        format!(
            "{} vs {}",
            fmt_s(med("leaf_move", "sqlite", 100_000).unwrap_or(f64::NAN)),
            fmt_s(med("leaf_move", "sqlite", 1000).unwrap_or(f64::NAN))
        ),
    ));
    let largest = rows
        .iter()
        .filter(|r| r.op == "import" && r.backend == "sqlite")
        .max_by_key(|r| r.size);
    out.push(target(
        "bulk import of pi JSONL with the search index maintained (SQLite, largest size; issue 12 raised the goal from 40)",
        "≥ 60 MB/s",
        largest.and_then(|r| r.extra["mb_per_s"].as_f64()),
        |x| x >= 60.0,
        largest.map_or("-".to_owned(), |r| format!("at {} entries", r.size)),
    ));
    let rss_1m = rss
        .iter()
        .find(|v| v["backend"] == "sqlite" && v["size"] == 1_000_000)
        .and_then(|v| v["child"]["vmhwm_kb"].as_f64())
        .map(|kb| kb / 1024.0);
    out.push(target(
        "peak RSS of a resume, 1,000,000-entry session (SQLite, child process VmHWM)",
        "≤ 30 MB",
        rss_1m,
        |x| x <= 30.0,
        "MB; run with --rss-sizes 1000000 to measure".to_owned(),
    ));
    out.extend(shape_targets(shape_rows));
    out.extend(compacted::targets(compact_rows));
    out.extend(issue12_targets(rows, proc_rows, pi_sqlite, import_real));
    out
}

/// Issue 12's targets: whole-process resume and context against their
/// floors, the long path read against the rowid scan, and no peer faster.
fn issue12_targets(
    rows: &[Row],
    proc_rows: &[Row],
    pi_sqlite: &[Value],
    import_real: &Value,
) -> Vec<Value> {
    let mut out = Vec::new();
    let p = |name: &str, size: usize| find(proc_rows, "process", name, size).map(Row::median);
    let over = |a: Option<f64>, b: Option<f64>| Some(a? / b?);
    let (ctx, floor) = (
        p("context, forked", 100_000),
        p("sessiontree --version", 100_000),
    );
    out.push(target(
        "cold resume of the 100k forked session, whole process (`sessiontree context`) vs the process floor (`sessiontree --version`)",
        "≤ 2×",
        over(ctx, floor),
        |x| x <= 2.0,
        format!("{} / {}; rpc buildContext: {}", ctx.map_or("-".into(), fmt_s), floor.map_or("-".into(), fmt_s),
            over(p("rpc buildContext, forked", 100_000), floor).map_or("-".into(), fmt_ratio)),
    ));
    let (ctx, floor) = (
        p("context, linear (no compactions)", 10_000),
        p(
            "floor: print the path's rows, linear (no compactions)",
            10_000,
        ),
    );
    let decoded_floor = p(
        "floor: print the path's rows decoded from the archive, linear (no compactions)",
        10_000,
    );
    let rows_n = find(
        proc_rows,
        "process",
        "context, linear (no compactions)",
        10_000,
    )
    .map(|r| r.extra["path_rows"].clone());
    out.push(target(
        "context of the 10k linear session without compactions (~10,000 messages), whole process, vs reading the same number of rows' text and writing it to stdout (whole process)",
        "≤ 2×",
        over(ctx, floor),
        |x| x <= 2.0,
        format!("{} / {} ({} path rows); against printing the same rows decoded from the archive's compressed storage ({}): {}", ctx.map_or("-".into(), fmt_s), floor.map_or("-".into(), fmt_s), rows_n.unwrap_or(Value::Null),
            decoded_floor.map_or("-".into(), fmt_s), over(ctx, decoded_floor).map_or("-".into(), fmt_ratio)),
    ));
    let m = |b: &str| find(rows, "path_long", b, 100_000).map(Row::median);
    let len = find(rows, "path_long", "sqlite", 100_000).map(|r| r.extra["mean_path_len"].clone());
    out.push(target(
        "path read of the active path of the 100k linear session without compactions (the issue's ~55k rows: here every entry), whole read by the path query (kept paths forgotten), vs the rowid-scan floor (text)",
        "≤ 1.5×",
        over(m("sqlite-query"), m("floor-raw")),
        |x| x <= 1.5,
        format!("{} / {} for {} rows; against the same scan of the archive's own rows, decompressed (floor-decoded, {}): {}; against the scan that also parses each row (floor-parsed): {}; answered from the kept path: {}; after `compact` (entries in blocks): {} ({} the text floor; its own rows decompressed: {})", m("sqlite-query").map_or("-".into(), fmt_s), m("floor-raw").map_or("-".into(), fmt_s),
            len.unwrap_or(Value::Null), m("floor-decoded").map_or("-".into(), fmt_s), over(m("sqlite-query"), m("floor-decoded")).map_or("-".into(), fmt_ratio), over(m("sqlite-query"), m("floor-parsed")).map_or("-".into(), fmt_ratio), m("sqlite").map_or("-".into(), fmt_s),
            m("compacted-query").map_or("-".into(), fmt_s), over(m("compacted-query"), m("floor-raw")).map_or("-".into(), fmt_ratio), m("compacted-floor").map_or("-".into(), fmt_s)),
    ));
    out.push(target(
        "import with search maintained on the real pi files",
        "≥ 60 MB/s",
        import_real["mb_per_s"].as_f64(),
        |x| x >= 60.0,
        import_real["skipped"].as_str().map_or_else(
            || {
                format!(
                    "{} files, {:.1} MB in {}, each into a fresh archive (its schema made and its first dictionary trained by the import); each into an archive holding the other files: {:.1} MB/s ({})",
                    import_real["files"].as_array().map_or(0, Vec::len),
                    import_real["bytes"].as_f64().unwrap_or(0.0) / 1e6,
                    import_real["secs"].as_f64().map_or("-".into(), fmt_s),
                    import_real["into_existing"]["mb_per_s"].as_f64().unwrap_or(f64::NAN),
                    import_real["into_existing"]["secs"].as_f64().map_or("-".into(), fmt_s)
                )
            },
            str::to_owned,
        ),
    ));
    let peers = peers_json(rows, proc_rows);
    let compared = peers.iter().filter(|v| v["like_for_like"] == true).count();
    let wins: Vec<String> = peers
        .iter()
        .filter(|v| v["peer_wins"] == true)
        .map(|v| {
            format!(
                "{} @ {} by {}",
                v["op"].as_str().unwrap_or(""),
                v["size"],
                v["peer"].as_str().unwrap_or("")
            )
        })
        .collect();
    let skipped = pi_sqlite.iter().find_map(|v| v["skipped"].as_str());
    out.push(target(
        "every operation at least as fast as pi's SQLite store and pi's JSONL at every size (like-for-like rows where a peer wins)",
        "0",
        (compared > 0).then_some(wins.len() as f64),
        |x| x == 0.0,
        format!("{compared} like-for-like rows compared{}{}", if wins.is_empty() { String::new() } else { format!("; peer wins: {}", wins.join(", ")) },
            skipped.map_or(String::new(), |w| format!("; pi SQLite skipped: {w}"))),
    ));
    out
}

/// The shapes' targets: the regenerate shape within 1.5× of the linear one on
/// every row, at the largest size measured.
fn shape_targets(shape_rows: &[Row]) -> Vec<Value> {
    let Some(size) = shape_rows.iter().map(|r| r.size).max() else {
        return Vec::new();
    };
    let costs = |shape: Shape| shape_costs(shape_rows, shape, size);
    let (linear, regenerate) = (costs(Shape::Linear), costs(Shape::Regenerate));
    let names = [
        "import time per MB",
        "archive bytes per entry",
        "cold resume",
        "path from a random entry (per read)",
        "path read per returned row (stricter: its answers are shorter)",
        "leaf move",
    ];
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let r = match (regenerate[i], linear[i]) {
                (Some(a), Some(b)) => Some(a / b),
                _ => None,
            };
            target(
                &format!("regenerate shape vs linear at {size} entries: {name} (SQLite)"),
                "≤ 1.5×",
                r,
                |x| x <= 1.5,
                format!(
                    "regenerate {} / linear {}",
                    regenerate[i].map_or("-".to_owned(), |v| format!("{v:.4e}")),
                    linear[i].map_or("-".to_owned(), |v| format!("{v:.4e}"))
                ),
            )
        })
        .collect()
}

/// One shape's costs at one size, each lower-is-better: seconds per MB
/// imported, archive bytes per entry, resume seconds, path seconds per read
/// and per row, leaf move seconds.
fn shape_costs(shape_rows: &[Row], shape: Shape, size: usize) -> [Option<f64>; 6] {
    let row = |op: &str| find(shape_rows, op, shape.as_str(), size);
    let import = row("import");
    [
        import
            .and_then(|r| r.extra["mb_per_s"].as_f64())
            .map(|x| 1.0 / x),
        import.and_then(|r| r.extra["bytes_per_entry"].as_f64()),
        row("resume").map(Row::median),
        row("path").map(Row::median),
        row("path").and_then(|r| Some(r.median() / r.extra["mean_path_len"].as_f64()?)),
        row("leaf_move").map(Row::median),
    ]
}

/// Measures every shape of [`SHAPES`] at `size` on SQLite.
fn measure_shapes(
    work: &Path,
    size: usize,
    seed: u64,
    budget: &Budget,
    path_samples: usize,
    datasets: &mut Vec<Value>,
) -> Result<Vec<Row>> {
    let mut out = Vec::new();
    for shape in SHAPES {
        let ds = ops::prepare_archive_only(work, shape, size, seed, &mut |m| progress(m))?;
        datasets.push(dataset_json(&ds));
        let name = shape.as_str();
        let row = |op: &'static str, samples: Vec<f64>, per_sample: f64, extra: Value| Row {
            op,
            backend: name.to_owned(),
            size,
            samples,
            per_sample,
            extra,
        };

        progress(&format!("shapes: import {name} @ {size}"));
        let file = ds.main().path.clone();
        let mb = ds.main().bytes as f64 / 1e6;
        let dir = ops::scratch(work, "shape-import")?;
        let samples = measure(&budget.for_import(size), || {
            ops::import(Backend::Sqlite, &file, &dir).map(drop)
        })?;
        let (bytes, segments) = ops::archive_bytes(&dir.join("import.db"))?;
        let _ = std::fs::remove_dir_all(&dir);
        let mut import = row("import", samples, 1.0, Value::Null);
        import.extra = json!({"mb": mb, "mb_per_s": mb / import.median(), "bytes": bytes,
            "bytes_per_entry": bytes as f64 / ds.main().entries as f64, "segments": segments,
            "forks": ds.main().forks, "jsonl_bytes": ds.main().bytes});
        out.push(import);

        progress(&format!("shapes: resume {name} @ {size}"));
        let messages = ops::resume(Backend::Sqlite, &ds, None)?;
        let samples = measure(budget, || ops::resume(Backend::Sqlite, &ds, None).map(drop))?;
        out.push(row(
            "resume",
            samples,
            1.0,
            json!({"context_messages": messages}),
        ));

        progress(&format!("shapes: path {name} @ {size}"));
        let fx = ops::SqlitePaths::new(&ds, path_samples, seed ^ 0x5eed)?;
        let k = fx.ids.len();
        let samples = measure(budget, || {
            for i in 0..k {
                fx.read(i)?;
            }
            Ok(())
        })?;
        out.push(row(
            "path",
            samples,
            k as f64,
            json!({"mean_path_len": fx.mean_length(), "reads_per_sample": k}),
        ));

        progress(&format!("shapes: leaf_move {name} @ {size}"));
        let dir = ops::scratch(work, "shape-leaf")?;
        let mut fx = WriteFixture::new(
            Backend::Sqlite,
            &ds,
            &dir,
            Durability::Relaxed,
            (size * 9 / 10, size),
            seed,
        )?;
        let samples = measure(budget, || fx.move_leaf())?;
        drop(fx);
        let _ = std::fs::remove_dir_all(&dir);
        out.push(row("leaf_move", samples, 1.0, Value::Null));
    }
    Ok(out)
}

/// The shapes section of the report: each shape's cost beside the linear one.
fn render_shapes(shape_rows: &[Row]) -> String {
    let mut t = String::new();
    let mut sizes: Vec<usize> = shape_rows.iter().map(|r| r.size).collect();
    sizes.dedup();
    if sizes.is_empty() {
        return t;
    }
    let _ = writeln!(
        t,
        "\nTree shapes on SQLite (`(N×)` = that shape's cost / the linear shape's; import and bytes per entry: lower is better too):\n"
    );
    let _ = write!(t, "| entries | measure |");
    for shape in SHAPES {
        let _ = write!(t, " {} |", shape.as_str());
    }
    let _ = write!(t, "\n|---:|---|");
    for _ in SHAPES {
        let _ = write!(t, "---:|");
    }
    t.push('\n');
    let labels = [
        "import (s per MB; MB/s)",
        "archive bytes per entry",
        "cold resume",
        "path from a random entry (per read)",
        "path read per row (mean rows)",
        "leaf move",
    ];
    for size in sizes {
        let base = shape_costs(shape_rows, Shape::Linear, size);
        for (i, label) in labels.iter().enumerate() {
            let _ = write!(t, "| {size} | {label} |");
            for shape in SHAPES {
                let c = shape_costs(shape_rows, shape, size)[i];
                let shown = match (i, c) {
                    (_, None) => String::new(),
                    (0, Some(v)) => format!("{:.1} MB/s", 1.0 / v),
                    (1, Some(v)) => format!("{v:.0} B"),
                    (4, Some(v)) => {
                        let len = find(shape_rows, "path", shape.as_str(), size)
                            .and_then(|r| r.extra["mean_path_len"].as_f64())
                            .unwrap_or(f64::NAN);
                        format!("{} ({len:.0} rows)", fmt_s(v))
                    }
                    (_, Some(v)) => fmt_s(v),
                };
                let ratio = match (c, base[i]) {
                    (Some(a), Some(b)) if shape != Shape::Linear => {
                        format!(" ({})", fmt_ratio(a / b))
                    }
                    _ => String::new(),
                };
                let _ = write!(t, " {shown}{ratio} |");
            }
            t.push('\n');
        }
    }
    t
}

fn machine() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_owned())
        })
        .unwrap_or_default();
    json!({
        "loadavg": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        "cpu": cpu,
        "os": std::env::consts::OS,
        "arch": std::env::consts::ARCH,
        "sqlite": rusqlite::version(),
    })
}

fn render_text(report: &Value, rows: &[Row]) -> String {
    let mut t = String::new();
    let _ = writeln!(t, "# sessiontree bench\n");
    let _ = writeln!(
        t,
        "{} build, {} CPU(s) {}, SQLite {}; load average {} at start, {} at end (other work on the machine skews timings). Medians; `(N×)` = that backend's time / SQLite's time (> 1: SQLite is faster).\n",
        report["profile"].as_str().unwrap_or(""),
        report["machine"]["cpus"],
        report["machine"]["cpu"].as_str().unwrap_or(""),
        report["machine"]["sqlite"].as_str().unwrap_or(""),
        report["loadavg_at_start"].as_str().unwrap_or("?"),
        report["machine"]["loadavg"].as_str().unwrap_or("?")
    );
    let mut backends: Vec<String> = Vec::new();
    for r in rows {
        if !backends.contains(&r.backend) && !r.backend.ends_with("-sql-only") {
            backends.push(r.backend.clone());
        }
    }
    let order = [
        "sqlite",
        "sqlite-query",
        "jsonl",
        "memory",
        "sql-cte",
        "sql-pathcopy",
        "floor-raw",
        "floor-decoded",
        "floor-parsed",
        "pi-node",
    ];
    backends.sort_by_key(|b| order.iter().position(|o| o == b).unwrap_or(99));
    let _ = write!(t, "| op | entries |");
    for b in &backends {
        let _ = write!(t, " {b} |");
    }
    let _ = write!(t, "\n|---|---:|");
    for _ in &backends {
        let _ = write!(t, "---:|");
    }
    t.push('\n');
    let mut keys: Vec<(usize, usize)> = Vec::new();
    for r in rows {
        let k = (OPS.iter().position(|o| *o == r.op).unwrap_or(99), r.size);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.sort();
    for (op_i, size) in keys {
        let op = OPS[op_i];
        let base = find(rows, op, "sqlite", size).map(Row::median);
        let _ = write!(t, "| {op} | {size} |");
        for b in &backends {
            match find(rows, op, b, size) {
                None => {
                    let _ = write!(t, " |");
                }
                Some(r) => {
                    let m = r.median();
                    let ratio = match base {
                        Some(s) if b != "sqlite" => format!(" ({})", fmt_ratio(m / s)),
                        _ => String::new(),
                    };
                    let extra = if op == "import" || op == "import_files" {
                        r.extra["mb_per_s"]
                            .as_f64()
                            .map(|x| format!(", {x:.1} MB/s"))
                            .unwrap_or_default()
                    } else {
                        String::new()
                    };
                    let _ = write!(t, " {}{ratio}{extra} |", fmt_s(m));
                }
            }
        }
        t.push('\n');
    }
    let _ = writeln!(t, "\nWhat each operation measures:");
    for o in report["operations"].as_array().into_iter().flatten() {
        let _ = writeln!(
            t,
            "- {}: {}",
            o["op"].as_str().unwrap_or(""),
            o["what"].as_str().unwrap_or("")
        );
    }
    // Path detail: rows per read and the floor.
    let path_sizes: Vec<usize> = rows
        .iter()
        .filter(|r| r.op == "path" && r.backend == "sqlite")
        .map(|r| r.size)
        .collect();
    if !path_sizes.is_empty() {
        let _ = writeln!(
            t,
            "\nPath reads against the physical floor (a rowid range scan of as many rows):\n"
        );
        let _ = writeln!(t, "| entries | mean rows/path | sqlite (kept paths) | sqlite-query | floor (text) | floor (parsed) | sqlite-query/floor text | sqlite-query/floor parsed | sql-cte/sqlite-query | SQL only: sqlite | SQL only: sql-cte | SQL only: sql-cte/sqlite | SQL only: sqlite/floor text |");
        let _ = writeln!(
            t,
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for size in path_sizes {
            let g = |b: &str| find(rows, "path", b, size).map_or(f64::NAN, Row::median);
            let len = find(rows, "path", "sqlite", size)
                .and_then(|r| r.extra["mean_path_len"].as_f64())
                .unwrap_or(f64::NAN);
            let _ = writeln!(
                t,
                "| {size} | {len:.0} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                fmt_s(g("sqlite")),
                fmt_s(g("sqlite-query")),
                fmt_s(g("floor-raw")),
                fmt_s(g("floor-parsed")),
                fmt_ratio(g("sqlite-query") / g("floor-raw")),
                fmt_ratio(g("sqlite-query") / g("floor-parsed")),
                fmt_ratio(g("sql-cte") / g("sqlite-query")),
                fmt_s(g("sqlite-sql-only")),
                fmt_s(g("sql-cte-sql-only")),
                fmt_ratio(g("sql-cte-sql-only") / g("sqlite-sql-only")),
                fmt_ratio(g("sqlite-sql-only") / g("floor-raw"))
            );
        }
        let _ = writeln!(t, "\n`SQL only` rows are diagnostics: the same reads returning text, without turning each row into an `Entry` (which every backend's path read does, and which costs about as much as a whole floor-parsed row).");
    }
    if let Some(rss) = report["rss"].as_array().filter(|a| !a.is_empty()) {
        let _ = writeln!(t, "\nResume in a fresh child process (time and peak RSS = VmHWM; `none` = the bare process):\n");
        let _ = writeln!(
            t,
            "| entries | backend | resume | peak RSS | context messages |"
        );
        let _ = writeln!(t, "|---:|---|---:|---:|---:|");
        for v in rss {
            let c = &v["child"];
            if let Some(e) = c["error"].as_str() {
                let _ = writeln!(
                    t,
                    "| {} | {} | error: {} | | |",
                    v["size"],
                    v["backend"].as_str().unwrap_or(""),
                    e.replace('|', "/")
                );
                continue;
            }
            let _ = writeln!(
                t,
                "| {} | {} | {} | {:.1} MB | {} |",
                v["size"],
                v["backend"].as_str().unwrap_or(""),
                c["secs"].as_f64().map_or("-".to_owned(), fmt_s),
                c["vmhwm_kb"].as_f64().unwrap_or(f64::NAN) / 1024.0,
                c["context_messages"]
            );
        }
    }
    if let Some(pi) = report["pi"].as_array().filter(|a| !a.is_empty()) {
        let _ = writeln!(
            t,
            "\npi 0.83.0 on node, same files (JsonlSessionStorage.open + Session.buildContext):\n"
        );
        let _ = writeln!(
            t,
            "| entries | open | getBranch | buildContext | resume | path/read | peak RSS |"
        );
        let _ = writeln!(t, "|---:|---:|---:|---:|---:|---:|---:|");
        for v in pi {
            let r = &v["result"];
            if let Some(e) = r["error"].as_str().or(v["error"].as_str()) {
                let _ = writeln!(
                    t,
                    "| {} | error: {} | | | | | |",
                    v["size"],
                    e.replace('|', "/")
                );
                continue;
            }
            let ms = |k: &str| r[k].as_f64().map_or("-".to_owned(), |x| fmt_s(x / 1e3));
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {} | {} | {:.0} MB |",
                v["size"],
                ms("median_open_ms"),
                ms("median_branch_ms"),
                ms("median_context_ms"),
                ms("median_resume_ms"),
                ms("median_path_ms"),
                r["vmhwm_kb"].as_f64().unwrap_or(f64::NAN) / 1024.0
            );
        }
    }
    let _ = writeln!(t, "\nTargets (measured ratios; a miss is a miss):\n");
    for v in report["targets"].as_array().into_iter().flatten() {
        let m = v["measured"]
            .as_f64()
            .map_or("-".to_owned(), |x| format!("{x:.2}"));
        let _ = writeln!(
            t,
            "- [{}] {} — goal {}, measured {} ({})",
            v["status"].as_str().unwrap_or(""),
            v["target"].as_str().unwrap_or(""),
            v["goal"].as_str().unwrap_or(""),
            m,
            v["detail"].as_str().unwrap_or("")
        );
    }
    for c in report["checks"].as_array().into_iter().flatten() {
        let _ = writeln!(t, "- check: {c}");
    }
    t
}

/// Makes sure node and the pi package are there (installs with npm if needed).
fn pi_ready(dir: &Path) -> std::result::Result<(), String> {
    let node = Command::new("node").arg("--version").output();
    if !node.is_ok_and(|o| o.status.success()) {
        return Err("node is not available".to_owned());
    }
    if !dir.join("resume.mjs").is_file() {
        return Err(format!("{} has no resume.mjs", dir.display()));
    }
    if !dir
        .join("node_modules/@earendil-works/pi-agent-core")
        .is_dir()
    {
        progress("installing the pi anchor's npm packages");
        let sub = if dir.join("package-lock.json").is_file() {
            "ci"
        } else {
            "install"
        };
        let out = Command::new("npm")
            .current_dir(dir)
            .args([sub, "--no-audit", "--no-fund"])
            .output()
            .map_err(|e| format!("running npm: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "npm {sub} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }
    Ok(())
}

/// The hidden child: one resume in a fresh process, then its peak RSS.
fn child_resume(backend: &str, dataset: Option<&Path>) -> Result<Report> {
    let dir =
        dataset.ok_or_else(|| Error::Unknown("--child-resume needs --child-dataset".into()))?;
    let started = Instant::now();
    let messages = if backend == "none" {
        0
    } else {
        let b = Backend::from_name(backend)
            .ok_or_else(|| Error::Unknown(format!("unknown backend {backend}")))?;
        let ds = ops::load(dir)?;
        ops::resume(b, &ds, None)?
    };
    let secs = started.elapsed().as_secs_f64();
    let v = json!({
        "backend": backend, "secs": secs, "context_messages": messages,
        "vmhwm_kb": proc_status_kb("VmHWM:"), "vmrss_kb": proc_status_kb("VmRSS:"),
    });
    println!("{v}");
    std::process::exit(0);
}

// ---------------------------------------------------------------------------
// The scaling curves, hand-written SVG.

fn svg(rows: &[Row]) -> String {
    let colors: &[(&str, &str)] = &[
        ("sqlite", "#1f77b4"),
        ("sqlite-query", "#17becf"),
        ("jsonl", "#d62728"),
        ("memory", "#2ca02c"),
        ("sql-cte", "#ff7f0e"),
        ("sql-pathcopy", "#9467bd"),
        ("floor-raw", "#7f7f7f"),
        ("floor-parsed", "#bcbd22"),
        ("pi-node", "#e377c2"),
        ("pi-sqlite", "#8c564b"),
    ];
    let (pw, ph) = (330.0, 250.0);
    let (ml, mr, mt, mb) = (62.0, 12.0, 28.0, 38.0);
    let cols = 4;
    let ops: Vec<&str> = OPS
        .iter()
        .copied()
        .filter(|o| rows.iter().any(|r| r.op == *o))
        .collect();
    let nrows = ops.len().div_ceil(cols).max(1);
    let width = pw * cols as f64;
    let height = ph * nrows as f64 + 60.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    for (i, op) in ops.iter().enumerate() {
        let ox = (i % cols) as f64 * pw;
        let oy = (i / cols) as f64 * ph;
        let pts: Vec<&Row> = rows.iter().filter(|r| r.op == *op).collect();
        let xs: Vec<f64> = pts.iter().map(|r| r.size as f64).collect();
        let ys: Vec<f64> = pts
            .iter()
            .map(|r| r.median())
            .filter(|y| *y > 0.0 && y.is_finite())
            .collect();
        if xs.is_empty() || ys.is_empty() {
            continue;
        }
        let lx0 = xs
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
            .log10()
            .floor();
        let mut lx1 = xs.iter().copied().fold(0.0, f64::max).log10().ceil();
        if lx1 <= lx0 {
            lx1 = lx0 + 1.0;
        }
        let ly0 = ys
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
            .log10()
            .floor();
        let mut ly1 = ys.iter().copied().fold(0.0, f64::max).log10().ceil();
        if ly1 <= ly0 {
            ly1 = ly0 + 1.0;
        }
        let (x0, x1, y0, y1) = (ox + ml, ox + pw - mr, oy + ph - mb, oy + mt);
        let px = |x: f64| x0 + (x.log10() - lx0) / (lx1 - lx0) * (x1 - x0);
        let py = |y: f64| y0 - (y.log10() - ly0) / (ly1 - ly0) * (y0 - y1);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" font-size="13" font-weight="bold">{op}</text>"#,
            ox + ml,
            oy + 18.0
        );
        let _ = writeln!(
            s,
            r##"<rect x="{x0}" y="{y1}" width="{}" height="{}" fill="none" stroke="#999"/>"##,
            x1 - x0,
            y0 - y1
        );
        let mut e = lx0 as i32;
        while e <= lx1 as i32 {
            let x = px(10f64.powi(e));
            let _ = writeln!(
                s,
                r##"<line x1="{x}" y1="{y0}" x2="{x}" y2="{y1}" stroke="#eee"/><text x="{x}" y="{}" text-anchor="middle">1e{e}</text>"##,
                y0 + 14.0
            );
            e += 1;
        }
        let mut e = ly0 as i32;
        while e <= ly1 as i32 {
            let y = py(10f64.powi(e));
            let _ = writeln!(
                s,
                r##"<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#eee"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
                x0 - 4.0,
                y + 4.0,
                fmt_s(10f64.powi(e))
            );
            e += 1;
        }
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">entries</text>"#,
            (x0 + x1) / 2.0,
            y0 + 28.0
        );
        for (b, color) in colors {
            let mut line: Vec<(f64, f64)> = pts
                .iter()
                .filter(|r| r.backend == *b)
                .map(|r| (r.size as f64, r.median()))
                .filter(|(_, y)| *y > 0.0 && y.is_finite())
                .collect();
            line.sort_by(|a, b| a.0.total_cmp(&b.0));
            if line.is_empty() {
                continue;
            }
            let dash = if b.starts_with("floor") {
                r#" stroke-dasharray="4 3""#
            } else {
                ""
            };
            let d: Vec<String> = line
                .iter()
                .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
                .collect();
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"#,
                d.join(" ")
            );
            for (x, y) in &line {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{color}"><title>{b} {x}: {}</title></circle>"#,
                    px(*x),
                    py(*y),
                    fmt_s(*y)
                );
            }
        }
    }
    // Legend.
    let ly = ph * nrows as f64 + 20.0;
    let mut lx = 20.0;
    for (b, color) in colors {
        if !rows.iter().any(|r| r.backend == *b) {
            continue;
        }
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{}" width="14" height="4" fill="{color}"/><text x="{}" y="{}">{b}</text>"#,
            ly - 4.0,
            lx + 18.0,
            ly + 2.0
        );
        lx += 30.0 + 7.0 * b.len() as f64;
    }
    let _ = writeln!(
        s,
        r##"<text x="20" y="{}" fill="#555">median cost per operation (log) against entries in the session or archive (log); dashed: physical floors</text>"##,
        ly + 22.0
    );
    s.push_str("</svg>\n");
    s
}

// ---------------------------------------------------------------------------
// pi's SQLite store and whole processes.

/// Where the pi SQLite store of a data set is loaded for the report.
fn pi_sqlite_store(work: &Path, d: &Dataset, size: usize) -> PathBuf {
    let kind = d.dir.file_name().map_or_else(
        || d.shape.as_str().to_owned(),
        |n| n.to_string_lossy().into_owned(),
    );
    work.join("scratch")
        .join(format!("pi-sqlite-{kind}-{size}"))
}

/// Ops on which pi's SQLite model differs from sessiontree's, so its rows are
/// shown but kept out of like-for-like comparisons: it has no `leaf` entries
/// (a leaf move is a new branch + append), and its branch scan stops at the
/// compaction entry (kept messages inside it) instead of returning the kept
/// entries, so a path read returns other rows.
const PI_SQLITE_DIFFERS: [&str; 3] = ["path", "path_long", "leaf_move"];

/// Loads one size's sessions into pi's SQLite store with its own API and
/// measures it there; pushes its rows, returns what each step answered.
#[allow(clippy::too_many_arguments)]
fn measure_pi_sqlite(
    n: &Node24,
    work: &Path,
    size: usize,
    ds: &Dataset,
    linear: Option<&Dataset>,
    long: Option<&Dataset>,
    ops: &[&str],
    path_ids: &[String],
    repeat: usize,
    rows: &mut Vec<Row>,
) -> Vec<Value> {
    let mut out = Vec::new();
    let row = |op: &'static str, samples: Vec<f64>, extra: Value| Row {
        op,
        backend: "pi-sqlite".to_owned(),
        size,
        samples,
        per_sample: 1.0,
        extra,
    };
    let secs = |v: &Value, k: &str| -> Vec<f64> {
        v[k].as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_f64)
            .map(|m| m / 1e3)
            .collect()
    };
    let load = |d: &Dataset, rows: &mut Vec<Row>, out: &mut Vec<Value>| -> Option<PathBuf> {
        let store = pi_sqlite_store(work, d, size);
        let _ = std::fs::remove_dir_all(&store);
        let main = d.main();
        let kind = if d.dir.to_string_lossy().ends_with("-uncompacted") {
            " (no compactions)"
        } else {
            ""
        };
        progress(&format!(
            "pi SQLite load {}{kind} @ {size}",
            d.shape.as_str()
        ));
        let v = n.run(&[
            "load",
            &main.path.to_string_lossy(),
            &store.to_string_lossy(),
            "--leaf",
            main.leaf_id.as_deref().unwrap_or(""),
        ]);
        let ok = v.get("error").is_none();
        if ok && d.shape == Shape::Forked && ops.contains(&"import") {
            let mb = main.bytes as f64 / 1e6;
            rows.push(row(
                "import",
                vec![v["load_ms"].as_f64().unwrap_or(f64::NAN) / 1e3],
                json!({"mb": mb, "mb_per_s": v["mb_per_s"], "search_index": false, "writes": true,
                    "store_bytes": v["store_bytes"], "parse_ms": v["parse_ms"], "commit_ms": v["commit_ms"],
                    "note": "one load: v3 lines parsed and mapped to v4 entries, committed 1,000 per Session.mutate, then createBranch(main, leaf); no search index (the package has none)"}),
            ));
        }
        out.push(
            json!({"size": size, "step": format!("load {}{kind}", d.shape.as_str()), "result": v}),
        );
        ok.then_some(store)
    };
    let main = ds.main();
    let Some(store) = load(ds, rows, &mut out) else {
        return out;
    };
    let store_s = store.to_string_lossy().into_owned();
    if ops.contains(&"resume") || ops.contains(&"path") {
        progress(&format!("pi SQLite resume @ {size}"));
        let v = n.run(&[
            "resume",
            &store_s,
            &main.id,
            "--repeat",
            &repeat.to_string(),
            "--ids",
            &path_ids.join(","),
        ]);
        if v.get("error").is_none() {
            rows.push(row(
                "resume",
                secs(&v, "resume_ms"),
                json!({"context_messages": v["messages"], "path_len": v["path_len"], "import_ms": v["import_ms"]}),
            ));
            if !path_ids.is_empty() {
                rows.push(row(
                    "path",
                    secs(&v, "path_ms"),
                    json!({"mean_path_len": v["mean_path_rows"], "like_for_like": false,
                        "note": "scanBranch from each start entry, stopping at the compaction entry"}),
                ));
            }
        }
        out.push(json!({"size": size, "step": "resume", "result": v}));
        // Peak RSS of one resume in a fresh process, as the Rust children measure it.
        let one = n.run(&["resume", &store_s, &main.id, "--repeat", "1"]);
        out.push(json!({"size": size, "step": "resume_rss", "result": one}));
    }
    if ops.contains(&"append") {
        // On a copy: the whole-process resume later reads the store as loaded.
        progress(&format!("pi SQLite append @ {size}"));
        let copy = store.with_extension("append");
        let _ = std::fs::remove_dir_all(&copy);
        let copied = std::fs::create_dir_all(&copy).is_ok()
            && std::fs::read_dir(&store)
                .into_iter()
                .flatten()
                .flatten()
                .all(|e| std::fs::copy(e.path(), copy.join(e.file_name())).is_ok());
        let v = if copied {
            n.run(&[
                "write",
                &copy.to_string_lossy(),
                &main.id,
                "--op",
                "append",
                "--repeat",
                &(repeat * 3).to_string(),
            ])
        } else {
            json!({"error": format!("copying {}", store.display())})
        };
        let _ = std::fs::remove_dir_all(&copy);
        if v.get("error").is_none() {
            rows.push(row(
                "append",
                secs(&v, "ms"),
                json!({"durable": true, "note": "Branch.appendMessage on main (WAL, node:sqlite's default synchronous)"}),
            ));
        }
        out.push(json!({"size": size, "step": "append", "result": v}));
    }
    if let Some(long) = long.filter(|_| ops.contains(&"path_long")) {
        if let Some(store) = load(long, rows, &mut out) {
            progress(&format!("pi SQLite path_long @ {size}"));
            let m = long.main();
            let leaf = m.leaf_id.clone().unwrap_or_default();
            let v = n.run(&[
                "resume",
                &store.to_string_lossy(),
                &m.id,
                "--repeat",
                "1",
                "--ids",
                &leaf,
            ]);
            if v.get("error").is_none() {
                rows.push(row(
                    "path_long",
                    secs(&v, "path_ms"),
                    json!({"mean_path_len": v["mean_path_rows"], "like_for_like": false}),
                ));
            }
            out.push(json!({"size": size, "step": "path_long", "result": v}));
        }
    }
    let Some(linear) = linear.filter(|_| ops.contains(&"leaf_move")) else {
        return out;
    };
    let Some(lstore) = load(linear, rows, &mut out) else {
        return out;
    };
    let lmain = linear.main();
    let lstore_s = lstore.to_string_lossy().into_owned();
    {
        progress(&format!("pi SQLite leaf_move @ {size}"));
        let v = match peers::entry_ids(&lmain.path) {
            Err(e) => json!({"error": e}),
            Ok(ids) => {
                // Targets at depth 0.9–1.0 × size, as the Rust side draws them.
                let (lo, hi) = (ids.len() * 9 / 10, ids.len().saturating_sub(1));
                let targets: Vec<&str> = (0..8)
                    .map(|i| ids[lo + (hi - lo) * i / 8].as_str())
                    .collect();
                n.run(&[
                    "write",
                    &lstore_s,
                    &lmain.id,
                    "--op",
                    "leaf_move",
                    "--targets",
                    &targets.join(","),
                    "--repeat",
                    &repeat.to_string(),
                ])
            }
        };
        if v.get("error").is_none() {
            rows.push(row(
                "leaf_move",
                secs(&v, "ms"),
                json!({"like_for_like": false, "note": "createBranch at the target + one appendMessage (pi v4 has no leaf to move); durable"}),
            ));
        }
        out.push(json!({"size": size, "step": "leaf_move", "result": v}));
    }
    out
}

/// The active path's length from the leaf of a data set's main session (SQLite).
fn active_path_rows(ds: &Dataset) -> Result<usize> {
    let st = sessiontree::backend::sqlite::Archive::open(&ds.archive, Durability::Full)?
        .open_session(&ds.main().id)?;
    let leaf = sessiontree::SessionStorage::leaf_id(&st)?;
    Ok(sessiontree::SessionStorage::path_to_root_or_compaction(&st, leaf.as_deref())?.len())
}

/// Times whole commands at one size, alternating between them.
#[allow(clippy::too_many_arguments)]
fn measure_processes(
    exe: &Path,
    bin: &Path,
    forked: &Dataset,
    linear: &Dataset,
    archive: &Dataset,
    size: usize,
    rounds: usize,
    pi_dir: Option<&Path>,
    node24: Option<&Node24>,
    work: &Path,
    notes: &mut Vec<Value>,
) -> Result<Vec<Row>> {
    let st = |a: &Path, rest: &[&str]| {
        Cmd::new(bin)
            .with(&["--db", &a.to_string_lossy()])
            .with(rest)
    };
    let (fid, lid) = (forked.main().id.as_str(), linear.main().id.as_str());
    let (frows, lrows) = (active_path_rows(forked)?, active_path_rows(linear)?);
    // The first rowid is found here, so the floor process does nothing but the scan.
    let first_rowid = |d: &Dataset| -> Result<i64> {
        let naive = crate::naive::Naive::open(&d.naive, true)?;
        Ok(naive.rowid_range(naive.session_key(&d.main().id)?)?.0)
    };
    let (fstart, lstart) = (first_rowid(forked)?, first_rowid(linear)?);
    let lkey = ops::archive_first_key(
        &sessiontree::backend::sqlite::Archive::open_read_only(&linear.archive)?,
        lid,
    )?;
    let floor = |d: &Dataset, n: usize, start: i64| {
        Cmd::new(exe).with(&[
            "report",
            "--child-floor-rows",
            &n.to_string(),
            "--child-floor-start",
            &start.to_string(),
            "--child-dataset",
            &d.dir.to_string_lossy(),
        ])
    };
    let mut rpc = st(&forked.archive, &["rpc", fid]);
    rpc.stdin = Some(b"{\"id\":1,\"method\":\"buildContext\"}\n".to_vec());
    let mut cmds: Vec<(String, Cmd)> = vec![
        (
            "sessiontree --version".into(),
            Cmd::new(bin).with(&["--version"]),
        ),
        (
            "context, forked".into(),
            st(&forked.archive, &["--json", "context", fid]),
        ),
        ("rpc buildContext, forked".into(), rpc),
        ("tree, forked".into(), st(&forked.archive, &["tree", fid])),
        ("ls".into(), st(&archive.archive, &["ls"])),
        (
            "search".into(),
            st(&archive.archive, &["search", ops::SEARCH_TERM]),
        ),
        (
            "context, linear (no compactions)".into(),
            st(&linear.archive, &["--json", "context", lid]),
        ),
        (
            "floor: print the path's rows, forked".into(),
            floor(forked, frows, fstart),
        ),
        (
            "floor: print the path's rows, linear (no compactions)".into(),
            floor(linear, lrows, lstart),
        ),
        (
            "floor: print the path's rows decoded from the archive, linear (no compactions)".into(),
            floor(linear, lrows, lkey).with(&["--child-floor-decoded"]),
        ),
    ];
    if let Some(dir) = pi_dir {
        let mut c = Cmd::new(Path::new("node")).with(&[
            "resume.mjs",
            &forked.main().path.to_string_lossy(),
            "--repeat",
            "1",
        ]);
        c.dir = Some(dir.to_owned());
        cmds.push(("pi JSONL resume, forked".into(), c));
    }
    if let Some(n) = node24 {
        let store = pi_sqlite_store(work, forked, size);
        if store.is_dir() {
            cmds.push((
                "pi SQLite resume, forked".into(),
                n.resume_command(&store, fid),
            ));
        }
    }
    let mut out = Vec::new();
    for (name, result) in peers::time_commands(&cmds, rounds) {
        let cmd = &cmds
            .iter()
            .find(|(n, _)| *n == name)
            .expect("timed command")
            .1;
        match result {
            Err(e) => notes.push(json!({"size": size, "command": name, "error": e})),
            Ok(samples) => out.push(Row {
                op: "process",
                backend: name.clone(),
                size,
                samples,
                per_sample: 1.0,
                extra: json!({
                    "argv": std::iter::once(cmd.program.to_string_lossy().into_owned()).chain(cmd.args.iter().cloned()).collect::<Vec<_>>(),
                    "path_rows": if name.contains("linear") { Some(lrows) } else if name.contains("forked") { Some(frows) } else { None },
                }),
            }),
        }
    }
    Ok(out)
}

/// The hidden child: the text of `rows` rows of the main session, one rowid
/// range scan, written to stdout (the floor of printing a context).
fn child_floor(
    rows: usize,
    start: Option<i64>,
    dataset: Option<&Path>,
    decoded: bool,
) -> Result<Report> {
    let (Some(dir), Some(start)) = (dataset, start) else {
        return Err(Error::Unknown(
            "--child-floor-rows needs --child-floor-start and --child-dataset".into(),
        ));
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    if decoded {
        use std::io::Write;
        let archive =
            sessiontree::backend::sqlite::Archive::open_read_only(dir.join("archive.db"))?;
        let write = |e| Error::io("writing the floor's output", e);
        ops::archive_floor_scan(&archive, start, rows as i64, &mut |text| {
            out.write_all(text.as_bytes()).map_err(write)?;
            out.write_all(b"\n").map_err(write)
        })?;
        out.flush().map_err(write)?;
    } else {
        crate::naive::Naive::floor_write(&dir.join("naive.db"), start, rows as i64, &mut out)?;
    }
    drop(out);
    std::process::exit(0);
}

/// Every (op, size, peer) with the peer's time over sessiontree's, and
/// whether it is like for like and whether the peer wins.
fn peers_json(rows: &[Row], proc_rows: &[Row]) -> Vec<Value> {
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r.backend == "sqlite") {
        for peer in ["pi-node", "pi-sqlite"] {
            let Some(p) = find(rows, r.op, peer, r.size) else {
                continue;
            };
            let ratio = p.median() / r.median();
            let like = !(peer == "pi-sqlite" && PI_SQLITE_DIFFERS.contains(&r.op));
            out.push(
                json!({"op": r.op, "size": r.size, "peer": peer, "sessiontree_s": r.median(),
                "peer_s": p.median(), "peer_over_sessiontree": ratio, "like_for_like": like,
                "peer_wins": like && ratio < 1.0}),
            );
        }
    }
    for r in proc_rows.iter().filter(|r| r.backend == "context, forked") {
        for (peer, name) in [
            ("pi-node", "pi JSONL resume, forked"),
            ("pi-sqlite", "pi SQLite resume, forked"),
        ] {
            let Some(p) = find(proc_rows, "process", name, r.size) else {
                continue;
            };
            let ratio = p.median() / r.median();
            out.push(
                json!({"op": "resume, whole process", "size": r.size, "peer": peer,
                "sessiontree_s": r.median(), "peer_s": p.median(), "peer_over_sessiontree": ratio,
                "like_for_like": true, "peer_wins": ratio < 1.0}),
            );
        }
    }
    out
}

/// The peers section and the whole-process table.
fn render_peers(report: &Value, proc_rows: &[Row]) -> String {
    let mut t = String::new();
    let peers = report["peers"].as_array().cloned().unwrap_or_default();
    let _ = writeln!(t, "\nPeers: pi's JSONL (`pi-node`, pi-agent-core 0.83.0) and pi's own SQLite store (`pi-sqlite`, pi-session-backend-sqlite-node 0.87.1 on Node ≥ 22.19), each on the same generated sessions. Ratio = the peer's time / sessiontree's (> 1: sessiontree is faster). **PEER WINS** marks every like-for-like row where the peer is faster.\n");
    for v in report["pi_sqlite"].as_array().into_iter().flatten() {
        if let Some(why) = v["skipped"].as_str() {
            let _ = writeln!(t, "- pi SQLite peer skipped: {why}\n");
        }
        if let Some(e) = v["result"]["error"].as_str() {
            let _ = writeln!(
                t,
                "- pi SQLite {} @ {}: error: {e}",
                v["step"].as_str().unwrap_or(""),
                v["size"]
            );
        }
    }
    if !peers.is_empty() {
        let _ = writeln!(
            t,
            "| op | entries | peer | sessiontree | peer | peer / sessiontree | |"
        );
        let _ = writeln!(t, "|---|---:|---|---:|---:|---:|---|");
        for v in &peers {
            let flag = if !v["like_for_like"].as_bool().unwrap_or(true) {
                "model differs: not compared"
            } else if v["peer_wins"].as_bool().unwrap_or(false) {
                "**PEER WINS**"
            } else {
                ""
            };
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {} | {} | {flag} |",
                v["op"].as_str().unwrap_or(""),
                v["size"],
                v["peer"].as_str().unwrap_or(""),
                v["sessiontree_s"].as_f64().map_or("-".into(), fmt_s),
                v["peer_s"].as_f64().map_or("-".into(), fmt_s),
                v["peer_over_sessiontree"]
                    .as_f64()
                    .map_or("-".into(), fmt_ratio),
            );
        }
        let _ = writeln!(t, "\npi's JSONL (`pi-node`) reads a path by walking its in-memory index: the whole file was read and indexed at open, which its resume row pays; its path rows are flagged as they are.");
        let _ = writeln!(t, "\nWhere pi's SQLite model differs (rows shown, kept out of the comparison): it has no `leaf` entries, so a leaf move is `createBranch` at the target plus one `appendMessage`; its branch scan (`scanBranch`, the cursor its `getEntries`/path reads use) stops at the compaction entry and carries the kept messages inside it, so a path read returns other rows than pi's `getPathToRootOrCompaction`. Its sessions are loaded through its own API (`Session.mutate` + entry commits, `createBranch`): pi's v3 records keep their ids and parents (settings, labels and session info as `custom` entries; `leaf` records dropped, the final leaf made the tip of branch `main`).");
        for v in report["pi_sqlite"].as_array().into_iter().flatten() {
            let r = &v["result"];
            if v["step"] == "resume" && r.get("error").is_none() {
                let _ = writeln!(t, "- pi SQLite @ {}: module import {} (paid once per process, not in its resume row), resume = open {} + branch scan {} + context {}, {} context messages, peak RSS {:.0} MB", v["size"],
                    r["import_ms"].as_f64().map_or("-".into(), |x| fmt_s(x / 1e3)),
                    r["median_open_ms"].as_f64().map_or("-".into(), |x| fmt_s(x / 1e3)),
                    r["median_branch_ms"].as_f64().map_or("-".into(), |x| fmt_s(x / 1e3)),
                    r["median_context_ms"].as_f64().map_or("-".into(), |x| fmt_s(x / 1e3)),
                    r["messages"], r["vmhwm_kb"].as_f64().unwrap_or(f64::NAN) / 1024.0);
            }
            if v["step"].as_str().is_some_and(|s| s.starts_with("load")) && r.get("error").is_none()
            {
                let _ = writeln!(t, "- pi SQLite {} @ {}: {} entries loaded in {} ({:.1} MB/s), store {:.1} MB (JSONL {:.1} MB)", v["step"].as_str().unwrap_or(""), v["size"], r["entries"],
                    r["load_ms"].as_f64().map_or("-".into(), |x| fmt_s(x / 1e3)), r["mb_per_s"].as_f64().unwrap_or(f64::NAN),
                    r["store_bytes"].as_f64().unwrap_or(f64::NAN) / 1e6, r["jsonl_bytes"].as_f64().unwrap_or(f64::NAN) / 1e6);
            }
        }
    }
    if !proc_rows.is_empty() {
        let _ = writeln!(t, "\nWhole processes (spawn to exit, stdout to /dev/null, median of alternating runs after one untimed round; `× floor` = over `sessiontree --version` at the same size):\n");
        let _ = writeln!(
            t,
            "| entries | command | median | p90 | × floor | path rows |"
        );
        let _ = writeln!(t, "|---:|---|---:|---:|---:|---:|");
        for r in proc_rows {
            let floor = find(proc_rows, "process", "sessiontree --version", r.size)
                .map_or(f64::NAN, Row::median);
            let _ = writeln!(
                t,
                "| {} | {} | {} | {} | {} | {} |",
                r.size,
                r.backend,
                fmt_s(r.median()),
                fmt_s(r.p90()),
                fmt_ratio(r.median() / floor),
                r.extra["path_rows"]
                    .as_u64()
                    .map_or(String::new(), |n| n.to_string())
            );
        }
        let _ = writeln!(t, "\n`context` is `sessiontree --json context` (the whole model context as JSON, what an agent reads); `rpc buildContext` is one request to `sessiontree rpc`; `tree` is the default view (the active path, folded). `floor: print the path's rows` = a process (this bench binary) that opens the naive log read-only, reads as many rows as the active path holds in one rowid range scan and writes their text to stdout: the floor of printing a context.");
    }
    for v in report["process_notes"].as_array().into_iter().flatten() {
        let _ = writeln!(t, "- whole process: {v}");
    }
    t
}
