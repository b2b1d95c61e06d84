//! JSON helpers that keep pi's bytes: raw text, ordered objects, JS number and
//! string rules.
//!
//! Entries are stored as the exact text they arrived as. Rules only need a few
//! fields, so we parse those and carry the text along untouched; where we must
//! build or edit JSON (new entries, format upgrades) we keep key order by hand,
//! because `serde_json::Map` sorts keys in this build.

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;
use std::fmt;

/// Removes the whitespace between JSON tokens, leaving strings and number
/// spellings as written. The input must be valid JSON.
pub fn minify(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_string = false;
    let mut escaped = false;
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !is_json_whitespace(c) {
            out.push(c);
        }
    }
    out
}

/// Whether `c` is removed by JavaScript's `String.prototype.trim`.
pub fn is_js_whitespace(c: char) -> bool {
    matches!(
        c,
        '\u{9}'..='\u{d}'
            | ' '
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'..='\u{200a}'
            | '\u{2028}'
            | '\u{2029}'
            | '\u{202f}'
            | '\u{205f}'
            | '\u{3000}'
            | '\u{feff}'
    )
}

/// JavaScript's `String.prototype.trim`.
pub fn js_trim(s: &str) -> &str {
    s.trim_matches(is_js_whitespace)
}

/// Whether `c` is whitespace JSON allows around a value (RFC 8259: space,
/// tab, line feed, carriage return) — not JavaScript's wider set.
pub fn is_json_whitespace(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// `s` without the JSON whitespace around it.
pub fn trim_json_whitespace(s: &str) -> &str {
    s.trim_matches(is_json_whitespace)
}

/// Parses JSON into an owned value, reading lone surrogate escapes as U+FFFD.
pub fn parse_value_lossy(text: &str) -> serde_json::Result<Value> {
    match serde_json::from_str(text) {
        Ok(v) => Ok(v),
        Err(first) => match replace_lone_surrogates(text) {
            Some(fixed) => serde_json::from_str(&fixed).map_err(|_| first),
            None => Err(first),
        },
    }
}

/// Returns `text` with each `\uXXXX` escape of an unpaired surrogate replaced by
/// `\ufffd`, or `None` when there is none.
pub fn replace_lone_surrogates(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut changed = false;
    let mut last = 0;
    let mut i = 0;
    let hex_at = |i: usize| -> Option<u16> {
        let s = text.get(i..i + 4)?;
        u16::from_str_radix(s, 16).ok()
    };
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 1 < bytes.len() {
            if bytes[i + 1] == b'u' {
                if let Some(unit) = hex_at(i + 2) {
                    let is_high = (0xD800..0xDC00).contains(&unit);
                    let is_low = (0xDC00..0xE000).contains(&unit);
                    if is_high {
                        let paired = bytes.get(i + 6) == Some(&b'\\')
                            && bytes.get(i + 7) == Some(&b'u')
                            && hex_at(i + 8).is_some_and(|u| (0xDC00..0xE000).contains(&u));
                        if paired {
                            i += 12;
                            continue;
                        }
                    }
                    if is_high || is_low {
                        out.push_str(&text[last..i]);
                        out.push_str("\\ufffd");
                        changed = true;
                        i += 6;
                        last = i;
                        continue;
                    }
                }
                i += 6;
            } else {
                i += 2;
            }
        } else {
            i += 1;
        }
    }
    if !changed {
        return None;
    }
    out.push_str(&text[last..]);
    Some(out)
}

/// The raw values of the last members named `keys` (JSON's last-wins rule)
/// of the object `text`, found in one pass that builds nothing: what
/// [`OrderedObject::get`] answers, without a key or value allocated (but
/// for keys written with escapes). Fails where [`OrderedObject::parse`]
/// may still succeed (lone surrogates): callers fall back to it.
pub fn object_members<'a, const N: usize>(
    text: &'a str,
    keys: [&str; N],
) -> serde_json::Result<[Option<&'a RawValue>; N]> {
    struct Finder<'k, const N: usize>([&'k str; N]);
    impl<'de, const N: usize> Visitor<'de> for Finder<'_, N> {
        type Value = [Option<&'de RawValue>; N];
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found = [None; N];
            while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
                match self.0.iter().position(|k| *k == key) {
                    Some(i) => found[i] = Some(map.next_value::<&'de RawValue>()?),
                    None => {
                        map.next_value::<serde::de::IgnoredAny>()?;
                    }
                }
            }
            Ok(found)
        }
    }
    /// A key, borrowed from the text unless it has escapes.
    struct Key<'a>(std::borrow::Cow<'a, str>);
    impl<'de> Deserialize<'de> for Key<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct KeyVisitor;
            impl<'de> Visitor<'de> for KeyVisitor {
                type Value = Key<'de>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a key")
                }
                fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                    Ok(Key(std::borrow::Cow::Borrowed(v)))
                }
                fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                    Ok(Key(std::borrow::Cow::Owned(v.to_owned())))
                }
            }
            d.deserialize_str(KeyVisitor)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    let found = de.deserialize_map(Finder(keys))?;
    de.end()?;
    Ok(found)
}

