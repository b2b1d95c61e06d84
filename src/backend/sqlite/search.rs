//! What of an entry is searchable text (message content, custom messages and
//! summaries, with the role they are shown as), and how a query finds it.
//!
//! # The index keeps no positions
//! `message_text` (schema version 8) records which entries hold each token,
//! not where (`detail = none`, 0.30× the size of a positional index). A
//! query is cut into single tokens by FTS5's own tokenizer ([`IndexQuery`]):
//! entries holding all of them are the candidates. Where token order
//! matters (a `"phrase"`, a word FTS5 splits, `foo-bar`) each candidate is
//! confirmed by running the query as written on its text in a scratch
//! positional index with the same tokenizer, so a query finds exactly what
//! it found with positions stored.

use super::sql;
use crate::entry::{Entry, EntryType};
use crate::error::Result;
use crate::preview::content_text;
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use serde_json::value::RawValue;
use serde_json::Value;
use std::cell::RefCell;

/// The few members search reads; everything else is skipped unparsed.
#[derive(serde::Deserialize)]
struct TextProbe<'a> {
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default)]
    role: Option<String>,
}

#[derive(serde::Deserialize)]
struct Part {
    #[serde(default)]
    text: Option<String>,
}

fn probe_content(raw: &RawValue) -> Option<String> {
    let text = raw.get();
    if text.starts_with('"') {
        return serde_json::from_str(text).ok();
    }
    if text.starts_with('[') {
        let parts: Vec<Part> = serde_json::from_str(text).ok()?;
        return Some(
            parts
                .into_iter()
                .filter_map(|p| p.text)
                .collect::<Vec<_>>()
                .join("\n"),
        );
    }
    Some(String::new())
}

/// The fast path: borrowed probes; `None` when the text needs the full parse
/// (duplicate keys, lone surrogates, odd shapes).
fn probe(entry: &Entry) -> Option<Option<(String, String)>> {
    let p: TextProbe = serde_json::from_str(entry.json()).ok()?;
    let (role, text) = match entry.entry_type() {
        EntryType::Message => {
            let m: TextProbe = serde_json::from_str(p.message?.get()).ok()?;
            let role = m.role.unwrap_or_else(|| "message".to_owned());
            match m.content {
                Some(c) => (role, probe_content(c)?),
                None => return Some(None),
            }
        }
        EntryType::CustomMessage => match p.content {
            Some(c) => ("custom".to_owned(), probe_content(c)?),
            None => return Some(None),
        },
        EntryType::Compaction => ("compactionSummary".to_owned(), p.summary?),
        EntryType::BranchSummary => ("branchSummary".to_owned(), p.summary?),
        _ => return Some(None),
    };
    Some((!text.trim().is_empty()).then_some((role, text)))
}

/// The role and plain text of an entry a person would search for, if any.
pub fn searchable_text(entry: &Entry) -> Option<(String, String)> {
    if let Some(found) = probe(entry) {
        return found;
    }
    full_parse(entry)
}

fn full_parse(entry: &Entry) -> Option<(String, String)> {
    let (role, text) = match entry.entry_type() {
        EntryType::Message => {
            let v = entry.value();
            let m = v.get("message")?;
            let role = m
                .get("role")
                .and_then(Value::as_str)
                .unwrap_or("message")
                .to_owned();
            (role, content_text(m.get("content")?))
        }
        EntryType::CustomMessage => (
            "custom".to_owned(),
            content_text(entry.value().get("content")?),
        ),
        EntryType::Compaction => (
            "compactionSummary".to_owned(),
            entry.value().get("summary")?.as_str()?.to_owned(),
        ),
        EntryType::BranchSummary => (
            "branchSummary".to_owned(),
            entry.value().get("summary")?.as_str()?.to_owned(),
        ),
        _ => return None,
    };
    (!text.trim().is_empty()).then_some((role, text))
}

/// A token as `unicode61` sees it: a run of letters and digits.
fn is_token_char(c: char) -> bool {
    c.is_alphanumeric()
}

