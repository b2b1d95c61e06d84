//! Drawing the browser's state: a header, the screen's body, a status line
//! and a footer of keys; the help and a prompt or question over them.
//! Nothing here reads the archive ([`super::app::App::prepare`] has read
//! what is drawn).

use super::app::{App, Ask, Modal, Top};
use super::list::ListState;
use super::markdown::clean;
use super::reader::ReaderState;
use super::tree::TreeState;
use crate::cli::columns::fit;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Wrap};
use ratatui::Frame;
use sessiontree::listing::SessionSummary;

/// The keys of each screen, for the footer.
pub const LIST_KEYS: &str =
    "/ filter  ↑↓ move  ⏎ open  r rename  d delete  p resume in pi  ? help  q quit";
/// The tree's keys.
pub const TREE_KEYS: &str =
    "⏎ read  ␣ fold  l leaf  / search  L label  r name  m move  f fork  d del  p pi  ?";
/// The reader's keys.
pub const READER_KEYS: &str = "↑↓ scroll  PgUp/PgDn page  g/G top/bottom  q back";
/// The filter's keys while typing.
pub const FILTER_KEYS: &str = "type to filter (name, cwd, id, message text)  Enter done  Esc clear";

/// The help overlay's lines.
const HELP: &[(&str, &str)] = &[
    ("Sessions", ""),
    (
        "/",
        "filter as you type: name, cwd, id and message text (search index)",
    ),
    ("↑ ↓ j k PgUp PgDn g G", "move"),
    ("Enter", "open the session's tree at its leaf"),
    ("r / d / p", "rename / delete (asks first) / resume in pi"),
    ("Tree", ""),
    ("Enter", "read the entry in full"),
    ("Space ← →", "fold / unfold a branch; ← goes up to the fork"),
    ("l", "back to the leaf"),
    ("/ n N", "search this session; next / previous hit"),
    ("L r", "label the entry / rename the session"),
    (
        "m f",
        "move the leaf here / fork a new session with the path up to here",
    ),
    ("d p", "delete the session / resume it in pi"),
    ("Everywhere", ""),
    ("q Esc", "back; quit from the list"),
    ("Ctrl-C", "quit"),
];

