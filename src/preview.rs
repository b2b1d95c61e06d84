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
    if *e.entry_type() == EntryType::Message {
        if let Some(s) = probed_message_preview(e.json(), width, cwd) {
            return truncate(&s, width);
        }
    }
    parsed_preview(e, width, cwd)
}

/// [`preview_in`] from the entry parsed whole into a `serde_json::Value`.
fn parsed_preview(e: &Entry, width: usize, cwd: Option<&str>) -> String {
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
    MessageFields::of_value(m).parts(cwd, &one_line)
}

/// What a preview reads of a message: deserialized in one typed pass from
/// the entry's text ([`EntryProbe`]), or taken from a parsed value.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageFields {
    role: Option<String>,
    content: Option<ContentProbe<PreviewPart>>,
    tool_name: Option<String>,
    command: Option<String>,
    stop_reason: Option<String>,
    error_message: Option<String>,
}

impl MessageFields {
    /// The fields of a parsed message (members of other shapes read as absent).
    fn of_value(m: &Value) -> Self {
        let text = |key: &str| m[key].as_str().map(str::to_owned);
        let calls = m["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["type"] == "toolCall")
            .map(|p| PreviewPart {
                kind: Some("toolCall".to_owned()),
                text: None,
                name: p["name"].as_str().map(str::to_owned),
                arguments: p["arguments"].clone(),
            })
            .collect();
        MessageFields {
            role: text("role"),
            content: Some(ContentProbe {
                text: m.get("content").map(content_text).unwrap_or_default(),
                parts: calls,
            }),
            tool_name: text("toolName"),
            command: text("command"),
            stop_reason: text("stopReason"),
            error_message: text("errorMessage"),
        }
    }

    /// [`message_parts`], each text made one line by `one_line`.
    fn parts(&self, cwd: Option<&str>, one_line: &dyn Fn(&str) -> String) -> (String, String) {
        let role = self.role.as_deref().unwrap_or("?");
        let (text, calls) = match &self.content {
            Some(c) => (one_line(&c.text), c.parts.as_slice()),
            None => (String::new(), &[][..]),
        };
        let body = match role {
            "assistant" if text.is_empty() => {
                let calls: Vec<String> = calls
                    .iter()
                    .map(|p| tool_call(p.name.as_deref().unwrap_or("tool"), &p.arguments, cwd))
                    .collect();
                if !calls.is_empty() {
                    calls.join(" ")
                } else if self.stop_reason.as_deref() == Some("aborted") {
                    "(aborted)".to_owned()
                } else if let Some(err) = self.error_message.as_deref() {
                    format!("(error: {})", one_line(err))
                } else {
                    "(no content)".to_owned()
                }
            }
            "toolResult" => match self.tool_name.as_deref() {
                Some(tool) => return (format!("toolResult [{tool}]"), text),
                None => text,
            },
            "bashExecution" => format!("$ {}", one_line(self.command.as_deref().unwrap_or(""))),
            _ => text,
        };
        (role.to_owned(), body)
    }
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

/// The members of a message entry a preview reads, in one typed pass over
/// the entry (no `serde_json::Value` of its content, whose building was a
/// quarter of `tree`'s time). Any member of another shape than pi writes
/// fails the pass, and the preview is made from the parsed entry instead.
#[derive(serde::Deserialize)]
struct EntryProbe {
    message: Option<MessageFields>,
}

/// A part of a `content` array as a typed pass reads it ([`ContentProbe`]).
pub(crate) trait ContentPart: for<'de> serde::Deserialize<'de> {
    /// Takes the part's text out, if it has some.
    fn take_text(&mut self) -> Option<String>;
    /// Whether the reader keeps the part (once its text is taken).
    fn kept(&self) -> bool;
}

/// A `content` member read in one typed pass: a string, or the texts of an
/// array's parts joined by newlines (as [`content_text`] joins them), with
/// the parts the reader keeps; any other value holds no text. A part that
/// is not an object, or of another shape than `P` reads, fails the pass.
pub(crate) struct ContentProbe<P> {
    pub(crate) text: String,
    pub(crate) parts: Vec<P>,
}

impl<P> Default for ContentProbe<P> {
    fn default() -> Self {
        ContentProbe {
            text: String::new(),
            parts: Vec::new(),
        }
    }
}

impl<'de, P: ContentPart> serde::Deserialize<'de> for ContentProbe<P> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ContentVisitor(std::marker::PhantomData))
    }
}

struct ContentVisitor<P>(std::marker::PhantomData<P>);

impl<'de, P: ContentPart> serde::de::Visitor<'de> for ContentVisitor<P> {
    type Value = ContentProbe<P>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("message content")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(ContentProbe {
            text: v.to_owned(),
            parts: Vec::new(),
        })
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(ContentProbe {
            text: v,
            parts: Vec::new(),
        })
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut out = ContentProbe::default();
        let mut first = true;
        while let Some(mut part) = seq.next_element::<P>()? {
            if let Some(text) = part.take_text() {
                if !first {
                    out.text.push('\n');
                }
                out.text.push_str(&text);
                first = false;
            }
            if part.kept() {
                out.parts.push(part);
            }
        }
        Ok(out)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        use serde::de::IgnoredAny;
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(ContentProbe::default())
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(ContentProbe::default())
    }

    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(ContentProbe::default())
    }

    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(ContentProbe::default())
    }

    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(ContentProbe::default())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
        Ok(ContentProbe::default())
    }
}

