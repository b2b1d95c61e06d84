//! How the archive's search index (`message_text`) answers a query.
//!
//! # Invariants
//! 1. **No positions.** The index (schema version 8, `detail = none`) records
//!    which entries hold each token, not where: 0.30–0.45× the size of a
//!    positional index. A query is cut into single tokens by FTS5's own
//!    tokenizer ([`IndexQuery`]); entries holding all of them are the
//!    candidates.
//! 2. **Same answers as with positions.** Where token order matters (a
//!    `"phrase"`, a word FTS5 splits, `foo-bar`) each candidate is confirmed
//!    by running the query as written on its text in a scratch positional
//!    index with the same [`TOKENIZER`] as the archive's.
//! 3. **bm25 without counts.** FTS5's `bm25()` answers 0 without positions;
//!    [`Ranking`] computes it from FTS5's own totals and token counts with
//!    each query token counted once per text.
//! 4. **Token lists only.** Since schema version 10 the index has one
//!    column, the text: a row's role is its entry's `role_id` (set from the
//!    same [`searchable_text`] the row is indexed from; for rows migrated to
//!    version 10, the role the old index kept; never changed), its session
//!    its entry's.

use super::error::sql;
use crate::entry::Entry;
use crate::error::Result;
use crate::search::{fts_query, query_parts, searchable_text, QueryPart};
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use std::cell::RefCell;

/// The tokenizer of the search index (schema/0008), and of the scratch index
/// that tokenizes queries and confirms candidates: they must agree.
pub const TOKENIZER: &str = "unicode61 remove_diacritics 2";

/// A search query as the position-less index can run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexQuery {
    /// Every token of the query, each quoted (a prefix token followed by
    /// `*`); a candidate holds them all.
    pub tokens: Vec<String>,
    /// The FTS5 query that finds the candidates: `tokens`, all required.
    /// Empty when the query has no token (it matches nothing).
    pub terms: String,
    /// The query as written ([`fts_query`]), to confirm each candidate with,
    /// when token order matters; `None` when every candidate is a hit.
    pub confirm: Option<String>,
}

impl IndexQuery {
    /// Cuts `query` into tokens as the index's tokenizer does.
    pub fn new(query: &str) -> Result<IndexQuery> {
        let quote = |w: &str| format!("\"{}\"", w.replace('"', "\"\""));
        let mut terms = Vec::new();
        let mut ordered = false;
        with_scratch(|scratch| {
            for part in query_parts(query) {
                let (text, prefix) = match part {
                    QueryPart::Word { text, prefix } => (text, prefix),
                    QueryPart::Phrase(text) => (text, false),
                };
                let tokens = scratch.tokens(&text)?;
                ordered |= tokens.len() > 1;
                let last = tokens.len().saturating_sub(1);
                for (i, token) in tokens.iter().enumerate() {
                    let mut star = prefix && i == last;
                    // FTS5 cut a token of more than 32 KB inside a character:
                    // the candidates are those starting with its whole
                    // characters, and the query as written confirms them.
                    let token = match std::str::from_utf8(token) {
                        Ok(token) => token,
                        Err(e) => {
                            star = true;
                            ordered = true;
                            std::str::from_utf8(&token[..e.valid_up_to()]).unwrap_or_default()
                        }
                    };
                    let star = if star { "*" } else { "" };
                    terms.push(format!("{}{star}", quote(token)));
                }
            }
            Ok(())
        })?;
        Ok(IndexQuery {
            terms: terms.join(" "),
            tokens: terms,
            confirm: ordered.then(|| fts_query(query)),
        })
    }

    /// Whether a candidate whose searchable text is `text` is a hit.
    pub fn confirms(&self, text: &str) -> Result<bool> {
        match &self.confirm {
            None => Ok(true),
            Some(query) => with_scratch(|scratch| scratch.matches(text, query)),
        }
    }
}

/// BM25's constants, as FTS5's `bm25()` has them.
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// BM25 as FTS5's `bm25()` computes it (lower is better), for an index that
/// keeps no counts: each query token is taken to occur once in each
/// candidate. Every candidate holds every token, so the order is shortest
/// text first; the value stays comparable with FTS5's.
pub struct Ranking {
    /// The sum of the tokens' inverse document frequencies.
    idf_sum: f64,
    /// Tokens per indexed text, on average.
    average_length: f64,
}

