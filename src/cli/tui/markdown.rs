//! Markdown to styled terminal lines (headings, lists, code blocks,
//! emphasis, inline code, quotes, links), plain text to lines, and wrapping
//! styled lines to a width. Every piece of stored text goes through
//! [`clean`]: control characters are shown escaped, never sent to the
//! terminal.

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use unicode_width::UnicodeWidthChar;

/// Stored text made safe to draw: tabs as four spaces, other control
/// characters (and bidirectional overrides) escaped.
pub fn clean(s: &str) -> String {
    crate::cli::terminal_safe(&s.replace('\t', "    ").replace('\n', " "))
}

/// Plain text as lines (one per line of the text), in `style`; at least one line.
pub fn plain(text: &str, style: Style) -> Vec<Line<'static>> {
    text.split('\n')
        .map(|l| Line::from(Span::styled(clean(l), style)))
        .collect()
}

/// Builds lines from Markdown events.
struct Writer {
    lines: Vec<Line<'static>>,
    line: Vec<Span<'static>>,
    styles: Vec<Style>,
    /// Per open list: the next number (ordered) or `None` (bullets).
    lists: Vec<Option<u64>>,
    quote: usize,
    code: bool,
    /// What each new line starts with (list indentation, quote bars).
    indent: String,
}

impl Writer {
    fn style(&self) -> Style {
        self.styles.last().copied().unwrap_or_default()
    }

    fn push_style(&mut self, f: impl FnOnce(Style) -> Style) {
        let s = f(self.style());
        self.styles.push(s);
    }

    fn text(&mut self, t: &str) {
        if self.line.is_empty() && !self.indent.is_empty() {
            self.line.push(Span::styled(
                self.indent.clone(),
                Style::default().fg(Color::DarkGray),
            ));
        }
        self.line.push(Span::styled(clean(t), self.style()));
    }

    fn end_line(&mut self) {
        let spans = std::mem::take(&mut self.line);
        self.lines.push(Line::from(spans));
    }

    /// Ends the current line if it has anything.
    fn flush(&mut self) {
        if !self.line.is_empty() {
            self.end_line();
        }
    }

    /// A blank line between blocks (never two, never at the start).
    fn gap(&mut self) {
        self.flush();
        if self.lines.last().is_some_and(|l| l.width() > 0) && self.lists.is_empty() {
            self.lines.push(Line::default());
        }
    }

    fn set_indent(&mut self) {
        let bars = "│ ".repeat(self.quote);
        let lists = "  ".repeat(self.lists.len().saturating_sub(1));
        self.indent = format!("{bars}{lists}");
    }
}

