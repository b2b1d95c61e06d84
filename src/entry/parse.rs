//! The facts parser: reads [`EntryFacts`] from an entry's text with the
//! checks pi applies to a session file line, by a fast structural scan where
//! a store already checked the text and by the full parser otherwise.

use super::facts::{EntryFacts, EntryType, Usage};
use crate::json::{self, JsString};
use serde::de::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// Why a line or JSON text is not a valid entry, in pi's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryProblem {
    /// Not JSON at all.
    NotJson,
    /// JSON, but not an object.
    NotObject,
    /// `type` is missing or not a string.
    MissingType,
    /// `id` is missing, empty or not a string.
    MissingId,
    /// `parentId` is missing or neither string nor null.
    InvalidParentId,
    /// `timestamp` is missing, empty or not a string.
    MissingTimestamp,
    /// A `leaf` whose `targetId` is neither string nor null.
    InvalidTargetId,
}

impl EntryProblem {
    /// pi's wording, as it follows `line <n>` in its messages.
    pub fn reason(&self) -> &'static str {
        match self {
            EntryProblem::NotJson => "is not valid JSON",
            EntryProblem::NotObject => "is not a valid session entry",
            EntryProblem::MissingType => "is missing entry type",
            EntryProblem::MissingId => "is missing entry id",
            EntryProblem::InvalidParentId => "has invalid parentId",
            EntryProblem::MissingTimestamp => "is missing timestamp",
            EntryProblem::InvalidTargetId => "has invalid targetId",
        }
    }
}

/// A member that may be absent; unlike `Option`, `null` is kept as present.
#[derive(Debug, Default)]
enum Field<'a> {
    #[default]
    Absent,
    Present(&'a str),
}

impl<'de: 'a, 'a> Deserialize<'de> for Field<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        <&RawValue>::deserialize(d).map(|r| Field::Present(r.get()))
    }
}

impl<'a> Field<'a> {
    fn raw(&self) -> Option<&'a str> {
        match self {
            Field::Absent => None,
            Field::Present(r) => Some(r),
        }
    }
    fn is_null_or_absent(&self) -> bool {
        matches!(self.raw(), None | Some("null"))
    }
    fn as_string(&self) -> Option<String> {
        let raw = self.raw()?;
        if !raw.starts_with('"') {
            return None;
        }
        // Ids, types and timestamps rarely hold escapes: then the text between
        // the quotes is the string.
        if raw.len() >= 2 && raw.ends_with('"') && !raw[1..raw.len() - 1].contains(['\\', '"']) {
            return Some(raw[1..raw.len() - 1].to_owned());
        }
        match json::parse_value_lossy(raw) {
            Ok(Value::String(s)) => Some(s),
            _ => None,
        }
    }
    fn as_js_string(&self) -> Option<JsString> {
        JsString::from_json_literal(self.raw()?)
    }
    fn is_string(&self) -> bool {
        self.raw().is_some_and(|r| r.starts_with('"'))
    }
    /// JavaScript truthiness of the value.
    fn is_truthy(&self) -> bool {
        match self.raw() {
            None | Some("null" | "false" | "\"\"") => false,
            Some(r) if r.starts_with(|c: char| c == '-' || c.is_ascii_digit()) => {
                r.parse::<f64>().is_ok_and(|x| x != 0.0 && !x.is_nan())
            }
            Some(_) => true,
        }
    }
}

/// The members the rules read; everything else is skipped without being parsed.
#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct Probe<'a> {
    #[serde(rename = "type", borrow)]
    entry_type: Field<'a>,
    #[serde(borrow)]
    id: Field<'a>,
    #[serde(rename = "parentId", borrow)]
    parent_id: Field<'a>,
    #[serde(borrow)]
    timestamp: Field<'a>,
    #[serde(rename = "targetId", borrow)]
    target_id: Field<'a>,
    #[serde(borrow)]
    label: Field<'a>,
    #[serde(borrow)]
    name: Field<'a>,
    #[serde(rename = "firstKeptEntryId", borrow)]
    first_kept_entry_id: Field<'a>,
    #[serde(rename = "retainedTail", borrow)]
    retained_tail: Field<'a>,
    #[serde(borrow)]
    message: Field<'a>,
    #[serde(borrow)]
    usage: Field<'a>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct MessageProbe<'a> {
    #[serde(borrow)]
    role: Field<'a>,
    #[serde(borrow)]
    usage: Field<'a>,
}