/// The raw values of the top-level members named `keys` of an object whose
/// text a store checked when it was appended, found by a structural scan
/// that validates nothing and skips strings with memchr (reading a long
/// context scans megabytes of message text).
///
/// `None` wherever the answer could differ from [`object_members`] on the
/// same text, so callers fall back to it: a key written with an escape, a
/// wanted key given twice (JSON's last-wins rule goes through the full
/// parser), a `\u` escape of a surrogate anywhere (lone surrogates), or
/// anything that is not an object. Text that was never checked must go
/// through [`object_members`]: this scan accepts malformed scalars.
pub fn checked_object_members<'a, const N: usize>(
    text: &'a str,
    keys: [&str; N],
) -> Option<[Option<&'a str>; N]> {
    checked_members_and_nested(text, keys, "", []).map(|(found, _)| found)
}

/// [`checked_object_members`], plus the members `inner` of the member named
/// `nested` when that is an object, found in the same pass (an entry and
/// its `message`: one scan of the message text, not two). The nested
/// answer is `None` where the nested object defers to the full parser.
#[allow(clippy::type_complexity)]
pub fn checked_members_and_nested<'a, const N: usize, const M: usize>(
    text: &'a str,
    keys: [&str; N],
    nested: &str,
    inner: [&str; M],
) -> Option<([Option<&'a str>; N], Option<[Option<&'a str>; M]>)> {
    let b = text.as_bytes();
    let mut found = [None; N];
    let mut inner_found = [None; M];
    let mut inner_ok = None;
    let start = skip_json_ws(b, 0);
    let end = scan_object(b, start, &keys, &mut found, &mut |key, at| {
        if key != nested.as_bytes() || b.get(at) != Some(&b'{') {
            return None;
        }
        let end = scan_object(b, at, &inner, &mut inner_found, &mut |_, _| None);
        inner_ok = Some(end.is_some());
        Some(end.unwrap_or_else(|| value_end(b, at).unwrap_or(b.len() + 1)))
    })?;
    if skip_json_ws(b, end) != b.len() {
        return None;
    }
    let cut = |span: Option<(usize, usize)>| span.map(|(s, e)| &text[s..e]);
    let nested_found = match inner_ok {
        Some(true) => Some(inner_found.map(cut)),
        _ => None,
    };
    Some((found.map(cut), nested_found))
}

/// The span of the value of `key` in the object `text` when that member is
/// an object and is the object's last member and the first of its name
/// (so its only one): found by scanning only the members before it, the
/// value running to the text's closing brace. For stored text whose writer
/// recorded that this holds (the archive's `message`, see
/// `backend::sqlite::codec`); it proves nothing about other text.
pub fn trailing_object_member(text: &str, key: &str) -> Option<std::ops::Range<usize>> {
    let start = first_member_value_start(text, key)?;
    let b = text.as_bytes();
    let close = text
        .trim_end_matches([' ', '\t', '\n', '\r'])
        .len()
        .checked_sub(1)?;
    let end = text[..close]
        .trim_end_matches([' ', '\t', '\n', '\r'])
        .len();
    (b.get(close) == Some(&b'}')
        && b.get(start) == Some(&b'{')
        && end > start
        && b[end - 1] == b'}')
        .then_some(start..end)
}

/// Where the value of the first member of the object `text` named `key`
/// starts, scanning only the members before it; `None` when there is none
/// or the scan defers (as [`checked_object_members`]).
fn first_member_value_start(text: &str, key: &str) -> Option<usize> {
    let b = text.as_bytes();
    let mut i = skip_json_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return None;
    }
    i = skip_json_ws(b, i + 1);
    loop {
        let (name, start) = member_key(b, i)?;
        if name == key.as_bytes() {
            return Some(start);
        }
        i = skip_json_ws(b, value_end(b, start)?);
        if b.get(i) != Some(&b',') {
            return None;
        }
        i = skip_json_ws(b, i + 1);
    }
}