/// A character folded as `unicode61 remove_diacritics 2` folds the common
/// Latin letters: lower case, accents removed.
fn fold(c: char) -> char {
    let c = c.to_lowercase().next().unwrap_or(c);
    match c {
        'à'..='å' | 'ā' | 'ă' | 'ą' => 'a',
        'ç' | 'ć' | 'ĉ' | 'ċ' | 'č' => 'c',
        'è'..='ë' | 'ē' | 'ĕ' | 'ė' | 'ę' | 'ě' => 'e',
        'ì'..='ï' | 'ĩ' | 'ī' | 'ĭ' | 'į' => 'i',
        'ñ' | 'ń' | 'ņ' | 'ň' => 'n',
        'ò'..='ö' | 'ø' | 'ō' | 'ŏ' | 'ő' => 'o',
        'ù'..='ü' | 'ũ' | 'ū' | 'ŭ' | 'ů' | 'ű' | 'ų' => 'u',
        'ý' | 'ÿ' => 'y',
        'ś' | 'ŝ' | 'ş' | 'š' => 's',
        'ź' | 'ż' | 'ž' => 'z',
        other => other,
    }
}

fn folded(token: &str) -> String {
    token.chars().map(fold).collect()
}

/// Tokens in a search hit's snippet (as FTS5's `snippet(…, 12)` showed).
pub const SNIPPET_TOKENS: usize = 12;

/// A part of what a person typed into search: the one reading of the query
/// grammar, which the index query ([`fts_query`]) and the scan of a session
/// file ([`text_matches`]) both follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueryPart {
    /// A word (`prefix`: written `word*`, matching words that start with it).
    Word {
        /// The word as typed, without the `*`.
        text: String,
        /// Whether it was written with a trailing `*`.
        prefix: bool,
    },
    /// `"words in this order"`.
    Phrase(String),
}

