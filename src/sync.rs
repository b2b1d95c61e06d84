//! `sync`: pushing sessions — of a local SQLite archive, or pi session files
//! — to a team archive on PostgreSQL. Above the backends, like
//! [`crate::convert`]: it reads with one and writes with the other.
//!
//! A session is copied in batches of [`SYNC_BATCH`] entries, each its own
//! transaction that commits only if the team archive's log still has the
//! length this sync read ([`PgArchive::append_if_at`]). So a sync is
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
use crate::error::{Error, Result};
use crate::listing::NewSession;
use crate::storage::{Durability, SessionStorage};
use std::path::Path;

/// Entries per transaction of a sync.
pub const SYNC_BATCH: usize = 1000;

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
        let batch = source.entries(at, Some(SYNC_BATCH))?;
        if batch.is_empty() {
            return Ok(copied);
        }
        if target.append_if_at(&new.id, have, &batch)? {
            copied += batch.len() as u64;
        }
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
