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

/// The words of `text` as the index reads them — runs of letters and
/// digits, folded like [`query_terms`] — one space between each, for an
/// index with its own tokenizer (PostgreSQL's `tsvector`) to read exactly
/// these words; at most `limit` bytes of them.
pub fn index_words(text: &str, limit: usize) -> String {
    let mut out = String::new();
    for r in tokens(text) {
        let word = folded(&text[r]);
        if out.len() + word.len() + 1 > limit {
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&word);
    }
    out
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
