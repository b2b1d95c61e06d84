//! One entry read in full: a message's text rendered from Markdown, its
//! thinking, tool calls (each argument on its own lines) and tool results
//! as they came back, other entries as indented JSON; wrapped to the
//! screen's width and scrolled.

use super::markdown::{self, plain, wrap};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use serde_json::Value;
use sessiontree::{Entry, EntryType};

/// The reader screen's state.
#[derive(Debug)]
pub struct ReaderState {
    /// The first line: type, role, time.
    pub title: String,
    /// The rendered lines, before wrapping.
    lines: Vec<Line<'static>>,
    /// The lines wrapped to `width`.
    pub wrapped: Vec<Line<'static>>,
    /// The width wrapped to.
    pub width: usize,
    /// The first line on screen.
    pub scroll: usize,
    /// Lines on screen.
    pub height: usize,
}

impl ReaderState {
    /// Renders `e` for reading.
    pub fn new(e: &Entry) -> Self {
        let v = e.value();
        let role = v["message"]["role"].as_str().unwrap_or("");
        let title = if *e.entry_type() == EntryType::Message {
            format!("{} {role} · {}", e.id(), e.timestamp())
        } else {
            format!("{} {} · {}", e.id(), e.entry_type().as_str(), e.timestamp())
        };
        ReaderState {
            title,
            lines: render(e, &v),
            wrapped: Vec::new(),
            width: 0,
            scroll: 0,
            height: 20,
        }
    }

    /// Wraps to `width` columns (again only when it changed).
    pub fn fit(&mut self, width: usize, height: usize) {
        self.height = height.max(1);
        if width != self.width {
            self.width = width;
            self.wrapped = wrap(&self.lines, width.max(10));
        }
        self.scroll = self.scroll.min(self.max_scroll());
    }

    fn max_scroll(&self) -> usize {
        self.wrapped.len().saturating_sub(self.height)
    }

    /// Scrolls by `delta` lines.
    pub fn scroll_by(&mut self, delta: isize) {
        self.scroll = self
            .scroll
            .saturating_add_signed(delta)
            .min(self.max_scroll());
    }

    /// To the top (`false`) or the bottom (`true`).
    pub fn jump(&mut self, bottom: bool) {
        self.scroll = if bottom { self.max_scroll() } else { 0 };
    }

    /// The whole text, one string per wrapped line (for the tests).
    #[cfg(test)]
    pub fn text(&self) -> Vec<String> {
        self.wrapped
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
            .collect()
    }
}

fn heading(text: String) -> Line<'static> {
    Line::from(Span::styled(
        text,
        Style::default()
            .fg(Color::Magenta)
            .add_modifier(Modifier::BOLD),
    ))
}

fn dim(text: &str) -> Vec<Line<'static>> {
    plain(
        text,
        Style::default()
            .fg(Color::DarkGray)
            .add_modifier(Modifier::ITALIC),
    )
}

/// The entry's lines.
fn render(e: &Entry, v: &Value) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    match e.entry_type() {
        EntryType::Message => message(&v["message"], &mut out),
        EntryType::Compaction | EntryType::BranchSummary => {
            out.push(heading(format!("[{}]", e.entry_type().as_str())));
            out.extend(markdown::render(v["summary"].as_str().unwrap_or("")));
        }
        EntryType::CustomMessage => {
            out.push(heading(format!(
                "[{}]",
                v["customType"].as_str().unwrap_or("custom")
            )));
            content(&v["content"], &mut out, true);
        }
        _ => out.extend(plain(
            &serde_json::to_string_pretty(v).unwrap_or_default(),
            Style::default(),
        )),
    }
    out
}

/// A message: by role, its parts in order.
fn message(m: &Value, out: &mut Vec<Line<'static>>) {
    let role = m["role"].as_str().unwrap_or("?");
    match role {
        "toolResult" => {
            let tool = m["toolName"].as_str().unwrap_or("?");
            let error = if m["isError"] == Value::Bool(true) {
                " (error)"
            } else {
                ""
            };
            out.push(heading(format!("← result of {tool}{error}")));
            content(&m["content"], out, false);
        }
        "bashExecution" => {
            out.push(heading(format!(
                "$ {}",
                m["command"].as_str().unwrap_or("")
            )));
            out.extend(plain(m["output"].as_str().unwrap_or(""), Style::default()));
        }
        _ => {
            out.push(heading(format!("{role}:")));
            content(&m["content"], out, true);
            if let Some(err) = m["errorMessage"].as_str() {
                out.extend(plain(
                    &format!("error: {err}"),
                    Style::default().fg(Color::Red),
                ));
            }
        }
    }
}

/// Message content: a string, or parts (text, thinking, tool calls, images).
/// Text is Markdown where `markdown` (what people and models write), plain
/// otherwise (what tools return).
fn content(c: &Value, out: &mut Vec<Line<'static>>, as_markdown: bool) {
    let text = |t: &str, out: &mut Vec<Line<'static>>| {
        if as_markdown {
            out.extend(markdown::render(t));
        } else {
            out.extend(plain(t, Style::default()));
        }
    };
    match c {
        Value::String(s) => text(s, out),
        Value::Array(parts) => {
            for p in parts {
                match p["type"].as_str().unwrap_or("") {
                    "text" => text(p["text"].as_str().unwrap_or(""), out),
                    "thinking" => {
                        out.extend(dim(&format!(
                            "thinking: {}",
                            p["thinking"].as_str().unwrap_or("")
                        )));
                    }
                    "toolCall" => tool_call(p, out),
                    "image" => out.push(Line::from(Span::styled(
                        format!(
                            "[image {}, {} bytes of base64]",
                            p["mimeType"].as_str().unwrap_or("?"),
                            p["data"].as_str().map_or(0, str::len)
                        ),
                        Style::default().fg(Color::Cyan),
                    ))),
                    other => out.extend(plain(
                        &format!(
                            "[{other}] {}",
                            serde_json::to_string_pretty(p).unwrap_or_default()
                        ),
                        Style::default(),
                    )),
                }
                out.push(Line::default());
            }
        }
        Value::Null => {}
        other => text(&other.to_string(), out),
    }
}

/// A tool call: its name, then each argument (strings as written, over as
/// many lines as they hold; other values as JSON).
fn tool_call(p: &Value, out: &mut Vec<Line<'static>>) {
    out.push(Line::from(Span::styled(
        format!("→ {}", p["name"].as_str().unwrap_or("?")),
        Style::default()
            .fg(Color::Yellow)
            .add_modifier(Modifier::BOLD),
    )));
    let key_style = Style::default().fg(Color::Yellow);
    match &p["arguments"] {
        Value::Object(args) => {
            for (k, v) in args {
                let body = match v {
                    Value::String(s) => s.clone(),
                    other => serde_json::to_string_pretty(other).unwrap_or_default(),
                };
                if body.contains('\n') {
                    out.push(Line::from(Span::styled(format!("  {k}:"), key_style)));
                    out.extend(plain(&body, Style::default()).into_iter().map(|mut l| {
                        l.spans.insert(0, Span::raw("    "));
                        l
                    }));
                } else {
                    let mut l = Line::from(Span::styled(format!("  {k}: "), key_style));
                    l.spans
                        .extend(plain(&body, Style::default()).remove(0).spans);
                    out.push(l);
                }
            }
        }
        other => out.extend(plain(
            &serde_json::to_string_pretty(other).unwrap_or_default(),
            Style::default(),
        )),
    }
}