/// Draws the whole screen.
pub fn draw(f: &mut Frame<'_>, app: &App) {
    let [header, body, status, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let bar = Style::default().add_modifier(Modifier::REVERSED);
    let (title, keys) = match app.screen() {
        Top::List(l) => {
            let title = format!(
                "sessiontree browse · {} sessions{}",
                l.total,
                if l.filter.is_empty() {
                    String::new()
                } else {
                    format!(" · filter: {}", clean(&l.filter))
                }
            );
            draw_list(f, body, l);
            (title, if l.editing { FILTER_KEYS } else { LIST_KEYS })
        }
        Top::Tree(t) => {
            draw_tree(f, body, t);
            (
                format!(
                    "{} · {} entries · {}{}",
                    t.id,
                    t.total,
                    clean(t.cwd.as_deref().unwrap_or("")),
                    if t.partial {
                        " · the active path (side branches still being read)"
                    } else {
                        ""
                    }
                ),
                TREE_KEYS,
            )
        }
        Top::Reader(r) => {
            draw_reader(f, body, r);
            (
                format!(
                    "{} · line {}/{}",
                    clean(&r.title),
                    (r.scroll + 1).min(r.wrapped.len()),
                    r.wrapped.len()
                ),
                READER_KEYS,
            )
        }
    };
    let w = f.area().width as usize;
    f.render_widget(Paragraph::new(fit(&title, w)).style(bar), header);
    f.render_widget(
        Paragraph::new(fit(&clean(&app.status), w)).style(Style::default().fg(Color::Yellow)),
        status,
    );
    f.render_widget(
        Paragraph::new(fit(keys, w)).style(Style::default().fg(Color::DarkGray)),
        footer,
    );
    if let Some(m) = &app.modal {
        draw_modal(f, m);
    }
    if app.help {
        draw_help(f);
    }
}

fn date(iso: &str) -> &str {
    iso.get(..16).unwrap_or(iso)
}

/// When a session was last active (its newest entry, as `ls` orders and
/// shows it), else when it was created.
fn last_active(s: &SessionSummary) -> String {
    s.last_active_or_created().map_or_else(
        || s.metadata.created_at.clone(),
        sessiontree::entry::iso_timestamp,
    )
}

fn draw_list(f: &mut Frame<'_>, area: Rect, l: &ListState) {
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(area);
    let w = left.width as usize;
    let mut lines: Vec<Line<'_>> = Vec::new();
    if l.editing || !l.filter.is_empty() {
        lines.push(Line::from(vec![
            Span::styled("/ ", Style::default().fg(Color::Yellow)),
            Span::raw(clean(&l.filter)),
            Span::styled(
                if l.editing { "▏" } else { "" },
                Style::default().fg(Color::Yellow),
            ),
        ]));
    }
    let room = (left.height as usize).saturating_sub(lines.len());
    for (i, s) in l.rows.iter().enumerate().skip(l.top).take(room) {
        let name = s
            .name
            .as_ref()
            .map(|n| clean(&n.to_string_lossy()))
            .unwrap_or_else(|| "-".into());
        let cwd = clean(s.metadata.cwd.as_deref().unwrap_or(""));
        let text = format!(
            "{}  {:>5}  {}  {}",
            date(&last_active(s)),
            s.stats.message_count,
            name,
            cwd
        );
        let style = if i == l.selected {
            Style::default().add_modifier(Modifier::REVERSED)
        } else {
            Style::default()
        };
        lines.push(Line::from(Span::styled(fit(&text, w), style)));
    }
    if l.rows.is_empty() {
        lines.push(Line::from(if l.filter.is_empty() {
            "no sessions: `sessiontree import` brings pi's in"
        } else {
            "no session matches the filter"
        }));
    }
    f.render_widget(Paragraph::new(lines), left);
    // The preview.
    let block = Block::default()
        .borders(Borders::LEFT)
        .border_style(Style::default().fg(Color::DarkGray));
    let inner = block.inner(right);
    f.render_widget(block, right);
    let Some(s) = l.current() else { return };
    let key = Style::default().fg(Color::DarkGray);
    let mut p: Vec<Line<'_>> = vec![
        Line::from(Span::styled(
            s.name
                .as_ref()
                .map(|n| clean(&n.to_string_lossy()))
                .unwrap_or_else(|| "(no name)".into()),
            Style::default().add_modifier(Modifier::BOLD),
        )),
        Line::from(vec![
            Span::styled("id       ", key),
            Span::raw(s.metadata.id.clone()),
        ]),
        Line::from(vec![
            Span::styled("cwd      ", key),
            Span::raw(clean(s.metadata.cwd.as_deref().unwrap_or("-"))),
        ]),
        Line::from(vec![
            Span::styled("created  ", key),
            Span::raw(s.metadata.created_at.clone()),
        ]),
        Line::from(vec![
            Span::styled("active   ", key),
            Span::raw(clean(&last_active(s))),
        ]),
    ];
    let preview = l.preview.as_ref().filter(|p| p.id == s.metadata.id);
    if let Some(last) = preview.and_then(|p| p.last_activity.as_deref()) {
        p.push(Line::from(vec![
            Span::styled("leaf     ", key),
            Span::raw(clean(last)),
        ]));
    }
    p.push(Line::from(vec![
        Span::styled("entries  ", key),
        Span::raw(format!(
            "{} ({} messages)",
            s.entry_count, s.stats.message_count
        )),
    ]));
    p.push(Line::from(vec![
        Span::styled("tokens   ", key),
        Span::raw(format!("{}", s.stats.total_tokens)),
    ]));
    p.push(Line::from(vec![
        Span::styled("cost     ", key),
        Span::raw(format!("${:.4}", s.stats.cost_total)),
    ]));
    let snippets = l.snippets(&s.metadata.id);
    if !snippets.is_empty() {
        p.push(Line::default());
        for hit in snippets {
            p.push(Line::from(vec![
                Span::styled("match    ", key),
                Span::raw(clean(hit)),
            ]));
        }
    }
    if let Some(pv) = preview {
        p.push(Line::default());
        for m in &pv.messages {
            p.push(Line::from(clean(m)));
        }
    }
    f.render_widget(Paragraph::new(p).wrap(Wrap { trim: false }), inner);
}

