//! `sessiontree-bench team`: the team archive on PostgreSQL beside an SQLite
//! archive on the same workload — bulk load (SQLite `import`, PostgreSQL
//! `sync`), resume, path read, leaf move, append — and a concurrency row:
//! writers appending to their own sessions while readers read active paths,
//! total appends per second and read latency percentiles. Writers and
//! readers are threads, each with its own archive handle (its own pool, its
//! own connections), so the server sees them as separate clients.

use crate::gen::{write_session, SessionSpec, TreeShape};
use crate::Report;
use serde_json::{json, Value};
use sessiontree::backend::postgres::PgArchive;
use sessiontree::backend::sqlite::Archive;
use sessiontree::repo::postgres::PgRepo;
use sessiontree::repo::sqlite::SqliteRepo;
use sessiontree::repo::{CreateOptions, SessionRepo};
use sessiontree::{Durability, JsonText, Result, Session, SessionStorage};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Arguments of `team`.
#[derive(Debug, clap::Args)]
pub struct TeamArgs {
    /// The PostgreSQL server (`postgres://…`); a fresh schema of it is used.
    #[arg(long)]
    pub url: String,
    /// Entries of the measured session.
    #[arg(long, default_value_t = 20_000)]
    pub entries: usize,
    /// Writers (and as many readers) of the concurrency row.
    #[arg(long, default_value_t = 8)]
    pub writers: usize,
    /// Seconds the concurrency row runs.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    /// Runs of each timed operation.
    #[arg(long, default_value_t = 30)]
    pub runs: usize,
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i]
}

fn timed(runs: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    let mut v = Vec::with_capacity(runs);
    for _ in 0..runs {
        let t = Instant::now();
        f()?;
        v.push(t.elapsed().as_secs_f64());
    }
    Ok(crate::median(v))
}

fn message(i: usize) -> Result<JsonText> {
    JsonText::parse(&format!(
        r#"{{"role":"user","content":"bench message {i}: the quick brown fox jumps over the lazy dog"}}"#
    ))
    .map_err(|e| sessiontree::Error::Unknown(format!("a bench message: {e}")))
}

/// The single-session rows of one backend: resume, path read, leaf move, append.
fn session_rows<S: SessionStorage>(runs: usize, open: impl Fn() -> Result<S>) -> Result<[f64; 4]> {
    let resume = timed(runs, || {
        let s = Session::new(open()?);
        s.build_context(None).map(|_| ())
    })?;
    let mut s = Session::new(open()?);
    let leaf = s.storage().leaf_id()?;
    let path = s.branch(None)?;
    let path_read = timed(runs, || {
        s.storage()
            .path_to_root_or_compaction(leaf.as_deref())
            .map(|_| ())
    })?;
    let back = path
        .get(path.len() / 2)
        .map(|e| e.id().to_owned())
        .unwrap_or_default();
    let mut to_back = true;
    let leaf_move = timed(runs, || {
        let target = if to_back {
            &back
        } else {
            leaf.as_deref().unwrap_or(&back)
        };
        to_back = !to_back;
        s.move_to(Some(target), None).map(|_| ())
    })?;
    let mut i = 0;
    let append = timed(runs, || {
        i += 1;
        s.append_message(&message(i)?).map(|_| ())
    })?;
    Ok([resume, path_read, leaf_move, append])
}

/// The concurrency row: `writers` threads appending to their own sessions,
/// as many readers reading their active paths; (appends/s, read p50, p90, p99).
fn concurrency<S: SessionStorage + Send + 'static>(
    writers: usize,
    seconds: u64,
    open: Arc<dyn Fn(usize) -> Result<S> + Send + Sync>,
) -> Result<(f64, f64, f64, f64)> {
    let stop = Arc::new(AtomicBool::new(false));
    let appends = Arc::new(AtomicU64::new(0));
    let reads = Arc::new(Mutex::new(Vec::new()));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for w in 0..writers {
        let (stop, appends, errors, open) =
            (stop.clone(), appends.clone(), errors.clone(), open.clone());
        threads.push(std::thread::spawn(move || {
            let run = || -> Result<()> {
                let mut s = Session::new(open(w)?);
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    s.append_message(&message(i)?)?;
                    appends.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            };
            if let Err(e) = run() {
                errors.lock().map(|mut v| v.push(e.to_string())).ok();
            }
        }));
    }
    for r in 0..writers {
        let (stop, reads, errors, open) =
            (stop.clone(), reads.clone(), errors.clone(), open.clone());
        threads.push(std::thread::spawn(move || {
            let run = || -> Result<()> {
                let s = open(r)?;
                let mut mine = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let leaf = s.leaf_id()?;
                    s.path_to_root_or_compaction(leaf.as_deref())?;
                    mine.push(t.elapsed().as_secs_f64());
                }
                reads.lock().map(|mut v| v.extend(mine)).ok();
                Ok(())
            };
            if let Err(e) = run() {
                errors.lock().map(|mut v| v.push(e.to_string())).ok();
            }
        }));
    }
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(seconds));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    let elapsed = started.elapsed().as_secs_f64();
    if let Some(e) = errors.lock().ok().and_then(|v| v.first().cloned()) {
        return Err(sessiontree::Error::Unknown(format!(
            "a concurrency thread failed: {e}"
        )));
    }
    let mut lat = reads.lock().map(|v| v.clone()).unwrap_or_default();
    lat.sort_by(f64::total_cmp);
    Ok((
        appends.load(Ordering::Relaxed) as f64 / elapsed,
        percentile(&lat, 0.5),
        percentile(&lat, 0.9),
        percentile(&lat, 0.99),
    ))
}

