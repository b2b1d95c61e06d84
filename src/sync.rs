//! `sync`: pushing sessions — of a local SQLite archive, or pi session files
//! — to a team archive on PostgreSQL. Above the backends, like
//! [`crate::convert`]: it reads with one and writes with the other.
//!
//! A session is copied in batches, each its own transaction that commits
//! only if the team archive's log still has the length this sync read
//! ([`PgArchive::append_if_at`]). A batch starts at [`SYNC_BATCH`] entries
//! and doubles while its transaction takes under [`BATCH_TIME`] (halving
//! past twice that, never below the first), up to [`MAX_BATCH`] entries or [`MAX_BATCH_BYTES`] of
//! entry text: few transactions for a big session, none holding the
//! session's row (and so its other writers) for long, and memory bounded by
//! a batch whatever the archive's size. So a sync is
//! * **idempotent**: a session already there in full copies nothing;
//! * **resumable**: a sync killed part-way left whole batches, and the next
//!   one goes on after the last of them;
//! * **safe when several machines sync at once**: a batch that finds the log
//!   moved on (another sync of the same session committed first) writes
//!   nothing, and this sync re-reads where the log stands and goes on from
//!   there, after checking that what is there is its own prefix.
//!
//! A session whose team copy differs from the source (appended to there, or
//! another session under the same id) is refused (`invalid_session`), never
//! overwritten.

use crate::backend::jsonl::JsonlStorage;
use crate::backend::postgres::PgArchive;
use crate::backend::sqlite::SqliteStorage;
use crate::convert::new_session_from_header;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::listing::NewSession;
use crate::storage::{Durability, SessionStorage};
use std::path::Path;

/// Entries of a sync's first transaction for a session.
pub const SYNC_BATCH: usize = 1000;
/// Entries of a sync's transaction at most.
pub const MAX_BATCH: usize = 64_000;
/// Bytes of entry text a sync's transaction carries at most (one entry
/// more may pass it: an entry is never split).
pub const MAX_BATCH_BYTES: usize = 32 << 20;
/// How long a sync's transaction may take before the next is made smaller.
pub const BATCH_TIME: std::time::Duration = std::time::Duration::from_millis(500);
/// Entries read from the source at a time while a batch is filled.
const READ_CHUNK: usize = 256;

/// Copies what `target` lacks of `source` (session `new.id`), returning the
/// number of entries copied (0 when it was there in full).
pub fn sync_session(
    source: &dyn SessionStorage,
    new: &NewSession,
    target: &PgArchive,
) -> Result<u64> {
    target.ensure_session(new)?;
    let copied = sync_entries(source, new, target)?;
    target.sync_session_extras(&new.id, source.contract()?, &source.kept_lines()?)?;
    Ok(copied)
}

/// The entries of [`sync_session`].
fn sync_entries(source: &dyn SessionStorage, new: &NewSession, target: &PgArchive) -> Result<u64> {
    let total = u64::try_from(source.entry_count()?).unwrap_or(u64::MAX);
    let mut copied = 0;
    let mut batch_len = SYNC_BATCH;
    loop {
        let (have, last) = target.sync_position(&new.id)?;
        if have > total {
            return Err(Error::InvalidSession(format!(
                "the team archive's session {} has {have} entries, more than the {total} here: it was written to there; nothing synced",
                new.id
            )));
        }
        if let Some(last) = last {
            let at = usize::try_from(have - 1).unwrap_or(usize::MAX);
            let ours = source.entries(at, Some(1))?;
            if ours.first().map(|e| e.json()) != Some(last.as_str()) {
                return Err(Error::InvalidSession(format!(
                    "the team archive's session {} differs from this one at entry {have}; nothing synced",
                    new.id
                )));
            }
        }
        if have == total {
            return Ok(copied);
        }
        let at = usize::try_from(have).unwrap_or(usize::MAX);
        let batch = read_batch(source, at, batch_len)?;
        if batch.is_empty() {
            return Ok(copied);
        }
        let started = std::time::Instant::now();
        if target.append_if_at(&new.id, have, &batch)? {
            copied += batch.len() as u64;
        }
        batch_len = next_batch_len(batch_len, batch.len(), started.elapsed());
    }
}

/// Up to `len` entries of `source` from log position `at`, fewer where
/// their text reaches [`MAX_BATCH_BYTES`].
fn read_batch(source: &dyn SessionStorage, at: usize, len: usize) -> Result<Vec<Entry>> {
    let mut batch: Vec<Entry> = Vec::new();
    let mut bytes = 0;
    while batch.len() < len && bytes < MAX_BATCH_BYTES {
        let chunk = source.entries(at + batch.len(), Some(READ_CHUNK.min(len - batch.len())))?;
        let done = chunk.is_empty();
        for e in chunk {
            bytes += e.json().len();
            batch.push(e);
            if bytes >= MAX_BATCH_BYTES {
                break;
            }
        }
        if done {
            break;
        }
    }
    Ok(batch)
}

/// The next batch's length after a batch of `written` entries (asked:
/// `asked`) took `took`: doubled while quick and the batch was full, halved
/// when slow, within [`SYNC_BATCH`] (a loaded server never makes a sync
/// take more transactions than a fixed 1,000 did) and [`MAX_BATCH`].
fn next_batch_len(asked: usize, written: usize, took: std::time::Duration) -> usize {
    if took > 2 * BATCH_TIME {
        (asked / 2).max(SYNC_BATCH)
    } else if took < BATCH_TIME && written >= asked {
        (asked * 2).min(MAX_BATCH)
    } else {
        asked
    }
}

/// [`sync_session`] for a session of a local SQLite archive.
pub fn sync_sqlite_session(source: &SqliteStorage, target: &PgArchive) -> Result<u64> {
    let m = source.metadata()?;
    let new = NewSession {
        id: m.id,
        created_at: m.created_at,
        cwd: m.cwd.unwrap_or_default(),
        parent_session: m.parent_session,
        metadata: m.metadata,
        header: source.header_json()?,
        contract: source.contract()?,
    };
    sync_session(source, &new, target)
}

/// [`sync_session`] for a pi session file; returns its session id too.
pub fn sync_jsonl_file(path: &Path, target: &PgArchive) -> Result<(String, u64)> {
    let source = JsonlStorage::open(path, Durability::Relaxed)?;
    let mut new = new_session_from_header(source.header());
    new.contract = source.contract()?;
    let copied = sync_session(&source, &new, target)?;
    Ok((new.id, copied))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn batches_grow_while_quick_and_shrink_when_slow() {
        let quick = Duration::from_millis(10);
        assert_eq!(next_batch_len(1000, 1000, quick), 2000);
        assert_eq!(
            next_batch_len(1000, 400, quick),
            1000,
            "a short batch says nothing"
        );
        assert_eq!(next_batch_len(MAX_BATCH, MAX_BATCH, quick), MAX_BATCH);
        assert_eq!(next_batch_len(8000, 8000, 3 * BATCH_TIME), 4000);
        assert_eq!(next_batch_len(SYNC_BATCH, 1, 3 * BATCH_TIME), SYNC_BATCH);
        assert_eq!(next_batch_len(4000, 4000, BATCH_TIME + quick), 4000);
    }
}
