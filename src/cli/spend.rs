//! Archive-wide `stats`: usage from the archive's maintained usage facts
//! (each entry once across forks), filtered by time and project and grouped
//! by model, day, week, project or session, as a table, JSON and a chart of
//! cost over time; and resolving the directories `ls` and `stats` filter on.

use super::columns::{pad, width};
use super::Report;
use clap::ValueEnum;
use serde_json::{json, Map, Value};
use sessiontree::json::js_number;
use sessiontree::usage::{day_string, week_start, UsageQuery, UsageRow, DAY_MS};
use sessiontree::{Error, Result};
use std::collections::HashMap;

/// `--by`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum By {
    /// `provider/model` as pi's cost breakdown keys it (`Tools/summaries` for tool and summary usage).
    Model,
    /// The UTC day of the entry.
    Day,
    /// The UTC week (Monday first) of the entry.
    Week,
    /// The session's working directory.
    Project,
    /// The session.
    Session,
}

impl By {
    fn name(self) -> &'static str {
        match self {
            By::Model => "model",
            By::Day => "day",
            By::Week => "week",
            By::Project => "project",
            By::Session => "session",
        }
    }

    fn is_time(self) -> bool {
        matches!(self, By::Day | By::Week)
    }

    /// The row's value of this dimension.
    fn key(self, r: &UsageRow) -> Key {
        match self {
            By::Model => Key::Text(r.model.clone()),
            By::Day => Key::Day(r.day),
            By::Week => Key::Day(week_start(r.day)),
            By::Project => Key::Text(r.cwd.clone()),
            By::Session => Key::Text(r.session.clone()),
        }
    }
}

/// One dimension's value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key {
    Text(String),
    Day(i64),
}

impl Key {
    fn show(&self) -> String {
        match self {
            Key::Text(t) => t.clone(),
            Key::Day(d) => day_string(*d),
        }
    }
}

/// Sums of usage.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sums {
    entries: i64,
    input: f64,
    output: f64,
    cache_read: f64,
    cache_write: f64,
    cost: f64,
}

impl Sums {
    fn add(&mut self, r: &UsageRow) {
        self.entries += r.entries;
        self.input += r.input;
        self.output += r.output;
        self.cache_read += r.cache_read;
        self.cache_write += r.cache_write;
        self.cost += r.cost;
    }

    fn tokens(&self) -> f64 {
        self.input + self.output + self.cache_read + self.cache_write
    }

    fn json(&self, obj: &mut Map<String, Value>) {
        obj.insert("entries".into(), json!(self.entries));
        obj.insert("input".into(), js_number(self.input));
        obj.insert("output".into(), js_number(self.output));
        obj.insert("cacheRead".into(), js_number(self.cache_read));
        obj.insert("cacheWrite".into(), js_number(self.cache_write));
        obj.insert("tokens".into(), js_number(self.tokens()));
        // Cost to a ten-billionth of a dollar: sums of floating-point costs
        // differ in their last bits between SQLite's and PostgreSQL's `sum`.
        obj.insert("cost".into(), js_number((self.cost * 1e10).round() / 1e10));
    }
}

/// A directory argument as the sessions' cwds hold it: a relative one
/// (`.`, `proj`) resolved against the current directory (symbolic links
/// resolved where it exists, as `process.cwd()` gives pi's cwd), an absolute
/// one as given.
pub fn resolve_dir(arg: &str) -> Result<String> {
    let p = std::path::Path::new(arg);
    if p.is_absolute() {
        return Ok(arg.to_owned());
    }
    let here = std::env::current_dir()
        .map_err(|e| Error::Usage(format!("cannot read the current directory: {e}")))?;
    let joined = here.join(p);
    let resolved = std::fs::canonicalize(&joined).unwrap_or_else(|_| {
        // Lexically: `a/./b/../c` is `a/c`.
        let mut out = std::path::PathBuf::new();
        for c in joined.components() {
            match c {
                std::path::Component::CurDir => {}
                std::path::Component::ParentDir => {
                    out.pop();
                }
                other => out.push(other),
            }
        }
        out
    });
    resolved
        .to_str()
        .map(str::to_owned)
        .ok_or_else(|| Error::Usage(format!("{arg:?} is not a UTF-8 path")))
}

/// `--since`/`--until`: a date (`2026-12-01`, UTC) or an ISO time. A date
/// given to `--until` takes in the whole of that day.
pub fn time_arg(flag: &str, s: &str, until: bool) -> Result<i64> {
    let ms = sessiontree::entry::timestamp_millis(s).ok_or_else(|| {
        Error::Usage(format!(
            "{flag} {s:?} is not a date or ISO-8601 time (e.g. 2026-12-01 or 2026-12-01T09:00:00Z)"
        ))
    })?;
    let date_only = s.len() == 10 && s.as_bytes().get(4) == Some(&b'-');
    Ok(if until && date_only { ms + DAY_MS } else { ms })
}