/// The rows a delete left in the index for deleted entries (`fts_dead`):
/// search passes over them and ranks as if they were gone.
#[derive(Debug, Default)]
pub(super) struct LeftBehind {
    /// How many rows.
    pub rows: u64,
    /// Their indexed tokens.
    pub tokens: u64,
    /// The entry keys they lie among, as sorted ranges that do not overlap
    /// (a range may also hold rows of a delete under way, whose entries
    /// are still there).
    pub key_ranges: Vec<(i64, i64)>,
}

impl LeftBehind {
    /// Whether the row of entry key `key` lies in one of the ranges.
    pub fn holds(&self, key: i64) -> bool {
        let after = self.key_ranges.partition_point(|&(from, _)| from <= key);
        after > 0 && self.key_ranges[after - 1].1 >= key
    }
}

impl Ranking {
    /// Reads the index's totals and how many texts hold each token, leaving
    /// out the rows a delete left in the index for deleted entries.
    pub(super) fn new(
        conn: &Connection,
        query: &IndexQuery,
        left_behind: &LeftBehind,
    ) -> Result<Ranking> {
        let context = "ranking search hits";
        let totals: Option<Vec<u8>> = conn
            .prepare_cached("SELECT block FROM message_text_data WHERE id = 1")
            .and_then(|mut st| st.query_row([], |r| r.get(0)))
            .optional()
            .map_err(sql(context))?;
        // FTS5's averages record: rows, then tokens per column.
        let (rows, tokens) = totals
            .and_then(|block| {
                let mut at = 0;
                Some((fts5_varint(&block, &mut at)?, fts5_varint(&block, &mut at)?))
            })
            .unwrap_or((0, 0));
        let (rows, tokens) = (
            rows.saturating_sub(left_behind.rows),
            tokens.saturating_sub(left_behind.tokens),
        );
        let rows = rows.max(1) as f64;
        let mut idf_sum = 0.0;
        let mut count = conn
            .prepare_cached("SELECT count(*) FROM message_text WHERE message_text MATCH ?1")
            .map_err(sql(context))?;
        for token in &query.tokens {
            let mut holding: i64 = count
                .query_row([token], |r| r.get(0))
                .map_err(sql(context))?;
            // Each range's rows left behind, counted with FTS5's rowid bounds.
            for (from, to) in &left_behind.key_ranges {
                holding -= conn
                    .prepare_cached(
                        "SELECT count(*) FROM message_text WHERE message_text MATCH ?1
                           AND rowid BETWEEN ?2 AND ?3
                           AND NOT EXISTS
                               (SELECT 1 FROM entries WHERE entry_key = message_text.rowid)",
                    )
                    .and_then(|mut st| {
                        st.query_row(rusqlite::params![token, from, to], |r| r.get::<_, i64>(0))
                    })
                    .map_err(sql(context))?;
            }
            let holding = holding as f64;
            let idf = ((rows - holding + 0.5) / (holding + 0.5)).ln();
            idf_sum += if idf <= 0.0 { 1e-6 } else { idf };
        }
        Ok(Ranking {
            idf_sum,
            average_length: (tokens as f64 / rows).max(1.0),
        })
    }

    /// The rank of a candidate of `length` tokens.
    pub fn score(&self, length: u64) -> f64 {
        let norm = 1.0 - B + B * length as f64 / self.average_length;
        -self.idf_sum * (K1 + 1.0) / (1.0 + K1 * norm)
    }
}

/// A text's token count from its `message_text_docsize.sz` value.
pub(super) fn indexed_length(sz: &[u8]) -> u64 {
    fts5_varint(sz, &mut 0).unwrap_or(0)
}

/// SQLite's varint (big-endian groups of 7 bits, a 9th byte of 8), as FTS5
/// writes its totals and sizes.
fn fts5_varint(bytes: &[u8], at: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..8 {
        let b = *bytes.get(*at + i)?;
        v = (v << 7) | u64::from(b & 0x7f);
        if b < 0x80 {
            *at += i + 1;
            return Some(v);
        }
    }
    let b = *bytes.get(*at + 8)?;
    *at += 9;
    Some((v << 8) | u64::from(b))
}

/// An in-memory positional FTS5 index of one row at a time, with the
/// archive index's tokenizer: FTS5's own answer to "which tokens does this
/// text hold, in order" and "does this text match this query".
struct Scratch(Connection);

