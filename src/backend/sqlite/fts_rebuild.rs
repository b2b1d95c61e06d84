//! The search index built again beside itself, in short transactions, when
//! deleted rows crowd it (a `compact` after a large session was deleted).
//!
//! FTS5 drops a deleted row (a tombstone, schema step 0017) only when a
//! merge rewrites its segment, and a merge through tombstones is slow: at
//! 1,000,000 entries after a 1,000,000-entry fork was deleted, merging the
//! index took 14.1 s and one step 137 ms (FTS5 ends a step only between
//! two terms, and a common term's list is one step), against 1.5 s and
//! 24 ms for the same index with no tombstones. No step can be cut short,
//! so a `compact` instead builds the live rows into a new index
//! ([`NEXT`]), a few hundred entries a transaction, and puts it in the
//! old one's place.
//!
//! # Invariants
//! 1. **The new index holds every row the old one does** when it takes its
//!    place: the rebuild indexes the entries that were there when it began
//!    ([`IndexRebuild::high`]), and from then on every writer that indexes a
//!    row in `message_text`, or leaves one behind for a deleted entry
//!    (`fts_dead`), does the same in [`NEXT`] and its record
//!    ([`rebuilding`]); an entry the rebuild reaches that a writer already
//!    indexed there is passed by. The two records of rows left behind trade
//!    places with the indexes.
//! 2. **Nothing reads [`NEXT`] or [`GONE`]**: searches read `message_text`
//!    until one transaction renames the tables. A rebuild a killed
//!    `compact` left behind is renamed [`GONE`] by the next one (writers
//!    stop indexing into it) and removed a few hundred rows a transaction,
//!    as is the index the rebuild replaced.

use super::error::sql;
use super::fts::IndexShape;
use super::fts_dead::dead_table;
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::search::searchable_text;
use rusqlite::{params, Connection};

/// The index being built beside `message_text`.
pub(super) const NEXT: &str = "message_text_next";

/// An index no longer used: the one a rebuild replaced, or a rebuild a
/// killed `compact` left. Removed in batches ([`remove_step`]).
pub(super) const GONE: &str = "message_text_gone";

/// The fewest deleted rows worth a rebuild: below it, merging through them
/// costs little.
const REBUILD_MIN_TOMBSTONES: u64 = 20_000;

/// Whether `shape`'s index is rebuilt rather than merged: at least
/// [`REBUILD_MIN_TOMBSTONES`] deleted rows, a tenth of its rows or more, or
/// as many rows left behind for deleted entries (`dead_rows`, fts_dead):
/// removed one by one, those would become as many tombstones, and FTS5
/// rebuilds a segment's tombstone hash whole in one statement.
pub(super) fn worth_rebuilding(shape: &IndexShape, dead_rows: u64) -> bool {
    dead_rows >= REBUILD_MIN_TOMBSTONES
        || (shape.tombstones >= REBUILD_MIN_TOMBSTONES && shape.tombstones * 10 >= shape.rows)
}

/// Whether a rebuild is under way ([`NEXT`] and its record of rows left
/// behind exist): a writer that indexes rows in `message_text`, or leaves
/// them behind, does the same there. (A [`NEXT`] without the record is one
/// a build before schema step 20 left, killed: never put in place, it is
/// removed by the next compact.)
pub(super) fn rebuilding(conn: &Connection) -> Result<bool> {
    Ok(table_exists(conn, NEXT)? && table_exists(conn, &dead_table(NEXT))?)
}

fn table_exists(conn: &Connection, name: &str) -> Result<bool> {
    conn.prepare_cached("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = ?1")
        .and_then(|mut st| st.exists([name]))
        .map_err(sql("reading the archive's schema"))
}

/// The highest segment id in a run of segments whose search rows a delete
/// left behind (`fts_dead`), in `message_text`'s record or, during a
/// rebuild, [`NEXT`]'s: a new segment's id must be above it.
pub(super) fn highest_dead_segment(conn: &Connection) -> Result<Option<i64>> {
    let mut highest = super::fts_dead::highest_dead_segment(conn, super::fts_dead::INDEX)?;
    if rebuilding(conn)? {
        highest = highest.max(super::fts_dead::highest_dead_segment(conn, NEXT)?);
    }
    Ok(highest)
}

/// Shadow-table rows of [`GONE`] removed per step.
const REMOVE_ROWS: i64 = 512;