fn ms(s: f64) -> String {
    format!("{:.3} ms", s * 1000.0)
}

/// Runs `team`.
pub fn run(args: &TeamArgs) -> Result<Report> {
    let dir = std::env::temp_dir().join(format!("sessiontree-team-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| sessiontree::Error::io("creating a temp dir", e))?;
    let file = dir.join("forked.jsonl");
    {
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(&file).map_err(|e| sessiontree::Error::io("creating", e))?,
        );
        write_session(
            &mut out,
            &SessionSpec {
                id: "team-bench".into(),
                created_ms: 1_748_736_000_000,
                cwd: "/work/team".into(),
                entries: args.entries,
                forks: args.entries / 100,
                compaction_every: 2_000,
                seed: 11,
                tree: TreeShape::Spread,
                dangling_root: false,
            },
        )
        .map_err(|e| sessiontree::Error::io("generating", e))?;
    }
    let schema = format!("bench_{}", std::process::id());
    let sep = if args.url.contains('?') { '&' } else { '?' };
    let url = format!("{}{sep}options=-csearch_path%3D{schema}", args.url);

    let db = dir.join("archive.db");
    let sqlite = Archive::open(&db, Durability::Full)?;
    let t = Instant::now();
    sessiontree::convert::import_jsonl(&sqlite, &file)?;
    let sqlite_load = t.elapsed().as_secs_f64();
    let pg = PgArchive::open(&url, Durability::Full)?;
    let t = Instant::now();
    sessiontree::sync::sync_jsonl_file(&file, &pg)?;
    let pg_load = t.elapsed().as_secs_f64();

    let sqlite_rows = session_rows(args.runs, || sqlite.open_session("team-bench"))?;
    let pg_rows = session_rows(args.runs, || pg.open_session("team-bench"))?;

    let mut sqlite_repo = SqliteRepo::new(sqlite.clone());
    let mut pg_repo = PgRepo::new(pg.clone());
    for w in 0..args.writers {
        let options = CreateOptions {
            id: Some(format!("writer-{w}")),
            cwd: "/work/team".into(),
            ..CreateOptions::default()
        };
        drop(sqlite_repo.create(&options)?);
        drop(pg_repo.create(&options)?);
    }
    let db_path = db.clone();
    let sqlite_conc = concurrency(
        args.writers,
        args.seconds,
        Arc::new(move |w| {
            Archive::open(&db_path, Durability::Full)?.open_session(&format!("writer-{w}"))
        }),
    )?;
    let pg_url = url.clone();
    let pg_conc = concurrency(
        args.writers,
        args.seconds,
        Arc::new(move |w| {
            PgArchive::open(&pg_url, Durability::Full)?.open_session(&format!("writer-{w}"))
        }),
    )?;
    let _ = pg.drop_schema();
    let _ = std::fs::remove_dir_all(&dir);

    let ops = ["resume", "path read", "leaf move", "append"];
    let mut text = format!(
        "team archive bench: a forked session of {} entries, durability full\n\n| op | SQLite | PostgreSQL |\n|---|---:|---:|\n",
        args.entries
    );
    text.push_str(&format!(
        "| bulk load (import / sync), entries/s | {:.0} | {:.0} |\n",
        args.entries as f64 / sqlite_load,
        args.entries as f64 / pg_load
    ));
    let mut rows: Vec<Value> = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        text.push_str(&format!(
            "| {op} | {} | {} |\n",
            ms(sqlite_rows[i]),
            ms(pg_rows[i])
        ));
        rows.push(json!({"op": op, "sqlite_s": sqlite_rows[i], "postgres_s": pg_rows[i]}));
    }
    let w = args.writers;
    text.push_str(&format!(
        "| {w} writers + {w} readers: appends/s | {:.0} | {:.0} |\n| … read p50 / p90 / p99 | {} / {} / {} | {} / {} / {} |\n",
        sqlite_conc.0, pg_conc.0,
        ms(sqlite_conc.1), ms(sqlite_conc.2), ms(sqlite_conc.3),
        ms(pg_conc.1), ms(pg_conc.2), ms(pg_conc.3),
    ));
    let json = json!({
        "entries": args.entries,
        "load_entries_per_s": {"sqlite": args.entries as f64 / sqlite_load, "postgres": args.entries as f64 / pg_load},
        "ops": rows,
        "concurrency": {
            "writers": w, "readers": w,
            "sqlite": {"appends_per_s": sqlite_conc.0, "read_p50_s": sqlite_conc.1, "read_p90_s": sqlite_conc.2, "read_p99_s": sqlite_conc.3},
            "postgres": {"appends_per_s": pg_conc.0, "read_p50_s": pg_conc.1, "read_p90_s": pg_conc.2, "read_p99_s": pg_conc.3},
        },
    });
    Ok(Report::new(json, text))
}
