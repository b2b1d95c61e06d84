//! The `/session` statistics (`AgentSession.getSessionStats`, without
//! `contextUsage`) and `getUsageCostBreakdown`, summed in pi's order with
//! JavaScript's `+`, so every total is bit for bit pi's.

use super::context::type_error;
use super::tree::v8_sort;
use super::value::{JsSum, JsValue};
use super::AppSession;
use crate::entry::{Entry, EntryType};
use crate::error::Result;
use crate::json::{string_literal, JsString};
use crate::storage::SessionStorage;

/// pi's usage totals (`createUsageTotals`), kept as JavaScript keeps them.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageTotals {
    /// `input`.
    pub input: JsSum,
    /// `output`.
    pub output: JsSum,
    /// `cacheRead`.
    pub cache_read: JsSum,
    /// `cacheWrite`.
    pub cache_write: JsSum,
    /// `cost` (the sum of `usage.cost.total`).
    pub cost: JsSum,
}

impl Default for UsageTotals {
    fn default() -> Self {
        UsageTotals {
            input: JsSum::Number(0.0),
            output: JsSum::Number(0.0),
            cache_read: JsSum::Number(0.0),
            cache_write: JsSum::Number(0.0),
            cost: JsSum::Number(0.0),
        }
    }
}

impl UsageTotals {
    /// pi's `addUsageToTotals(totals, usage)`; a missing usage fails as pi's does.
    fn add(&mut self, usage: Option<&JsValue>) -> Result<()> {
        let u = match usage {
            Some(u @ (JsValue::Object(_) | JsValue::Array(_))) => u,
            Some(JsValue::Null) | None => return Err(type_error(usage, "input")),
            // Primitives have no such members: every one reads as undefined.
            Some(_) => &JsValue::Object(Vec::new()),
        };
        self.input = self.input.add(u.get("input"));
        self.output = self.output.add(u.get("output"));
        self.cache_read = self.cache_read.add(u.get("cacheRead"));
        self.cache_write = self.cache_write.add(u.get("cacheWrite"));
        let cost = u.get("cost");
        if matches!(cost, None | Some(JsValue::Null)) {
            return Err(type_error(cost, "total"));
        }
        self.cost = self.cost.add(cost.and_then(|c| c.get("total")));
        Ok(())
    }

    /// `input + output + cacheRead + cacheWrite`.
    fn tokens(&self) -> JsSum {
        self.input
            .plus(&self.output)
            .plus(&self.cache_read)
            .plus(&self.cache_write)
    }
}

/// `AgentSession.getSessionStats()` without `contextUsage`.
#[derive(Debug, Clone, PartialEq)]
pub struct AppStats {
    /// The JSONL file, where the session is one (pi's `sessionFile`; an
    /// in-memory session has none and `JSON.stringify` drops it).
    pub session_file: Option<String>,
    /// The session id.
    pub session_id: String,
    /// User messages.
    pub user_messages: u64,
    /// Assistant messages.
    pub assistant_messages: u64,
    /// Tool calls in assistant content.
    pub tool_calls: u64,
    /// Tool results.
    pub tool_results: u64,
    /// Every message entry.
    pub total_messages: u64,
    /// The usage totals.
    pub totals: UsageTotals,
}

impl AppStats {
    /// The stats as pi's `JSON.stringify` writes them.
    pub fn to_json_text(&self) -> String {
        let mut out = String::from("{");
        if let Some(f) = &self.session_file {
            out.push_str("\"sessionFile\":");
            out.push_str(&string_literal(f));
            out.push(',');
        }
        let t = &self.totals;
        out.push_str(&format!(
            "\"sessionId\":{},\"userMessages\":{},\"assistantMessages\":{},\"toolCalls\":{},\"toolResults\":{},\"totalMessages\":{},\"tokens\":{{\"input\":{},\"output\":{},\"cacheRead\":{},\"cacheWrite\":{},\"total\":{}}},\"cost\":{}}}",
            string_literal(&self.session_id),
            self.user_messages,
            self.assistant_messages,
            self.tool_calls,
            self.tool_results,
            self.total_messages,
            t.input.to_json(),
            t.output.to_json(),
            t.cache_read.to_json(),
            t.cache_write.to_json(),
            t.tokens().to_json(),
            t.cost.to_json(),
        ));
        out
    }
}

/// One line of `getUsageCostBreakdown`: `{key, cost, tokens}`.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageCost {
    /// `provider/model`, or `Tools/summaries`.
    pub key: JsString,
    /// The cost.
    pub cost: JsSum,
    /// The tokens.
    pub tokens: JsSum,
}

impl UsageCost {
    /// The breakdown as pi's `JSON.stringify` writes it.
    pub fn list_json(list: &[UsageCost]) -> String {
        let items: Vec<String> = list
            .iter()
            .map(|u| {
                format!(
                    "{{\"key\":{},\"cost\":{},\"tokens\":{}}}",
                    u.key.json(),
                    u.cost.to_json(),
                    u.tokens.to_json()
                )
            })
            .collect();
        format!("[{}]", items.join(","))
    }
}

/// JavaScript's `x > 0` for a running total.
fn positive(s: &JsSum) -> bool {
    s.to_number() > 0.0
}

/// `entry.message`, failing as pi does reading `.role` of a missing one.
fn message(v: &JsValue) -> Result<&JsValue> {
    match v.get("message") {
        Some(JsValue::Null) | None => Err(type_error(v.get("message"), "role")),
        Some(m) => Ok(m),
    }
}