/// The keys of an object written compactly, as `JSON.stringify` writes
/// one: no whitespace around its members, no escape in a key. `None` for
/// anything else. Validates nothing inside the values, and takes a `\u`
/// escape of a surrogate for any other (callers that care look for `\u`).
pub fn compact_object_keys(text: &str) -> Option<Vec<&str>> {
    let b = text.as_bytes();
    if b.first() != Some(&b'{') {
        return None;
    }
    let mut keys = Vec::new();
    if b.get(1) == Some(&b'}') {
        return (b.len() == 2).then_some(keys);
    }
    let mut i = 1;
    loop {
        if b.get(i) != Some(&b'"') {
            return None;
        }
        let key_end = quoted_end(b, i)?;
        let key = &text[i + 1..key_end - 1];
        if key.contains('\\') || b.get(key_end) != Some(&b':') {
            return None;
        }
        keys.push(key);
        let end = value_end_with(b, key_end + 1, quoted_end)?;
        match b.get(end) {
            Some(b',') => i = end + 1,
            Some(b'}') => return (end + 1 == b.len()).then_some(keys),
            _ => return None,
        }
    }
}

/// The key of the member starting at `at` (unescaped keys only) and where
/// its value starts.
fn member_key(b: &[u8], at: usize) -> Option<(&[u8], usize)> {
    if b.get(at) != Some(&b'"') {
        return None;
    }
    let (key_end, escaped) = string_end(b, at)?;
    if escaped {
        return None;
    }
    let i = skip_json_ws(b, key_end);
    if b.get(i) != Some(&b':') {
        return None;
    }
    Some((&b[at + 1..key_end - 1], skip_json_ws(b, i + 1)))
}

/// Scans the object opening at `at`, recording the value spans of `keys` in
/// `found`; returns the end of the object. `descend` may scan a member's
/// value itself (given its key and where it starts) and return its end.
fn scan_object(
    b: &[u8],
    at: usize,
    keys: &[&str],
    found: &mut [Option<(usize, usize)>],
    descend: &mut dyn FnMut(&[u8], usize) -> Option<usize>,
) -> Option<usize> {
    if b.get(at) != Some(&b'{') {
        return None;
    }
    let mut i = skip_json_ws(b, at + 1);
    if b.get(i) == Some(&b'}') {
        return Some(i + 1);
    }
    loop {
        let (key, start) = member_key(b, i)?;
        i = match descend(key, start) {
            Some(end) if end <= b.len() => end,
            Some(_) => return None,
            None => value_end(b, start)?,
        };
        if let Some(k) = keys.iter().position(|k| k.as_bytes() == key) {
            if found[k].is_some() {
                return None;
            }
            found[k] = Some((start, i));
        }
        i = skip_json_ws(b, i);
        match b.get(i) {
            Some(b',') => i = skip_json_ws(b, i + 1),
            Some(b'}') => return Some(i + 1),
            _ => return None,
        }
    }
}

/// The number a JSON number literal from checked text reads as, as
/// `serde_json::Value::as_f64` gives it (integers read as integers first, so
/// `-0` is `0`); `None` for anything else.
pub fn checked_number(raw: &str) -> Option<f64> {
    if !raw.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        return None;
    }
    if !raw.contains(['.', 'e', 'E']) {
        if let Ok(i) = raw.parse::<i64>() {
            return Some(i as f64);
        }
        if let Ok(u) = raw.parse::<u64>() {
            return Some(u as f64);
        }
    }
    raw.parse::<f64>().ok()
}

fn skip_json_ws(b: &[u8], mut i: usize) -> usize {
    while matches!(b.get(i), Some(b' ' | b'\t' | b'\n' | b'\r')) {
        i += 1;
    }
    i
}

/// The end (past the closing quote) of the string opening at `open`, and
/// whether it holds an escape; `None` at a surrogate `\u` escape or no end.
fn string_end(b: &[u8], open: usize) -> Option<(usize, bool)> {
    let mut i = open + 1;
    let mut escaped = false;
    loop {
        let j = i + memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
        if b[j] == b'"' {
            return Some((j + 1, escaped));
        }
        escaped = true;
        if b.get(j + 1) == Some(&b'u') {
            let hex = b.get(j + 2..j + 4)?;
            if hex[0] | 0x20 == b'd' && matches!(hex[1] | 0x20, b'8'..=b'9' | b'a'..=b'f') {
                return None;
            }
        }
        i = j + 2;
    }
}

