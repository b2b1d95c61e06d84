//! What of an entry is searchable text: message content, custom messages and
//! summaries, with the role they are shown as.

use crate::entry::{Entry, EntryType};
use crate::preview::{content_text, ContentPart, ContentProbe};
use serde_json::Value;

/// The few members search reads, in one pass over the entry's text;
/// everything else is skipped unparsed. A member of an unexpected shape (or
/// a duplicate key) fails the probe, and the full parse decides.
#[derive(serde::Deserialize)]
struct TextProbe {
    #[serde(default)]
    message: Option<MessageProbe>,
    #[serde(default)]
    content: Option<ContentProbe<Part>>,
    #[serde(default)]
    summary: Option<String>,
}

/// A message entry's `message`: its role and content.
#[derive(serde::Deserialize)]
struct MessageProbe {
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    content: Option<ContentProbe<Part>>,
}

/// A part as search reads it: its text alone.
#[derive(serde::Deserialize)]
struct Part {
    #[serde(default)]
    text: Option<String>,
}

impl ContentPart for Part {
    fn take_text(&mut self) -> Option<String> {
        self.text.take()
    }

    fn kept(&self) -> bool {
        false
    }
}

/// The fast path: one typed pass; `None` when the text needs the full parse
/// (duplicate keys, lone surrogates, odd shapes).
fn probe(entry: &Entry) -> Option<Option<(String, String)>> {
    let p: TextProbe = serde_json::from_str(entry.json()).ok()?;
    let (role, text) = match entry.entry_type() {
        EntryType::Message => {
            let m = p.message?;
            let role = m.role.unwrap_or_else(|| "message".to_owned());
            match m.content {
                Some(c) => (role, c.text),
                None => return Some(None),
            }
        }
        EntryType::CustomMessage => match p.content {
            Some(c) => ("custom".to_owned(), c.text),
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

pub mod boolean;
mod rule;
mod unicode61;

use rule::{folded, tokens, FoldedText};
pub use rule::{index_words, pg_lexeme, words};

/// Tokens in a search hit's snippet (as FTS5's `snippet(…, 12)` showed).
pub const SNIPPET_TOKENS: usize = 12;

/// A part of what a person typed into search: the one reading of the query
/// grammar, which every store follows — the FTS5 query ([`fts_query`]), the
/// PostgreSQL `tsquery` and the scan of a session file ([`text_matches`]).
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

/// One token a [`QueryPart`] asks for, folded by the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    /// The folded token.
    pub text: String,
    /// Whether a text's token need only start with it.
    pub prefix: bool,
}

impl Term {
    /// Whether a folded token of a text is what this term asks for: equal,
    /// or for a prefix starting with it, compared as FTS5 compares (bytes,
    /// each side's first [`rule::MAX_TOKEN_BYTES`]).
    pub fn matches(&self, token: &str) -> bool {
        rule::key_matches(self.text.as_bytes(), self.prefix, token.as_bytes())
    }
}

impl QueryPart {
    /// The tokens this part asks for, one after another: the rule's tokens of
    /// its text (a word FTS5 splits, `foo-bar`, is several; a `*` inside a
    /// word is a separator, not a prefix), the last a prefix when the word
    /// was written `word*`. Empty when the text has no token (`🚀`, `-`):
    /// such a part asks for nothing, and every store ignores it.
    pub fn terms(&self) -> Vec<Term> {
        let (text, prefix) = match self {
            QueryPart::Word { text, prefix } => (text, *prefix),
            QueryPart::Phrase(text) => (text, false),
        };
        let mut terms: Vec<Term> = words(text)
            .into_iter()
            .map(|text| Term {
                text,
                prefix: false,
            })
            .collect();
        if let Some(last) = terms.last_mut() {
            last.prefix = prefix;
        }
        terms
    }
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

/// The parts of `query` that ask for something, as their terms: what every
/// store looks for (all groups, each group's terms one after another).
/// Empty when the query asks for nothing (it matches nothing).
pub fn query_groups(query: &str) -> Vec<Vec<Term>> {
    query_parts(query)
        .iter()
        .map(QueryPart::terms)
        .filter(|g| !g.is_empty())
        .collect()
}

/// The FTS5 query for `query`: every part quoted, so user text is never read
/// as FTS5 syntax; a phrase stays a phrase and `word*` a prefix query. FTS5
/// tokenizes each quoted part by the same rule as [`QueryPart::terms`].
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

/// Whether `text` matches `query` as the index matches it: every part, a
/// word (or `word*`) anywhere, a phrase's tokens one after another (a word
/// FTS5 splits into several tokens, `foo-bar`, is such a run too). For
/// searching where there is no index (a session file); a scan of many texts
/// reads the query once ([`groups_match`]).
pub fn text_matches(text: &str, query: &str) -> bool {
    groups_match(&query_groups(query), text)
}

/// [`text_matches`] for a query already read into its [`query_groups`].
pub fn groups_match(groups: &[Vec<Term>], text: &str) -> bool {
    if groups.is_empty() {
        return false;
    }
    let tokens = FoldedText::new(text);
    groups.iter().all(|group| {
        (0..(tokens.count() + 1).saturating_sub(group.len())).any(|start| {
            group
                .iter()
                .enumerate()
                .all(|(i, term)| term.matches(tokens.get(start + i)))
        })
    })
}

/// The folded terms of a search query, to mark in hit text ([`snippet`]):
/// every term of every part ([`query_groups`]), a prefix term written with
/// a trailing `*`.
pub fn query_terms(query: &str) -> Vec<String> {
    query_groups(query)
        .into_iter()
        .flatten()
        .map(|t| if t.prefix { t.text + "*" } else { t.text })
        .collect()
}

/// Whether a folded token of hit text is what `term` (of [`query_terms`])
/// asks for.
fn term_matches(term: &str, token: &str) -> bool {
    match term.strip_suffix('*') {
        Some(prefix) => rule::key_matches(prefix.as_bytes(), true, token.as_bytes()),
        None => rule::key_matches(term.as_bytes(), false, token.as_bytes()),
    }
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

    /// The one-pass probe finds what the full parse finds, or leaves the
    /// entry to it: on every entry of pi's real files and on odd shapes.
    #[test]
    fn the_fast_probe_agrees_with_the_full_parse() {
        let mut entries: Vec<Entry> = Vec::new();
        for file in crate::pi_fixture_files() {
            let storage = crate::backend::jsonl::JsonlStorage::open(
                file,
                crate::storage::Durability::Relaxed,
            )
            .expect("a pi file");
            entries.extend(storage.all_entries().iter().cloned());
        }
        let real = entries.len();
        let mut lines: Vec<String> = Vec::new();
        for odd in [
            r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"plain \"quoted\" text"}}"#,
            r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"assistant","content":[{"type":"text","text":"one"},{"type":"image","data":"AAAA"},{"type":"text","text":"two"}]}}"#,
            r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"content":"no role"}}"#,
            r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":{"odd":"object"}}}"#,
            r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":42}}"#,
            r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":null}}"#,
            r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":[null]}}"#,
            r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"lone \ud800 surrogate"}}"#,
            r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","role":"assistant","content":"duplicate key"}}"#,
            r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":[{"text":7}]}}"#,
            r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":"not an object"}"#,
            r#"{"type":"custom_message","id":"a","parentId":null,"timestamp":"t","customType":"x","content":[{"type":"text","text":"custom"}],"display":true}"#,
            r#"{"type":"compaction","id":"a","parentId":null,"timestamp":"t","summary":"the summary","firstKeptEntryId":"b","tokensBefore":1}"#,
            r#"{"type":"branch_summary","id":"a","parentId":null,"timestamp":"t","summary":7,"fromId":"b"}"#,
            r#"{"type":"label","id":"a","parentId":null,"timestamp":"t","targetId":"b","label":"x","content":"not searched"}"#,
        ] {
            lines.push(odd.to_owned());
        }
        entries.extend(
            lines
                .iter()
                .map(|l| Entry::from_stored_line(l).expect("an entry")),
        );
        let mut probed = 0;
        for entry in &entries {
            let line = entry.json();
            if let Some(found) = probe(entry) {
                probed += 1;
                assert_eq!(found, full_parse(entry), "{line}");
            }
            assert_eq!(searchable_text(entry), full_parse(entry), "{line}");
        }
        assert!(
            probed * 10 >= real * 9,
            "the fast path takes most real entries ({probed} of {real})"
        );
    }

    #[test]
    fn index_words_are_tsvector_input_of_the_rule() {
        assert_eq!(
            index_words("Das ist doğru, İstanbul! ＡＢＣ", 1000),
            "'das':1 'ist':2 'dogru':3 'istanbul':4 'ａｂｃ':5"
        );
        assert_eq!(index_words("one two three", 7), "'one':1 'two':2");
        assert_eq!(
            index_words("\u{301} a\u{301}b", 100),
            "'ab':1",
            "no empty token"
        );
        let long = "é".repeat(1500);
        assert_eq!(
            index_words(&long, 10_000),
            format!("'{}':1", "e".repeat(1500)),
            "folded first, then cut"
        );
        let long = "ğ".repeat(1500);
        assert_eq!(
            index_words(&long, 10_000),
            format!("'{}':1", "g".repeat(1500))
        );
        let long = "ж".repeat(1500);
        assert_eq!(
            index_words(&long, 10_000),
            format!("'{}':1", "ж".repeat(1023)),
            "cut at PostgreSQL's 2,046 bytes, on a character boundary"
        );
        assert_eq!(pg_lexeme("it's a \\"), "'it''s a \\\\'");
    }

    #[test]
    fn query_parts_ask_for_the_rules_tokens() {
        assert!(text_matches("foo bar", "foo*bar"), "a `*` inside separates");
        assert!(!text_matches("food bar", "foo*bar"), "and makes no prefix");
        assert!(text_matches("l'élève", "ELEVE"));
        assert!(text_matches("ﬁle", "ﬁ*") && !text_matches("ﬁle", "file"));
        assert!(
            !text_matches("🚀 launch", "🚀"),
            "no token: asks for nothing"
        );
        assert!(text_matches("🚀 launch", "🚀 launch"));
        assert_eq!(
            query_terms("Doğ* \"İstanbul ılık\" x-y*"),
            ["dog*", "istanbul", "ılık", "x", "y*"]
        );
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