impl Scratch {
    fn open() -> rusqlite::Result<Scratch> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE scratch USING fts5 (text, tokenize = '{TOKENIZER}');
             CREATE VIRTUAL TABLE scratch_tokens USING fts5vocab (scratch, instance);"
        ))?;
        Ok(Scratch(conn))
    }

    fn holding<T>(
        &self,
        text: &str,
        read: impl FnOnce(&Connection) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.0
            .prepare_cached("INSERT INTO scratch (rowid, text) VALUES (1, ?1)")?
            .execute([text])?;
        let found = read(&self.0);
        self.0.prepare_cached("DELETE FROM scratch")?.execute([])?;
        found
    }

    /// The tokens of `text` as the index keeps them: bytes, since FTS5
    /// cuts a token of more than 32 KB even inside a character.
    fn tokens(&self, text: &str) -> rusqlite::Result<Vec<Vec<u8>>> {
        self.holding(text, |conn| {
            conn.prepare_cached("SELECT term FROM scratch_tokens ORDER BY offset")?
                .query_map([], |r| Ok(r.get_ref(0)?.as_bytes()?.to_vec()))?
                .collect()
        })
    }

    fn matches(&self, text: &str, query: &str) -> rusqlite::Result<bool> {
        self.holding(text, |conn| {
            conn.prepare_cached("SELECT count(*) FROM scratch WHERE scratch MATCH ?1")?
                .query_row([query], |r| r.get::<_, i64>(0))
                .map(|n| n > 0)
        })
    }
}

thread_local! {
    /// One scratch index per thread, opened on first use.
    static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
}

fn with_scratch<T>(f: impl FnOnce(&Scratch) -> rusqlite::Result<T>) -> Result<T> {
    SCRATCH
        .with(|cell| {
            let mut cell = cell.borrow_mut();
            if cell.is_none() {
                *cell = Some(Scratch::open()?);
            }
            f(cell.as_ref().expect("opened above"))
        })
        .map_err(sql("tokenizing a search query"))
}

/// FTS5's most segments in one index (`FTS5_MAX_SEGMENT`): a write that
/// needs one more fails with SQLITE_FULL, "database or disk is full",
/// whatever the disk holds.
pub(super) const MAX_SEGMENTS: u64 = 2000;

/// How the search index is laid out, from FTS5's structure record: its
/// segments (b-trees), on how many levels, and whether a merge of one
/// level into the next is under way.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct IndexShape {
    /// Levels, empty ones included.
    pub levels: u64,
    /// Segments on all levels.
    pub segments: u64,
    /// The levels whose segments are the input of an unfinished merge
    /// (into the level above), lowest first.
    pub merging: Vec<u64>,
    /// Each segment's id, lowest level first: a merge replaces its inputs'
    /// ids with its output's.
    pub segment_ids: Vec<u64>,
    /// Each level's segments, lowest first.
    pub per_level: Vec<u64>,
    /// Rows deleted from the segments and not yet merged out of them (the
    /// tombstones a contentless-delete index keeps; version 2 records only).
    pub tombstones: u64,
    /// Rows in the segments, deleted ones included (version 2 records only).
    pub rows: u64,
}

/// Reads the index's structure record (`message_text_data` row 10):
/// a cookie, an optional version-2 mark, then levels, segments, the write
/// counter and each level's merge count, segment count and segments.
pub(super) fn index_shape(conn: &Connection) -> Result<IndexShape> {
    let record: Option<Vec<u8>> = conn
        .prepare_cached("SELECT block FROM message_text_data WHERE id = 10")
        .and_then(|mut st| st.query_row([], |r| r.get(0)))
        .optional()
        .map_err(sql("reading the search index's structure"))?;
    let Some(record) = record else {
        return Ok(IndexShape::default());
    };
    let damaged = || {
        crate::error::Error::Corrupt(
            "the search index's structure record is malformed: run `sessiontree check`".into(),
        )
    };
    let version2 = record.get(4..8) == Some(&[0xff, 0, 0, 1][..]);
    let mut at = if version2 { 8 } else { 4 };
    let mut next = || fts5_varint(&record, &mut at).ok_or_else(damaged);
    let levels = next()?;
    let segments = next()?;
    next()?; // the write counter
    let (mut merging, mut segment_ids, mut tombstones, mut rows) = (Vec::new(), Vec::new(), 0, 0);
    let mut per_level = Vec::new();
    for level in 0..levels {
        if next()? > 0 {
            merging.push(level);
        }
        let in_level = next()?;
        per_level.push(in_level);
        for _ in 0..in_level {
            // Id, first and last page; version 2 adds two origins, tombstone
            // pages, tombstones and entries.
            let segment = next()?;
            segment_ids.push(segment);
            next()?;
            next()?;
            if version2 {
                next()?;
                next()?;
                next()?;
                tombstones += next()?;
                rows += next()?;
            }
        }
    }
    Ok(IndexShape {
        levels,
        segments,
        merging,
        segment_ids,
        per_level,
        tombstones,
        rows,
    })
}

