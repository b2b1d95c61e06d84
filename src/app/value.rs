//! JavaScript values as pi's code sees a parsed entry: objects keep their key
//! order (JavaScript's, as `JSON.parse` builds them), strings keep lone
//! surrogates, and the few operators pi applies to stored data (`+`, truthiness,
//! `String(x)`, `??`) behave as in JavaScript, so sums and keys come out
//! exactly as pi computes them.

use crate::error::{Error, Result};
use crate::json::{js_number_text, JsString};

/// A JSON value held as JavaScript holds it after `JSON.parse`.
#[derive(Debug, Clone, PartialEq)]
pub enum JsValue {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// A number (a double, as JavaScript reads every JSON number).
    Number(f64),
    /// A string (UTF-16 code units, lone surrogates kept).
    String(JsString),
    /// An array.
    Array(Vec<JsValue>),
    /// An object: members in insertion order, one per key (a repeated key keeps
    /// its first position and its last value, as `JSON.parse` does).
    Object(Vec<(JsString, JsValue)>),
}

/// Nesting deeper than this is refused: the parser keeps no frame on the
/// call stack per level, but dropping or cloning a value recurses. pi 1.6
/// under Node 22 parses any depth and writes (`JSON.stringify`) at most
/// about 4,160 levels, so every entry pi can have written is read.
const MAX_DEPTH: usize = 10_000;

impl JsValue {
    /// Parses JSON text (`JSON.parse`); lone surrogate escapes are kept.
    pub fn parse(text: &str) -> Result<JsValue> {
        let mut p = Parser {
            b: text.as_bytes(),
            s: text,
            pos: 0,
        };
        p.ws();
        let v = p.value()?;
        p.ws();
        if p.pos != p.b.len() {
            return Err(p.err());
        }
        Ok(v)
    }

    /// A string value.
    pub fn str(s: &str) -> JsValue {
        JsValue::String(JsString::new(s))
    }

