//! `sessiontree show`: one entry, or a whole path, in full — never cut with
//! `…` — as plain text, Markdown or a self-contained HTML page (inline CSS,
//! images embedded as data URIs, every stored text escaped); and the HTML page
//! of `export --html`, one file per session as pi's `/export` writes.
//!
//! Output is streamed: the path is known as ids from the session's compact
//! index ([`Index`]), and each entry is read, rendered and written in turn, so
//! a 1,000,000-entry path never becomes one string in memory.

use super::db::{self, Access};
use super::pager::{ColorChoice, Display, Printer, Style};
use super::{target, Cli};
use clap::{Args, ValueEnum};
use serde_json::Value;
use sessiontree::archive::BoxedStorage;
use sessiontree::preview::{content_text, preview_in};
use sessiontree::tree_index::{Index, NONE, PRESENT};
use sessiontree::{Entry, EntryType, Error, Result, SessionRef, SessionStorage};
use std::io::{IsTerminal, Write};
use std::path::Path;

/// Arguments of `show`.
#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  sessiontree show ffae                             # the active path, every entry whole
  sessiontree show v1-00176 --session ffae          # one entry in full
  sessiontree show ffae --format html > ffae.html   # one page: inline CSS, images embedded")]
pub struct ShowArgs {
    /// A session (id, unique id prefix, or `.jsonl` path): its active path;
    /// or an entry id: that entry (looked up in `--session`, else in every
    /// session of the archive).
    pub target: String,
    /// The session the entry is in (when TARGET is an entry id).
    #[arg(long, value_name = "SESSION")]
    pub session: Option<String>,
    /// The path ending at this entry instead of the active path (TARGET is a session).
    #[arg(long, value_name = "ID")]
    pub from: Option<String>,
    /// Plain text, Markdown, or a self-contained HTML page.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Write to stdout even on a terminal (no pager).
    #[arg(long)]
    pub no_pager: bool,
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Plain text (control characters escaped on a terminal).
    Text,
    /// Markdown.
    Md,
    /// One HTML page: inline CSS, images as data URIs.
    Html,
}

/// What `show` writes: a session's path (ids root first) or one entry.
pub struct Shown {
    storage: BoxedStorage,
    ids: Vec<String>,
    title: String,
}

/// Resolves `show`'s arguments to a session and the entries to write, before
/// any output (a bad argument fails with nothing printed).
pub fn prepare(cli: &Cli, args: &ShowArgs) -> Result<Shown> {
    if let Some(session) = &args.session {
        if args.from.is_some() {
            return Err(Error::Usage(
                "--from takes a session as TARGET; with --session, TARGET is an entry".into(),
            ));
        }
        let storage = target::open_for_reading(cli, session)?;
        return entry_in(storage, &args.target);
    }
    let storage = match open_session(cli, &args.target) {
        Ok(Some(storage)) => storage,
        Ok(None) if args.from.is_none() => return find_entry(cli, &args.target),
        Ok(None) => return Err(Error::SessionNotFound(args.target.clone())),
        Err(e) => return Err(e),
    };
    let mut idx = Index::build(&*storage)?;
    let end = match &args.from {
        Some(id) => idx
            .find(id)
            .filter(|&n| idx.has(n, PRESENT))
            .ok_or_else(|| Error::EntryNotFound(id.clone()))?,
        None => idx.leaf(),
    };
    let path = if end == NONE {
        Vec::new()
    } else {
        idx.ascend(end)
    };
    let ids = path.into_iter().map(|n| idx.id(n).to_owned()).collect();
    let meta = storage.metadata()?;
    let title = session_title(&*storage, &meta.id)?;
    Ok(Shown {
        storage,
        ids,
        title,
    })
}

/// The session `arg` names, or `None` when it names no session of the
/// archive (it may be an entry id).
fn open_session(cli: &Cli, arg: &str) -> Result<Option<BoxedStorage>> {
    match SessionRef::parse(arg) {
        SessionRef::File(_) => target::open_for_reading(cli, arg).map(Some),
        SessionRef::Archive(prefix) => {
            let archive = db::open(cli, Access::Read)?;
            match archive.resolve_session(&prefix) {
                Ok(id) => archive.open_storage(&id).map(Some),
                Err(Error::SessionNotFound(_)) => Ok(None),
                Err(e) => Err(e),
            }
        }
    }
}