/// The least segments on one level that the writers' merge steps merge
/// (`usermerge`; FTS5's default, and its automerge threshold before schema
/// step 0019). A compact's merge sets it to 2 while it runs.
const WRITERS_USERMERGE: i64 = 4;

/// `usermerge` while a compact merges the whole index ([`IndexMerge`]):
/// FTS5's least, so that a step never stops short while the merge is under
/// way; writers do no merge work meanwhile ([`merge_due`]).
const COMPACT_USERMERGE: i64 = 2;

/// Leaf pages of the search index one step of a writer's merge work
/// writes ([`merge_due`]): a few milliseconds, so that the time a
/// transaction gives its merge work overshoots by little.
const WRITER_MERGE_PAGES: i64 = 16;

/// How long a write transaction spends, at its start, on the search
/// index's merge work (at most one step more). FTS5's automerge is off
/// (schema step 0019): a transaction that crossed a 64-page mark merged
/// 64 pages per level of the index in its commit (45-60 ms at a few
/// hundred MB, unforeseeable by a batch clock). Each writer now merges
/// in steps it times, while some level holds enough segments to merge
/// (`usermerge`: 4, FTS5's automerge threshold, as it was): the work
/// comes with the writes that cause it. A fifth of a batch
/// ([`BATCH_TIME`](crate::backend::pending::BATCH_TIME)) keeps up: a
/// 200,000-entry import and a 3,000-file home import end with 8 and 13
/// segments on 4 and 5 levels (automerge left 8 and 10), in the same CPU
/// time (`writers_keep_the_search_index_merged` counts the segments).
pub(super) const WRITER_MERGE_TIME: std::time::Duration = std::time::Duration::from_millis(10);

/// Does the search index's due merge work inside the write transaction on
/// `conn`, in steps of [`WRITER_MERGE_PAGES`], until none is due or
/// `budget` has passed. None while a compact merges the whole index
/// ([`IndexMerge`], which sets `usermerge` to 2 until it is done): a
/// writer's step would carry on that merge, and FTS5 bounds a step by the
/// pages it writes, not by the deleted rows it reads and drops (a single
/// 16-page step of an append took 149 ms on a CPU during the compact of a
/// 1,000,000-entry archive after a deleted fork). A compact killed during
/// its merge leaves it set: writers then leave the index to FTS5's crisis
/// merge (16 segments on a level) until the next compact finishes it.
pub(super) fn merge_due(conn: &Connection, budget: std::time::Duration) -> Result<()> {
    let context = "merging the search index";
    let usermerge: Option<i64> = conn
        .prepare_cached("SELECT v FROM message_text_config WHERE k = 'usermerge'")
        .and_then(|mut st| st.query_row([], |r| r.get(0)).optional())
        .map_err(sql(context))?;
    if usermerge == Some(COMPACT_USERMERGE) {
        return Ok(());
    }
    merge_steps(conn, "message_text", budget)
}

/// Merges FTS5 table `table`'s segments where a level holds enough of
/// them, in steps of [`WRITER_MERGE_PAGES`], until none is due or `budget`
/// has passed (at most one step more).
pub(super) fn merge_steps(
    conn: &Connection,
    table: &str,
    budget: std::time::Duration,
) -> Result<()> {
    let context = "merging the search index";
    let started = std::time::Instant::now();
    let mut step = conn
        .prepare_cached(&format!(
            "INSERT INTO {table} ({table}, rank) VALUES ('merge', ?1)"
        ))
        .map_err(sql(context))?;
    loop {
        let before = conn.total_changes();
        step.execute([WRITER_MERGE_PAGES]).map_err(sql(context))?;
        // FTS5: fewer than two rows changed means nothing was due.
        if conn.total_changes() - before < 2 || started.elapsed() >= budget {
            return Ok(());
        }
    }
}

