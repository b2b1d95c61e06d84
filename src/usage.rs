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

/// Whether [`usage_fact`] must parse `entry` to know: false only where the
/// parse is sure to find nothing, without it. A message whose role is a
/// string other than `assistant` and `toolResult` counts nothing (the facts
/// read that role last-wins; a duplicated member fails the parse below
/// anyway). Nor does an entry whose text has no `usage` member: a member
/// name can only spell `usage` as those bytes or with a `\u` escape. Both
/// tests read no JSON: the parse was 6 % of an import's CPU, spent mostly
/// on user messages and tool results (inline images among them).
fn may_carry_usage(entry: &Entry) -> bool {
    if *entry.entry_type() == EntryType::Message {
        if let Some(role) = entry.facts().role.as_deref() {
            if role != "assistant" && role != "toolResult" {
                return false;
            }
        }
    }
    let text = entry.json().as_bytes();
    memchr::memmem::find(text, b"usage").is_some() || memchr::memmem::find(text, b"\\u").is_some()
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
    if !may_carry_usage(entry) {
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

/// The UTC day (days since 1970-01-01) of a time in Unix ms, day 0 when
/// there is none: the floor, as the old per-row trigger's
/// `at_ms / 86400000 - (at_ms % 86400000 < 0)` took it, so times before
/// 1970 fall on the day before, not the day after.
pub fn day_of(at_ms: Option<i64>) -> i64 {
    at_ms.map_or(0, |ms| ms.div_euclid(DAY_MS))
}

/// One (session, UTC day, model) row of per-day usage (`usage_daily`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DaySums {
    /// Counted facts.
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

impl DaySums {
    /// The row after its first fact of an append: the stored row plus the
    /// fact, or, with no row stored, the fact's own values. Not `0.0` plus
    /// them: the old trigger inserted a missing row with the values as they
    /// came, and `0.0 + -0.0` is `0.0`, so the bits would differ.
    pub fn start(stored: Option<DaySums>, first: &UsageFact) -> DaySums {
        match stored {
            Some(mut row) => {
                row.add(first);
                row
            }
            None => DaySums {
                entries: 1,
                input: first.input,
                output: first.output,
                cache_read: first.cache_read,
                cache_write: first.cache_write,
                cost: first.cost,
            },
        }
    }

    /// Adds one counted fact, as the trigger's `ON CONFLICT` update did.
    pub fn add(&mut self, fact: &UsageFact) {
        self.entries += 1;
        self.input += fact.input;
        self.output += fact.output;
        self.cache_read += fact.cache_read;
        self.cache_write += fact.cache_write;
        self.cost += fact.cost;
    }
}

/// How far apart a stored day sum and a sum of its facts may be, relative
/// to the larger (or 1): a store adds in append order, SQL in any, and f64
/// addition is not associative.
pub const DAY_SUMS_TOLERANCE: f64 = 1e-9;

impl DaySums {
    /// Whether `self` and `other` count the same facts and each double
    /// agrees to [`DAY_SUMS_TOLERANCE`].
    pub fn agrees_with(&self, other: &DaySums) -> bool {
        let close =
            |a: f64, b: f64| (a - b).abs() <= DAY_SUMS_TOLERANCE * a.abs().max(b.abs()).max(1.0);
        self.entries == other.entries
            && close(self.input, other.input)
            && close(self.output, other.output)
            && close(self.cache_read, other.cache_read)
            && close(self.cache_write, other.cache_write)
            && close(self.cost, other.cost)
    }
}

/// What `check` says of a session's (day, model) whose stored day row
/// (`usage_daily`, `stored`) is not the sum of its counted facts
/// (`counted`); either may be missing.
pub fn day_sums_differ(
    session: &str,
    day: i64,
    model: &str,
    stored: Option<DaySums>,
    counted: Option<DaySums>,
) -> String {
    let show = |s: Option<DaySums>| {
        s.map_or_else(
            || "missing".to_owned(),
            |s| {
                format!(
                    "{} entries, input {}, output {}, cache read {}, cache write {}, cost {}",
                    s.entries, s.input, s.output, s.cache_read, s.cache_write, s.cost
                )
            },
        )
    };
    format!(
        "session {session}: usage of {} ({model}) is {}, its counted facts sum to {}",
        day_string(day),
        show(stored),
        show(counted)
    )
}

/// One day row being summed by [`DailySums`].
#[derive(Debug, Clone, PartialEq)]
pub struct DayRow {
    /// The UTC day ([`day_of`]).
    pub day: i64,
    /// The model key.
    pub model: String,
    /// The sums so far, stored row included.
    pub sums: DaySums,
    /// Whether the row was stored before this append (an update, not an insert).
    pub stored: bool,
}

/// One session's counted usage of an append, summed per (UTC day, model)
/// exactly as the per-row trigger summed `usage_daily` before the stores
/// did it themselves: each row starts from the stored row or the first
/// fact ([`DaySums::start`]) and adds the facts in the order appended, so
/// that the doubles come out bit for bit the same (f64 addition is not
/// associative). A store reads and writes the rows; the rule is this one.
#[derive(Debug, Default)]
pub struct DailySums {
    rows: Vec<DayRow>,
    at: std::collections::HashMap<(i64, String), usize>,
}

impl DailySums {
    /// Adds a counted `fact` stored at `at_ms` (as the store recorded it)
    /// to its day's row; `stored` reads the row of a (day, model) not yet
    /// met in this append, if the store holds one.
    pub fn add<E>(
        &mut self,
        at_ms: Option<i64>,
        fact: &UsageFact,
        stored: impl FnOnce(i64, &str) -> std::result::Result<Option<DaySums>, E>,
    ) -> std::result::Result<(), E> {
        let day = day_of(at_ms);
        if let Some(&i) = self.at.get(&(day, fact.model.clone())) {
            self.rows[i].sums.add(fact);
            return Ok(());
        }
        let row = stored(day, &fact.model)?;
        self.at.insert((day, fact.model.clone()), self.rows.len());
        self.rows.push(DayRow {
            day,
            model: fact.model.clone(),
            stored: row.is_some(),
            sums: DaySums::start(row, fact),
        });
        Ok(())
    }

    /// Whether no fact was added since the last [`DailySums::take`].
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows summed, in the order of their first fact, leaving none.
    pub fn take(&mut self) -> Vec<DayRow> {
        self.at.clear();
        std::mem::take(&mut self.rows)
    }
}

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

/// Where an archive finds the usage a [`UsageQuery`] asks for: whole UTC
/// days in the per-day sums (`usage_daily`), and the days `since` or `until`
/// cut in two in the facts themselves (`usage_facts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsagePlan {
    /// Whether any whole day is asked for.
    pub daily: bool,
    /// The first whole day (inclusive), if bounded.
    pub day_from: Option<i64>,
    /// The day after the last whole day, if bounded.
    pub day_to: Option<i64>,
    /// Times (ms, from inclusive, to exclusive) read from the facts, at most
    /// two spans (archives read `None` as the empty span `(0, 0)`, which an
    /// index answers without a scan).
    pub cut: [Option<(i64, i64)>; 2],
}

impl UsageQuery {
    /// The [`UsagePlan`] of this query.
    pub fn plan(&self) -> UsagePlan {
        let first_whole = |s: i64| s.div_euclid(DAY_MS) + i64::from(s.rem_euclid(DAY_MS) != 0);
        let mut plan = UsagePlan {
            daily: true,
            day_from: self.since_ms.map(first_whole),
            day_to: self.until_ms.map(|u| u.div_euclid(DAY_MS)),
            cut: [None, None],
        };
        if let (Some(s), Some(u), Some(from), Some(to)) =
            (self.since_ms, self.until_ms, plan.day_from, plan.day_to)
        {
            if from >= to {
                plan.daily = false;
                plan.cut[0] = (s < u).then_some((s, u));
                return plan;
            }
        }
        if let (Some(s), Some(from)) = (self.since_ms, plan.day_from) {
            plan.cut[0] = (s < from * DAY_MS).then_some((s, from * DAY_MS));
        }
        if let (Some(u), Some(to)) = (self.until_ms, plan.day_to) {
            plan.cut[1] = (to * DAY_MS < u).then_some((to * DAY_MS, u));
        }
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(v: serde_json::Value) -> Entry {
        Entry::from_value(&v).expect("entry")
    }

    fn usage(cost: f64) -> Value {
        serde_json::json!({"input": 1, "output": 2, "cacheRead": 3, "cacheWrite": 4,
                           "cost": {"total": cost}})
    }

    #[test]
    fn facts_are_keyed_as_pi_s_cost_breakdown_keys_usage() {
        let t = "2026-12-01T10:00:00.000Z";
        let asst = entry(
            serde_json::json!({"type": "message", "id": "a1", "parentId": null,
            "timestamp": t, "message": {"role": "assistant", "provider": "anthropic",
            "model": "m", "responseModel": "m-2026", "usage": usage(0.5)}}),
        );
        let f = usage_fact(&asst).expect("assistant usage");
        assert_eq!(f.model, "anthropic/m-2026");
        assert_eq!((f.tokens(), f.cost), (10.0, 0.5));
        assert_eq!(f.at_ms, timestamp_millis(t));
        assert_eq!(f.dedup, dedup_key("a1", t));
        let own = entry(
            serde_json::json!({"type": "usage", "id": "u1", "parentId": "a1",
            "timestamp": t, "provider": "openai", "model": "gpt", "usage": usage(0.25)}),
        );
        assert_eq!(usage_fact(&own).expect("usage entry").model, "openai/gpt");
        let tool = entry(
            serde_json::json!({"type": "message", "id": "t1", "parentId": "a1",
            "timestamp": t, "message": {"role": "toolResult", "usage": usage(0.125)}}),
        );
        assert_eq!(usage_fact(&tool).expect("tool usage").model, TOOLS_KEY);
        let summary = entry(serde_json::json!({"type": "branch_summary", "id": "b1",
            "parentId": "a1", "timestamp": t, "fromId": "a1", "summary": "s",
            "usage": usage(0.125)}));
        assert_eq!(
            usage_fact(&summary).expect("summary usage").model,
            TOOLS_KEY
        );
        // No usage, a user message, or a falsy usage: nothing.
        let user = entry(
            serde_json::json!({"type": "message", "id": "q1", "parentId": null,
            "timestamp": t, "message": {"role": "user", "content": "hi", "usage": usage(1.0)}}),
        );
        assert_eq!(usage_fact(&user), None);
        let bare = entry(
            serde_json::json!({"type": "compaction", "id": "c1", "parentId": "a1",
            "timestamp": t, "summary": "s", "firstKeptEntryId": "a1", "tokensBefore": 1,
            "usage": null}),
        );
        assert_eq!(usage_fact(&bare), None);
        // A member name with an escape still names `usage` (the fast exit
        // looks for the bytes `usage` or a `\u`); without either, nothing.
        let escaped = Entry::from_stored_line(&format!(
            r#"{{"type":"message","id":"e1","parentId":null,"timestamp":"{t}","message":{{"role":"assistant","provider":"p","model":"m","\u0075sage":{}}}}}"#,
            usage(0.5)
        ))
        .expect("entry");
        assert!(escaped.json().contains("\\u0075sage"));
        assert_eq!(usage_fact(&escaped).expect("escaped usage").cost, 0.5);
        let none = entry(
            serde_json::json!({"type": "message", "id": "a2", "parentId": null,
            "timestamp": t, "message": {"role": "assistant", "provider": "p", "model": "m"}}),
        );
        assert!(!may_carry_usage(&none));
        assert_eq!(usage_fact(&none), None);
        // The same id at another time is another entry.
        assert_ne!(
            dedup_key("a1", t),
            dedup_key("a1", "2026-12-01T10:00:00.001Z")
        );
    }

    #[test]
    fn a_plan_reads_whole_days_from_the_sums_and_cut_days_from_the_facts() {
        let d = |day: i64, ms: i64| day * DAY_MS + ms;
        let q = |s: Option<i64>, u: Option<i64>| UsageQuery {
            since_ms: s,
            until_ms: u,
            cwd_under: None,
        };
        let all = q(None, None).plan();
        assert_eq!(
            (all.daily, all.day_from, all.day_to, all.cut),
            (true, None, None, [None, None])
        );
        let days = q(Some(d(10, 0)), Some(d(12, 0))).plan();
        assert_eq!(
            (days.daily, days.day_from, days.day_to),
            (true, Some(10), Some(12))
        );
        assert_eq!(days.cut, [None, None]);
        let cut = q(Some(d(10, 5)), Some(d(12, 7))).plan();
        assert_eq!((cut.day_from, cut.day_to), (Some(11), Some(12)));
        assert_eq!(
            cut.cut,
            [Some((d(10, 5), d(11, 0))), Some((d(12, 0), d(12, 7)))]
        );
        let within = q(Some(d(10, 5)), Some(d(10, 9))).plan();
        assert!(!within.daily);
        assert_eq!(within.cut, [Some((d(10, 5), d(10, 9))), None]);
        let before_1970 = q(Some(-5), None).plan();
        assert_eq!(before_1970.day_from, Some(0));
        assert_eq!(before_1970.cut[0], Some((-5, 0)));
    }

    #[test]
    fn day_sums_start_from_the_stored_row_or_the_first_fact_and_add_in_order() {
        let fact = |model: &str, cost: f64| UsageFact {
            dedup: 0,
            at_ms: None,
            model: model.to_owned(),
            input: cost,
            output: 0.0,
            cache_read: 0.0,
            cache_write: 0.0,
            cost,
        };
        assert_eq!(day_of(Some(-1)), -1);
        assert_eq!(day_of(Some(DAY_MS)), 1);
        assert_eq!(day_of(None), 0);
        let mut sums = DailySums::default();
        let mut reads = Vec::new();
        let mut stored = |day: i64, model: &str| {
            reads.push((day, model.to_owned()));
            Ok::<_, ()>((model == "old").then_some(DaySums {
                entries: 2,
                input: 0.1,
                output: 0.0,
                cache_read: 0.0,
                cache_write: 0.0,
                cost: 0.1,
            }))
        };
        // A new row keeps its first fact's own bits (-0.0, not 0.0 + -0.0).
        sums.add(Some(5), &fact("new", -0.0), &mut stored).unwrap();
        for cost in [0.2, 0.3] {
            sums.add(Some(DAY_MS + 5), &fact("old", cost), &mut stored)
                .unwrap();
        }
        sums.add(Some(7), &fact("new", -0.0), &mut stored).unwrap();
        // Each (day, model) is read once, at its first fact.
        assert_eq!(reads, [(0, "new".to_owned()), (1, "old".to_owned())]);
        let rows = sums.take();
        assert!(sums.is_empty());
        assert_eq!(
            (rows[0].day, rows[0].stored, rows[0].sums.entries),
            (0, false, 2)
        );
        assert_eq!(rows[0].sums.cost.to_bits(), (-0.0f64).to_bits());
        // (0.1 + 0.2) + 0.3 is not 0.1 + (0.2 + 0.3): append order it is.
        assert_eq!(
            (rows[1].day, rows[1].stored, rows[1].sums.entries),
            (1, true, 4)
        );
        assert_eq!(
            rows[1].sums.cost.to_bits(),
            ((0.1 + 0.2) + 0.3f64).to_bits()
        );
        assert_ne!(
            rows[1].sums.cost.to_bits(),
            (0.1 + (0.2 + 0.3f64)).to_bits()
        );
    }

    #[test]
    fn weeks_start_on_monday() {
        // 2026-11-30 was a Monday.
        let monday = timestamp_millis("2026-11-30T00:00:00Z").expect("date") / DAY_MS;
        for d in monday..monday + 7 {
            assert_eq!(week_start(d), monday);
        }
        assert_eq!(week_start(monday - 1), monday - 7);
        assert_eq!(day_string(monday), "2026-11-30");
    }
}