/// Markdown text as styled lines.
pub fn render(md: &str) -> Vec<Line<'static>> {
    let mut w = Writer {
        lines: Vec::new(),
        line: Vec::new(),
        styles: Vec::new(),
        lists: Vec::new(),
        quote: 0,
        code: false,
        indent: String::new(),
    };
    let options =
        Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES | Options::ENABLE_TASKLISTS;
    for event in Parser::new_ext(md, options) {
        match event {
            Event::Start(tag) => match tag {
                Tag::Heading { level, .. } => {
                    w.gap();
                    let hashes = match level {
                        HeadingLevel::H1 => 1,
                        HeadingLevel::H2 => 2,
                        HeadingLevel::H3 => 3,
                        HeadingLevel::H4 => 4,
                        HeadingLevel::H5 => 5,
                        HeadingLevel::H6 => 6,
                    };
                    w.push_style(|s| {
                        s.fg(Color::Cyan).add_modifier(Modifier::BOLD).add_modifier(
                            if hashes == 1 {
                                Modifier::UNDERLINED
                            } else {
                                Modifier::empty()
                            },
                        )
                    });
                    w.text(&format!("{} ", "#".repeat(hashes)));
                }
                Tag::Paragraph if w.lists.is_empty() => w.gap(),
                Tag::BlockQuote(_) => {
                    w.gap();
                    w.quote += 1;
                    w.set_indent();
                }
                Tag::CodeBlock(kind) => {
                    w.gap();
                    w.code = true;
                    if let pulldown_cmark::CodeBlockKind::Fenced(lang) = kind {
                        if !lang.is_empty() {
                            w.lines.push(Line::from(Span::styled(
                                format!("```{}", clean(&lang)),
                                Style::default().fg(Color::DarkGray),
                            )));
                        }
                    }
                }
                Tag::List(start) => {
                    if w.lists.is_empty() {
                        w.gap();
                    } else {
                        w.flush();
                    }
                    w.lists.push(start);
                    w.set_indent();
                }
                Tag::Item => {
                    w.flush();
                    let marker = match w.lists.last_mut() {
                        Some(Some(n)) => {
                            *n += 1;
                            format!("{}. ", *n - 1)
                        }
                        _ => "• ".to_owned(),
                    };
                    w.text("");
                    w.line
                        .push(Span::styled(marker, Style::default().fg(Color::Yellow)));
                }
                Tag::Emphasis => w.push_style(|s| s.add_modifier(Modifier::ITALIC)),
                Tag::Strong => w.push_style(|s| s.add_modifier(Modifier::BOLD)),
                Tag::Strikethrough => w.push_style(|s| s.add_modifier(Modifier::CROSSED_OUT)),
                Tag::Link { .. } => {
                    w.push_style(|s| s.fg(Color::Blue).add_modifier(Modifier::UNDERLINED))
                }
                Tag::TableRow | Tag::TableHead => w.flush(),
                Tag::TableCell => w.text("│ "),
                _ => {}
            },
            Event::End(tag) => match tag {
                TagEnd::Heading(_) => {
                    w.styles.pop();
                    w.end_line();
                }
                TagEnd::Paragraph => w.flush(),
                TagEnd::BlockQuote(_) => {
                    w.flush();
                    w.quote = w.quote.saturating_sub(1);
                    w.set_indent();
                }
                TagEnd::CodeBlock => {
                    w.code = false;
                    w.flush();
                }
                TagEnd::List(_) => {
                    w.flush();
                    w.lists.pop();
                    w.set_indent();
                }
                TagEnd::Item => w.flush(),
                TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough | TagEnd::Link => {
                    w.styles.pop();
                }
                TagEnd::TableHead | TagEnd::TableRow => w.flush(),
                _ => {}
            },
            Event::Text(t) if w.code => {
                let code = Style::default().fg(Color::Green);
                for (i, l) in t.split('\n').enumerate() {
                    if i > 0 {
                        w.end_line();
                    }
                    if !l.is_empty() {
                        w.line.push(Span::styled("  ", code));
                        w.line.push(Span::styled(clean(l), code));
                    }
                }
            }
            Event::Text(t) => w.text(&t),
            Event::Code(t) => {
                let s = w.style().fg(Color::Yellow);
                w.styles.push(s);
                w.text(&format!("`{t}`"));
                w.styles.pop();
            }
            Event::SoftBreak => w.text(" "),
            Event::HardBreak => w.end_line(),
            Event::Rule => {
                w.gap();
                w.lines.push(Line::from(Span::styled(
                    "────────",
                    Style::default().fg(Color::DarkGray),
                )));
            }
            Event::TaskListMarker(done) => w.text(if done { "[x] " } else { "[ ] " }),
            Event::Html(t) | Event::InlineHtml(t) => {
                for (i, l) in t.split('\n').enumerate() {
                    if i > 0 {
                        w.end_line();
                    }
                    w.text(l);
                }
            }
            Event::FootnoteReference(t) => w.text(&format!("[^{t}]")),
            Event::InlineMath(t) | Event::DisplayMath(t) => w.text(&t),
        }
    }
    w.flush();
    while w.lines.last().is_some_and(|l| l.width() == 0) {
        w.lines.pop();
    }
    if w.lines.is_empty() {
        w.lines.push(Line::default());
    }
    w.lines
}