/// One entry of `storage`.
fn entry_in(storage: BoxedStorage, id: &str) -> Result<Shown> {
    if storage.entry(id)?.is_none() {
        return Err(Error::EntryNotFound(id.to_owned()));
    }
    let meta = storage.metadata()?;
    let title = format!("{id} in {}", session_title(&*storage, &meta.id)?);
    Ok(Shown {
        storage,
        ids: vec![id.to_owned()],
        title,
    })
}

/// The entry `id` in whichever session of the archive holds it (the newest
/// first; forks share ids, and a forked entry is the same entry).
fn find_entry(cli: &Cli, id: &str) -> Result<Shown> {
    let archive = db::open(cli, Access::Read)?;
    for summary in archive.list(&Default::default())? {
        let storage = archive.open_storage(&summary.metadata.id)?;
        if storage.entry(id)?.is_some() {
            return entry_in(storage, id);
        }
    }
    Err(Error::Usage(format!(
        "{id} is neither a session nor an entry of the archive"
    )))
}

/// `NAME (ID)` or the id.
fn session_title(storage: &dyn SessionStorage, id: &str) -> Result<String> {
    Ok(match storage.session_name()? {
        Some(name) => format!("{} ({id})", name.to_string_lossy()),
        None => id.to_owned(),
    })
}

impl Shown {
    /// Writes every entry, read one at a time, to `out`.
    pub fn write(&self, format: Format, out: &mut dyn Sink) -> Result<()> {
        let cwd = self.storage.metadata()?.cwd;
        let mut doc = Document::new(format, out);
        doc.start(&self.title);
        for id in &self.ids {
            if !doc.out.is_open() {
                break;
            }
            let entry = self
                .storage
                .entry(id)?
                .ok_or_else(|| Error::EntryNotFound(id.clone()))?;
            doc.entry(&entry, cwd.as_deref());
        }
        doc.end();
        Ok(())
    }

    /// The entries as stored, for `--json`: `{"title", "entries": [...]}`.
    pub fn write_json(&self, out: &mut Printer) -> Result<()> {
        out.raw(&format!(
            r#"{{"title":{},"entries":["#,
            serde_json::json!(self.title)
        ));
        for (i, id) in self.ids.iter().enumerate() {
            let entry = self
                .storage
                .entry(id)?
                .ok_or_else(|| Error::EntryNotFound(id.clone()))?;
            if i > 0 {
                out.raw(",");
            }
            out.raw(entry.json());
        }
        out.raw("]}\n");
        Ok(())
    }
}

/// Where a rendering goes.
pub trait Sink {
    /// Writes text as it is.
    fn put(&mut self, s: &str);
    /// Whether output still goes anywhere.
    fn is_open(&self) -> bool {
        true
    }
}

/// The printer: text is made terminal-safe when stdout is a terminal (the
/// printer's own escaping), passed exactly into a pipe or file.
pub struct PrinterSink<'a> {
    printer: &'a mut Printer,
    terminal: bool,
}

impl<'a> PrinterSink<'a> {
    /// Wraps `printer`.
    pub fn new(printer: &'a mut Printer) -> Self {
        PrinterSink {
            printer,
            terminal: std::io::stdout().is_terminal(),
        }
    }
}

impl Sink for PrinterSink<'_> {
    fn put(&mut self, s: &str) {
        if self.terminal {
            // `piece` escapes control characters; line breaks pass.
            self.printer.piece(Style::Plain, s);
        } else {
            self.printer.raw(s);
        }
    }
    fn is_open(&self) -> bool {
        self.printer.is_open()
    }
}

/// A file being written (`export --html`); the first failure is kept.
struct FileSink {
    out: std::io::BufWriter<std::fs::File>,
    failed: Option<std::io::Error>,
}

impl Sink for FileSink {
    fn put(&mut self, s: &str) {
        if self.failed.is_none() {
            if let Err(e) = self.out.write_all(s.as_bytes()) {
                self.failed = Some(e);
            }
        }
    }
    fn is_open(&self) -> bool {
        self.failed.is_none()
    }
}