/// Merges the search index's segments into one b-tree a few pages a step,
/// as FTS5's `optimize` does in one go, while other writers append (and
/// so add segments) between the steps.
///
/// Only the first step asks for a merge of everything (`'merge'` with a
/// negative page count). That request moves every segment onto one new
/// level and starts merging it *unless* all but one segment are already
/// the inputs of a merge; one segment appended between two steps breaks
/// that, so repeating it restarted the merge from its first term after
/// every append, one level and one segment more each time, until FTS5's
/// [`MAX_SEGMENTS`] made the merge fail with "database or disk is full"
/// (issue 40.1: `compact` of a 1M-entry archive while another session was
/// appended to). The later steps continue that merge (a positive page
/// count) until its level is merged; what was appended meanwhile stays in
/// small segments of the lower levels, for the writers' merge steps
/// ([`merge_due`], which also continue this merge while it runs).
pub(super) struct IndexMerge {
    /// The level the merge of everything reads, once asked for.
    level: Option<u64>,
}

impl IndexMerge {
    /// A merge not yet started.
    pub(super) fn new() -> IndexMerge {
        IndexMerge { level: None }
    }

    /// Merges about `pages` leaf pages; true once the segments there were
    /// at the first step are one.
    pub(super) fn step(&mut self, conn: &Connection, pages: i64) -> Result<bool> {
        let context = "merging the search index";
        if self.level.is_none() {
            // A positive 'merge' works on the level under way only when no
            // lower level holds more segments than it merges; else on the
            // level with the most segments, if at least 'usermerge': at 2
            // (its least) a step never stops short with the merge under way
            // (at the default 4, a level of 3 appended segments beneath a
            // merge of 2 stopped it). Only a positive 'merge' reads it.
            let usermerge: Option<i64> = conn
                .query_row(
                    "SELECT v FROM message_text_config WHERE k = 'usermerge'",
                    [],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql(context))?;
            if usermerge != Some(COMPACT_USERMERGE) {
                conn.execute(
                    "INSERT INTO message_text (message_text, rank) VALUES ('usermerge', ?1)",
                    [COMPACT_USERMERGE],
                )
                .map_err(sql(context))?;
            }
        }
        let before = conn.total_changes();
        let pages = if self.level.is_some() { pages } else { -pages };
        conn.prepare_cached("INSERT INTO message_text (message_text, rank) VALUES ('merge', ?1)")
            .and_then(|mut st| st.execute([pages]))
            .map_err(sql(context))?;
        // FTS5: fewer than two rows changed means nothing was left to merge.
        let done = conn.total_changes() - before < 2 || {
            let merging = index_shape(conn)?.merging;
            // The merge of everything reads the highest level that merges.
            let level = *self
                .level
                .get_or_insert(merging.last().copied().unwrap_or(u64::MAX));
            !merging.contains(&level)
        };
        if done {
            // The writers' merge steps ([`merge_due`]) merge a level from
            // FTS5's automerge threshold, as before schema step 0019: at 2
            // every byte would be written again twice as often.
            conn.execute(
                "INSERT INTO message_text (message_text, rank) VALUES ('usermerge', ?1)",
                [WRITERS_USERMERGE],
            )
            .map_err(sql(context))?;
        }
        Ok(done)
    }
}

/// The columns of the index a migration fills.
#[derive(Clone, Copy)]
pub(in crate::backend::sqlite) enum IndexColumns {
    /// Versions 8 and 9: `text, role UNINDEXED, session_key UNINDEXED`.
    WithRoleAndSession,
    /// Version 10 on: `text`.
    TextOnly,
}