fn probe_object<'a, T: Deserialize<'a> + Default>(
    text: &'a str,
) -> Result<Option<T>, EntryProblem> {
    match serde_json::from_str::<T>(text) {
        Ok(p) => Ok(Some(p)),
        Err(e) if e.is_data() => {
            // Either not an object, or an object with a duplicate member (which JSON
            // allows, last wins): tell the two apart with a full parse.
            match json::parse_value_lossy(text) {
                Ok(Value::Object(_)) => Ok(None),
                Ok(_) => Err(EntryProblem::NotObject),
                Err(_) => Err(EntryProblem::NotJson),
            }
        }
        Err(_) => match json::parse_value_lossy(text) {
            Ok(Value::Object(_)) => Ok(None),
            Ok(_) => Err(EntryProblem::NotObject),
            Err(_) => Err(EntryProblem::NotJson),
        },
    }
}

/// Reads an object whose fast probe failed (duplicate keys, lone surrogates):
/// duplicates are resolved last-wins, as `JSON.parse` does, then probed again.
pub(super) fn parse_facts(text: &str) -> Result<EntryFacts, EntryProblem> {
    if !text.trim_start().starts_with('{') {
        // An array is an object to JavaScript's `typeof`, so pi reports its missing type.
        return match json::parse_value_lossy(text) {
            Ok(Value::Array(_)) => Err(EntryProblem::MissingType),
            Ok(_) => Err(EntryProblem::NotObject),
            Err(_) => Err(EntryProblem::NotJson),
        };
    }
    if let Some(probe) = probe_object::<Probe>(text)? {
        let mut facts = facts_from_probe(&probe, None)?;
        facts.message_span = probe.message.raw().and_then(|raw| {
            // The probe borrows from `text`: the member's offset in it.
            let start = (raw.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
            let span = start..start + raw.len();
            (text.get(span.clone()) == Some(raw)).then_some(span)
        });
        return Ok(facts);
    }
    let obj = json::OrderedObject::parse(text).map_err(|_| EntryProblem::NotJson)?;
    let mut dedup = json::OrderedObject::default();
    for (k, v) in obj.members {
        dedup.set(&k, v);
    }
    let text = dedup.to_json();
    let sanitized = json::replace_lone_surrogates(&text).unwrap_or(text);
    let probe: Probe = serde_json::from_str(&sanitized).map_err(|_| EntryProblem::NotObject)?;
    let mut facts = facts_from_probe(&probe, None)?;
    // The sanitised text lost lone surrogates; labels and names keep them.
    let exact = |key| {
        dedup
            .get(key)
            .and_then(|r| JsString::from_json_literal(r.get()))
    };
    match facts.entry_type {
        EntryType::Label => facts.label = exact("label"),
        EntryType::SessionInfo => facts.name = exact("name"),
        _ => {}
    }
    Ok(facts)
}

/// The members [`Probe`] reads, in its field order.
const PROBE_KEYS: [&str; 11] = [
    "type",
    "id",
    "parentId",
    "timestamp",
    "targetId",
    "label",
    "name",
    "firstKeptEntryId",
    "retainedTail",
    "message",
    "usage",
];

/// The facts of text a store checked when it was appended, read by the fast
/// structural scan ([`json::checked_object_members`]); `None` where that scan
/// defers to the full parser, and where the text breaks a rule (only
/// [`parse_facts`] says which).
pub(super) fn checked_facts(text: &str) -> Option<EntryFacts> {
    let (found, message) =
        json::checked_members_and_nested(text, PROBE_KEYS, "message", ["role", "usage"])?;
    let field = |i: usize| found[i].map_or(Field::Absent, Field::Present);
    let probe = Probe {
        entry_type: field(0),
        id: field(1),
        parent_id: field(2),
        timestamp: field(3),
        target_id: field(4),
        label: field(5),
        name: field(6),
        first_kept_entry_id: field(7),
        retained_tail: field(8),
        message: field(9),
        usage: field(10),
    };
    let message = message.map(|[role, usage]| MessageProbe {
        role: role.map_or(Field::Absent, Field::Present),
        usage: usage.map_or(Field::Absent, Field::Present),
    });
    let mut facts = facts_from_probe(&probe, Some(message)).ok()?;
    facts.message_span = found[9].map(|raw| {
        let start = raw.as_ptr() as usize - text.as_ptr() as usize;
        start..start + raw.len()
    });
    Some(facts)
}

/// The facts a probe's members say. `checked` is given for text a store
/// checked: then usage is read by the fast scan, and it holds the message's
/// members when that scan found them.
fn facts_from_probe(
    p: &Probe,
    checked: Option<Option<MessageProbe>>,
) -> Result<EntryFacts, EntryProblem> {
    let is_checked = checked.is_some();
    let usage = |raw: Option<&str>| {
        is_checked
            .then(|| checked_usage_from(raw))
            .flatten()
            .unwrap_or_else(|| usage_from(raw))
    };
    let entry_type = p
        .entry_type
        .as_string()
        .filter(|_| p.entry_type.is_string())
        .ok_or(EntryProblem::MissingType)?;
    let id =
        p.id.as_string()
            .filter(|s| !s.is_empty())
            .ok_or(EntryProblem::MissingId)?;
    let parent_id = match p.parent_id.raw() {
        Some("null") => None,
        Some(_) if p.parent_id.is_string() => p.parent_id.as_string(),
        _ => return Err(EntryProblem::InvalidParentId),
    };
    let timestamp = p
        .timestamp
        .as_string()
        .filter(|s| !s.is_empty())
        .ok_or(EntryProblem::MissingTimestamp)?;
    let entry_type = EntryType::from_name(&entry_type);
    if entry_type == EntryType::Leaf
        && !p.target_id.is_string()
        && p.target_id.raw() != Some("null")
    {
        return Err(EntryProblem::InvalidTargetId);
    }
    let mut facts = EntryFacts::common(entry_type, id, parent_id, timestamp);
    match facts.entry_type {
        EntryType::Leaf | EntryType::Label => facts.target_id = p.target_id.as_string(),
        _ => {}
    }
    match facts.entry_type {
        EntryType::Label => facts.label = p.label.as_js_string(),
        EntryType::SessionInfo => facts.name = p.name.as_js_string(),
        EntryType::Compaction => {
            facts.first_kept_entry_id = p.first_kept_entry_id.as_string();
            facts.has_retained_tail = p.retained_tail.is_truthy();
            facts.usage = usage(p.usage.raw());
        }
        EntryType::BranchSummary => facts.usage = usage(p.usage.raw()),
        EntryType::Message => {
            facts.message_missing = p.message.is_null_or_absent();
            if let Some(raw) = p.message.raw() {
                if raw.starts_with('{') {
                    let fast = checked.flatten();
                    if let Some(m) =
                        fast.or_else(|| probe_object::<MessageProbe>(raw).ok().flatten())
                    {
                        facts.role = m.role.as_string();
                        if facts.role.as_deref() == Some("assistant") {
                            facts.usage = usage(m.usage.raw());
                        }
                    } else if let Ok(Value::Object(m)) = json::parse_value_lossy(raw) {
                        facts.role = m.get("role").and_then(Value::as_str).map(str::to_owned);
                        if facts.role.as_deref() == Some("assistant") {
                            facts.usage = m.get("usage").and_then(usage_from_value);
                        }
                    }
                }
            }
        }
        _ => {}
    }
    Ok(facts)
}

/// The usage a checked entry's `usage` member counts, read by the fast scan;
/// `None` where the scan defers to [`usage_from`].
fn checked_usage_from(raw: Option<&str>) -> Option<Option<Usage>> {
    let Some(raw) = raw else {
        return Some(None);
    };
    if !raw.starts_with('{') {
        return Some(None);
    }
    let [input, output, cache_read, cache_write, cost] =
        json::checked_object_members(raw, ["input", "output", "cacheRead", "cacheWrite", "cost"])?;
    // serde refuses a number out of f64's range anywhere in the object (and
    // then nothing counts): such text goes to the full parser.
    if may_overflow_f64(raw) {
        return None;
    }
    let num = |r: Option<&str>| r.and_then(json::checked_number);
    let cost_total = match cost {
        Some(c) if c.starts_with('{') => {
            let [total] = json::checked_object_members(c, ["total"])?;
            num(total)
        }
        _ => None,
    };
    Some((|| {
        Some(Usage {
            input: num(input)?,
            output: num(output)?,
            cache_read: num(cache_read)?,
            cache_write: num(cache_write)?,
            cost_total: cost_total?,
        })
    })())
}

/// Whether `raw` may hold a number too large for an `f64`: an exponent, or
/// 300 digits in a row.
fn may_overflow_f64(raw: &str) -> bool {
    let mut run = 0;
    let mut prev = b' ';
    for &c in raw.as_bytes() {
        if (c | 0x20) == b'e' && (prev.is_ascii_digit() || prev == b'.') {
            return true;
        }
        run = if c.is_ascii_digit() { run + 1 } else { 0 };
        if run >= 300 {
            return true;
        }
        prev = c;
    }
    false
}

fn usage_from(raw: Option<&str>) -> Option<Usage> {
    let raw = raw?;
    if !raw.starts_with('{') {
        return None;
    }
    usage_from_value(&json::parse_value_lossy(raw).ok()?)
}

fn usage_from_value(v: &Value) -> Option<Usage> {
    let num = |key: &str| v.get(key).and_then(Value::as_f64);
    Some(Usage {
        input: num("input")?,
        output: num("output")?,
        cache_read: num("cacheRead")?,
        cache_write: num("cacheWrite")?,
        cost_total: v.get("cost")?.get("total")?.as_f64()?,
    })
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::entry::Entry;

    #[test]
    fn facts_follow_pi_checks() {
        let ok = Entry::parse(
            r#"{"type":"leaf","id":"a","parentId":null,"timestamp":"t","targetId":null}"#,
        )
        .expect("valid");
        assert_eq!(ok.facts().leaf_after(), None);
        let bad = |t: &str| Entry::parse(t).err();
        assert_eq!(bad("nope"), Some(EntryProblem::NotJson));
        assert_eq!(bad("[1]"), Some(EntryProblem::MissingType));
        assert_eq!(bad("3"), Some(EntryProblem::NotObject));
        assert_eq!(bad(r#"{"id":"a"}"#), Some(EntryProblem::MissingType));
        assert_eq!(
            bad(r#"{"type":"x","id":""}"#),
            Some(EntryProblem::MissingId)
        );
        assert_eq!(
            bad(r#"{"type":"x","id":"a","timestamp":"t"}"#),
            Some(EntryProblem::InvalidParentId)
        );
        assert_eq!(
            bad(r#"{"type":"x","id":"a","parentId":1,"timestamp":"t"}"#),
            Some(EntryProblem::InvalidParentId)
        );
        assert_eq!(
            bad(r#"{"type":"x","id":"a","parentId":null}"#),
            Some(EntryProblem::MissingTimestamp)
        );
        assert_eq!(
            bad(r#"{"type":"leaf","id":"a","parentId":null,"timestamp":"t","targetId":3}"#),
            Some(EntryProblem::InvalidTargetId)
        );
    }

    #[test]
    fn duplicate_keys_take_the_last_value_and_keep_text() {
        let text = r#"{"type":"label","id":"a","id":"b","parentId":null,"timestamp":"t","targetId":"x","label":" hi "}"#;
        let e = Entry::parse(text).expect("valid");
        assert_eq!(e.id(), "b");
        assert_eq!(e.json(), text);
        assert_eq!(
            e.facts().label_update(),
            Some(("x", Some(JsString::new("hi"))))
        );
    }

    #[test]
    fn assistant_usage_counts_only_when_complete() {
        let e = Entry::parse(r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"assistant","usage":{"input":1,"output":2,"cacheRead":3,"cacheWrite":4,"cost":{"total":0.5}}}}"#).expect("valid");
        assert_eq!(e.facts().usage.map(|u| u.cache_write), Some(4.0));
        let e = Entry::parse(r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"assistant","usage":{"input":1,"output":2,"cacheRead":3,"cacheWrite":4,"cost":{}}}}"#).expect("valid");
        assert_eq!(e.facts().usage, None);
    }

    /// The fast scan of checked text gives exactly the full parser's facts,
    /// wherever it answers at all.
    fn assert_checked_facts_agree(text: &str) -> bool {
        let fast = checked_facts(text);
        if let (Some(fast), Ok(full)) = (&fast, parse_facts(text)) {
            assert_eq!(fast, &full, "{text}");
        }
        fast.is_some()
    }

    #[test]
    fn checked_facts_agree_with_the_parser_on_real_sessions() {
        use crate::storage::SessionStorage;
        let (mut lines, mut fast) = (0, 0);
        for file in crate::pi_fixture_files() {
            // Entries as a store keeps them (older pi formats upgraded).
            let storage = crate::backend::jsonl::JsonlStorage::open(
                file,
                crate::storage::Durability::Relaxed,
            )
            .expect("a pi session");
            for entry in storage.entries(0, None).expect("entries") {
                lines += 1;
                fast += usize::from(assert_checked_facts_agree(entry.json()));
            }
        }
        assert!(lines > 100, "{lines} lines");
        // The fast path is the one taken (only odd text defers).
        assert!(fast * 100 >= lines * 95, "{fast} of {lines} fast");
    }

    #[test]
    fn checked_facts_defer_where_the_parser_must_decide() {
        for text in [
            // A key spelled with an escape.
            r#"{"typ\u0065":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user"}}"#,
            // A wanted key twice (last wins, through the full parser).
            r#"{"type":"message","id":"a","id":"b","parentId":null,"timestamp":"t","message":{"role":"user"}}"#,
            // A lone surrogate.
            r#"{"type":"label","id":"a","parentId":null,"timestamp":"t","targetId":"x","label":"\ud800"}"#,
        ] {
            assert!(checked_facts(text).is_none(), "{text}");
            // The entry still reads: through the full parser.
            let full = parse_facts(text).expect("valid");
            assert_eq!(Entry::from_checked_text(text.to_owned()).facts(), &full);
        }
        // A message whose role is given twice: the message's members come
        // from the full parser, the rest from the fast scan.
        let text = r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","role":"assistant","usage":{"input":1,"output":2,"cacheRead":3,"cacheWrite":4,"cost":{"total":0.5}}}}"#;
        assert!(assert_checked_facts_agree(text));
        assert_eq!(
            checked_facts(text).and_then(|f| f.role),
            Some("assistant".into())
        );
    }

    mod generated {
        use super::*;
        use proptest::prelude::*;

        /// JSON string bodies with the characters a scan can trip on.
        fn string_body() -> impl Strategy<Value = String> {
            proptest::collection::vec(
                prop_oneof![
                    Just("a".to_owned()),
                    Just("word ".to_owned()),
                    Just("\\\"".to_owned()),
                    Just("\\\\".to_owned()),
                    Just("\\n".to_owned()),
                    Just("\\u0041".to_owned()),
                    Just("\\ud83d\\ude00".to_owned()),
                    Just("\\ud800".to_owned()),
                    Just("{[}]".to_owned()),
                    Just(",:".to_owned()),
                    Just("é😀".to_owned()),
                ],
                0..6,
            )
            .prop_map(|parts| parts.concat())
        }

        fn ws() -> impl Strategy<Value = &'static str> {
            prop_oneof![4 => Just(""), 1 => Just(" "), 1 => Just("\n\t ")]
        }

        fn scalar() -> impl Strategy<Value = String> {
            prop_oneof![
                string_body().prop_map(|s| format!("\"{s}\"")),
                Just("null".to_owned()),
                Just("true".to_owned()),
                Just("0".to_owned()),
                Just("-0".to_owned()),
                Just("0.30000000000000004".to_owned()),
                Just("12345678901234567".to_owned()),
                Just("1e400".to_owned()),
                Just("-2.5E-3".to_owned()),
                Just("18446744073709551616".to_owned()),
            ]
        }

        fn value() -> impl Strategy<Value = String> {
            scalar().prop_recursive(3, 24, 4, |inner| {
                prop_oneof![
                    proptest::collection::vec((ws(), inner.clone()), 0..4).prop_map(|items| {
                        let items: Vec<String> = items
                            .into_iter()
                            .map(|(w, v)| format!("{w}{v}{w}"))
                            .collect();
                        format!("[{}]", items.join(","))
                    }),
                    proptest::collection::vec((key(), ws(), inner), 0..4).prop_map(|members| {
                        let m: Vec<String> = members
                            .into_iter()
                            .map(|(k, w, v)| format!("{w}\"{k}\"{w}:{w}{v}"))
                            .collect();
                        format!("{{{}}}", m.join(","))
                    }),
                ]
            })
        }

        fn key() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("type".to_owned()),
                Just("role".to_owned()),
                Just("usage".to_owned()),
                Just("total".to_owned()),
                Just("input".to_owned()),
                Just("content".to_owned()),
                Just("typ\\u0065".to_owned()),
                string_body(),
            ]
        }

        fn usage() -> impl Strategy<Value = String> {
            (scalar(), scalar(), value()).prop_map(|(a, b, extra)| {
                format!(
                    r#"{{"input":{a},"output":12,"cacheRead":{b},"cacheWrite":0,"extra":{extra},"cost":{{"input":0.1,"total":0.01234567890123456}}}}"#
                )
            })
        }

        fn message() -> impl Strategy<Value = String> {
            (
                prop_oneof![Just("\"user\""), Just("\"assistant\""), Just("3")],
                value(),
                usage(),
                any::<bool>(),
                ws(),
            )
                .prop_map(|(role, content, usage, twice, w)| {
                    let again = if twice { r#","role":"user""# } else { "" };
                    format!(
                        r#"{{{w}"role"{w}:{w}{role},"content":{content},"usage":{usage}{again}}}"#
                    )
                })
        }

        fn entry() -> impl Strategy<Value = String> {
            (
                prop_oneof![
                    Just("message"),
                    Just("compaction"),
                    Just("label"),
                    Just("leaf"),
                    Just("session_info"),
                    Just("branch_summary"),
                    Just("custom"),
                ],
                string_body(),
                message(),
                usage(),
                value(),
                proptest::collection::vec((key(), value()), 0..3),
                ws(),
            )
                .prop_map(|(kind, id, message, usage, other, extra, w)| {
                    let mut members = vec![
                        format!(r#""type":"{kind}""#),
                        format!(r#""id":"x{id}""#),
                        r#""parentId":null"#.to_owned(),
                        r#""timestamp":"2025-01-01T00:00:00.000Z""#.to_owned(),
                        format!(r#""message":{message}"#),
                        format!(r#""usage":{usage}"#),
                        format!(r#""targetId":{other}"#),
                        format!(r#""label":{other}"#),
                        format!(r#""name":{other}"#),
                        format!(r#""firstKeptEntryId":"x{id}""#),
                        format!(r#""retainedTail":{other}"#),
                    ];
                    members.extend(extra.into_iter().map(|(k, v)| format!(r#""{k}":{v}"#)));
                    format!("{w}{{{w}{}{w}}}{w}", members.join(&format!("{w},{w}")))
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]
            #[test]
            fn checked_facts_agree_with_the_parser(text in entry()) {
                assert_checked_facts_agree(&text);
            }

            #[test]
            fn checked_members_agree_with_the_parser(text in value()) {
                let keys = ["type", "role", "usage", "total", "content"];
                if let (Some(fast), Ok(full)) = (
                    json::checked_object_members(&text, keys),
                    json::object_members(&text, keys),
                ) {
                    prop_assert_eq!(fast, full.map(|r| r.map(RawValue::get)));
                }
            }
        }
    }
}