fn role_is(m: &JsValue, role: &str) -> bool {
    m.get("role").is_some_and(|r| r.is_str(role))
}

impl<S: SessionStorage> AppSession<S> {
    /// Every entry of the log whose type a statistic reads, parsed, in log order.
    fn visit_counted(&self, mut f: impl FnMut(&Entry, &JsValue) -> Result<()>) -> Result<()> {
        self.storage.visit_entries(0, None, &mut |text| {
            let e = Entry::from_checked_text(text);
            let counted = matches!(
                e.entry_type(),
                EntryType::Message | EntryType::BranchSummary | EntryType::Compaction
            ) || *e.entry_type() == EntryType::Other("usage".into());
            if counted {
                let v = JsValue::parse(e.json())?;
                f(&e, &v)?;
            }
            Ok(())
        })
    }

    /// `AgentSession.getSessionStats()` without `contextUsage`.
    pub fn session_stats(&self) -> Result<AppStats> {
        let meta = self.storage.metadata()?;
        let mut s = AppStats {
            session_file: meta.path.clone(),
            session_id: meta.id.clone(),
            user_messages: 0,
            assistant_messages: 0,
            tool_calls: 0,
            tool_results: 0,
            total_messages: 0,
            totals: UsageTotals::default(),
        };
        self.visit_counted(|e, v| {
            match e.entry_type() {
                EntryType::Other(t) if t == "usage" => s.totals.add(v.get("usage"))?,
                EntryType::BranchSummary | EntryType::Compaction
                    if JsValue::truthy(v.get("usage")) =>
                {
                    s.totals.add(v.get("usage"))?;
                }
                _ => {}
            }
            if *e.entry_type() != EntryType::Message {
                return Ok(());
            }
            s.total_messages += 1;
            let m = message(v)?;
            if role_is(m, "user") {
                s.user_messages += 1;
            } else if role_is(m, "toolResult") {
                s.tool_results += 1;
                if JsValue::truthy(m.get("usage")) {
                    s.totals.add(m.get("usage"))?;
                }
            } else if role_is(m, "assistant") {
                s.assistant_messages += 1;
                if let Some(JsValue::Array(blocks)) = m.get("content") {
                    for b in blocks {
                        if matches!(b, JsValue::Null) {
                            return Err(type_error(Some(b), "type"));
                        }
                        if b.get("type").is_some_and(|t| t.is_str("toolCall")) {
                            s.tool_calls += 1;
                        }
                    }
                }
                s.totals.add(m.get("usage"))?;
            }
            Ok(())
        })?;
        Ok(s)
    }

    /// usage-totals.js `getUsageCostBreakdown(entries)`: usage by
    /// `provider/model` (and `Tools/summaries`), those with cost or tokens,
    /// most expensive first.
    pub fn usage_cost_breakdown(&self) -> Result<Vec<UsageCost>> {
        let mut keys: Vec<(JsString, UsageTotals)> = Vec::new();
        self.visit_counted(|e, v| {
            let mut found: Option<(JsString, &JsValue)> = None;
            let is_usage = *e.entry_type() == EntryType::Other("usage".into());
            let m = if *e.entry_type() == EntryType::Message {
                Some(message(v)?)
            } else {
                None
            };
            if let Some(m) = m.filter(|m| role_is(m, "assistant")) {
                let model = match m.get("responseModel") {
                    Some(r) if !JsValue::nullish(Some(r)) => Some(r),
                    _ => m.get("model"),
                };
                let key = template(m.get("provider"), model);
                found = m.get("usage").map(|u| (key, u));
            } else if is_usage {
                let key = template(v.get("provider"), v.get("model"));
                found = v.get("usage").map(|u| (key, u));
            } else if let Some(m) =
                m.filter(|m| role_is(m, "toolResult") && JsValue::truthy(m.get("usage")))
            {
                found = m
                    .get("usage")
                    .map(|u| (JsString::new("Tools/summaries"), u));
            } else if matches!(
                e.entry_type(),
                EntryType::BranchSummary | EntryType::Compaction
            ) && JsValue::truthy(v.get("usage"))
            {
                found = v
                    .get("usage")
                    .map(|u| (JsString::new("Tools/summaries"), u));
            }
            let Some((key, usage)) = found else {
                return Ok(());
            };
            if !JsValue::truthy(Some(usage)) {
                return Ok(());
            }
            let pos = match keys.iter().position(|(k, _)| *k == key) {
                Some(p) => p,
                None => {
                    keys.push((key, UsageTotals::default()));
                    keys.len() - 1
                }
            };
            keys[pos].1.add(Some(usage))
        })?;
        let mut list: Vec<UsageCost> = keys
            .into_iter()
            .map(|(key, t)| UsageCost {
                key,
                tokens: t.tokens(),
                cost: t.cost,
            })
            .filter(|u| positive(&u.cost) || positive(&u.tokens))
            .collect();
        v8_sort(&mut list, |a, b| b.cost.to_number() - a.cost.to_number());
        Ok(list)
    }
}

/// `` `${a}/${b}` ``.
fn template(a: Option<&JsValue>, b: Option<&JsValue>) -> JsString {
    let mut units = JsValue::js_to_string(a).to_utf16();
    units.push(u16::from(b'/'));
    units.extend(JsValue::js_to_string(b).to_utf16());
    JsString::from_utf16(&units)
}
