//! `OR`, `-exclusion` and `( grouping )` in search queries, for every store
//! alike: a query using them is read into alternatives (its disjunctive
//! normal form), each a plain query of today's grammar (words, `"phrases"`,
//! `prefix*`: what each store already answers by the one rule) and the parts
//! its hits must not match, confirmed on the hit's text by the rule
//! ([`super::groups_match`]). A store runs each alternative's plain query,
//! drops the hits an exclusion matches, and merges the alternatives' hits
//! (an entry once, at its best rank). A query without this syntax is not
//! touched.

use super::Term;
use crate::error::{Error, Result};
use crate::listing::SearchHit;

/// One alternative of a query: a plain query, and what its hits must not match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alternative {
    /// Today's grammar: words, `"phrases"`, `prefix*`, all required.
    pub plain: String,
    /// Each excluded part's terms (one after another, as a phrase's).
    pub excluded: Vec<Vec<Term>>,
}

/// Alternatives a query may expand to at most.
const MAX_ALTERNATIVES: usize = 64;

/// A token of the boolean grammar, with its 1-based character position.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Word(String),
    Phrase(String),
    Open,
    Close,
    Or,
    /// `-` right before a word, phrase or `(`.
    Minus,
}

/// The query's tokens, or `None` when it uses none of `OR`, `-word`, `(`, `)`.
fn tokens(query: &str) -> Result<Option<Vec<(Tok, usize)>>> {
    let chars: Vec<char> = query.chars().collect();
    let mut out = Vec::new();
    let mut boolean = false;
    let mut i = 0;
    let blank = |c: char| c.is_whitespace() || c == '\0';
    while i < chars.len() {
        let c = chars[i];
        let at = i + 1;
        if blank(c) {
            i += 1;
        } else if c == '"' {
            let end = chars[i + 1..]
                .iter()
                .position(|&c| c == '"')
                .map_or(chars.len(), |p| i + 1 + p);
            out.push((Tok::Phrase(chars[i + 1..end].iter().collect()), at));
            i = end + 1;
        } else if c == '(' || c == ')' {
            // At the start of a word: `(` opens a group, `)` closes one.
            boolean = true;
            out.push((if c == '(' { Tok::Open } else { Tok::Close }, at));
            i += 1;
        } else if c == '-' && chars.get(i + 1) != Some(&'-') {
            boolean = true;
            match chars.get(i + 1) {
                Some(&n) if !blank(n) && n != ')' => {
                    out.push((Tok::Minus, at));
                    i += 1;
                }
                _ => {
                    return Err(Error::Usage(format!(
                        "search query: a lone `-` at position {at}: write it right before the word, \"phrase\" or (group) to exclude"
                    )))
                }
            }
        } else {
            // A word runs to a blank or a quote; `)`s that end it close
            // groups (one inside it, `robert');`, is part of the word).
            let end = chars[i..]
                .iter()
                .position(|&c| blank(c) || c == '"')
                .map_or(chars.len(), |p| i + p);
            let mut closes = end;
            while closes > i && chars[closes - 1] == ')' {
                closes -= 1;
            }
            if closes > i {
                let word: String = chars[i..closes].iter().collect();
                if word == "OR" {
                    out.push((Tok::Or, at));
                } else {
                    out.push((Tok::Word(word), at));
                }
            }
            for k in closes..end {
                boolean = true;
                out.push((Tok::Close, k + 1));
            }
            i = end;
        }
    }
    // `OR` with a side missing (first, last, beside another `OR`, next to a
    // parenthesis that leaves it nothing) is the word "or", as before.
    let operand_before =
        |k: usize| k > 0 && matches!(out[k - 1].0, Tok::Word(_) | Tok::Phrase(_) | Tok::Close);
    let operand_after = |k: usize| {
        matches!(
            out.get(k + 1).map(|t| &t.0),
            Some(Tok::Word(_) | Tok::Phrase(_) | Tok::Open | Tok::Minus)
        )
    };
    let lone: Vec<usize> = (0..out.len())
        .filter(|&k| out[k].0 == Tok::Or && !(operand_before(k) && operand_after(k)))
        .collect();
    for k in lone {
        out[k].0 = Tok::Word("OR".to_owned());
    }
    boolean = boolean || out.iter().any(|(t, _)| *t == Tok::Or);
    Ok(boolean.then_some(out))
}

