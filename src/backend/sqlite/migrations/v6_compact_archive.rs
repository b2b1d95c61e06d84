//! Schema version 6 (`schema/0006_compact_archive.sql`): the archive's
//! first dictionary, and every entry encoded.

use crate::backend::sqlite::codec::{Codec, Encoder, Training};
use crate::backend::sqlite::compact::{
    entry_total, reencode_batch, train_from_archive, EncodePool, Packing, Pass, BATCH_ROWS,
};
use crate::error::Result;
use rusqlite::Transaction;

/// Schema version 6: trains the archive's first dictionary from its
/// entries and encodes every entry, in the migration's transaction.
pub(super) fn migrate_to_v6(tx: &Transaction, progress: &mut dyn FnMut(u64, u64)) -> Result<()> {
    let codec = Codec::default();
    let encoder = Encoder::new(train_from_archive(tx, &codec, Training::Search)?);
    let total = entry_total(tx)?;
    let mut pass = Pass::default();
    let mut after = i64::MIN;
    progress(0, total);
    EncodePool::run(&encoder, |pool| {
        while let Some(last) = reencode_batch(
            tx,
            &codec,
            pool,
            (after, BATCH_ROWS),
            Packing::Alone,
            &mut pass,
        )? {
            after = last;
            progress(pass.entries, total);
        }
        Ok(())
    })
}