/// One step of removing [`GONE`] (and first renaming a [`NEXT`] a killed
/// rebuild left to it): a few hundred rows of one of its tables, or once
/// they are empty the table itself. True when neither is left.
pub(super) fn remove_step(conn: &Connection) -> Result<bool> {
    let context = "removing an unused search index";
    if !table_exists(conn, GONE)? {
        if !table_exists(conn, NEXT)? {
            return Ok(true);
        }
        conn.execute_batch(&format!("ALTER TABLE {NEXT} RENAME TO {GONE}"))
            .map_err(sql(context))?;
        if table_exists(conn, &dead_table(NEXT))? {
            conn.execute_batch(&format!(
                "ALTER TABLE {} RENAME TO {}",
                dead_table(NEXT),
                dead_table(GONE)
            ))
            .map_err(sql(context))?;
        }
        return Ok(false);
    }
    // FTS5's own tables, emptied a few rows at a time (its `_config` stays
    // whole: dropping the table reads it). Dropped whole, a table of
    // 100 MB frees its pages in one transaction.
    let steps = [
        format!(
            "DELETE FROM {GONE}_data WHERE id IN (SELECT id FROM {GONE}_data LIMIT {REMOVE_ROWS})"
        ),
        format!(
            "DELETE FROM {GONE}_idx WHERE (segid, term) IN
               (SELECT segid, term FROM {GONE}_idx LIMIT {REMOVE_ROWS})"
        ),
        format!(
            "DELETE FROM {GONE}_docsize WHERE id IN
               (SELECT id FROM {GONE}_docsize LIMIT {})",
            REMOVE_ROWS * 8
        ),
    ];
    for step in &steps {
        if conn.execute(step, []).map_err(sql(context))? > 0 {
            return Ok(false);
        }
    }
    let dead = dead_table(GONE);
    if table_exists(conn, &dead)? {
        let removed = conn
            .execute(
                &format!(
                    "DELETE FROM {dead} WHERE first_segment IN
                       (SELECT first_segment FROM {dead} LIMIT {})",
                    REMOVE_ROWS * 8
                ),
                [],
            )
            .map_err(sql(context))?;
        if removed > 0 {
            return Ok(false);
        }
        conn.execute_batch(&format!("DROP TABLE {dead}"))
            .map_err(sql(context))?;
    }
    conn.execute_batch(&format!("DROP TABLE {GONE}"))
        .map_err(sql(context))?;
    Ok(false)
}

/// Creates `name` as `table` is defined: `create`, then `name`, then what
/// follows `from` in `table`'s definition (a renamed table's definition
/// names it quoted: what follows the name is the same either way).
fn create_like(conn: &Connection, table: &str, create: &str, name: &str, from: &str) -> Result<()> {
    let context = "starting to rebuild the search index";
    let definition: String = conn
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [table],
            |r| r.get(0),
        )
        .map_err(sql(context))?;
    let at = definition.find(from).ok_or_else(|| {
        Error::Corrupt(format!(
            "the definition of {table} has no `{}`: {definition}",
            from.trim()
        ))
    })?;
    conn.execute_batch(&format!("{create} {name}{}", &definition[at..]))
        .map_err(sql(context))
}

/// Entries read per step of [`IndexRebuild::fill_step`], and the most text
/// (bytes) one reads: about 10 ms.
const FILL_ENTRIES: i64 = 256;
const FILL_BYTES: usize = 1 << 20;

/// A rebuild of the search index into [`NEXT`] under way.
pub(super) struct IndexRebuild {
    /// Entries up to this key are indexed in [`NEXT`] (or were not there).
    done_to: i64,
    /// The highest entry key when the rebuild began: writers index every
    /// later entry into [`NEXT`] themselves.
    high: i64,
}