/// The end of the value starting at `start` (a string, a nested object or
/// array, or a scalar).
fn value_end(b: &[u8], start: usize) -> Option<usize> {
    value_end_with(b, start, |b, open| string_end(b, open).map(|(end, _)| end))
}

/// The end (past the closing quote) of the string opening at `open`, found
/// by looking for quotes alone and counting the backslashes before each:
/// escapes (message text is full of `\n`) do not stop the search. Unlike
/// [`string_end`], it does not notice surrogate escapes.
pub(crate) fn quoted_end(b: &[u8], open: usize) -> Option<usize> {
    let mut i = open + 1;
    loop {
        let quote = i + memchr::memchr(b'"', b.get(i..)?)?;
        let backslashes = b[open + 1..quote]
            .iter()
            .rev()
            .take_while(|&&c| c == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return Some(quote + 1);
        }
        i = quote + 1;
    }
}

/// [`value_end`], finding the end of each string with `string_end`.
fn value_end_with(
    b: &[u8],
    start: usize,
    string_end: impl Fn(&[u8], usize) -> Option<usize>,
) -> Option<usize> {
    match *b.get(start)? {
        b'"' => string_end(b, start),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut i = start;
            loop {
                match *b.get(i)? {
                    b'"' => {
                        i = string_end(b, i)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
        }
        _ => {
            let len = b[start..]
                .iter()
                .position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                .unwrap_or(b.len() - start);
            (len > 0).then_some(start + len)
        }
    }
}

/// A JSON object as an ordered list of keys and raw values, for editing an
/// object without reordering its keys or respelling its values.
#[derive(Debug, Default)]
pub struct OrderedObject {
    /// The members in document order (duplicates kept, as in the text).
    pub members: Vec<(String, Box<RawValue>)>,
}

impl OrderedObject {
    /// Parses an object; fails on anything else.
    pub fn parse(text: &str) -> serde_json::Result<Self> {
        match serde_json::from_str(text) {
            Ok(v) => Ok(v),
            Err(first) => match replace_lone_surrogates(text) {
                // Keys with lone surrogates are vanishingly rare; values keep their text
                // only when the object parses as written.
                Some(fixed) => serde_json::from_str(&fixed).map_err(|_| first),
                None => Err(first),
            },
        }
    }

    /// The raw value of the last member named `key` (JSON's last-wins rule).
    pub fn get(&self, key: &str) -> Option<&RawValue> {
        self.members
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_ref())
    }

    /// Sets `key` to `raw` in place of every existing member of that name, keeping
    /// the first one's position; appends it when absent (as JavaScript does).
    pub fn set(&mut self, key: &str, raw: Box<RawValue>) {
        match self.members.iter().position(|(k, _)| k == key) {
            Some(pos) => {
                self.members[pos].1 = raw;
                let mut i = self.members.len();
                while i > pos + 1 {
                    i -= 1;
                    if self.members[i].0 == key {
                        self.members.remove(i);
                    }
                }
            }
            None => self.members.push((key.to_owned(), raw)),
        }
    }

    /// Removes every member named `key`.
    pub fn remove(&mut self, key: &str) {
        self.members.retain(|(k, _)| k != key);
    }

    /// Writes the object as compact JSON.
    pub fn to_json(&self) -> String {
        let mut w = ObjectWriter::new();
        for (k, v) in &self.members {
            w.raw(k, v.get());
        }
        w.finish()
    }
}

impl<'de> Deserialize<'de> for OrderedObject {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OrderedObject;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedObject, A::Error> {
                let mut members = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push((k, v));
                }
                Ok(OrderedObject { members })
            }
        }
        d.deserialize_map(V)
    }
}

/// Builds a compact JSON object with keys in the order they are added, as
/// `JSON.stringify` writes a freshly built JavaScript object.
#[derive(Debug)]
pub struct ObjectWriter {
    out: String,
    empty: bool,
}

impl Default for ObjectWriter {
    fn default() -> Self {
        Self::new()
    }
}

impl ObjectWriter {
    /// An empty object.
    pub fn new() -> Self {
        ObjectWriter {
            out: String::from("{"),
            empty: true,
        }
    }

    fn key(&mut self, key: &str) {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        self.out.push_str(&string_literal(key));
        self.out.push(':');
    }

    /// Adds a member whose value is already JSON text.
    pub fn raw(&mut self, key: &str, json: &str) -> &mut Self {
        self.key(key);
        self.out.push_str(json);
        self
    }

    /// Adds a string member.
    pub fn str(&mut self, key: &str, value: &str) -> &mut Self {
        self.key(key);
        self.out.push_str(&string_literal(value));
        self
    }

