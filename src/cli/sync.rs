//! `sync --to postgres://…`: pushes the local archive (or pi session files)
//! to a team archive (see `sessiontree::sync` for what makes it idempotent,
//! resumable and safe when several machines sync at once).

use super::{Cli, Report};
use clap::Args;
use serde_json::json;
use sessiontree::backend::postgres::is_postgres_url;
use sessiontree::{Error, Result};
use std::path::PathBuf;

/// Arguments of `sync`.
#[derive(Debug, Args)]
pub struct SyncArgs {
    /// The team archive: `postgres://user@host/db` (`?host=/socket/dir` for a unix socket).
    #[arg(long)]
    pub to: String,
    /// pi session files or directories of them (recursively); without any,
    /// the sessions of the local archive (`--db`).
    pub sources: Vec<PathBuf>,
    /// Sessions synced at once, each by its own thread and server
    /// connection (default: the machine's cores, at most 4).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=8))]
    pub jobs: Option<u16>,
}

/// [`SyncArgs::jobs`] when not given: one per core, at most this many (the
/// server's per-row work is most of a sync, and a session's batches are one
/// after another, so sessions side by side are what uses a second core).
const DEFAULT_JOBS: usize = 4;

/// Runs `sync`: every session is tried; one that fails is reported and the
/// exit status is 2.
pub fn run(cli: &Cli, args: &SyncArgs) -> Result<Report> {
    if !is_postgres_url(&args.to) {
        return Err(Error::Usage(format!(
            "--to {:?} is not a PostgreSQL URL (postgres://…)",
            args.to
        )));
    }
    let target = super::db::open_postgres(cli, &args.to)?;
    target.writable("sync --to")?;
    let jobs = args.jobs.map_or_else(
        || {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .min(DEFAULT_JOBS)
        },
        usize::from,
    );
    let results: Vec<(String, Result<u64>)> = if args.sources.is_empty() {
        // Oldest first (the list is newest first), as they were written
        // here; the report is in the list's order.
        let mut sessions = super::open_archive_for_reading(cli)?.list(&Default::default())?;
        sessions.reverse();
        let ids: Vec<String> = sessions.iter().map(|s| s.metadata.id.clone()).collect();
        let parents: Vec<&str> = sessions
            .iter()
            .filter_map(|s| s.metadata.parent_session.as_deref())
            .collect();
        // A fork and its parent share entries, and which of them counts a
        // shared entry's usage is whichever is synced first: such sessions
        // go one after another, oldest first (the original before its fork,
        // as the local archive counted them), by one worker. (A parent is
        // named by its id or by a path holding it.)
        let in_family: Vec<bool> = sessions
            .iter()
            .map(|s| {
                s.metadata.parent_session.is_some()
                    || parents.iter().any(|p| p.contains(s.metadata.id.as_str()))
            })
            .collect();
        // Each worker reads through a handle of its own.
        let handles = (0..jobs.min(ids.len()).max(1))
            .map(|_| super::open_archive_for_reading(cli))
            .collect::<Result<Vec<_>>>()?;
        let mut results = in_parallel(&ids, &in_family, handles, |archive, id| {
            let r = archive
                .open_session(id)
                .and_then(|s| sessiontree::sync::sync_sqlite_session(&s, &target));
            (id.clone(), r)
        });
        results.reverse();
        results
    } else {
        let mut files = Vec::new();
        for source in &args.sources {
            sessiontree::layout::collect_jsonl_files(source, &mut files)?;
        }
        // A file's parent is known only once it is read: files go one
        // after another.
        in_parallel(&files, &vec![true; files.len()], vec![()], |_, file| {
            match sessiontree::sync::sync_jsonl_file(file, &target) {
                Ok((id, copied)) => (id, Ok(copied)),
                Err(e) => (file.display().to_string(), Err(e)),
            }
        })
    };
    let mut text = String::new();
    let (mut synced, mut failed) = (Vec::new(), Vec::new());
    for (name, r) in results {
        match r {
            Ok(0) => {
                text.push_str(&format!("{name}: up to date\n"));
                synced.push(json!({"session": name, "copied": 0}));
            }
            Ok(n) => {
                text.push_str(&format!("{name}: {n} entries copied\n"));
                synced.push(json!({"session": name, "copied": n}));
            }
            Err(e) => {
                text.push_str(&format!("failed [{}]: {name}: {e}\n", e.code()));
                failed.push(
                    json!({"session": name, "code": e.code().as_str(), "message": e.to_string()}),
                );
            }
        }
    }
    if synced.is_empty() && failed.is_empty() {
        text.push_str("nothing to sync\n");
    }
    let mut report = Report::new(json!({"synced": synced, "failed": failed}), text);
    if !failed.is_empty() {
        report.status = super::exit::SOME_FAILED;
    }
    Ok(report)
}

/// `work` applied to every item by a thread per state, each with its own
/// state: the items marked `serial` by the first thread, in order, before
/// it joins the others, which take the next unmarked item when they finish
/// one. The results in the items' order, so the report reads as a serial
/// sync's.
fn in_parallel<T: Sync, S: Send, R: Send>(
    items: &[T],
    serial: &[bool],
    states: Vec<S>,
    work: impl Fn(&S, &T) -> R + Sync,
) -> Vec<R> {
    let lane: Vec<usize> = (0..items.len()).filter(|&i| serial[i]).collect();
    let rest: Vec<usize> = (0..items.len()).filter(|&i| !serial[i]).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(Vec::with_capacity(items.len()));
    std::thread::scope(|scope| {
        for (w, state) in states.into_iter().enumerate() {
            let (next, done, work, lane, rest) = (&next, &done, &work, &lane, &rest);
            scope.spawn(move || {
                let mine = if w == 0 { &lane[..] } else { &[][..] };
                let queued = std::iter::from_fn(|| {
                    let at = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    rest.get(at).copied()
                });
                for i in mine.iter().copied().chain(queued) {
                    let item = &items[i];
                    let r = work(&state, item);
                    // A worker that panicked poisons nothing we read after the scope.
                    if let Ok(mut d) = done.lock() {
                        d.push((i, r));
                    }
                }
            });
        }
    });
    let mut done = done.into_inner().unwrap_or_else(|e| e.into_inner());
    done.sort_by_key(|(i, _)| *i);
    done.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    use super::in_parallel;
    use std::sync::Mutex;

    #[test]
    fn every_item_once_in_order_and_the_serial_ones_one_after_another() {
        let items: Vec<usize> = (0..200).collect();
        let serial: Vec<bool> = items.iter().map(|i| i % 7 == 3).collect();
        let seen = Mutex::new(Vec::new());
        let out = in_parallel(&items, &serial, vec![0usize, 1, 2], |worker, &i| {
            seen.lock().expect("seen").push((*worker, i));
            i * 10
        });
        assert_eq!(out, items.iter().map(|i| i * 10).collect::<Vec<_>>());
        let seen = seen.into_inner().expect("seen");
        let mut all: Vec<usize> = seen.iter().map(|&(_, i)| i).collect();
        all.sort_unstable();
        assert_eq!(all, items, "each item once");
        let lane: Vec<(usize, usize)> = seen.iter().copied().filter(|&(_, i)| serial[i]).collect();
        assert!(lane.iter().all(|&(w, _)| w == 0), "{lane:?}");
        assert!(lane.windows(2).all(|p| p[0].1 < p[1].1), "{lane:?}");
    }
}