pub(in crate::backend::sqlite) fn reindex(
    tx: &Transaction,
    columns: IndexColumns,
    progress: &mut dyn FnMut(u64, u64),
) -> Result<()> {
    let codec = super::codec::Codec::default();
    let context = "indexing message text for search";
    let total: i64 = tx
        .query_row("SELECT count(*) FROM entries", [], |r| r.get(0))
        .map_err(sql(context))?;
    let total = u64::try_from(total).unwrap_or(0);
    progress(0, total);
    let mut insert = tx
        .prepare(match columns {
            IndexColumns::WithRoleAndSession => {
                "INSERT INTO message_text (rowid, text, role, session_key) VALUES (?1, ?2, ?3, ?4)"
            }
            IndexColumns::TextOnly => "INSERT INTO message_text (rowid, text) VALUES (?1, ?2)",
        })
        .map_err(sql(context))?;
    let mut st = tx
        .prepare("SELECT entry_key, session_key, json FROM entries ORDER BY entry_key")
        .map_err(sql(context))?;
    let mut rows = st.query([]).map_err(sql(context))?;
    let mut done = 0u64;
    while let Some(row) = rows.next().map_err(sql(context))? {
        let key: i64 = row.get(0).map_err(sql(context))?;
        let session: i64 = row.get(1).map_err(sql(context))?;
        let text = codec.decode(tx, row.get_ref(2).map_err(sql(context))?)?;
        if let Some((role, text)) = searchable_text(&Entry::from_checked_text(text)) {
            match columns {
                IndexColumns::WithRoleAndSession => {
                    insert.execute(params![key, text, role, session])
                }
                IndexColumns::TextOnly => insert.execute(params![key, text]),
            }
            .map_err(sql(context))?;
        }
        done += 1;
        if done.is_multiple_of(4096) {
            progress(done, total);
        }
    }
    progress(done, total);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ranking gives FTS5's own bm25() wherever FTS5 could compute it
    /// without counts (each query token once per text), best first.
    #[test]
    fn ranking_is_fts5_bm25_for_texts_that_hold_each_token_once() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE message_text USING fts5 (text, content = '', detail = none, tokenize = '{TOKENIZER}');
             CREATE VIRTUAL TABLE positional USING fts5 (text, tokenize = '{TOKENIZER}');"
        ))
        .unwrap();
        let texts = [
            "alpha beta",
            "alpha gamma delta epsilon",
            "beta gamma",
            "alpha beta gamma delta epsilon zeta eta theta",
            "iota kappa",
            "Alpha, one two three four five six seven eight nine ten",
        ];
        for (i, t) in texts.iter().enumerate() {
            for table in ["message_text", "positional"] {
                conn.execute(
                    &format!("INSERT INTO {table} (rowid, text) VALUES (?1, ?2)"),
                    params![i as i64 + 1, t],
                )
                .unwrap();
            }
        }
        for query in ["alpha", "alpha beta", "gamma", "alp*"] {
            let expected: Vec<(i64, f64)> = conn
                .prepare("SELECT rowid, bm25(positional) FROM positional WHERE positional MATCH ?1 ORDER BY 2, 1")
                .unwrap()
                .query_map([query], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            let plan = IndexQuery::new(query).unwrap();
            let ranking = Ranking::new(&conn, &plan, &LeftBehind::default()).unwrap();
            let mut ours: Vec<(u64, i64)> = conn
                .prepare("SELECT m.rowid, d.sz FROM message_text m JOIN message_text_docsize d ON d.id = m.rowid WHERE message_text MATCH ?1")
                .unwrap()
                .query_map([&plan.terms], |r| {
                    Ok((indexed_length(r.get_ref(1)?.as_blob()?), r.get(0)?))
                })
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            ours.sort_unstable();
            assert_eq!(ours.len(), expected.len(), "{query}");
            for ((len, key), (want_key, want)) in ours.iter().zip(&expected) {
                assert_eq!(key, want_key, "{query}: order");
                assert!(
                    (ranking.score(*len) - want).abs() < 1e-9,
                    "{query}: {} vs {want}",
                    ranking.score(*len)
                );
            }
        }
    }

    /// The archive's index as `schema/fresh.sql` has it, with leaves of 64
    /// bytes (FTS5's `pgsz`, 4050 by default): a few thousand rows then
    /// make the many pages, segments and levels of a 1M-entry index.
    fn small_page_index() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(&format!(
            "CREATE VIRTUAL TABLE message_text USING fts5 (text, content = '', contentless_delete = 1, detail = none, tokenize = '{TOKENIZER}');
             INSERT INTO message_text (message_text, rank) VALUES ('pgsz', 64);"
        ))
        .unwrap();
        conn
    }

    /// Indexes `rows` more rows after row `last` in one transaction (one
    /// segment), `last` then the newest.
    fn append_rows(conn: &mut Connection, last: &mut i64, rows: usize) {
        let tx = conn.transaction().unwrap();
        for _ in 0..rows {
            *last += 1;
            tx.execute(
                "INSERT INTO message_text (rowid, text) VALUES (?1, ?2)",
                params![*last, row_text(*last)],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }

    /// Row `n`'s text: one rare, one common and one middling token.
    fn row_text(n: i64) -> String {
        format!("w{} x{} y{}", n * 7919 % 10007, n % 13, n * 31 % 997)
    }

    /// Issue 40.1: `compact`'s merge of the search index with another
    /// session appending between its steps (a segment each) restarted from
    /// its first term at every step, a level and a segment more each time,
    /// until FTS5's 2000 segments ("database or disk is full"). It must
    /// finish in about as many steps as the index has pages, on a bounded
    /// number of levels, and leave the index answering as before.
    #[test]
    fn a_merge_with_appends_between_its_steps_finishes_and_keeps_the_answers() {
        let mut conn = small_page_index();
        let mut last = 0i64;
        let mut append = |conn: &mut Connection, rows: usize| append_rows(conn, &mut last, rows);
        // An imported session, a commit per batch: segments on several levels.
        for _ in 0..300 {
            append(&mut conn, 20);
        }
        // A deleted fork: tombstones in the segments.
        let deleted = |n: i64| n % 10 == 0 && n <= 6000;
        conn.execute("DELETE FROM message_text WHERE rowid % 10 = 0", [])
            .unwrap();
        let start = index_shape(&conn).unwrap();
        assert!(start.segments > 1, "several segments to merge: {start:?}");
        let pages: i64 = conn
            .query_row("SELECT count(*) FROM message_text_data", [], |r| r.get(0))
            .unwrap();
        let pages = pages as u64;
        let mut merge = IndexMerge::new();
        let (mut steps, mut most_levels, mut most_segments) = (0u64, 0, 0);
        loop {
            let tx = conn.transaction().unwrap();
            let done = merge.step(&tx, 2).unwrap();
            tx.commit().unwrap();
            steps += 1;
            if done {
                break;
            }
            // Another session's append commits between two steps.
            append(&mut conn, 1);
            let shape = index_shape(&conn).unwrap();
            most_levels = most_levels.max(shape.levels);
            most_segments = most_segments.max(shape.segments);
            assert!(
                steps <= pages,
                "not done after {steps} steps of 2 pages of a {pages}-page index: {shape:?}"
            );
        }
        let end = index_shape(&conn).unwrap();
        assert!(
            end.merging.iter().all(|&l| l < start.levels),
            "the merge of everything is done: {end:?}"
        );
        assert!(
            most_levels <= start.levels + 2,
            "{most_levels} levels from {start:?}: the merge restarted"
        );
        // Beside the merge's input and output, the appended segments: FTS5
        // merges them a level up once a few share a level.
        assert!(
            most_segments <= start.segments + 2 + 4 * most_levels,
            "{most_segments} segments from {start:?}: the merge restarted"
        );
        // The same answers as a count over the rows written.
        for token in ["x5", "y17", "w7919", "x0"] {
            let want = (1..=last)
                .filter(|&n| !deleted(n) && row_text(n).split(' ').any(|t| t == token))
                .count() as i64;
            let got: i64 = conn
                .query_row(
                    "SELECT count(*) FROM message_text WHERE message_text MATCH ?1",
                    [token],
                    |r| r.get(0),
                )
                .unwrap();
            assert_eq!(got, want, "{token}");
        }
    }

    #[test]
    fn index_queries_are_single_tokens_confirmed_where_order_matters() {
        let q = IndexQuery::new("foo-bar baz* \"Two Words\"").unwrap();
        assert_eq!(q.terms, "\"foo\" \"bar\" \"baz\"* \"two\" \"words\"");
        assert!(q.confirms("a foo bar, bazaar: two words").unwrap());
        assert!(
            !q.confirms("bar foo bazaar two words").unwrap(),
            "foo-bar is foo then bar"
        );
        assert!(
            !q.confirms("foo bar bazaar words two").unwrap(),
            "a phrase keeps its order"
        );
        let plain = IndexQuery::new("alpha beta*").unwrap();
        assert_eq!(plain.confirm, None, "words in any order need no confirming");
        assert!(IndexQuery::new("--- \"\"").unwrap().terms.is_empty());
    }
}