/// A query read: a plain part, all of, any of, or not.
#[derive(Debug, Clone)]
enum Expr {
    Part(String),
    All(Vec<Expr>),
    Any(Vec<Expr>),
    Not(Box<Expr>),
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    at: usize,
    /// Where the query ends, for messages (its length + 1).
    end: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at).map(|(t, _)| t)
    }

    fn position(&self) -> usize {
        self.toks.get(self.at).map_or(self.end, |(_, p)| *p)
    }

    fn any(&mut self) -> Result<Expr> {
        let mut alternatives = vec![self.all()?];
        while self.peek() == Some(&Tok::Or) {
            self.at += 1;
            alternatives.push(self.all()?);
        }
        Ok(if alternatives.len() == 1 {
            alternatives.remove(0)
        } else {
            Expr::Any(alternatives)
        })
    }

    fn all(&mut self) -> Result<Expr> {
        let mut parts = Vec::new();
        loop {
            match self.peek() {
                None | Some(Tok::Close) | Some(Tok::Or) => break,
                _ => parts.push(self.unary()?),
            }
        }
        if parts.is_empty() {
            let what = match self.peek() {
                Some(Tok::Or) => "`OR` needs something to look for on each side",
                Some(Tok::Close) => "an empty group, or `)` with nothing before it",
                _ => "nothing to look for here",
            };
            return Err(Error::Usage(format!(
                "search query: {what} (position {})",
                self.position()
            )));
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Expr::All(parts)
        })
    }

    fn unary(&mut self) -> Result<Expr> {
        if self.peek() == Some(&Tok::Minus) {
            self.at += 1;
            return Ok(Expr::Not(Box::new(self.primary()?)));
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Expr> {
        let position = self.position();
        let Some((tok, _)) = self.toks.get(self.at).cloned() else {
            return Err(Error::Usage(format!(
                "search query: it ends where a word was expected (position {position})"
            )));
        };
        self.at += 1;
        match tok {
            Tok::Word(w) => Ok(Expr::Part(w)),
            Tok::Phrase(p) => Ok(Expr::Part(format!("\"{p}\""))),
            Tok::Open => {
                if self.peek().is_none() {
                    return Err(Error::Usage(format!(
                        "search query: the `(` at position {position} is never closed"
                    )));
                }
                let inner = self.any()?;
                if self.peek() != Some(&Tok::Close) {
                    return Err(Error::Usage(format!(
                        "search query: the `(` at position {position} is never closed"
                    )));
                }
                self.at += 1;
                Ok(inner)
            }
            Tok::Close | Tok::Or | Tok::Minus => Err(Error::Usage(format!(
                "search query: a word was expected at position {position}"
            ))),
        }
    }
}

/// One conjunction while expanding: parts required, parts excluded.
#[derive(Debug, Clone, Default)]
struct Conj {
    required: Vec<String>,
    excluded: Vec<String>,
}

/// The alternatives of `e` (negated when `negate`), at most [`MAX_ALTERNATIVES`].
fn expand(e: &Expr, negate: bool) -> Result<Vec<Conj>> {
    let too_many = || {
        Error::Usage(format!(
            "search query: more than {MAX_ALTERNATIVES} alternatives; write it with fewer ORs"
        ))
    };
    // not(all) = any(not), not(any) = all(not).
    let (product, items): (bool, &[Expr]) = match (e, negate) {
        (Expr::Part(p), false) => {
            return Ok(vec![Conj {
                required: vec![p.clone()],
                excluded: Vec::new(),
            }])
        }
        (Expr::Part(p), true) => {
            return Ok(vec![Conj {
                required: Vec::new(),
                excluded: vec![p.clone()],
            }])
        }
        (Expr::Not(inner), n) => return expand(inner, !n),
        (Expr::All(items), false) | (Expr::Any(items), true) => (true, items),
        (Expr::Any(items), false) | (Expr::All(items), true) => (false, items),
    };
    if product {
        let mut out = vec![Conj::default()];
        for item in items {
            let next = expand(item, negate)?;
            if out.len() * next.len() > MAX_ALTERNATIVES {
                return Err(too_many());
            }
            out = out
                .iter()
                .flat_map(|a| {
                    next.iter().map(move |b| Conj {
                        required: a.required.iter().chain(&b.required).cloned().collect(),
                        excluded: a.excluded.iter().chain(&b.excluded).cloned().collect(),
                    })
                })
                .collect();
        }
        Ok(out)
    } else {
        let mut out = Vec::new();
        for item in items {
            out.extend(expand(item, negate)?);
            if out.len() > MAX_ALTERNATIVES {
                return Err(too_many());
            }
        }
        Ok(out)
    }
}

/// The terms a plain query asks for, as one run per part.
fn groups_of(plain: &str) -> Vec<Vec<Term>> {
    super::query_groups(plain)
}

/// `query` read as alternatives, or `None` when it uses none of `OR`,
/// `-word`, `(`…`)` (then it is a plain query, answered as ever). A
/// malformed query is a `usage` error naming the position (1-based, in
/// characters): an unbalanced parenthesis, a lone `-`, an `OR` with a side
/// missing, or an alternative that only excludes (`-foo`, `a OR -b`: there
/// is nothing to look for).
pub fn alternatives(query: &str) -> Result<Option<Vec<Alternative>>> {
    let Some(toks) = tokens(query)? else {
        return Ok(None);
    };
    let end = query.chars().count() + 1;
    let mut parser = Parser { toks, at: 0, end };
    let expr = parser.any()?;
    if let Some((tok, position)) = parser.toks.get(parser.at) {
        let what = if *tok == Tok::Close {
            "a `)` that closes no `(`"
        } else {
            "unexpected text"
        };
        return Err(Error::Usage(format!(
            "search query: {what} at position {position}"
        )));
    }
    let conjs = expand(&expr, false)?;
    conjs
        .into_iter()
        .map(|c| {
            if c.required.is_empty() {
                return Err(Error::Usage(format!(
                    "search query: an alternative only excludes ({}): add a word to look for",
                    c.excluded
                        .iter()
                        .map(|x| format!("-{x}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                )));
            }
            // Each part as written: words and phrases re-read by today's grammar.
            let plain = c.required.join(" ");
            let excluded = c
                .excluded
                .iter()
                .flat_map(|x| groups_of(x))
                .filter(|g| !g.is_empty())
                .collect();
            Ok(Alternative { plain, excluded })
        })
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// Whether `text` matches one of `alternatives` as the index matches: all
/// of its plain query, none of its exclusions.
pub fn alternatives_match(alternatives: &[Alternative], text: &str) -> bool {
    alternatives.iter().any(|a| {
        super::groups_match(&groups_of(&a.plain), text)
            && !a
                .excluded
                .iter()
                .any(|x| super::groups_match(std::slice::from_ref(x), text))
    })
}

/// Whether `text` matches `query`, plain or not (the file scan's rule).
pub fn query_matches(query: &str, text: &str) -> Result<bool> {
    Ok(match alternatives(query)? {
        Some(alts) => alternatives_match(&alts, text),
        None => super::text_matches(text, query),
    })
}

/// The terms to mark in a hit's snippet: every required part's.
pub fn marked_terms(query: &str) -> Vec<String> {
    match alternatives(query) {
        Ok(Some(alts)) => {
            let mut terms: Vec<String> = Vec::new();
            for a in alts {
                for t in super::query_terms(&a.plain) {
                    if !terms.contains(&t) {
                        terms.push(t);
                    }
                }
            }
            terms
        }
        _ => super::query_terms(query),
    }
}

/// A page of hits for `alternatives` from a store: `plain(query, limit,
/// offset)` is the store's own search of a plain query (ranked, in its
/// order), `text(hit)` the searchable text of a hit's entry (for the
/// exclusions). Hits are merged best rank first (an entry once, at its best
/// rank; ties by session and entry id), then `offset` skipped and `limit` kept.
pub fn search_page(
    alternatives: &[Alternative],
    limit: usize,
    offset: usize,
    mut plain: impl FnMut(&str, usize, usize) -> Result<Vec<SearchHit>>,
    mut text: impl FnMut(&SearchHit) -> Result<Option<String>>,
) -> Result<Vec<SearchHit>> {
    const BATCH: usize = 256;
    let wanted = offset.saturating_add(limit);
    let mut merged: Vec<SearchHit> = Vec::new();
    for alt in alternatives {
        let mut kept = 0;
        let mut from = 0;
        loop {
            let batch = plain(&alt.plain, BATCH.max(wanted), from)?;
            let got = batch.len();
            for hit in batch {
                if !alt.excluded.is_empty() {
                    let t = text(&hit)?.unwrap_or_default();
                    if alt
                        .excluded
                        .iter()
                        .any(|x| super::groups_match(std::slice::from_ref(x), &t))
                    {
                        continue;
                    }
                }
                kept += 1;
                match merged
                    .iter_mut()
                    .find(|m| m.session_id == hit.session_id && m.entry_id == hit.entry_id)
                {
                    Some(m) if hit.rank < m.rank => *m = hit,
                    Some(_) => {}
                    None => merged.push(hit),
                }
            }
            from += got;
            if got < BATCH.max(wanted) || kept >= wanted {
                break;
            }
        }
    }
    merged.sort_by(|a, b| {
        a.rank
            .total_cmp(&b.rank)
            .then_with(|| a.session_id.cmp(&b.session_id))
            .then_with(|| a.entry_id.cmp(&b.entry_id))
    });
    Ok(merged.into_iter().skip(offset).take(limit).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(query: &str) -> Vec<(String, usize)> {
        alternatives(query)
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|a| (a.plain, a.excluded.len()))
            .collect()
    }

    fn error(query: &str) -> String {
        alternatives(query).unwrap_err().to_string()
    }

    #[test]
    fn plain_queries_are_left_alone() {
        for q in [
            "foo bar",
            "\"a phrase\" pre*",
            "foo-bar",
            "or",
            "a - b".replace(" - ", " ").as_str(),
        ] {
            assert!(alternatives(q).unwrap().is_none(), "{q}");
        }
    }

    #[test]
    fn or_exclusion_and_groups_expand_into_alternatives() {
        assert_eq!(plain("foo OR bar"), [("foo".into(), 0), ("bar".into(), 0)]);
        assert_eq!(plain("abort -controller"), [("abort".into(), 1)]);
        assert_eq!(
            plain("(foo OR bar) baz"),
            [("foo baz".into(), 0), ("bar baz".into(), 0)]
        );
        assert_eq!(plain("x -(a OR b)"), [("x".into(), 2)]);
        assert_eq!(plain("x -(a b)"), [("x".into(), 1), ("x".into(), 1)]);
        assert_eq!(
            plain("\"a b\" OR -\"c d\" e"),
            [("\"a b\"".into(), 0), ("e".into(), 1)]
        );
    }

    #[test]
    fn malformed_queries_name_the_position() {
        assert!(error("(foo bar").contains("`(` at position 1 is never closed"));
        assert!(error("foo) bar").contains("`)` that closes no `(` at position 4"));
        assert!(error("foo - bar").contains("lone `-` at position 5"));
        assert!(error("-").contains("lone `-` at position 1"));
        assert!(error("-foo").contains("only excludes (-foo)"));
        assert!(error("a OR -b").contains("only excludes (-b)"));
        assert!(
            alternatives("a OR").unwrap().is_none(),
            "a trailing OR is a word"
        );
        assert!(alternatives("OR").unwrap().is_none());
        assert!(alternatives("x --").unwrap().is_none(), "dashes are a word");
        assert!(error("()").contains("position 2"));
        assert!(error("(NEAR").contains("`(` at position 1 is never closed"));
        assert!(
            alternatives("NEAR( robert');").unwrap().is_none(),
            "inside words"
        );
        assert!(error("NEAR(a b, 2)").contains("`)` that closes no `(` at position 12"));
    }

    #[test]
    fn texts_match_as_the_alternatives_say() {
        let m = |q: &str, t: &str| query_matches(q, t).unwrap();
        assert!(m("abort OR cancel", "we cancel it"));
        assert!(!m("abort -controller", "the abort controller"));
        assert!(m("abort -controller", "abort now"));
        assert!(m("(alpha OR beta) gamma", "beta and gamma"));
        assert!(!m("(alpha OR beta) gamma", "beta alone"));
        assert!(!m("x -\"a b\"", "x a b"));
        assert!(m("x -\"a b\"", "x b a"));
    }
}