/// Lines wrapped to `width` columns: at the last space that fits, else
/// mid-word; styles kept.
pub fn wrap(lines: &[Line<'static>], width: usize) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    for line in lines {
        if line.width() <= width {
            out.push(line.clone());
            continue;
        }
        // Characters with their styles, then cut into rows.
        let chars: Vec<(char, Style)> = line
            .spans
            .iter()
            .flat_map(|s| s.content.chars().map(move |c| (c, s.style)))
            .collect();
        let mut start = 0;
        while start < chars.len() {
            let mut cols = 0;
            let mut end = start;
            let mut last_space = None;
            while end < chars.len() {
                let w = chars[end].0.width().unwrap_or(0);
                if cols + w > width {
                    break;
                }
                if chars[end].0 == ' ' {
                    last_space = Some(end);
                }
                cols += w;
                end += 1;
            }
            if end < chars.len() {
                if let Some(sp) = last_space.filter(|&sp| sp > start) {
                    end = sp + 1;
                }
            }
            if end == start {
                end = start + 1;
            }
            out.push(spans_of(&chars[start..end]));
            start = end;
        }
    }
    out
}

/// Characters back into spans of one style each.
fn spans_of(chars: &[(char, Style)]) -> Line<'static> {
    let mut spans: Vec<Span<'static>> = Vec::new();
    let mut text = String::new();
    let mut style = chars.first().map(|c| c.1).unwrap_or_default();
    for &(c, s) in chars {
        if s != style && !text.is_empty() {
            spans.push(Span::styled(std::mem::take(&mut text), style));
        }
        style = s;
        text.push(c);
    }
    if !text.is_empty() {
        spans.push(Span::styled(text, style));
    }
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Line<'_>]) -> Vec<String> {
        lines
            .iter()
            .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
            .collect()
    }

    #[test]
    fn headings_lists_code_and_emphasis_are_rendered() {
        let md = "# Title\n\nSome *soft* and **bold** text with `code`.\n\n- one\n- two\n  1. inner\n\n```rust\nfn main() {\n    x();\n}\n```\n\n> quoted";
        let lines = render(md);
        let t = text(&lines);
        assert_eq!(t[0], "# Title");
        assert!(lines[0].spans[0]
            .style
            .add_modifier
            .contains(Modifier::BOLD));
        assert_eq!(t[2], "Some soft and bold text with `code`.");
        let bold = lines[2].spans.iter().find(|s| s.content == "bold").unwrap();
        assert!(bold.style.add_modifier.contains(Modifier::BOLD));
        let soft = lines[2].spans.iter().find(|s| s.content == "soft").unwrap();
        assert!(soft.style.add_modifier.contains(Modifier::ITALIC));
        assert!(t.contains(&"• one".to_owned()), "{t:?}");
        assert!(t.contains(&"  1. inner".to_owned()), "{t:?}");
        assert!(t.contains(&"```rust".to_owned()), "{t:?}");
        assert!(t.contains(&"      x();".to_owned()), "{t:?}");
        assert!(t.contains(&"│ quoted".to_owned()), "{t:?}");
    }

    #[test]
    fn control_characters_never_reach_the_terminal() {
        let t = text(&render("red \u{1b}[31m and\ttab"));
        assert_eq!(t, ["red \\u{1b}[31m and    tab"]);
    }

    #[test]
    fn wrapping_breaks_at_spaces_and_keeps_every_character() {
        let lines = vec![Line::from("alpha beta gamma delta")];
        let t = text(&wrap(&lines, 11));
        assert_eq!(t, ["alpha beta ", "gamma delta"]);
        let long = vec![Line::from("x".repeat(25))];
        assert_eq!(text(&wrap(&long, 10)).concat(), "x".repeat(25));
    }
}
