//! The search rule every store follows: which characters make up a token and
//! how each token is folded, exactly as SQLite's FTS5 tokenizer
//! `unicode61 remove_diacritics 2` (the archive index's) reads text.
//!
//! A token is a maximal run of token characters; each character is folded on
//! its own (lower case, diacritics removed; a combining mark folds to
//! nothing), and a run that folds to nothing is no token at all (FTS5 gives
//! it no position). The data is FTS5's own, generated into [`super::unicode61`]
//! from the bundled SQLite; `tests/search_rule.rs` proves the two agree on
//! every Unicode scalar value. ASCII, most of any real text, never reaches
//! the tables.
//!
//! FTS5 keeps a token's first [`MAX_TOKEN_BYTES`] bytes only, in the index
//! and in a query alike, so two tokens that share them are one token to it:
//! [`key_matches`] compares so too.
//!
//! This file needs nothing from the crate, so that a timing of the rule can
//! compile it alone.

use super::unicode61::{FOLDS, TOKEN_BOUNDS};
use std::ops::Range;

/// What a byte of UTF-8 text is, for the scan: an ASCII separator
/// ([`SEPARATOR`]), an ASCII letter or digit ([`ASCII_TOKEN`]), or a byte of
/// a longer character ([`NON_ASCII`]), which the tables decide.
const BYTE_CLASS: [u8; 256] = {
    let mut class = [NON_ASCII; 256];
    let mut b = 0;
    while b < 128 {
        class[b] = if (b as u8).is_ascii_alphanumeric() {
            ASCII_TOKEN
        } else {
            SEPARATOR
        };
        b += 1;
    }
    class
};
/// An ASCII byte that is no letter or digit.
const SEPARATOR: u8 = 0;
/// An ASCII letter or digit.
const ASCII_TOKEN: u8 = 1;
/// A byte of a character beyond ASCII.
const NON_ASCII: u8 = 2;

/// Whether `c` is part of a token (FTS5: letters, digits, private use, and
/// what its Unicode tables leave unassigned, by category).
#[inline]
pub fn is_token_char(c: char) -> bool {
    let c = c as u32;
    if c < 128 {
        return BYTE_CLASS[c as usize] == ASCII_TOKEN;
    }
    // Token-ness flips at each bound: odd many bounds at or below `c` means
    // `c` is in a run of token characters.
    TOKEN_BOUNDS.partition_point(|&b| b <= c) % 2 == 1
}

/// What token character `c` folds to; `None` when it folds to nothing (a
/// combining diacritic).
#[inline]
pub fn fold(c: char) -> Option<char> {
    if c.is_ascii() {
        return Some(c.to_ascii_lowercase());
    }
    match FOLDS.binary_search_by_key(&(c as u32), |&(from, _)| from) {
        Ok(i) => match FOLDS[i].1 {
            0 => None,
            to => char::from_u32(to),
        },
        Err(_) => Some(c),
    }
}

/// Appends token `token` (a run of token characters) folded to `out`.
#[inline]
pub fn fold_into(token: &str, out: &mut String) {
    fold_run(token, token.is_ascii(), out);
}

/// Token `token` folded.
pub fn folded(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    fold_into(token, &mut out);
    out
}

/// The bytes of a folded token FTS5 keeps (`FTS5_MAX_TOKEN_SIZE`), in its
/// index and in its queries: a longer token is cut there, even inside a
/// character.
pub const MAX_TOKEN_BYTES: usize = 32_768;

/// Whether folded token `token` is what folded query token `term` asks for
/// (`prefix`: starts with it), both cut to [`MAX_TOKEN_BYTES`] as FTS5 cuts
/// them.
#[inline]
pub fn key_matches(term: &[u8], prefix: bool, token: &[u8]) -> bool {
    let cut = |b: &[u8]| -> usize { b.len().min(MAX_TOKEN_BYTES) };
    let (term, token) = (&term[..cut(term)], &token[..cut(token)]);
    if prefix {
        token.starts_with(term)
    } else {
        token == term
    }
}

/// The byte ranges of the tokens of `text`, in order, lazily.
pub fn tokens(text: &str) -> impl Iterator<Item = Range<usize>> + '_ {
    runs(text).map(|(r, _)| r)
}