/// Writes the HTML page of `storage`'s active path to `path` (removed again
/// if writing fails).
pub fn write_html_file(storage: BoxedStorage, path: &Path) -> Result<()> {
    let mut idx = Index::build(&*storage)?;
    let ids = if idx.leaf() == NONE {
        Vec::new()
    } else {
        let leaf = idx.leaf();
        idx.ascend(leaf)
            .into_iter()
            .map(|n| idx.id(n).to_owned())
            .collect()
    };
    let meta = storage.metadata()?;
    let title = session_title(&*storage, &meta.id)?;
    let shown = Shown {
        storage,
        ids,
        title,
    };
    let io = |e| Error::io(format!("writing {}", path.display()), e);
    let file = std::fs::File::create(path).map_err(io)?;
    let mut sink = FileSink {
        out: std::io::BufWriter::with_capacity(1 << 16, file),
        failed: None,
    };
    let written = shown.write(Format::Html, &mut sink);
    let done = written.and_then(|()| {
        if let Some(e) = sink.failed.take() {
            return Err(io(e));
        }
        sink.out.flush().map_err(io)
    });
    if done.is_err() {
        let _ = std::fs::remove_file(path);
    }
    done
}

/// `export --html`: the page of `storage`'s active path as
/// `DIR/SESSION_ID.html`. Like every export it never destroys a file: an
/// identical page is left alone, a differing one is refused unless `force`,
/// which keeps the old page as `NAME.bak`.
pub fn export_html(
    storage: BoxedStorage,
    dir: &Path,
    force: bool,
) -> Result<(std::path::PathBuf, sessiontree::convert::ExportOutcome)> {
    use sessiontree::convert::ExportOutcome;
    let id = storage.metadata()?.id;
    if id.is_empty()
        || id.starts_with('.')
        || !id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        return Err(Error::Usage(format!(
            "session id {id:?} cannot name a file: not exported as HTML"
        )));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    let path = dir.join(format!("{id}.html"));
    let partial = dir.join(format!("{id}.html.partial"));
    // No write through a link planted in DIR (into the file it points at).
    sessiontree::convert::refuse_links_below(dir, &path)?;
    if std::fs::symlink_metadata(&partial).is_ok_and(|m| m.file_type().is_symlink()) {
        let _ = std::fs::remove_file(&partial);
    }
    write_html_file(storage, &partial)?;
    let io = |e| Error::io(format!("writing {}", path.display()), e);
    let outcome = match std::fs::read(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => ExportOutcome::Created,
        Err(e) => return Err(io(e)),
        Ok(old) if std::fs::read(&partial).map_err(io)? == old => {
            let _ = std::fs::remove_file(&partial);
            return Ok((path, ExportOutcome::Unchanged));
        }
        Ok(_) if !force => {
            let _ = std::fs::remove_file(&partial);
            return Err(Error::io(
                format!("writing {}", path.display()),
                std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "a different page is there; nothing written (--force replaces it, keeping NAME.bak)",
                ),
            ));
        }
        Ok(_) => {
            let mut backup = path.with_extension("html.bak");
            let mut n = 1;
            while backup.exists() {
                backup = path.with_extension(format!("html.bak.{n}"));
                n += 1;
            }
            std::fs::rename(&path, &backup).map_err(io)?;
            ExportOutcome::Replaced { backup }
        }
    };
    std::fs::rename(&partial, &path).map_err(io)?;
    Ok((path, outcome))
}

/// `show`'s display: the pager for text and Markdown on a terminal.
pub fn display(args: &ShowArgs) -> Display {
    Display {
        pager: !args.no_pager && args.format != Format::Html,
        color: ColorChoice::Never,
    }
}

// ---------------------------------------------------------------------------
// Rendering.

/// One readable piece of an entry.
enum Block {
    /// Prose (a message's text, a summary).
    Text(String),
    /// A model's thinking.
    Thinking(String),
    /// A tool call: its name and arguments, pretty-printed.
    ToolCall(String, String),
    /// Verbatim text (a command's output, JSON).
    Code(String),
    /// An image: its MIME type and base64 data.
    Image(String, String),
    /// A short note (`error`, `aborted`).
    Note(String),
}

