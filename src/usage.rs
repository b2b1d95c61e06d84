//! The usage one entry carries, by the app contract's rules (pi 1.6's
//! `getSessionStats` and `getUsageCostBreakdown`): an assistant message's
//! `usage` (keyed `provider/model`, `responseModel` first), a `usage`
//! entry's (keyed by its own `provider/model`), a tool result's and a
//! compaction's or branch summary's (keyed `Tools/summaries`). Each archive
//! keeps one row of these facts per usage-carrying entry (`usage_facts`),
//! written at append and import, so that `stats` sums rows instead of
//! reading entries.
//!
//! A fork copies entries with their ids into a new session: each fact has a
//! [`UsageFact::dedup`] key made of the entry's id and its timestamp, which
//! a fork's copy shares and an unrelated session's entry (ids are 8 hex
//! digits: they collide across an archive of 400,000 entries) practically
//! never does; the archive counts one row per key.

use crate::entry::{timestamp_millis, Entry, EntryType};
use serde::Deserialize;
use serde_json::Value;

/// The key of usage that is not a model's (pi's `Tools/summaries`).
pub const TOOLS_KEY: &str = "Tools/summaries";

/// One entry's usage.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageFact {
    /// FNV-1a 64 of the entry's id, a NUL and its timestamp (as `i64`).
    pub dedup: i64,
    /// The entry's timestamp as Unix ms (`None` when it does not parse).
    pub at_ms: Option<i64>,
    /// `provider/model` as pi's breakdown keys it, or [`TOOLS_KEY`].
    pub model: String,
    /// `usage.input`.
    pub input: f64,
    /// `usage.output`.
    pub output: f64,
    /// `usage.cacheRead`.
    pub cache_read: f64,
    /// `usage.cacheWrite`.
    pub cache_write: f64,
    /// `usage.cost.total`.
    pub cost: f64,
}

impl UsageFact {
    /// `input + output + cacheRead + cacheWrite`.
    pub fn tokens(&self) -> f64 {
        self.input + self.output + self.cache_read + self.cache_write
    }
}

#[derive(Deserialize)]
struct Raw {
    message: Option<Message>,
    usage: Option<Value>,
    provider: Option<Value>,
    model: Option<Value>,
}

#[derive(Deserialize)]
struct Message {
    role: Option<Value>,
    usage: Option<Value>,
    provider: Option<Value>,
    model: Option<Value>,
    #[serde(rename = "responseModel")]
    response_model: Option<Value>,
}

/// JavaScript's truthiness of a member (`undefined` is `None`).
fn truthy(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|x| x != 0.0 && !x.is_nan()),
        Some(Value::String(s)) => !s.is_empty(),
        Some(_) => true,
    }
}

/// `String(v)` for the values a model or provider holds.
fn js_string(v: Option<&Value>) -> String {
    match v {
        None => "undefined".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Object(_)) => "[object Object]".to_owned(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| match x {
                Value::Null => String::new(),
                x => js_string(Some(x)),
            })
            .collect::<Vec<_>>()
            .join(","),
        Some(other) => other.to_string(),
    }
}

/// A usage member's number (anything else adds nothing).
fn number(v: Option<&Value>) -> f64 {
    v.and_then(Value::as_f64).unwrap_or(0.0)
}

/// The dedup key of an entry with this id and timestamp.
pub fn dedup_key(id: &str, timestamp: &str) -> i64 {
    let mut h = crate::fnv::Fnv::new();
    h.update(id.as_bytes());
    h.update(&[0]);
    h.update(timestamp.as_bytes());
    h.value() as i64
}

/// The usage `entry` carries by the app contract's rules, if any.
pub fn usage_fact(entry: &Entry) -> Option<UsageFact> {
    let is_usage = matches!(entry.entry_type(), EntryType::Other(t) if t == "usage");
    let summary = matches!(
        entry.entry_type(),
        EntryType::BranchSummary | EntryType::Compaction
    );
    let is_message = *entry.entry_type() == EntryType::Message;
    if !(is_usage || summary || is_message) {
        return None;
    }
    let raw: Raw = serde_json::from_str(entry.json()).ok()?;
    let (model, usage) = if is_message {
        let m = raw.message?;
        let role = m.role.as_ref().and_then(Value::as_str);
        match role {
            Some("assistant") => {
                let model = match &m.response_model {
                    Some(r) if !r.is_null() => Some(r),
                    _ => m.model.as_ref(),
                };
                (
                    format!("{}/{}", js_string(m.provider.as_ref()), js_string(model)),
                    m.usage,
                )
            }
            Some("toolResult") => (TOOLS_KEY.to_owned(), m.usage),
            _ => return None,
        }
    } else if is_usage {
        (
            format!(
                "{}/{}",
                js_string(raw.provider.as_ref()),
                js_string(raw.model.as_ref())
            ),
            raw.usage,
        )
    } else {
        (TOOLS_KEY.to_owned(), raw.usage)
    };
    if !truthy(usage.as_ref()) {
        return None;
    }
    let u = usage?;
    let f = entry.facts();
    Some(UsageFact {
        dedup: dedup_key(&f.id, &f.timestamp),
        at_ms: timestamp_millis(&f.timestamp),
        model,
        input: number(u.get("input")),
        output: number(u.get("output")),
        cache_read: number(u.get("cacheRead")),
        cache_write: number(u.get("cacheWrite")),
        cost: number(u.get("cost").and_then(|c| c.get("total"))),
    })
}

/// What `stats` groups usage by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UsageDimension {
    /// The model key.
    Model,
    /// The UTC day of the entry.
    Day,
    /// The UTC week (from Monday) of the entry.
    Week,
    /// The session's working directory.
    Project,
    /// The session.
    Session,
}

/// Which usage `stats` sums.
#[derive(Debug, Clone, Default)]
pub struct UsageQuery {
    /// From this time (Unix ms, inclusive).
    pub since_ms: Option<i64>,
    /// Before this time (Unix ms, exclusive).
    pub until_ms: Option<i64>,
    /// Only sessions of this directory and the directories below it.
    pub cwd_under: Option<String>,
}

/// Usage summed by session, UTC day and model: what an archive answers, a
/// few thousand rows at most, which `stats` groups further.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRow {
    /// The session's id.
    pub session: String,
    /// The session's working directory.
    pub cwd: String,
    /// Days since 1970-01-01 (UTC).
    pub day: i64,
    /// The model key.
    pub model: String,
    /// Entries counted.
    pub entries: i64,
    /// Input tokens.
    pub input: f64,
    /// Output tokens.
    pub output: f64,
    /// Cache-read tokens.
    pub cache_read: f64,
    /// Cache-write tokens.
    pub cache_write: f64,
    /// Cost.
    pub cost: f64,
}

/// Milliseconds in a day.
pub const DAY_MS: i64 = 86_400_000;

/// `YYYY-MM-DD` of a day number (days since 1970-01-01).
pub fn day_string(day: i64) -> String {
    let iso = crate::entry::iso_timestamp(day.saturating_mul(DAY_MS));
    iso.get(..10).unwrap_or(&iso).to_owned()
}

/// The Monday (as a day number) of the week holding `day`.
pub fn week_start(day: i64) -> i64 {
    // 1970-01-01 was a Thursday: day 4 was a Monday.
    day - (day - 4).rem_euclid(7)
}