/// [`tokens`], each with whether it is all ASCII (folded without the
/// tables).
fn runs(text: &str) -> impl Iterator<Item = (Range<usize>, bool)> + '_ {
    let bytes = text.as_bytes();
    let mut at = 0;
    // Whether the character at byte `at` (a boundary) is a token character,
    // and its length.
    let decode = move |at: usize| -> (bool, usize) {
        let c = text[at..].chars().next().expect("a char boundary");
        (is_token_char(c), c.len_utf8())
    };
    std::iter::from_fn(move || loop {
        // Separators: ASCII ones byte by byte in a tight loop.
        while at < bytes.len() {
            match BYTE_CLASS[usize::from(bytes[at])] {
                SEPARATOR => at += 1,
                ASCII_TOKEN => break,
                _ => match decode(at) {
                    (true, _) => break,
                    (false, len) => at += len,
                },
            }
        }
        if at >= bytes.len() {
            return None;
        }
        let start = at;
        let mut ascii = true;
        while at < bytes.len() {
            match BYTE_CLASS[usize::from(bytes[at])] {
                ASCII_TOKEN => at += 1,
                SEPARATOR => break,
                _ => match decode(at) {
                    (true, len) => {
                        ascii = false;
                        at += len;
                    }
                    (false, _) => break,
                },
            }
        }
        // A run of nothing but combining marks folds to nothing: no token.
        if ascii || text[start..at].chars().any(|c| fold(c).is_some()) {
            return Some((start..at, ascii));
        }
    })
}

/// Appends token `token` folded to `out`, `ascii` when it is all ASCII.
#[inline]
fn fold_run(token: &str, ascii: bool, out: &mut String) {
    if ascii {
        let start = out.len();
        out.push_str(token);
        out[start..].make_ascii_lowercase();
    } else {
        out.extend(token.chars().filter_map(fold));
    }
}

/// The folded tokens of `text`, in order.
pub fn words(text: &str) -> Vec<String> {
    tokens(text).map(|r| folded(&text[r])).collect()
}

/// The folded tokens of a text in one buffer: what a scan matches against,
/// without a string per token.
pub struct FoldedText {
    buf: String,
    ends: Vec<usize>,
}

impl FoldedText {
    /// Folds every token of `text`.
    pub fn new(text: &str) -> FoldedText {
        let mut buf = String::with_capacity(text.len());
        let mut ends = Vec::new();
        for (r, ascii) in runs(text) {
            fold_run(&text[r], ascii, &mut buf);
            ends.push(buf.len());
        }
        FoldedText { buf, ends }
    }

    /// How many tokens the text has.
    pub fn count(&self) -> usize {
        self.ends.len()
    }

    /// Token `i`, folded.
    pub fn get(&self, i: usize) -> &str {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.buf[start..self.ends[i]]
    }
}

/// The longest lexeme PostgreSQL takes, in bytes (`tsvector` input refuses a
/// longer one).
const MAX_LEXEME: usize = 2046;

/// `word` cut to [`MAX_LEXEME`] bytes at a character boundary.
fn lexeme_cut(word: &str) -> &str {
    let mut end = word.len().min(MAX_LEXEME);
    while !word.is_char_boundary(end) {
        end -= 1;
    }
    &word[..end]
}

/// `word` (a folded token) as a PostgreSQL lexeme: cut to 2,046 bytes (the
/// most PostgreSQL takes) at a character boundary, so that a longer token is
/// indexed, and asked for, by that prefix of it; quoted for `tsvector` and
/// `tsquery` input, which read it as is (no parser, no dictionary: the rule
/// has folded it already).
pub fn pg_lexeme(word: &str) -> String {
    let word = lexeme_cut(word);
    // A token holds no quote or backslash (ASCII punctuation separates
    // tokens); any other text is escaped.
    format!("'{}'", word.replace('\\', "\\\\").replace('\'', "''"))
}

/// The words of `text` as the PostgreSQL index stores them: `tsvector` input
/// text, each token folded by the rule (as [`words`]), quoted
/// ([`pg_lexeme`]) and given its position from 1 (`'das':1 'ist':2 …`), for
/// PostgreSQL to read exactly these lexemes (its own parser would split and
/// lower-case again, by the server's locale); the first `limit` bytes of
/// words (one space between each) are indexed.
pub fn index_words(text: &str, limit: usize) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 2);
    let mut word = String::new();
    let mut indexed = 0usize;
    for (i, (r, ascii)) in runs(text).enumerate() {
        word.clear();
        fold_run(&text[r], ascii, &mut word);
        indexed += word.len() + 1;
        if indexed > limit.saturating_add(1) {
            break;
        }
        if i > 0 {
            out.push(' ');
        }
        // Quoted without escapes: a token holds no quote or backslash (ASCII
        // punctuation separates tokens, and no byte of a longer UTF-8
        // character is ASCII).
        out.push('\'');
        out.push_str(lexeme_cut(&word));
        out.push_str("':");
        push_number(&mut out, i + 1);
    }
    out
}

/// Appends `n` in decimal, without formatting machinery (one per token).
fn push_number(out: &mut String, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.push_str(std::str::from_utf8(&digits[at..]).expect("ASCII digits"));
}