/// A document being written in one format.
struct Document<'a> {
    format: Format,
    out: &'a mut dyn Sink,
    first: bool,
}

impl<'a> Document<'a> {
    fn new(format: Format, out: &'a mut dyn Sink) -> Self {
        Document {
            format,
            out,
            first: true,
        }
    }

    fn start(&mut self, title: &str) {
        match self.format {
            Format::Text => {}
            Format::Md => self.out.put(&format!("# {}\n", md_inline(title))),
            Format::Html => {
                self.out.put("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<meta name=\"generator\" content=\"sessiontree show\">\n<title>");
                self.out.put(&html_escape(title));
                self.out.put("</title>\n<style>\n");
                self.out.put(CSS);
                self.out.put("</style>\n</head>\n<body>\n<h1>");
                self.out.put(&html_escape(title));
                self.out.put("</h1>\n");
            }
        }
    }

    fn end(&mut self) {
        if self.format == Format::Html {
            self.out.put("</body>\n</html>\n");
        }
    }

    fn entry(&mut self, e: &Entry, cwd: Option<&str>) {
        let (kind, blocks) = blocks_of(e, cwd);
        let ts = e.timestamp();
        match self.format {
            Format::Text => {
                if !self.first {
                    self.out.put("\n");
                }
                self.out.put(&format!(
                    "── {} · {} · {} ──\n",
                    super::field(&kind),
                    super::field(e.id()),
                    super::field(ts)
                ));
                for b in &blocks {
                    match b {
                        Block::Text(t) | Block::Code(t) => self.lines(t),
                        Block::Thinking(t) => {
                            self.out.put("[thinking]\n");
                            self.lines(t);
                        }
                        Block::ToolCall(name, args) => {
                            self.out
                                .put(&format!("[tool call: {}]\n", super::field(name)));
                            self.lines(args);
                        }
                        Block::Image(mime, data) => self
                            .out
                            .put(&format!("[image: {mime}, {} bytes]\n", data.len() / 4 * 3)),
                        Block::Note(n) => self.out.put(&format!("({n})\n")),
                    }
                }
            }
            Format::Md => {
                self.out.put(&format!(
                    "\n## {} · `{}` · {}\n\n",
                    md_inline(&kind),
                    md_inline(&e.id().replace('`', "'")),
                    md_inline(ts)
                ));
                for b in &blocks {
                    match b {
                        Block::Text(t) => {
                            self.lines(t);
                            self.out.put("\n");
                        }
                        Block::Thinking(t) => {
                            self.out.put("> *thinking*\n>\n");
                            for line in t.lines() {
                                self.out.put(&format!("> {line}\n"));
                            }
                            self.out.put("\n");
                        }
                        Block::ToolCall(name, args) => {
                            self.out
                                .put(&format!("**tool call** `{}`\n\n", name.replace('`', "'")));
                            self.fenced("json", args);
                        }
                        Block::Code(t) => self.fenced("", t),
                        Block::Image(mime, data) => self
                            .out
                            .put(&format!("![image](data:{mime};base64,{data})\n\n")),
                        Block::Note(n) => self.out.put(&format!("*({})*\n\n", md_inline(n))),
                    }
                }
            }
            Format::Html => {
                let class = kind
                    .split(|c: char| !c.is_ascii_alphanumeric())
                    .next()
                    .unwrap_or("entry");
                self.out.put(&format!(
                    "<section class=\"entry {}\" id=\"{}\">\n<header><span class=\"kind\">{}</span> <code>{}</code> <time>{}</time></header>\n",
                    html_escape(class),
                    html_escape(e.id()),
                    html_escape(&kind),
                    html_escape(e.id()),
                    html_escape(ts)
                ));
                for b in &blocks {
                    match b {
                        Block::Text(t) => {
                            self.out
                                .put(&format!("<div class=\"text\">{}</div>\n", html_escape(t)))
                        }
                        Block::Thinking(t) => self.out.put(&format!(
                            "<details class=\"thinking\"><summary>thinking</summary><div class=\"text\">{}</div></details>\n",
                            html_escape(t)
                        )),
                        Block::ToolCall(name, args) => self.out.put(&format!(
                            "<div class=\"tool\"><div class=\"name\">{}</div><pre>{}</pre></div>\n",
                            html_escape(name),
                            html_escape(args)
                        )),
                        Block::Code(t) => {
                            self.out.put(&format!("<pre>{}</pre>\n", html_escape(t)))
                        }
                        Block::Image(mime, data) => self.out.put(&format!(
                            "<img alt=\"image\" src=\"data:{mime};base64,{data}\">\n"
                        )),
                        Block::Note(n) => self
                            .out
                            .put(&format!("<p class=\"note\">({})</p>\n", html_escape(n))),
                    }
                }
                self.out.put("</section>\n");
            }
        }
        self.first = false;
    }