fn draw_tree(f: &mut Frame<'_>, area: Rect, t: &TreeState) {
    let w = area.width as usize;
    let mut lines = Vec::new();
    for (i, r) in t
        .rows
        .iter()
        .enumerate()
        .skip(t.top)
        .take(area.height as usize)
    {
        let (active, leaf) = t.marks(r.node);
        let indent = "  ".repeat(usize::from(r.depth).min(w / 4));
        let fold = if r.hidden > 0 {
            format!("▸ (+{}) ", r.hidden)
        } else {
            String::new()
        };
        let mark = if active { "* " } else { "  " };
        let id = t.idx.id(r.node);
        let shown = t.shown(r.node);
        let label = shown
            .and_then(|s| s.label.as_deref())
            .map(|l| format!(" [{}]", clean(l)))
            .unwrap_or_default();
        let here = if leaf { "  ← leaf" } else { "" };
        let preview = shown.map(|s| clean(&s.preview)).unwrap_or_default();
        let head = format!("{indent}{mark}{fold}{} ", fit(&clean(id), 40));
        let used = crate::cli::columns::width(&head)
            + crate::cli::columns::width(&label)
            + crate::cli::columns::width(here)
            + 1;
        let style = if i == t.cursor {
            Style::default().add_modifier(Modifier::REVERSED)
        } else {
            Style::default()
        };
        let mark_style = if active {
            style.fg(Color::Green)
        } else {
            style
        };
        lines.push(Line::from(vec![
            Span::styled(head, mark_style),
            Span::styled(label, style.fg(Color::Magenta)),
            Span::styled(" ", style),
            Span::styled(fit(&preview, w.saturating_sub(used)), style),
            Span::styled(here, style.fg(Color::Green).add_modifier(Modifier::BOLD)),
        ]));
    }
    f.render_widget(Paragraph::new(lines), area);
}

fn draw_reader(f: &mut Frame<'_>, area: Rect, r: &ReaderState) {
    let lines: Vec<Line<'_>> = r
        .wrapped
        .iter()
        .skip(r.scroll)
        .take(area.height as usize)
        .cloned()
        .collect();
    f.render_widget(Paragraph::new(lines), area);
}

/// A box of `height` lines in the middle of the screen.
fn centered(area: Rect, height: u16) -> Rect {
    let w = area.width.saturating_sub(4).min(100);
    let h = height.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

fn draw_modal(f: &mut Frame<'_>, m: &Modal) {
    let (title, text) = match m {
        Modal::Prompt { ask, text } => (
            match ask {
                Ask::Rename(_) => " New name (Enter saves, Esc cancels) ",
                Ask::Label(_) => " Label (empty clears; Enter saves, Esc cancels) ",
                Ask::Search => " Search this session (Enter searches, Esc cancels) ",
            },
            format!("{}▏", clean(text)),
        ),
        Modal::Confirm { question, .. } => (" Confirm ", clean(question)),
    };
    let area = centered(f.area(), 5);
    f.render_widget(Clear, area);
    f.render_widget(
        Paragraph::new(text)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(title)),
        area,
    );
}

fn draw_help(f: &mut Frame<'_>) {
    let lines: Vec<Line<'_>> = HELP
        .iter()
        .map(|(k, what)| {
            if what.is_empty() {
                Line::from(Span::styled(
                    *k,
                    Style::default().add_modifier(Modifier::BOLD),
                ))
            } else {
                Line::from(vec![
                    Span::styled(format!("  {k:<22}"), Style::default().fg(Color::Yellow)),
                    Span::raw(*what),
                ])
            }
        })
        .collect();
    let area = centered(f.area(), lines.len() as u16 + 2);
    f.render_widget(Clear, area);
    f.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" Keys (any key closes) ")),
        area,
    );
}