/// Archive-wide `stats`.
pub fn archive_stats(
    archive: &dyn sessiontree::archive::SessionArchive,
    query: &UsageQuery,
    by: &[By],
    chart_width: Option<usize>,
) -> Result<Report> {
    let rows = archive.usage(query)?;
    let by: Vec<By> = if by.is_empty() {
        vec![By::Project]
    } else {
        let mut seen = Vec::new();
        for b in by {
            if !seen.contains(b) {
                seen.push(*b);
            }
        }
        seen
    };
    // Groups, and each dimension value's total (for ordering by cost).
    let mut groups: HashMap<Vec<Key>, Sums> = HashMap::new();
    let mut per_value: Vec<HashMap<Key, f64>> = vec![HashMap::new(); by.len()];
    let mut total = Sums::default();
    let mut per_time: HashMap<i64, f64> = HashMap::new();
    let time = by.iter().copied().find(|b| b.is_time());
    for r in &rows {
        let keys: Vec<Key> = by.iter().map(|b| b.key(r)).collect();
        for (i, k) in keys.iter().enumerate() {
            *per_value[i].entry(k.clone()).or_default() += r.cost;
        }
        groups.entry(keys).or_default().add(r);
        total.add(r);
        if let Some(t) = time {
            if let Key::Day(d) = t.key(r) {
                *per_time.entry(d).or_default() += r.cost;
            }
        }
    }
    let mut list: Vec<(Vec<Key>, Sums)> = groups.into_iter().collect();
    list.sort_by(|(a, _), (b, _)| {
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            let o = if by[i].is_time() {
                x.cmp(y)
            } else {
                let cx = per_value[i].get(x).copied().unwrap_or(0.0);
                let cy = per_value[i].get(y).copied().unwrap_or(0.0);
                cy.total_cmp(&cx).then_with(|| x.cmp(y))
            };
            if o != std::cmp::Ordering::Equal {
                return o;
            }
        }
        std::cmp::Ordering::Equal
    });
    // JSON.
    let json_rows: Vec<Value> = list
        .iter()
        .map(|(keys, sums)| {
            let mut obj = Map::new();
            for (b, k) in by.iter().zip(keys) {
                obj.insert(b.name().into(), json!(k.show()));
            }
            sums.json(&mut obj);
            Value::Object(obj)
        })
        .collect();
    let mut total_obj = Map::new();
    total.json(&mut total_obj);
    let j = json!({
        "by": by.iter().map(|b| b.name()).collect::<Vec<_>>(),
        "since": query.since_ms.map(sessiontree::entry::iso_timestamp),
        "until": query.until_ms.map(sessiontree::entry::iso_timestamp),
        "cwd": query.cwd_under,
        "rows": json_rows,
        "total": Value::Object(total_obj),
    });
    // Text.
    let shown: Vec<Vec<String>> = list
        .iter()
        .map(|(keys, _)| keys.iter().map(|k| super::field(&k.show())).collect())
        .collect();
    let widths: Vec<usize> = by
        .iter()
        .enumerate()
        .map(|(i, b)| {
            shown
                .iter()
                .map(|s| width(&s[i]))
                .chain([b.name().len(), if i == 0 { 5 } else { 0 }])
                .max()
                .unwrap_or(0)
                .min(60)
        })
        .collect();
    let mut text = String::new();
    let head = |cells: &[String]| -> String {
        cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| pad(c, *w))
            .collect::<Vec<_>>()
            .join("  ")
    };
    let line = |label: String, s: &Sums| {
        format!(
            "{label}  {:>8}  {:>14}  {:>12.4}\n",
            s.entries,
            format!("{}", s.tokens()),
            s.cost
        )
    };
    if list.is_empty() {
        text.push_str("no usage\n");
    } else {
        let names: Vec<String> = by.iter().map(|b| b.name().to_uppercase()).collect();
        text.push_str(&format!(
            "{}  {:>8}  {:>14}  {:>12}\n",
            head(&names),
            "ENTRIES",
            "TOKENS",
            "COST"
        ));
        for (cells, (_, sums)) in shown.iter().zip(&list) {
            text.push_str(&line(head(cells), sums));
        }
        let mut total_cells = vec![String::new(); by.len()];
        total_cells[0] = "TOTAL".into();
        text.push_str(&line(head(&total_cells), &total));
    }
    if let (Some(t), false) = (time, per_time.is_empty()) {
        text.push('\n');
        text.push_str(&chart(t, &per_time, chart_width.unwrap_or(80)));
    }
    Ok(Report::new(j, text))
}

/// Eighths of a block, for bars.
const EIGHTHS: [char; 8] = [' ', '▏', '▎', '▍', '▌', '▋', '▊', '▉'];

/// A bar per day (or week) of cost, every period from the first to the last
/// (at most the latest 400), scaled to fit `width` columns.
fn chart(by: By, cost: &HashMap<i64, f64>, width: usize) -> String {
    let step = if by == By::Week { 7 } else { 1 };
    let first = cost.keys().min().copied().unwrap_or(0);
    let last = cost.keys().max().copied().unwrap_or(0);
    let first = first.max(last - 399 * step);
    let max = cost.values().copied().fold(0.0_f64, f64::max);
    let amounts: Vec<String> = (0..)
        .map(|i| first + i * step)
        .take_while(|d| *d <= last)
        .map(|d| format!("${:.2}", cost.get(&d).copied().unwrap_or(0.0)))
        .collect();
    let amount_w = amounts.iter().map(String::len).max().unwrap_or(0);
    // `YYYY-MM-DD ` + bar + ` ` + amount.
    let bar_w = width.saturating_sub(11 + 1 + amount_w).max(10);
    let mut out = String::new();
    for (i, amount) in amounts.iter().enumerate() {
        let d = first + i as i64 * step;
        let c = cost.get(&d).copied().unwrap_or(0.0);
        let eighths = if max > 0.0 {
            (c / max * (bar_w * 8) as f64).round() as usize
        } else {
            0
        };
        let mut bar = "█".repeat(eighths / 8);
        if eighths % 8 > 0 {
            bar.push(EIGHTHS[eighths % 8]);
        }
        let pad_w = bar_w.saturating_sub(bar.chars().count());
        out.push_str(&format!(
            "{} {bar}{} {amount:>amount_w$}\n",
            day_string(d),
            " ".repeat(pad_w)
        ));
    }
    out
}