    /// Adds a string-or-null member.
    pub fn opt_str_or_null(&mut self, key: &str, value: Option<&str>) -> &mut Self {
        match value {
            Some(v) => self.str(key, v),
            None => self.raw(key, "null"),
        }
    }

    /// Adds a member only when it has a value (absent optional fields are omitted).
    pub fn opt_raw(&mut self, key: &str, json: Option<&str>) -> &mut Self {
        if let Some(j) = json {
            self.raw(key, j);
        }
        self
    }

    /// Adds a member from a `serde_json::Value`.
    pub fn value(&mut self, key: &str, value: &Value) -> &mut Self {
        self.raw(key, &value.to_string())
    }

    /// The object's text so far, left open: the caller writes the rest of
    /// its last member (and the closing brace) after it.
    pub fn unclosed(self) -> String {
        self.out
    }

    /// The finished object text.
    pub fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// A JSON string literal, escaped as `JSON.stringify` escapes it.
pub fn string_literal(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| String::from("\"\""))
}

/// A JavaScript string as pi holds it: UTF-16 code units, lone surrogates
/// included. Kept as the JSON literal `JSON.stringify` writes for it (lone
/// surrogates as `\udxxx` escapes), so it survives every store and every output
/// exactly; [`fmt::Display`] shows it with U+FFFD for what Unicode cannot hold.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct JsString(Box<str>);

impl JsString {
    /// The JavaScript string with the same code units as `s`.
    pub fn new(s: &str) -> Self {
        JsString(string_literal(s).into_boxed_str())
    }

    /// Reads a JSON string literal (any escapes, quotes included); `None` if `raw`
    /// is not one.
    pub fn from_json_literal(raw: &str) -> Option<Self> {
        // Most literals are already spelled as `JSON.stringify` spells them
        // (a stored entry was written by it): kept as they are, without the
        // round trip through UTF-16.
        if is_stringify_literal(raw) {
            return Some(JsString(raw.into()));
        }
        decode_literal(raw).map(|units| Self::from_utf16(&units))
    }

    /// Whether this string is exactly `s` (no lone surrogates in `s`).
    pub fn is(&self, s: &str) -> bool {
        match self.0.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
            Some(inner) if !needs_escape(s) => inner == s,
            _ => *self.0 == *string_literal(s),
        }
    }

    /// The string with these UTF-16 code units.
    pub fn from_utf16(units: &[u16]) -> Self {
        let mut out = String::with_capacity(units.len() + 2);
        out.push('"');
        for unit in char::decode_utf16(units.iter().copied()) {
            match unit {
                Ok(c) => push_escaped(&mut out, c),
                Err(lone) => {
                    out.push_str(&format!("\\u{:04x}", lone.unpaired_surrogate()));
                }
            }
        }
        out.push('"');
        JsString(out.into_boxed_str())
    }

    /// The UTF-16 code units.
    pub fn to_utf16(&self) -> Vec<u16> {
        decode_literal(&self.0).unwrap_or_default()
    }

    /// The JSON literal, as `JSON.stringify` writes it.
    pub fn json(&self) -> &str {
        &self.0
    }

    /// Whether the string has no code units.
    pub fn is_empty(&self) -> bool {
        self.0.len() == 2
    }

    /// JavaScript's `String.prototype.trim` (lone surrogates are not whitespace).
    pub fn js_trim(&self) -> Self {
        let units = self.to_utf16();
        let is_space = |u: &u16| char::from_u32(u32::from(*u)).is_some_and(is_js_whitespace);
        let start = units
            .iter()
            .position(|u| !is_space(u))
            .unwrap_or(units.len());
        let end = units
            .iter()
            .rposition(|u| !is_space(u))
            .map_or(start, |i| i + 1);
        Self::from_utf16(&units[start..end])
    }

    /// The text with each lone surrogate replaced by U+FFFD.
    pub fn to_string_lossy(&self) -> String {
        String::from_utf16_lossy(&self.to_utf16())
    }

    /// The text, if it holds no lone surrogate.
    pub fn to_str(&self) -> Option<String> {
        String::from_utf16(&self.to_utf16()).ok()
    }
}

impl fmt::Display for JsString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_string_lossy())
    }
}

/// Whether `JSON.stringify` escapes any character of `s`.
fn needs_escape(s: &str) -> bool {
    s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\')
}