    /// The member `key` of an object (`undefined` → `None`; non-objects have none).
    pub fn get(&self, key: &str) -> Option<&JsValue> {
        match self {
            JsValue::Object(members) => members.iter().find(|(k, _)| k.is(key)).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Sets `key` as `{...o, key: v}` does: in place if present, else appended.
    pub fn set(&mut self, key: &str, value: JsValue) {
        if let JsValue::Object(members) = self {
            match members.iter_mut().find(|(m, _)| m.is(key)) {
                Some((_, v)) => *v = value,
                None => members.push((JsString::new(key), value)),
            }
        }
    }

    /// The string, when this is one.
    pub fn as_js_str(&self) -> Option<&JsString> {
        match self {
            JsValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// Whether this is the string `s`.
    pub fn is_str(&self, s: &str) -> bool {
        self.as_js_str().is_some_and(|v| v.is(s))
    }

    /// JavaScript truthiness (`undefined` is `None`, falsy).
    pub fn truthy(v: Option<&JsValue>) -> bool {
        match v {
            None | Some(JsValue::Null) => false,
            Some(JsValue::Bool(b)) => *b,
            Some(JsValue::Number(x)) => *x != 0.0 && !x.is_nan(),
            Some(JsValue::String(s)) => !s.is_empty(),
            Some(JsValue::Array(_) | JsValue::Object(_)) => true,
        }
    }

    /// `x == null` (undefined or null).
    pub fn nullish(v: Option<&JsValue>) -> bool {
        matches!(v, None | Some(JsValue::Null))
    }

    /// `String(x)` as a template literal writes it (`undefined` for `None`).
    pub fn js_to_string(v: Option<&JsValue>) -> JsString {
        match v {
            None => JsString::new("undefined"),
            Some(JsValue::String(s)) => s.clone(),
            Some(other) => JsString::new(&other.to_plain_string()),
        }
    }

    /// `String(x)` for a defined value, as Rust text (lone surrogates lossy).
    fn to_plain_string(&self) -> String {
        match self {
            JsValue::Null => "null".into(),
            JsValue::Bool(b) => b.to_string(),
            JsValue::Number(x) => number_to_string(*x),
            JsValue::String(s) => s.to_string_lossy(),
            JsValue::Array(items) => items
                .iter()
                .map(|i| match i {
                    JsValue::Null => String::new(),
                    other => other.to_plain_string(),
                })
                .collect::<Vec<_>>()
                .join(","),
            JsValue::Object(_) => "[object Object]".into(),
        }
    }

    /// The value as `JSON.stringify` writes it (non-finite numbers as `null`,
    /// array-index keys first in ascending order, as JavaScript orders them).
    pub fn to_json(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }

    /// Appends [`JsValue::to_json`] to `out`, without recursion.
    pub fn write_json(&self, out: &mut String) {
        enum Step<'a> {
            Value(&'a JsValue),
            Text(&'static str),
            Key(&'a JsString),
        }
        let mut stack = vec![Step::Value(self)];
        while let Some(step) = stack.pop() {
            match step {
                Step::Text(t) => out.push_str(t),
                Step::Key(k) => {
                    out.push_str(k.json());
                    out.push(':');
                }
                Step::Value(v) => match v {
                    JsValue::Null => out.push_str("null"),
                    JsValue::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
                    JsValue::Number(x) => out.push_str(&js_number_text(*x)),
                    JsValue::String(s) => out.push_str(s.json()),
                    JsValue::Array(items) => {
                        out.push('[');
                        stack.push(Step::Text("]"));
                        for (i, item) in items.iter().enumerate().rev() {
                            stack.push(Step::Value(item));
                            if i > 0 {
                                stack.push(Step::Text(","));
                            }
                        }
                    }
                    JsValue::Object(members) => {
                        out.push('{');
                        stack.push(Step::Text("}"));
                        let mut push = |i: usize, k, v| {
                            stack.push(Step::Value(v));
                            stack.push(Step::Key(k));
                            if i > 0 {
                                stack.push(Step::Text(","));
                            }
                        };
                        // Most objects have no array-index key: their
                        // members go out in order, nothing sorted.
                        if members.iter().any(|(k, _)| array_index(k).is_some()) {
                            let ordered = js_key_order(members);
                            for (i, (k, v)) in ordered.into_iter().enumerate().rev() {
                                push(i, k, v);
                            }
                        } else {
                            for (i, (k, v)) in members.iter().enumerate().rev() {
                                push(i, k, v);
                            }
                        }
                    }
                },
            }
        }
    }
}

/// The array index a key names (`"0"`, `"17"`; not `"01"` or 2^32 - 1).
fn array_index(k: &JsString) -> Option<u32> {
    let inner = k.json().strip_prefix('"')?.strip_suffix('"')?;
    if inner.is_empty() || (inner.len() > 1 && inner.starts_with('0')) {
        return None;
    }
    if !inner.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    inner.parse::<u32>().ok().filter(|n| *n != u32::MAX)
}

/// An object's members in JavaScript's property order: array-index keys
/// ascending, then the rest in insertion order.
fn js_key_order(members: &[(JsString, JsValue)]) -> Vec<(&JsString, &JsValue)> {
    let index = array_index;
    let mut indexed: Vec<(u32, &JsString, &JsValue)> = members
        .iter()
        .filter_map(|(k, v)| index(k).map(|n| (n, k, v)))
        .collect();
    if indexed.is_empty() {
        return members.iter().map(|(k, v)| (k, v)).collect();
    }
    indexed.sort_by_key(|(n, _, _)| *n);
    let mut out: Vec<(&JsString, &JsValue)> = indexed.into_iter().map(|(_, k, v)| (k, v)).collect();
    out.extend(
        members
            .iter()
            .filter(|(k, _)| index(k).is_none())
            .map(|(k, v)| (k, v)),
    );
    out
}

/// `Number.prototype.toString()`: as `JSON.stringify` spells finite numbers,
/// and `NaN` / `Infinity` by name.
pub fn number_to_string(x: f64) -> String {
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        js_number_text(x)
    }
}

/// A running total as JavaScript's `+=` keeps it: a number until a string
/// (or an object) joins it, then a string.
#[derive(Debug, Clone, PartialEq)]
pub enum JsSum {
    /// A number (possibly `NaN`).
    Number(f64),
    /// A string (after concatenation).
    Text(String),
}

impl JsSum {
    /// `self + v`, with JavaScript's rules for `undefined`, `null`, booleans,
    /// strings and objects.
    pub fn add(&self, v: Option<&JsValue>) -> JsSum {
        let left_text = |s: &JsSum| match s {
            JsSum::Number(x) => number_to_string(*x),
            JsSum::Text(t) => t.clone(),
        };
        match v {
            Some(JsValue::String(_) | JsValue::Array(_) | JsValue::Object(_)) => {
                let right = v.map_or_else(String::new, JsValue::to_plain_string);
                JsSum::Text(left_text(self) + &right)
            }
            _ => {
                let right = match v {
                    None => f64::NAN,
                    Some(JsValue::Null) => 0.0,
                    Some(JsValue::Bool(b)) => f64::from(u8::from(*b)),
                    Some(JsValue::Number(x)) => *x,
                    Some(_) => f64::NAN,
                };
                match self {
                    JsSum::Number(x) => JsSum::Number(x + right),
                    JsSum::Text(t) => JsSum::Text(t.clone() + &number_to_string(right)),
                }
            }
        }
    }

    /// `self + other` for two running totals.
    pub fn plus(&self, other: &JsSum) -> JsSum {
        match (self, other) {
            (JsSum::Number(a), JsSum::Number(b)) => JsSum::Number(a + b),
            (a, b) => {
                let t = |s: &JsSum| match s {
                    JsSum::Number(x) => number_to_string(*x),
                    JsSum::Text(t) => t.clone(),
                };
                JsSum::Text(t(a) + &t(b))
            }
        }
    }

    /// `ToNumber(self)` (a string is read as JavaScript reads numeric strings).
    pub fn to_number(&self) -> f64 {
        match self {
            JsSum::Number(x) => *x,
            JsSum::Text(t) => {
                let t = crate::json::js_trim(t);
                if t.is_empty() {
                    0.0
                } else if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                    u64::from_str_radix(hex, 16).map_or(f64::NAN, |n| n as f64)
                } else if t == "Infinity" || t == "+Infinity" {
                    f64::INFINITY
                } else if t == "-Infinity" {
                    f64::NEG_INFINITY
                } else if t
                    .bytes()
                    .all(|c| c.is_ascii_digit() || b"+-.eE".contains(&c))
                {
                    t.parse().unwrap_or(f64::NAN)
                } else {
                    f64::NAN
                }
            }
        }
    }

    /// The total as `JSON.stringify` writes it.
    pub fn to_json(&self) -> String {
        match self {
            JsSum::Number(x) => js_number_text(*x),
            JsSum::Text(t) => crate::json::string_literal(t),
        }
    }
}

struct Parser<'a> {
    b: &'a [u8],
    s: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn err(&self) -> Error {
        Error::InvalidEntry(format!("invalid JSON at position {}", self.pos))
    }

    fn ws(&mut self) {
        while matches!(self.b.get(self.pos), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// A member's key and its colon, whitespace skipped on both sides.
    fn key(&mut self) -> Result<JsString> {
        self.ws();
        let key = self.string()?;
        self.ws();
        if self.b.get(self.pos) != Some(&b':') {
            return Err(self.err());
        }
        self.pos += 1;
        self.ws();
        Ok(key)
    }

    /// One value, its containers kept on a stack of their own rather than
    /// the call stack, so that any depth up to [`MAX_DEPTH`] is read.
    fn value(&mut self) -> Result<JsValue> {
        enum Open {
            Array(Vec<JsValue>),
            Object(Vec<(JsString, JsValue)>, Option<JsString>),
        }
        let mut open: Vec<Open> = Vec::new();
        loop {
            let deeper = |open: &[Open]| {
                if open.len() >= MAX_DEPTH {
                    Err(Error::InvalidEntry(format!(
                        "JSON nested deeper than {MAX_DEPTH} levels"
                    )))
                } else {
                    Ok(())
                }
            };
            let mut v = match self.b.get(self.pos) {
                Some(b'{') => {
                    self.pos += 1;
                    self.ws();
                    if self.b.get(self.pos) == Some(&b'}') {
                        self.pos += 1;
                        JsValue::Object(Vec::new())
                    } else {
                        deeper(&open)?;
                        let key = self.key()?;
                        open.push(Open::Object(Vec::new(), Some(key)));
                        continue;
                    }
                }
                Some(b'[') => {
                    self.pos += 1;
                    self.ws();
                    if self.b.get(self.pos) == Some(&b']') {
                        self.pos += 1;
                        JsValue::Array(Vec::new())
                    } else {
                        deeper(&open)?;
                        open.push(Open::Array(Vec::new()));
                        continue;
                    }
                }
                Some(b'"') => JsValue::String(self.string()?),
                Some(b't') => self.word("true", JsValue::Bool(true))?,
                Some(b'f') => self.word("false", JsValue::Bool(false))?,
                Some(b'n') => self.word("null", JsValue::Null)?,
                Some(b'-' | b'0'..=b'9') => {
                    let start = self.pos;
                    while matches!(
                        self.b.get(self.pos),
                        Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                    ) {
                        self.pos += 1;
                    }
                    crate::json::checked_number(&self.s[start..self.pos])
                        .map(JsValue::Number)
                        .ok_or_else(|| self.err())?
                }
                _ => return Err(self.err()),
            };
            // `v` is whole: it goes into the innermost open container, which
            // then takes its next value or closes (and so on outwards).
            loop {
                let Some(top) = open.last_mut() else {
                    return Ok(v);
                };
                self.ws();
                let next = self.b.get(self.pos).copied();
                match top {
                    Open::Array(items) => {
                        items.push(v);
                        match next {
                            Some(b',') => {
                                self.pos += 1;
                                self.ws();
                                break;
                            }
                            Some(b']') => {
                                self.pos += 1;
                                v = JsValue::Array(std::mem::take(items));
                            }
                            _ => return Err(self.err()),
                        }
                    }
                    Open::Object(members, pending) => {
                        let key = pending.take().ok_or_else(|| self.err())?;
                        match members.iter_mut().find(|(k, _)| *k == key) {
                            Some((_, old)) => *old = v,
                            None => members.push((key, v)),
                        }
                        match next {
                            Some(b',') => {
                                self.pos += 1;
                                *pending = Some(self.key()?);
                                break;
                            }
                            Some(b'}') => {
                                self.pos += 1;
                                v = JsValue::Object(std::mem::take(members));
                            }
                            _ => return Err(self.err()),
                        }
                    }
                }
                open.pop();
            }
        }
    }

    fn word(&mut self, w: &str, v: JsValue) -> Result<JsValue> {
        if self.s[self.pos..].starts_with(w) {
            self.pos += w.len();
            Ok(v)
        } else {
            Err(self.err())
        }
    }

    fn string(&mut self) -> Result<JsString> {
        if self.b.get(self.pos) != Some(&b'"') {
            return Err(self.err());
        }
        let start = self.pos;
        self.pos += 1;
        loop {
            // Jumps to the next quote or backslash (strings are most of an entry).
            let rest = self.b.get(self.pos..).unwrap_or_default();
            match memchr::memchr2(b'"', b'\\', rest) {
                None => return Err(self.err()),
                Some(at) if rest[at] == b'\\' => self.pos += at + 2,
                Some(at) => {
                    self.pos += at + 1;
                    break;
                }
            }
        }
        let raw = self.s.get(start..self.pos).ok_or_else(|| self.err())?;
        JsString::from_json_literal(raw).ok_or_else(|| self.err())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_writes_as_javascript() {
        let v =
            JsValue::parse(r#"{"b":1.50,"a":"\ud83d","2":true,"1":null,"b":[1e2,-0]}"#).unwrap();
        assert_eq!(
            v.to_json(),
            r#"{"1":null,"2":true,"b":[100,0],"a":"\ud83d"}"#
        );
        assert!(JsValue::parse("[1,]").is_err());
        assert!(JsValue::parse("{} x").is_err());
    }

    #[test]
    fn sums_follow_javascript_plus() {
        let s = JsSum::Number(0.0).add(Some(&JsValue::Number(0.1)));
        let s = s.add(Some(&JsValue::Number(0.2)));
        assert_eq!(s.to_json(), "0.30000000000000004");
        let t = JsSum::Number(1.0).add(Some(&JsValue::str("5")));
        assert_eq!(t, JsSum::Text("15".into()));
        assert_eq!(t.add(None), JsSum::Text("15NaN".into()));
        assert!(JsSum::Number(1.0).add(None).to_number().is_nan());
        assert_eq!(JsSum::Number(1.0).add(Some(&JsValue::Null)).to_json(), "1");
    }

    /// pi 1.6 (Node 22) parses any depth and writes about 4,160 levels
    /// (`JSON.stringify`'s stack): a value nested past that is read and
    /// written back as it was, without the call stack growing per level.
    #[test]
    fn reads_and_writes_what_pi_writes_however_deep() {
        let depth = 4_500;
        let text = format!("{}{}{}", r#"{"a":["#.repeat(depth), "1", "]}".repeat(depth));
        let v = JsValue::parse(&text).unwrap();
        assert_eq!(v.to_json(), text);
        let too_deep = "[".repeat(MAX_DEPTH + 2) + &"]".repeat(MAX_DEPTH + 2);
        assert!(JsValue::parse(&too_deep).is_err());
        assert!(JsValue::parse(&"[".repeat(3)).is_err());
        assert!(JsValue::parse(r#"{"a":1,}"#).is_err());
        assert!(JsValue::parse(r#"{"a" 1}"#).is_err());
        assert_eq!(
            JsValue::parse(r#" { "b" : [ 1 , { } , [ ] ] , "b" : 2 , "c" : { "d" : null } } "#)
                .unwrap()
                .to_json(),
            r#"{"b":2,"c":{"d":null}}"#
        );
        // Dropped on a thread with a small stack: 9,000 levels is 4,500 pairs.
        std::thread::Builder::new()
            .stack_size(4 << 20)
            .spawn(move || drop(v))
            .unwrap()
            .join()
            .unwrap();
    }
}