impl IndexRebuild {
    /// Creates [`NEXT`] as `message_text` is (its definition and settings)
    /// in `conn`'s write transaction. [`GONE`] must be gone and no other
    /// rebuild under way ([`remove_step`] first).
    pub(super) fn start(conn: &Connection) -> Result<IndexRebuild> {
        let context = "starting to rebuild the search index";
        create_like(
            conn,
            "message_text",
            "CREATE VIRTUAL TABLE",
            NEXT,
            " USING ",
        )?;
        // Its settings but FTS5's own version (and the merge threshold a
        // compact's merge sets while it runs).
        let settings: Vec<(String, rusqlite::types::Value)> = conn
            .prepare(
                "SELECT k, v FROM message_text_config
                 WHERE k IN ('automerge', 'crisismerge', 'deletemerge', 'pgsz', 'hashsize')",
            )
            .and_then(|mut st| {
                st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                    .and_then(Iterator::collect)
            })
            .map_err(sql(context))?;
        for (key, value) in settings {
            conn.execute(
                &format!("INSERT INTO {NEXT} ({NEXT}, rank) VALUES (?1, ?2)"),
                params![key, value],
            )
            .map_err(sql(context))?;
        }
        // Its record of rows left behind (fts_dead).
        create_like(
            conn,
            "dead_message_text",
            "CREATE TABLE",
            &dead_table(NEXT),
            " (",
        )?;
        let high: Option<i64> = conn
            .query_row("SELECT max(entry_key) FROM entries", [], |r| r.get(0))
            .map_err(sql(context))?;
        Ok(IndexRebuild {
            done_to: i64::MIN,
            high: high.unwrap_or(i64::MIN),
        })
    }

    /// Indexes the next entries (up to [`FILL_ENTRIES`], [`FILL_BYTES`] of
    /// text) into [`NEXT`], then merges its segments for at most
    /// `merge_time` as writers do; true once every entry up to
    /// [`IndexRebuild::high`] is there.
    pub(super) fn fill_step(
        &mut self,
        conn: &Connection,
        codec: &super::codec::Codec,
        merge_time: std::time::Duration,
    ) -> Result<bool> {
        let context = "rebuilding the search index";
        let mut read = conn
            .prepare_cached(
                "SELECT entry_key, json FROM entries
                 WHERE entry_key > ?1 AND entry_key <= ?2 ORDER BY entry_key LIMIT ?3",
            )
            .map_err(sql(context))?;
        let mut there = conn
            .prepare_cached(&format!("SELECT 1 FROM {NEXT}_docsize WHERE id = ?1"))
            .map_err(sql(context))?;
        let mut insert = conn
            .prepare_cached(&format!("INSERT INTO {NEXT} (rowid, text) VALUES (?1, ?2)"))
            .map_err(sql(context))?;
        let mut rows = read
            .query(params![self.done_to, self.high, FILL_ENTRIES])
            .map_err(sql(context))?;
        let (mut seen, mut bytes) = (0, 0);
        while let Some(row) = rows.next().map_err(sql(context))? {
            let key: i64 = row.get(0).map_err(sql(context))?;
            let text = codec.decode(conn, row.get_ref(1).map_err(sql(context))?)?;
            bytes += text.len();
            seen += 1;
            if let Some((_, text)) = searchable_text(&Entry::from_checked_text(text)) {
                if !there.exists([key]).map_err(sql(context))? {
                    insert.execute(params![key, text]).map_err(sql(context))?;
                }
            }
            self.done_to = key;
            if bytes >= FILL_BYTES {
                break;
            }
        }
        drop(rows);
        super::fts::merge_steps(conn, NEXT, merge_time)?;
        Ok(seen == 0)
    }

    /// Puts [`NEXT`] in `message_text`'s place, and the old index aside as
    /// [`GONE`] (removed by [`remove_step`]), each with the record of the
    /// rows it holds for deleted entries (fts_dead).
    pub(super) fn swap(self, conn: &Connection) -> Result<()> {
        conn.execute_batch(&format!(
            "ALTER TABLE message_text RENAME TO {GONE};
             ALTER TABLE {NEXT} RENAME TO message_text;
             ALTER TABLE dead_message_text RENAME TO {gone_dead};
             ALTER TABLE {next_dead} RENAME TO dead_message_text;",
            gone_dead = dead_table(GONE),
            next_dead = dead_table(NEXT),
        ))
        .map_err(sql("putting the rebuilt search index in place"))
    }
}

/// How many rows [`NEXT`] holds, if a rebuild is under way.
#[cfg(test)]
pub(super) fn next_rows(conn: &Connection) -> Result<Option<i64>> {
    if !table_exists(conn, NEXT)? {
        return Ok(None);
    }
    conn.query_row(&format!("SELECT count(*) FROM {NEXT}_docsize"), [], |r| {
        r.get(0)
    })
    .map(Some)
    .map_err(sql("counting the rebuilt index's rows"))
}