/// Whether `raw` is a JSON string literal exactly as `JSON.stringify` writes
/// its string: no raw control character, only the escapes it writes (`\"`,
/// `\\`, `\b\f\n\r\t`, `\u00xx` for the other controls and `\udxxx` for
/// a lone surrogate, lowercase hex). `false` says nothing about validity.
fn is_stringify_literal(raw: &str) -> bool {
    let b = raw.as_bytes();
    let Some(inner) = b.strip_prefix(b"\"").and_then(|t| t.strip_suffix(b"\"")) else {
        return false;
    };
    // The common case, in one pass the compiler vectorises: nothing escaped.
    if !inner.iter().any(|&c| c < 0x20 || c == b'"' || c == b'\\') {
        return true;
    }
    let hex4 = |at: usize, lower: bool| -> Option<u16> {
        let digits = inner.get(at..at + 4)?;
        let mut v = 0u16;
        for &d in digits {
            let n = match d {
                b'0'..=b'9' => d - b'0',
                b'a'..=b'f' => d - b'a' + 10,
                b'A'..=b'F' if !lower => d - b'A' + 10,
                _ => return None,
            };
            v = v << 4 | u16::from(n);
        }
        Some(v)
    };
    let mut i = 0;
    while i < inner.len() {
        // The text up to the next escape, checked in one pass.
        let next = memchr::memchr(b'\\', &inner[i..]).map_or(inner.len(), |at| i + at);
        if inner[i..next].iter().any(|&c| c < 0x20 || c == b'"') {
            return false;
        }
        i = next;
        if i == inner.len() {
            break;
        }
        match inner[i] {
            b'"' => return false,
            c if c < 0x20 => return false,
            b'\\' => match inner.get(i + 1) {
                Some(b'"' | b'\\' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                Some(b'u') => {
                    let Some(unit) = hex4(i + 2, true) else {
                        return false;
                    };
                    let ok = match unit {
                        0x08 | 0x09 | 0x0a | 0x0c | 0x0d => false,
                        0..0x20 => true,
                        // A high surrogate is lone unless a low one's escape
                        // follows (the pair is then written as its character).
                        0xd800..0xdc00 => {
                            !(inner.get(i + 6) == Some(&b'\\')
                                && inner.get(i + 7) == Some(&b'u')
                                && hex4(i + 8, false)
                                    .is_some_and(|low| (0xdc00..0xe000).contains(&low)))
                        }
                        // Lone: a high surrogate before it would have ended the scan.
                        0xdc00..0xe000 => true,
                        _ => false,
                    };
                    if !ok {
                        return false;
                    }
                    i += 6;
                }
                _ => return false,
            },
            _ => i += 1,
        }
    }
    true
}

/// Appends `s` as a JSON string literal, escaped as `JSON.stringify` does.
pub fn push_string_literal(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        push_escaped(out, c);
    }
    out.push('"');
}

/// Escapes one character the way `JSON.stringify` does.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
        c => out.push(c),
    }
}

/// The UTF-16 code units of a JSON string literal, escapes decoded (lone
/// surrogate escapes kept as code units); `None` if `raw` is not a literal.
fn decode_literal(raw: &str) -> Option<Vec<u16>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    let mut units = Vec::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                let unit = match chars.next()? {
                    '"' => 0x22,
                    '\\' => 0x5c,
                    '/' => 0x2f,
                    'b' => 0x08,
                    'f' => 0x0c,
                    'n' => 0x0a,
                    'r' => 0x0d,
                    't' => 0x09,
                    'u' => {
                        let hex: String = chars.by_ref().take(4).collect();
                        if hex.len() != 4 {
                            return None;
                        }
                        u16::from_str_radix(&hex, 16).ok()?
                    }
                    _ => return None,
                };
                units.push(unit);
            }
            '"' => return None,
            c if u32::from(c) < 0x20 => return None,
            c => {
                let mut buf = [0u16; 2];
                units.extend_from_slice(c.encode_utf16(&mut buf));
            }
        }
    }
    Some(units)
}

/// A JSON number the way JavaScript prints it: integral values without a
/// fraction (`3`, not `3.0`); non-finite values as `null`, as `JSON.stringify` does.
pub fn js_number(x: f64) -> Value {
    if !x.is_finite() {
        return Value::Null;
    }
    if x.fract() == 0.0 && x.abs() < 9.007_199_254_740_992e15 {
        // Exactly representable as an integer, so this conversion is lossless.
        #[allow(clippy::cast_possible_truncation)]
        return Value::from(x as i64);
    }
    serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
}

