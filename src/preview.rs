//! What a person reads of an entry: the text of message content, and the
//! one-line previews `tree`, `branch` and `search` show (pi `/tree` style). A
//! neutral module: the search index and the command line both use it, and
//! neither backend owns it.

use crate::entry::{Entry, EntryType};
use serde_json::Value;

/// The text of a content value: a string, or the `text` of its text parts.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Collapses whitespace runs (newlines included) to single spaces.
pub fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Truncates to `max` characters with an ellipsis.
pub fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// A one-line preview of an entry of a session working in `cwd` (tool calls
/// show paths below it relative to it), at most `width` characters.
pub fn preview_in(e: &Entry, width: usize, cwd: Option<&str>) -> String {
    let v = e.value();
    let s = match e.entry_type() {
        EntryType::Message => message_preview(&v["message"], cwd),
        EntryType::ModelChange => format!(
            "model → {}/{}",
            v["provider"].as_str().unwrap_or("?"),
            v["modelId"].as_str().unwrap_or("?")
        ),
        EntryType::ThinkingLevelChange => {
            format!("thinking → {}", v["thinkingLevel"].as_str().unwrap_or("?"))
        }
        EntryType::ActiveToolsChange => format!("tools → {}", v["activeToolNames"]),
        EntryType::Compaction => format!(
            "[compaction: {}k tokens] {}",
            (v["tokensBefore"].as_f64().unwrap_or(0.0) / 1000.0).round(),
            one_line(v["summary"].as_str().unwrap_or(""))
        ),
        EntryType::BranchSummary => format!(
            "[branch summary] {}",
            one_line(v["summary"].as_str().unwrap_or(""))
        ),
        EntryType::Custom => format!("[custom {}]", v["customType"].as_str().unwrap_or("?")),
        EntryType::CustomMessage => format!(
            "[{}] {}",
            v["customType"].as_str().unwrap_or("custom"),
            one_line(&v.get("content").map(content_text).unwrap_or_default())
        ),
        EntryType::Label => format!(
            "[label {} → {}]",
            v["targetId"].as_str().unwrap_or("?"),
            v["label"].as_str().unwrap_or("(cleared)")
        ),
        EntryType::SessionInfo => format!("[name] {}", v["name"].as_str().unwrap_or("")),
        EntryType::Leaf => format!("[leaf → {}]", v["targetId"].as_str().unwrap_or("root")),
        EntryType::Other(t) => format!("[{t}]"),
    };
    truncate(&s, width)
}

/// `role: text` of a message (see [`message_parts`]).
fn message_preview(m: &Value, cwd: Option<&str>) -> String {
    let (role, body) = message_parts(m, cwd);
    format!("{role}: {body}")
}

/// The role and one-line text of a message, pi `/tree` style: an assistant turn
/// without text shows its tool calls (`[read: src/main.rs]`), or `(aborted)` /
/// its error; a tool result names its tool (`toolResult [read]`); a shell
/// command shows `$ command`.
pub fn message_parts(m: &Value, cwd: Option<&str>) -> (String, String) {
    let role = m["role"].as_str().unwrap_or("?");
    let text = one_line(&m.get("content").map(content_text).unwrap_or_default());
    let body = match role {
        "assistant" if text.is_empty() => {
            let calls: Vec<String> = m["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["type"] == "toolCall")
                .map(|p| tool_call(p["name"].as_str().unwrap_or("tool"), &p["arguments"], cwd))
                .collect();
            if !calls.is_empty() {
                calls.join(" ")
            } else if m["stopReason"] == "aborted" {
                "(aborted)".to_owned()
            } else if let Some(err) = m["errorMessage"].as_str() {
                format!("(error: {})", one_line(err))
            } else {
                "(no content)".to_owned()
            }
        }
        "toolResult" => match m["toolName"].as_str() {
            Some(tool) => return (format!("toolResult [{tool}]"), text),
            None => text,
        },
        "bashExecution" => format!("$ {}", one_line(m["command"].as_str().unwrap_or(""))),
        _ => text,
    };
    (role.to_owned(), body)
}

/// `[name: argument]` for a tool call: the path, command or pattern it works
/// on, else its arguments as JSON.
fn tool_call(name: &str, args: &Value, cwd: Option<&str>) -> String {
    const MAX: usize = 48;
    let path = ["path", "file_path"]
        .iter()
        .find_map(|k| args[*k].as_str())
        .map(|p| {
            cwd.filter(|c| !c.is_empty())
                .and_then(|c| p.strip_prefix(c.trim_end_matches('/')))
                .and_then(|rest| rest.strip_prefix('/'))
                .filter(|rest| !rest.is_empty())
                .unwrap_or(p)
        });
    let other = ["command", "pattern", "query", "url"]
        .iter()
        .find_map(|k| args[*k].as_str());
    let arg = match (path, other) {
        // A long path keeps its end: the file name says more than the root.
        (Some(p), _) if p.chars().count() > MAX => {
            let tail: Vec<char> = p.chars().rev().take(MAX - 1).collect();
            format!("…{}", tail.into_iter().rev().collect::<String>())
        }
        (Some(p), _) => p.to_owned(),
        (None, Some(a)) => truncate(&one_line(a), MAX),
        (None, None) if args.is_null() => String::new(),
        (None, None) => truncate(&args.to_string(), MAX),
    };
    if arg.is_empty() {
        format!("[{name}]")
    } else {
        format!("[{name}: {arg}]")
    }
}