    /// `t` with a final line break.
    fn lines(&mut self, t: &str) {
        self.out.put(t);
        if !t.ends_with('\n') {
            self.out.put("\n");
        }
    }

    /// A fenced code block whose fence no backtick run inside can close.
    fn fenced(&mut self, lang: &str, t: &str) {
        let longest = t.split(|c| c != '`').map(str::len).max().unwrap_or(0);
        let fence = "`".repeat(longest.max(2) + 1);
        self.out.put(&format!("{fence}{lang}\n"));
        self.lines(t);
        self.out.put(&format!("{fence}\n\n"));
    }
}

/// What an entry is (`user`, `assistant · anthropic/claude-…`, `toolResult
/// [read]`, `compaction`, …) and its readable pieces, in full.
fn blocks_of(e: &Entry, cwd: Option<&str>) -> (String, Vec<Block>) {
    let v = e.value();
    let text = |key: &str| v[key].as_str().unwrap_or("").to_owned();
    match e.entry_type() {
        EntryType::Message => message_blocks(&v["message"]),
        EntryType::Compaction => (
            format!(
                "compaction ({} tokens before)",
                v["tokensBefore"].as_f64().unwrap_or(0.0)
            ),
            vec![Block::Text(text("summary"))],
        ),
        EntryType::BranchSummary => ("branch summary".into(), vec![Block::Text(text("summary"))]),
        EntryType::CustomMessage => (
            format!("custom message [{}]", text("customType")),
            content_blocks(&v["content"]),
        ),
        EntryType::Custom => (
            format!("custom [{}]", text("customType")),
            match v.get("data") {
                Some(data) if !data.is_null() => vec![Block::Code(pretty(data))],
                _ => Vec::new(),
            },
        ),
        _ => (
            e.entry_type().as_str().to_owned(),
            // A label, a name, a model: stored fields, one line each.
            vec![Block::Text(super::field(&preview_in(e, usize::MAX, cwd)))],
        ),
    }
}

/// A message's kind and pieces.
fn message_blocks(m: &Value) -> (String, Vec<Block>) {
    let role = m["role"].as_str().unwrap_or("?").to_owned();
    let mut blocks = Vec::new();
    let kind = match role.as_str() {
        "assistant" => {
            blocks.extend(content_blocks(&m["content"]));
            if m["stopReason"] == "aborted" {
                blocks.push(Block::Note("aborted".into()));
            }
            if let Some(err) = m["errorMessage"].as_str() {
                blocks.push(Block::Note(format!("error: {err}")));
            }
            match (m["provider"].as_str(), m["model"].as_str()) {
                (Some(p), Some(model)) => format!("assistant · {p}/{model}"),
                (None, Some(model)) => format!("assistant · {model}"),
                _ => role.clone(),
            }
        }
        "toolResult" => {
            blocks.extend(content_blocks(&m["content"]).into_iter().map(|b| match b {
                Block::Text(t) => Block::Code(t),
                other => other,
            }));
            if m["isError"] == true {
                blocks.push(Block::Note("the tool reported an error".into()));
            }
            match m["toolName"].as_str() {
                Some(tool) => format!("toolResult [{tool}]"),
                None => role.clone(),
            }
        }
        "bashExecution" => {
            let mut shown = format!("$ {}\n", m["command"].as_str().unwrap_or(""));
            shown.push_str(m["output"].as_str().unwrap_or(""));
            blocks.push(Block::Code(shown));
            if let Some(code) = m["exitCode"].as_i64().filter(|&c| c != 0) {
                blocks.push(Block::Note(format!("exit code {code}")));
            }
            role.clone()
        }
        _ => {
            blocks.extend(content_blocks(&m["content"]));
            role.clone()
        }
    };
    (kind, blocks)
}