/// A number spelled as JavaScript's `JSON.stringify` spells it (ECMAScript
/// `Number::toString`: the shortest digits that read back to the same double,
/// plain between 1e-7 and 1e21, exponent form with a sign outside; `-0` as `0`,
/// non-finite values as `null`).
pub fn js_number_text(x: f64) -> String {
    if !x.is_finite() {
        return "null".to_owned();
    }
    if x == 0.0 {
        return "0".to_owned();
    }
    if x.fract() == 0.0 && x.abs() < 9.007_199_254_740_992e15 {
        // Below 2^53 every integer is a double and no shorter digits read
        // back to it: its digits are the integer's. Exact, so lossless.
        #[allow(clippy::cast_possible_truncation)]
        return (x as i64).to_string();
    }
    // Rust's `{:e}` writes the shortest round-trip digits, as ECMAScript asks.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let k = digits.len() as i64;
    let n = exp.parse::<i64>().unwrap_or(0) + 1;
    let mut out = String::with_capacity(24);
    if x < 0.0 {
        out.push('-');
    }
    if k <= n && n <= 21 {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        out.push_str(&digits[..n as usize]);
        out.push('.');
        out.push_str(&digits[n as usize..]);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(&digits);
    } else {
        out.push_str(&digits[..1]);
        if k > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        out.push(if n > 0 { '+' } else { '-' });
        out.push_str(&(n - 1).abs().to_string());
    }
    out
}

