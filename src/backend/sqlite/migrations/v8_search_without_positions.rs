//! Schema version 8 (`schema/0008_search_without_positions.sql`): the
//! search index rebuilt without token positions.

use crate::backend::sqlite::fts::{reindex, IndexColumns};
use crate::error::Result;
use rusqlite::Transaction;

/// Schema version 8: indexes every entry's searchable text again (the
/// position-less index replaces the positional one), in the migration's
/// transaction; that version's index keeps each text's role and session.
pub(super) fn reindex_all_entries(
    tx: &Transaction,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<()> {
    reindex(tx, IndexColumns::WithRoleAndSession, progress)
}