/// The parts of `query`: words in any order, `"a phrase"`, `prefix*`. NUL
/// separates words too (FTS5 reads its query as a C string).
pub fn query_parts(query: &str) -> Vec<QueryPart> {
    let words = |chunk: &str| -> Vec<String> {
        chunk
            .split(|c: char| c.is_whitespace() || c == '\0')
            .filter(|w| !w.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let mut parts = Vec::new();
    for (i, chunk) in query.split('"').enumerate() {
        // Odd chunks were between quotes: one phrase each.
        if i % 2 == 1 {
            let phrase = words(chunk).join(" ");
            if !phrase.is_empty() {
                parts.push(QueryPart::Phrase(phrase));
            }
            continue;
        }
        for word in words(chunk) {
            let prefix =
                word.len() > 1 && word.ends_with('*') && !word[..word.len() - 1].ends_with('*');
            let text = word.trim_end_matches('*');
            if !text.is_empty() {
                parts.push(QueryPart::Word {
                    text: text.to_owned(),
                    prefix,
                });
            }
        }
    }
    parts
}

/// The FTS5 query for `query`: every part quoted, so user text is never read
/// as FTS5 syntax; a phrase stays a phrase and `word*` a prefix query.
pub fn fts_query(query: &str) -> String {
    let quote = |w: &str| format!("\"{}\"", w.replace('"', "\"\""));
    query_parts(query)
        .iter()
        .map(|part| match part {
            QueryPart::Word { text, prefix: true } => format!("{}*", quote(text)),
            QueryPart::Word { text, .. } | QueryPart::Phrase(text) => quote(text),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

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
                    let star = if prefix && i == last { "*" } else { "" };
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

impl Ranking {
    /// Reads the index's totals and how many texts hold each token.
    pub(super) fn new(conn: &Connection, query: &IndexQuery) -> Result<Ranking> {
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
        let rows = rows.max(1) as f64;
        let mut idf_sum = 0.0;
        let mut count = conn
            .prepare_cached("SELECT count(*) FROM message_text WHERE message_text MATCH ?1")
            .map_err(sql(context))?;
        for token in &query.tokens {
            let holding: i64 = count
                .query_row([token], |r| r.get(0))
                .map_err(sql(context))?;
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

    fn tokens(&self, text: &str) -> rusqlite::Result<Vec<String>> {
        self.holding(text, |conn| {
            conn.prepare_cached("SELECT term FROM scratch_tokens ORDER BY offset")?
                .query_map([], |r| r.get(0))?
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

/// Schema version 8: indexes every entry's searchable text again (the
/// position-less index replaces the positional one), in the migration's
/// transaction.
pub(super) fn reindex_all_entries(
    tx: &Transaction,
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
        .prepare(
            "INSERT INTO message_text (rowid, text, role, session_key) VALUES (?1, ?2, ?3, ?4)",
        )
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
            insert
                .execute(params![key, text, role, session])
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

/// Whether `text` matches `query` as the index matches it: every part, a
/// word (or `word*`) anywhere, a phrase's tokens one after another (a word
/// FTS5 splits into several tokens, `foo-bar`, is such a run too). For
/// searching where there is no index (a session file).
pub fn text_matches(text: &str, query: &str) -> bool {
    let groups: Vec<Vec<String>> = query_parts(query)
        .into_iter()
        .map(|part| match part {
            QueryPart::Word { text, prefix } => {
                let mut terms = query_terms(&text);
                if let Some(last) = terms.last_mut().filter(|_| prefix) {
                    last.push('*');
                }
                terms
            }
            QueryPart::Phrase(text) => query_terms(&text),
        })
        .filter(|g| !g.is_empty())
        .collect();
    if groups.is_empty() {
        return false;
    }
    let tokens: Vec<String> = tokens(text).map(|r| folded(&text[r])).collect();
    groups.iter().all(|group| {
        tokens.windows(group.len()).any(|window| {
            window
                .iter()
                .zip(group)
                .all(|(token, term)| term_matches(term, token))
        })
    })
}

/// The folded tokens of a search query, to find in hit text; a token written
/// with a trailing `*` (a prefix query) keeps it, and matches any token that
/// starts with it.
pub fn query_terms(query: &str) -> Vec<String> {
    tokens(query)
        .map(|r| {
            let prefix = query[r.end..].starts_with('*');
            let mut term = folded(&query[r]);
            if prefix {
                term.push('*');
            }
            term
        })
        .collect()
}

/// Whether a folded token of hit text is what `term` asks for.
fn term_matches(term: &str, token: &str) -> bool {
    match term.strip_suffix('*') {
        Some(prefix) => token.starts_with(prefix),
        None => term == token,
    }
}

/// The byte ranges of the tokens of `text`, lazily.
fn tokens(text: &str) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    let mut chars = text.char_indices().peekable();
    std::iter::from_fn(move || {
        let start = loop {
            let (i, c) = chars.next()?;
            if is_token_char(c) {
                break i;
            }
        };
        let mut end = text.len();
        while let Some(&(i, c)) = chars.peek() {
            if !is_token_char(c) {
                end = i;
                break;
            }
            chars.next();
        }
        Some(start..end)
    })
}

/// Text around the first match of `terms` in `text`: `window` tokens, each
/// match in `[` `]`, `…` where the text goes on, as FTS5's `snippet()`
/// showed. Reads the text only up to the window (a many-match megabyte
/// message costs what its first match's position costs).
pub fn snippet(text: &str, terms: &[String], window: usize) -> String {
    let window = window.max(1);
    let lead = (window - 1) / 2;
    let is_match = |r: &std::ops::Range<usize>| {
        let token = folded(&text[r.clone()]);
        terms.iter().any(|t| term_matches(t, &token))
    };
    let mut toks = tokens(text);
    // Tokens before the first match: the last `window - 1` of them, whether
    // any were dropped, and the text's first `window + 1` (if none matches).
    let mut before = std::collections::VecDeque::with_capacity(window);
    let mut head = Vec::with_capacity(window + 1);
    let mut dropped = false;
    let mut after = Vec::with_capacity(window);
    for r in toks.by_ref() {
        if is_match(&r) {
            after.push(r);
            break;
        }
        if head.len() <= window {
            head.push(r.clone());
        }
        before.push_back(r);
        if before.len() > window - 1 {
            before.pop_front();
            dropped = true;
        }
    }
    if after.is_empty() {
        // No match (a fold this approximation lacks): the text's start.
        before.clear();
        dropped = false;
        after = head;
    }
    after.extend(toks.by_ref().take((window + 1).saturating_sub(after.len())));
    let mut take_before = before.len().min(lead);
    if after.len() < window - take_before {
        take_before = before.len().min(window - after.len());
    }
    let take_after = after.len().min(window - take_before);
    let dropped_before = dropped || take_before < before.len();
    let chosen: Vec<_> = before
        .iter()
        .skip(before.len() - take_before)
        .chain(after.iter().take(take_after))
        .cloned()
        .collect();
    let more_after = take_after < after.len();
    let (Some(first), Some(last)) = (chosen.first(), chosen.last()) else {
        return text.to_owned();
    };
    let from = if dropped_before { first.start } else { 0 };
    let to = if more_after { last.end } else { text.len() };
    let mut out = String::with_capacity(to - from + 8);
    if dropped_before {
        out.push('…');
    }
    let mut at = from;
    for r in &chosen {
        out.push_str(&text[at..r.start]);
        if is_match(r) {
            out.push('[');
            out.push_str(&text[r.clone()]);
            out.push(']');
        } else {
            out.push_str(&text[r.clone()]);
        }
        at = r.end;
    }
    out.push_str(&text[at..to]);
    if more_after {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {

    #[test]
    fn text_matches_words_phrases_and_prefixes_as_the_index_does() {
        let text = "Run the Migration now, then the checkpoint test.";
        assert!(text_matches(text, "migration checkpoint"));
        assert!(text_matches(text, "checkpoint migration"), "any order");
        assert!(!text_matches(text, "migration missing"), "every word");
        assert!(text_matches(text, "\"run the migration\""));
        assert!(
            !text_matches(text, "\"migration run\""),
            "a phrase keeps its order"
        );
        assert!(text_matches(text, "migr* check*"));
        assert!(!text_matches(text, "grat*"), "a prefix, not a substring");
        assert!(
            text_matches("Café crème", "cafe creme"),
            "folded as unicode61"
        );
        assert!(
            !text_matches(text, "\"\""),
            "nothing to look for matches nothing"
        );
    }

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
            let ranking = Ranking::new(&conn, &plan).unwrap();
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

    fn snip(text: &str, query: &str) -> String {
        snippet(text, &query_terms(query), 12)
    }

    #[test]
    fn snippets_mark_matches_in_a_window_like_fts5() {
        assert_eq!(
            snip("Add \\u escapes to strings", "escapes"),
            "Add \\u [escapes] to strings"
        );
        let long = (0..40)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(
            snip(&long, "w20"),
            "…w15 w16 w17 w18 w19 [w20] w21 w22 w23 w24 w25 w26…"
        );
        assert_eq!(
            snip(&long, "w1"),
            "w0 [w1] w2 w3 w4 w5 w6 w7 w8 w9 w10 w11…"
        );
        assert_eq!(
            snip(&long, "W39"),
            "…w28 w29 w30 w31 w32 w33 w34 w35 w36 w37 w38 [w39]"
        );
        assert_eq!(
            snip(&long, "nothing"),
            "w0 w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11…"
        );
        assert_eq!(snip("Café au lait", "cafe"), "[Café] au lait");
        assert_eq!(snip("", "x"), "");
    }

    #[test]
    fn a_megabyte_of_matches_gives_one_window() {
        let text = "needle ".repeat(150_000);
        let s = snip(&text, "needle");
        assert!(
            s.starts_with("[needle] [needle]") && s.ends_with('…'),
            "{s}"
        );
        assert_eq!(s.matches('[').count(), 12);
    }
}