/// The pieces of a content value: a string, or parts (text, thinking, tool
/// calls, images).
fn content_blocks(content: &Value) -> Vec<Block> {
    let Some(parts) = content.as_array() else {
        let t = content_text(content);
        return if t.is_empty() {
            Vec::new()
        } else {
            vec![Block::Text(t)]
        };
    };
    parts
        .iter()
        .filter_map(|p| match p["type"].as_str() {
            Some("text") => p["text"].as_str().map(|t| Block::Text(t.to_owned())),
            Some("thinking") => p["thinking"]
                .as_str()
                .filter(|t| !t.is_empty())
                .map(|t| Block::Thinking(t.to_owned())),
            Some("toolCall") => Some(Block::ToolCall(
                p["name"].as_str().unwrap_or("tool").to_owned(),
                pretty(&p["arguments"]),
            )),
            Some("image") => {
                let mime = p["mimeType"].as_str().unwrap_or("");
                let data = p["data"].as_str().unwrap_or("");
                Some(if safe_mime(mime) && is_base64(data) {
                    Block::Image(mime.to_owned(), data.to_owned())
                } else {
                    Block::Note(format!("an image that cannot be shown ({mime})"))
                })
            }
            Some(other) => Some(Block::Code(format!("[{other}] {}", pretty(p)))),
            None => p["text"].as_str().map(|t| Block::Text(t.to_owned())),
        })
        .collect()
}

/// JSON pretty-printed (a string argument stays a JSON string).
fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// `image/png` and the like: nothing that could leave a `data:` URI.
fn safe_mime(m: &str) -> bool {
    m.strip_prefix("image/").is_some_and(|sub| {
        !sub.is_empty()
            && sub
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
    })
}

/// Only base64's characters (so the data cannot leave its attribute).
fn is_base64(d: &str) -> bool {
    !d.is_empty()
        && d.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=\n\r".contains(&b))
}

/// Text made safe inside HTML elements and attributes.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => {
                out.push_str(&format!("&#x{:x};", u32::from(c)))
            }
            c => out.push(c),
        }
    }
    out
}

/// One line of Markdown heading text: line breaks become spaces.
fn md_inline(s: &str) -> String {
    super::field(s)
}

/// The page's style: readable text, a card per entry, tool calls and
/// outputs in monospace, dark when the system is.
const CSS: &str = "\
body { font: 15px/1.5 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.3rem; }
section.entry { border: 1px solid #ddd; border-radius: 6px; margin: 1rem 0; padding: .6rem .9rem; }
section.user { background: #f3f7ff; }
section.toolResult, section.bashExecution { background: #fafafa; }
header { font-size: .8rem; color: #666; margin-bottom: .4rem; }
header .kind { font-weight: 600; color: #333; }
.text { white-space: pre-wrap; overflow-wrap: anywhere; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f4f4f4; padding: .5rem; border-radius: 4px; font-size: .85rem; }
.tool .name { font-family: monospace; font-weight: 600; }
details.thinking { color: #555; font-style: italic; }
img { max-width: 100%; }
.note { color: #a33; }
@media (prefers-color-scheme: dark) {
  body { color: #ddd; background: #161616; }
  section.entry { border-color: #333; }
  section.user { background: #1b2433; }
  section.toolResult, section.bashExecution { background: #1c1c1c; }
  pre { background: #222; }
  header, header .kind { color: #aaa; }
}
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_escape_leaves_no_markup() {
        assert_eq!(
            html_escape("<script>\"a\" & 'b'</script>"),
            "&lt;script&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/script&gt;"
        );
        assert_eq!(html_escape("\u{1b}[31m"), "&#x1b;[31m");
    }

    #[test]
    fn only_image_types_and_base64_become_data_uris() {
        assert!(safe_mime("image/png") && safe_mime("image/svg+xml"));
        assert!(!safe_mime("text/html") && !safe_mime("image/png\"><script>"));
        assert!(is_base64("iVBORw0KGgo=") && !is_base64("a\"b") && !is_base64(""));
    }
}