/// Wraps JSON text (already valid) as a raw value for embedding in output.
pub fn raw_value(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned())
        .unwrap_or_else(|_| RawValue::from_string("null".to_owned()).expect("null is JSON"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn object_members_answer_as_the_ordered_object_does() {
        for text in [
            r#"{"a":1,"message":{"role":"user"},"b":[1,{"message":2}]}"#,
            r#"{"message":1,"message":{"x":"\\u00e9"}}"#,
            r#"{"mess\u0061ge":"escaped key","other":null}"#,
            r#"{"b":true}"#,
            r#"{}"#,
        ] {
            let ordered = super::OrderedObject::parse(text).unwrap();
            let [message, b] = super::object_members(text, ["message", "b"]).unwrap();
            assert_eq!(
                message.map(|r| r.get()),
                ordered.get("message").map(|r| r.get()),
                "{text}"
            );
            assert_eq!(
                b.map(|r| r.get()),
                ordered.get("b").map(|r| r.get()),
                "{text}"
            );
        }
        assert!(super::object_members("[1]", ["a"]).is_err());
        assert!(super::object_members("{\"a\":1} x", ["a"]).is_err());
    }

    use super::*;

    #[test]
    fn numbers_are_spelled_as_javascript_spells_them() {
        for (x, js) in [
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-17.0, "-17"),
            (0.1 + 0.2, "0.30000000000000004"),
            (0.345_081_300_000_000_1, "0.3450813000000001"),
            (0.011_844_299_999_999_999, "0.011844299999999999"),
            (1e21, "1e+21"),
            (1e20, "100000000000000000000"),
            (123_456_789_012_345_680_000.0, "123456789012345680000"),
            (2f64.powi(60), "1152921504606847000"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (5e-324, "5e-324"),
            (1.797_693_134_862_315_7e308, "1.7976931348623157e+308"),
            (123.456, "123.456"),
            (f64::NAN, "null"),
            (f64::INFINITY, "null"),
        ] {
            assert_eq!(js_number_text(x), js, "{x:e}");
            if x.is_finite() {
                assert_eq!(js.parse::<f64>().unwrap(), x, "{js} reads back");
            }
        }
    }

    #[test]
    fn js_strings_keep_lone_surrogates() {
        let s = JsString::from_json_literal(r#"" label \udbff\u0041\n""#).unwrap();
        assert_eq!(s.json(), r#"" label \udbffA\n""#);
        assert_eq!(s.js_trim().json(), r#""label \udbffA""#);
        assert_eq!(s.js_trim().to_string_lossy(), "label \u{fffd}A");
        assert_eq!(s.to_str(), None);
        let pair = JsString::from_json_literal(r#""\ud83d\ude00 x""#).unwrap();
        assert_eq!(pair.json(), "\"\u{1f600} x\"");
        assert_eq!(JsString::new("a\"b\\").json(), r#""a\"b\\""#);
        assert_eq!(JsString::new(" \u{3000}").js_trim().json(), "\"\"");
        assert!(JsString::new("").is_empty());
        assert_eq!(JsString::from_json_literal("\"a"), None);
        assert_eq!(JsString::from_json_literal(r#""\x""#), None);
        assert_eq!(JsString::from_json_literal(r#""\u12""#), None);
        // The same literal as serde_json writes for valid text.
        assert_eq!(
            JsString::new("\u{1}\u{7f}é").json(),
            string_literal("\u{1}\u{7f}é")
        );
    }

    /// A literal kept as read must be the one decoding and re-escaping
    /// writes: every pair of pieces below (each escape `JSON.stringify`
    /// writes and several it does not, surrogate halves in both cases,
    /// raw text) read both ways.
    #[test]
    fn literals_kept_as_read_are_what_stringify_writes() {
        let pieces = [
            "a",
            "é",
            "\u{1f600}",
            "\u{2028}",
            "\u{7f}",
            "/",
            r"\/",
            r#"\""#,
            r"\\",
            r"\b",
            r"\f",
            r"\n",
            r"\r",
            r"\t",
            r"\u0000",
            r"\u001f",
            r"\u001F",
            r"\u0008",
            r"\u000a",
            r"\u0020",
            r"\u0041",
            r"\u00e9",
            r"\u2028",
            r"\ud83d",
            r"\uD83D",
            r"\ude00",
            r"\uDE00",
            r"\udbff",
            r"\udfff",
            r"\uffff",
            r"\x",
            r"\u12",
            "\u{1}",
            "\"",
        ];
        let mut kept = 0;
        for a in pieces {
            for b in pieces {
                for raw in [format!("\"{a}{b}\""), format!("\"{a}{b}{a}\"")] {
                    let slow = decode_literal(&raw).map(|u| JsString::from_utf16(&u));
                    assert_eq!(JsString::from_json_literal(&raw), slow, "{raw}");
                    if is_stringify_literal(&raw) {
                        kept += 1;
                        assert_eq!(slow.map(|s| s.0.into_string()), Some(raw.clone()));
                    }
                }
            }
        }
        assert!(kept > 100, "the fast path was taken {kept} times");
        for s in ["", "a", "a\"b", "\n", "é\u{1}"] {
            assert!(JsString::new(s).is(s));
            assert!(!JsString::new(s).is("x"));
        }
    }

    #[test]
    fn minify_keeps_strings_and_numbers() {
        assert_eq!(
            minify("{ \"a b\" : [1.50, 2e3 ], \"c\":\" x \\\" y\" }"),
            "{\"a b\":[1.50,2e3],\"c\":\" x \\\" y\"}"
        );
    }

    #[test]
    fn lone_surrogates_are_replaced_but_pairs_kept() {
        let t = r#"{"a":"\ud83d\ude00 \ud83d x \ude00"}"#;
        let fixed = replace_lone_surrogates(t).expect("changed");
        assert_eq!(fixed, r#"{"a":"\ud83d\ude00 \ufffd x \ufffd"}"#);
        assert!(parse_value_lossy(t).is_ok());
    }

    #[test]
    fn ordered_object_keeps_order_and_last_wins() {
        let mut o = OrderedObject::parse(r#"{"z":1,"a":2.0,"z":3}"#).expect("object");
        assert_eq!(o.get("z").map(|r| r.get()), Some("3"));
        o.set("id", raw_value("\"x\""));
        o.set("z", raw_value("4"));
        assert_eq!(o.to_json(), r#"{"z":4,"a":2.0,"id":"x"}"#);
    }

    #[test]
    fn js_numbers_print_like_javascript() {
        assert_eq!(js_number(3.0).to_string(), "3");
        assert_eq!(js_number(0.1 + 0.2).to_string(), "0.30000000000000004");
        assert_eq!(js_number(f64::NAN), Value::Null);
    }
}

/// Valid, compact JSON text: an opaque value the caller hands to the session
/// layer (a message, details, usage …), stored with its keys and numbers as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonText(String);

impl JsonText {
    /// Checks and compacts JSON text.
    pub fn parse(text: &str) -> Result<Self, serde_json::Error> {
        parse_value_lossy(text)?;
        Ok(JsonText(minify(trim_json_whitespace(text))))
    }

    /// A JSON string.
    pub fn string(s: &str) -> Self {
        JsonText(string_literal(s))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value parsed (lone surrogates read as U+FFFD).
    pub fn to_value(&self) -> Value {
        parse_value_lossy(&self.0).unwrap_or(Value::Null)
    }
}

impl From<&Value> for JsonText {
    fn from(v: &Value) -> Self {
        JsonText(v.to_string())
    }
}

impl From<Value> for JsonText {
    fn from(v: Value) -> Self {
        JsonText(v.to_string())
    }
}

impl From<&RawValue> for JsonText {
    fn from(v: &RawValue) -> Self {
        JsonText(minify(v.get()))
    }
}