/// A part as a preview reads it: its text, and a tool call's name and
/// arguments.
#[derive(serde::Deserialize)]
struct PreviewPart {
    #[serde(rename = "type")]
    kind: Option<String>,
    text: Option<String>,
    name: Option<String>,
    #[serde(default)]
    arguments: Value,
}

impl ContentPart for PreviewPart {
    fn take_text(&mut self) -> Option<String> {
        self.text.take()
    }

    fn kept(&self) -> bool {
        self.kind.as_deref() == Some("toolCall")
    }
}

/// [`one_line`] of `s` cut after `max` characters: as long as a preview
/// `max` wide can show, and as much as [`truncate`] needs to tell that it
/// was cut.
fn one_line_within(s: &str, max: usize) -> String {
    let mut out = String::with_capacity(s.len().min(max + 8));
    let mut chars = 0;
    let mut space = false;
    for c in s.chars() {
        if c.is_whitespace() {
            space = chars > 0;
            continue;
        }
        if space {
            if chars > max {
                return out;
            }
            out.push(' ');
            chars += 1;
            space = false;
        }
        if chars > max {
            return out;
        }
        out.push(c);
        chars += 1;
    }
    out
}

/// `role: text` of a message entry for [`preview_in`] from [`EntryProbe`];
/// `None` when the pass fails. The same as [`message_parts`] gives, but
/// that its texts are cut a character past `width`.
fn probed_message_preview(json: &str, width: usize, cwd: Option<&str>) -> Option<String> {
    let m = serde_json::from_str::<EntryProbe>(json).ok()?.message?;
    let (role, body) = m.parts(cwd, &|s| one_line_within(s, width + 1));
    Some(format!("{role}: {body}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Message entries pi writes, and shapes it does not (each must preview
    /// as the parsed entry does, whether the typed pass takes it or not).
    const MESSAGES: &[&str] = &[
        r#""hello   there\n\n  again""#,
        r#"[{"type":"text","text":"one"},{"type":"image","data":"AAAA"},{"type":"text","text":" two\tthree "}]"#,
        r#"[{"type":"thinking","thinking":"hm"},{"type":"toolCall","id":"t1","name":"read","arguments":{"path":"/home/u/p/src/main.rs"}},{"type":"toolCall","id":"t2","name":"bash","arguments":{"command":"ls   -la"}}]"#,
        r#"[{"type":"toolCall","arguments":{"pattern":"x"}},{"type":"toolCall","name":"odd"},{"type":"toolCall","name":"q","arguments":{"n":1}}]"#,
        r#"[{"type":"text","text":null},{"type":"text","text":5}]"#,
        r#"["loose", {"type":"text","text":"part"}]"#,
        r#"[]"#,
        r#"{"text":"an object"}"#,
        r#"7"#,
        r#"null"#,
        r#""   ""#,
        r#""ünïcödé — ✓ text that goes on and on and on beyond any width the tree would give it, with     spaces""#,
    ];

    fn entry(message: &str) -> Entry {
        Entry::from_json(&format!(
            r#"{{"type":"message","id":"e1","parentId":null,"timestamp":"t","message":{message}}}"#
        ))
        .expect("an entry")
    }

    fn assert_alike(e: &Entry) {
        for width in [0, 1, 5, 12, 48, 100, 400, 4000] {
            for cwd in [None, Some("/home/u/p")] {
                assert_eq!(
                    preview_in(e, width, cwd),
                    parsed_preview(e, width, cwd),
                    "width {width}, cwd {cwd:?}: {}",
                    e.json()
                );
            }
        }
    }

    #[test]
    fn a_message_previews_alike_typed_and_parsed() {
        let mut probed = 0;
        for role in [
            r#""user""#,
            r#""assistant""#,
            r#""toolResult""#,
            r#""bashExecution""#,
            r#""custom""#,
            "null",
            "3",
        ] {
            for content in MESSAGES {
                for extra in [
                    "",
                    r#","toolName":"read""#,
                    r#","command":"cargo  test\n --all""#,
                    r#","stopReason":"aborted""#,
                    r#","errorMessage":"overloaded:\n  try later""#,
                    r#","toolName":null,"stopReason":7"#,
                    r#","role":"user""#,
                ] {
                    let e = entry(&format!(r#"{{"role":{role},"content":{content}{extra}}}"#));
                    probed += usize::from(probed_message_preview(e.json(), 48, None).is_some());
                    assert_alike(&e);
                }
            }
        }
        // Most of these take the typed pass; the odd ones fall back.
        assert!(probed > 200, "{probed} typed");
        for message in ["null", r#""text""#, "[1]", "{}"] {
            assert_alike(&entry(message));
        }
    }

    #[test]
    fn pi_s_sessions_preview_alike_typed_and_parsed() {
        let mut messages = 0;
        for path in crate::pi_fixture_files() {
            let storage =
                crate::backend::jsonl::JsonlStorage::open(&path, crate::Durability::Relaxed)
                    .expect("a session");
            for e in storage.all_entries() {
                if *e.entry_type() == EntryType::Message {
                    assert!(probed_message_preview(e.json(), 100, None).is_some());
                    messages += 1;
                }
                assert_alike(e);
            }
        }
        assert!(messages > 1000, "{messages} messages");
    }
}
