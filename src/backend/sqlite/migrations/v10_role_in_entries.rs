//! Schema version 10 (`schema/0010_role_in_entries.sql`): the search
//! index rebuilt without its role and session columns.

use crate::backend::sqlite::fts::{reindex, IndexColumns};
use crate::error::Result;
use rusqlite::Transaction;

/// Schema version 10: indexes every entry's searchable text again (the index
/// without its role and session columns replaces version 8's), in the
/// migration's transaction.
pub(super) fn reindex_text_only(
    tx: &Transaction,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<()> {
    reindex(tx, IndexColumns::TextOnly, progress)
}
