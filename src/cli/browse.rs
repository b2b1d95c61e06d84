//! Reading commands: `ls`, `branch`, `context`, `search`, `stats`.

use super::columns::pad;
use super::{target, Cli, Report};
use clap::Args;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use sessiontree::backend::sqlite::{ListQuery, SearchHit};
use sessiontree::json::{js_number, JsString, ObjectWriter};
use sessiontree::preview::{message_parts, one_line, preview_in, truncate};
use sessiontree::{Entry, Error, Result, Session, SessionRef, SessionStorage};

/// Arguments of `ls`.
#[derive(Debug, Args)]
pub struct LsArgs {
    /// Only sessions of this directory or a directory below it (`ls .`: the
    /// current project); relative paths are resolved against the current directory.
    #[arg(value_name = "DIR", conflicts_with = "cwd")]
    pub dir: Option<String>,
    /// Only sessions of this working directory or a directory below it
    /// (relative paths resolved against the current directory).
    #[arg(long)]
    pub cwd: Option<String>,
    /// Only sessions created at or after this time (ISO-8601, e.g. 2025-01-31).
    #[arg(long)]
    pub since: Option<String>,
    /// Only sessions whose name contains this text.
    #[arg(long)]
    pub name: Option<String>,
    /// Page size.
    #[arg(long, default_value_t = 50)]
    pub limit: usize,
    /// Page number, from 1.
    #[arg(long, default_value_t = 1, value_parser = page_number)]
    pub page: usize,
}

/// `--page`: a whole number from 1.
fn page_number(s: &str) -> std::result::Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("pages are numbered from 1".to_owned()),
    }
}

/// `ls`.
pub fn ls(cli: &Cli, args: &LsArgs) -> Result<Report> {
    let archive = super::db::open(cli, super::db::Access::Read)?;
    let since_ms = match &args.since {
        None => None,
        Some(s) => Some(sessiontree::entry::timestamp_millis(s).ok_or_else(|| {
            Error::Usage(format!(
                "--since {s:?} is not an ISO-8601 date or time (e.g. 2025-01-31)"
            ))
        })?),
    };
    let offset = args
        .limit
        .checked_mul(args.page.saturating_sub(1))
        .ok_or_else(|| {
            Error::Usage(format!(
                "--limit {} with --page {} is past any archive",
                args.limit, args.page
            ))
        })?;
    let cwd_under = match args.dir.as_ref().or(args.cwd.as_ref()) {
        Some(d) => Some(super::spend::resolve_dir(d)?),
        None => None,
    };
    let mut query = ListQuery {
        cwd_under,
        since_ms,
        name_contains: args.name.clone(),
        limit: Some(args.limit),
        offset,
        by_activity: true,
        ..ListQuery::default()
    };
    let rows = archive.list(&query)?;
    // The total is needed only when the page does not say it: a short first
    // page holds every session (one statement fewer for the picker's case).
    let total = if args.page == 1 && rows.len() < args.limit {
        rows.len() as u64
    } else {
        query.limit = None;
        archive.count(&query)?
    };
    // Only the form that is printed is made: the other would cost a
    // formatted float, a date and an escape per row (most of `ls`'s time
    // after the archive is open).
    if cli.json {
        return Ok(Report::raw(ls_json(&rows, args, total), String::new()));
    }
    Ok(Report::raw(
        String::new(),
        ls_text(&rows, args, offset, total),
    ))
}

/// A listed session's last activity as ISO-8601 (its creation time when it has no dated entry).
fn last_active(r: &sessiontree::backend::sqlite::SessionSummary) -> String {
    r.last_active_or_created().map_or_else(
        || r.metadata.created_at.clone(),
        sessiontree::entry::iso_timestamp,
    )
}

/// `ls --json`: the page's sessions and the paging facts.
fn ls_json(
    rows: &[sessiontree::backend::sqlite::SessionSummary],
    args: &LsArgs,
    total: u64,
) -> String {
    let mut list = String::with_capacity(rows.len() * 320 + 2);
    list.push('[');
    for (i, r) in rows.iter().enumerate() {
        let m = &r.metadata;
        if i > 0 {
            list.push(',');
        }
        let mut row = ObjectWriter::new();
        row.str("id", &m.id)
            .str("createdAt", &m.created_at)
            .str("lastActive", &last_active(r))
            .opt_str_or_null("cwd", m.cwd.as_deref())
            .raw("name", r.name.as_ref().map_or("null", JsString::json))
            .raw("entries", &r.entry_count.to_string())
            .raw("messages", &r.stats.message_count.to_string())
            .value("cost", &js_number(r.stats.cost_total))
            .value("totalTokens", &js_number(r.stats.total_tokens))
            .str("contract", r.contract.as_str());
        list.push_str(&row.finish());
    }
    list.push(']');
    let mut json = ObjectWriter::new();
    json.raw("sessions", &list)
        .raw("page", &args.page.to_string())
        .raw("limit", &args.limit.to_string())
        .raw("total", &total.to_string());
    json.finish()
}

/// `ls`: the page's sessions as aligned columns, and where the page is.
fn ls_text(
    rows: &[sessiontree::backend::sqlite::SessionSummary],
    args: &LsArgs,
    offset: usize,
    total: u64,
) -> String {
    let mut text = String::with_capacity(rows.len() * 160 + 200);
    if !rows.is_empty() {
        text.push_str(&format!(
            "{:<36}  {:<24}  {:>7}  {:>6}  {:>8}  {:<5}  {}  {}\n",
            "ID",
            "LAST ACTIVE",
            "ENTRIES",
            "MSGS",
            "COST",
            "RULES",
            pad("NAME", 24),
            "CWD"
        ));
    }
    for r in rows {
        let m = &r.metadata;
        // Escaped before it is measured, so that a tab or a wide character
        // in a name never shifts the columns after it.
        let name = r
            .name
            .as_ref()
            .map_or_else(|| "-".to_owned(), JsString::to_string_lossy);
        text.push_str(&format!(
            "{:<36}  {:<24}  {:>7}  {:>6}  {:>8.4}  {:<5}  {}  {}\n",
            super::field(&m.id),
            last_active(r),
            r.entry_count,
            r.stats.message_count,
            r.stats.cost_total,
            r.contract.as_str(),
            pad(&super::field(&name), 24),
            super::field(m.cwd.as_deref().unwrap_or(""))
        ));
    }
    let shown_to = offset as u64 + rows.len() as u64;
    let first = offset as u64 + 1;
    if rows.is_empty() && total == 0 {
        text.push_str("no sessions\n");
    } else if rows.is_empty() {
        let pages = total.div_ceil(args.limit.max(1) as u64);
        text.push_str(&format!(
            "no sessions on page {}: {total} sessions make {pages} page(s) of {}\n",
            args.page, args.limit
        ));
    } else if shown_to < total {
        text.push_str(&format!(
            "{first}–{shown_to} of {total} sessions; {} more — use --page {}\n",
            total - shown_to,
            args.page + 1
        ));
    } else if args.page > 1 {
        text.push_str(&format!("{first}–{shown_to} of {total} sessions\n"));
    }
    text
}

/// Arguments of `branch` and `context`.
#[derive(Debug, Args)]
pub struct BranchArgs {
    /// Session id, unique id prefix, or `.jsonl` path.
    pub session: String,
    /// Start from this entry instead of the current leaf.
    #[arg(long)]
    pub from: Option<String>,
}

/// `branch`.
pub fn branch(cli: &Cli, args: &BranchArgs) -> Result<Report> {
    let storage = target::open_for_reading(cli, &args.session)?;
    let cwd = storage.metadata()?.cwd;
    // An app session's branch is pi 1.6's `getBranch`: the whole path to the
    // root from the last entry (or `--from`); an SDK session's is cut at a compaction.
    if storage.contract()? != sessiontree::Contract::App {
        let session = Session::new(storage);
        return Ok(branch_streamed(
            move |from, sink| session.visit_branch(from, sink),
            args.from.clone(),
            cwd,
        ));
    }
    let session = sessiontree::app::AppSession::open(storage)?;
    Ok(branch_streamed(
        move |from, sink| session.visit_branch(from, sink),
        args.from.clone(),
        cwd,
    ))
}

/// A branch written as `visit` reads it from `from` (an SDK session's
/// [`Session::visit_branch`], an app session's
/// [`sessiontree::app::AppSession::visit_branch`]), an entry at a time in
/// either form: bounded memory however long the path.
fn branch_streamed(
    visit: impl Fn(Option<&str>, &mut dyn FnMut(Entry) -> Result<()>) -> Result<()> + 'static,
    from: Option<String>,
    cwd: Option<String>,
) -> Report {
    let visit = std::rc::Rc::new(visit);
    let (for_json, json_from) = (std::rc::Rc::clone(&visit), from.clone());
    Report::streamed_both(
        Box::new(move |out| {
            let mut first = true;
            for_json(json_from.as_deref(), &mut |e| {
                let sep: &[u8] = if first { b"{\"entries\":[" } else { b"," };
                first = false;
                out.write_all(sep)
                    .and_then(|()| out.write_all(e.json().as_bytes()))
                    .map_err(|e| Error::io("writing output", e))
            })
            .map_err(super::stream_error)?;
            out.write_all(if first { b"{\"entries\":[]}" } else { b"]}" })
        }),
        Box::new(move |out| {
            visit(from.as_deref(), &mut |e| {
                let line = preview_in(&e, 100, cwd.as_deref());
                let line = format!("{}  {}\n", super::field(e.id()), super::field(&line));
                out.write_all(super::highlight(&super::terminal_safe(&line)).as_bytes())
                    .map_err(|e| Error::io("writing output", e))
            })
            .map_err(super::stream_error)
        }),
    )
}

/// Arguments of `history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// Session id, unique id prefix, or `.jsonl` path.
    pub session: String,
    /// How many moves to show, newest first.
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
}

/// `history`: where the leaf has been moved, newest first ("where was I
/// before"), from the archive's leaf-event index (a file's `leaf` entries).
pub fn history(cli: &Cli, args: &HistoryArgs) -> Result<Report> {
    let storage = target::open_for_reading(cli, &args.session)?;
    let moves = storage.leaf_moves(args.limit)?;
    let cwd = storage.metadata()?.cwd;
    let describe = |id: Option<&str>| -> Result<String> {
        Ok(match id {
            None => "(before the first entry)".to_owned(),
            Some(id) => match storage.entry(id)? {
                Some(e) => format!("{id} {}", preview_in(&e, 48, cwd.as_deref())),
                None => format!("{id} (missing)"),
            },
        })
    };
    let mut text = String::new();
    for m in &moves {
        text.push_str(&format!(
            "{}  from {}\n{:>24}    to {}\n",
            super::field(&m.timestamp),
            super::field(&describe(m.from.as_deref())?),
            "",
            super::field(&describe(m.to.as_deref())?)
        ));
    }
    if moves.is_empty() {
        text.push_str("the leaf has never been moved\n");
    }
    let rows: Vec<Value> = moves
        .iter()
        .map(|m| json!({"id": m.id, "timestamp": m.timestamp, "from": m.from, "to": m.to}))
        .collect();
    Ok(Report::new(json!({"moves": rows}), text))
}

/// `context`.
pub fn context(cli: &Cli, args: &BranchArgs) -> Result<Report> {
    let storage = target::open_for_reading(cli, &args.session)?;
    if storage.contract()? == sessiontree::Contract::App {
        return context_app(cli, storage, args);
    }
    let cwd = storage.metadata()?.cwd;
    let session = std::rc::Rc::new(Session::new(storage));
    let (for_json, json_from) = (std::rc::Rc::clone(&session), args.from.clone());
    let from = args.from.clone();
    // The JSON is the stored text passed through, never re-parsed (a message
    // nested deeper than a parser's recursion limit comes out exactly as
    // stored); both forms are made from the path as it is read, in passes,
    // and written as they go, never held whole ([`Session::context_stream`]).
    Ok(Report::streamed_both(
        Box::new(move |out| {
            for_json
                .context_stream(json_from.as_deref())
                .and_then(|ctx| ctx.write_json(out))
                .map_err(super::stream_error)
        }),
        Box::new(move |out| {
            let ctx = session
                .context_stream(from.as_deref())
                .map_err(super::stream_error)?;
            write_context_text(&ctx, cwd.as_deref(), out).map_err(super::stream_error)
        }),
    ))
}

/// The readable form of an SDK session's context, written a message at a time.
fn write_context_text(
    ctx: &sessiontree::session::ContextStream<'_, sessiontree::archive::BoxedStorage>,
    cwd: Option<&str>,
    out: &mut dyn std::io::Write,
) -> Result<()> {
    let io = |e| Error::io("writing output", e);
    // Readable forms of the stored JSON (strings unquoted).
    let show =
        |raw: Option<&RawValue>| match raw.map(|r| sessiontree::json::parse_value_lossy(r.get())) {
            Some(Ok(Value::String(s))) => s,
            Some(Ok(Value::Array(names))) => names
                .iter()
                .map(|n| n.as_str().map_or_else(|| n.to_string(), str::to_owned))
                .collect::<Vec<_>>()
                .join(", "),
            Some(Ok(other)) => other.to_string(),
            Some(Err(_)) | None => "?".into(),
        };
    let (thinking_level, model, active_tool_names) = ctx.state();
    let model = match model {
        Some(m) => format!(
            "{}/{}",
            show(m.provider.as_deref()),
            show(m.model_id.as_deref())
        ),
        None => "-".into(),
    };
    let tools = active_tool_names
        .as_deref()
        .map_or_else(|| "-".into(), |t| show(Some(t)));
    let head = format!(
        "thinking: {}  model: {model}  tools: {tools}\n",
        thinking_level
            .as_deref()
            .map_or_else(|| "-".into(), |t| show(Some(t))),
    );
    out.write_all(super::highlight(&super::terminal_safe(&head)).as_bytes())
        .map_err(io)?;
    ctx.visit_messages(&mut |raw| {
        let (role, body) = context_line(raw.get(), cwd);
        let line = format!(
            "{:>17}: {}\n",
            super::field(&role),
            super::field(&truncate(&body, 100))
        );
        out.write_all(super::highlight(&super::terminal_safe(&line)).as_bytes())
            .map_err(io)
    })
}

/// `stats` of an app session: pi 1.6's `AgentSession.getSessionStats()`
/// (without `contextUsage`), with the entry count and the contract.
fn stats_app(storage: sessiontree::archive::BoxedStorage) -> Result<Report> {
    let entries = storage.entry_count()?;
    let app = sessiontree::app::AppSession::open(storage)?;
    let st = app.session_stats()?;
    let mut json = st.to_json_text();
    json.pop();
    json.push_str(&format!(",\"entries\":{entries},\"contract\":\"app\"}}"));
    let t = &st.totals;
    let text = format!(
        "messages {} (user {}, assistant {}, tool results {}, tool calls {})  tokens {} (input {}, output {}, cache read {}, cache write {})  cost ${:.4}  entries {entries}  rules app\n",
        st.total_messages,
        st.user_messages,
        st.assistant_messages,
        st.tool_results,
        st.tool_calls,
        t.input.plus(&t.output).plus(&t.cache_read).plus(&t.cache_write).to_json(),
        t.input.to_json(),
        t.output.to_json(),
        t.cache_read.to_json(),
        t.cache_write.to_json(),
        t.cost.to_number(),
    );
    Ok(Report::raw(json, text))
}

/// `context` of an app session: pi 1.6's `buildSessionContext` (at the
/// last entry, or at `--from` after `branch(from)`).
fn context_app(
    cli: &Cli,
    storage: sessiontree::archive::BoxedStorage,
    args: &BranchArgs,
) -> Result<Report> {
    let mut app = sessiontree::app::AppSession::open(storage)?;
    if let Some(from) = &args.from {
        app.branch_to(from)?;
    }
    if cli.json {
        return Ok(Report::raw(app.session_context_json()?, String::new()));
    }
    let cwd = app.storage().metadata()?.cwd;
    let ctx = app.session_context()?;
    let show = |v: Option<&sessiontree::app::JsValue>| match v {
        Some(v) => match sessiontree::json::parse_value_lossy(&v.to_json()) {
            Ok(Value::String(s)) => s,
            Ok(Value::Null) => "-".into(),
            Ok(other) => other.to_string(),
            Err(_) => "?".into(),
        },
        None => "-".into(),
    };
    let model = match (ctx.model.get("provider"), ctx.model.get("modelId")) {
        (None, None) => "-".to_owned(),
        (p, m) => format!("{}/{}", show(p), show(m)),
    };
    let mut text = format!(
        "thinking: {}  model: {model}\n",
        show(ctx.thinking_level.as_ref())
    );
    for m in &ctx.messages {
        let (role, body) = context_line(&m.to_json(), cwd.as_deref());
        text.push_str(&format!(
            "{:>17}: {}\n",
            super::field(&role),
            super::field(&truncate(&body, 100))
        ));
    }
    Ok(Report::raw(String::new(), text))
}

/// The role and one-line text of a context message. Parsed for display
/// only; a message too deeply nested to parse whole still shows its role.
fn context_line(raw: &str, cwd: Option<&str>) -> (String, String) {
    match sessiontree::json::parse_value_lossy(raw) {
        Ok(m) => match m["summary"].as_str() {
            Some(summary) => (
                m["role"].as_str().unwrap_or("?").to_owned(),
                one_line(summary),
            ),
            None => message_parts(&m, cwd),
        },
        Err(_) => {
            let role = sessiontree::json::OrderedObject::parse(raw)
                .ok()
                .and_then(|o| {
                    o.get("role")
                        .and_then(|r| serde_json::from_str::<String>(r.get()).ok())
                })
                .unwrap_or_else(|| "?".into());
            (
                role,
                "(too deeply nested to preview; --json has it exactly)".into(),
            )
        }
    }
}

/// Arguments of `search`.
#[derive(Debug, Args)]
pub struct SearchArgs {
    /// Words to find: a message matches when it has all of them, in any order
    /// (`search rust lifetimes` = `search "rust lifetimes"`); `'"exact phrase"'`
    /// (quotes the shell passes on) for words in that order; `migrat*` for
    /// words starting with `migrat`; `a OR b` for either, `-word` (or
    /// `-"a phrase"`) to leave out messages that have it, `( … )` to group:
    /// quote a query that starts a word with `-` (`'abort -controller'`), or
    /// put it after `--`.
    #[arg(required = true, num_args = 1..)]
    pub query: Vec<String>,
    /// Only this session: an id or unique prefix, or a `.jsonl` file
    /// (scanned in log order: no index, no ranking).
    #[arg(long)]
    pub session: Option<String>,
    /// Only sessions of this working directory.
    #[arg(long)]
    pub cwd: Option<String>,
    /// Only messages of this role.
    #[arg(long, value_parser = ROLES)]
    pub role: Option<String>,
    /// Hits per page (at most 1000).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..=1000))]
    pub limit: u16,
    /// Which page of hits (from 1).
    #[arg(long, default_value_t = 1, value_parser = page_number)]
    pub page: usize,
    /// Colour the matches: `auto` on a terminal unless `NO_COLOR` is set.
    #[arg(long, value_enum, default_value_t = super::pager::ColorChoice::Auto)]
    pub color: super::pager::ColorChoice,
}

/// A snippet for the terminal: its `[match]` marks (see
/// `search::snippet`) coloured when `colour`, else kept as brackets.
fn shown_snippet(snippet: &str, colour: bool) -> String {
    let line = one_line(snippet);
    if !colour {
        return line;
    }
    // The marker characters are ours alone.
    let line: String = line
        .chars()
        .map(|c| {
            if c == super::MATCH_START || c == super::MATCH_END {
                '\u{fffd}'
            } else {
                c
            }
        })
        .collect();
    let mut out = String::with_capacity(line.len());
    let mut rest = line.as_str();
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']') else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push(super::MATCH_START);
        out.push_str(&rest[open + 1..open + close]);
        out.push(super::MATCH_END);
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    out
}

/// The roles the search index records: message roles, and the summaries.
const ROLES: [&str; 8] = [
    "user",
    "assistant",
    "toolResult",
    "bashExecution",
    "custom",
    "compactionSummary",
    "branchSummary",
    "message",
];

/// `search`.
pub fn search(cli: &Cli, args: &SearchArgs) -> Result<Report> {
    let limit = usize::from(args.limit);
    let offset = limit.checked_mul(args.page - 1).ok_or_else(|| {
        Error::Usage(format!(
            "--limit {limit} with --page {} is past any archive",
            args.page
        ))
    })?;
    let query = args.query.join(" ");
    // A file has no index to rank by: its hits come in log order, unranked.
    let (hits, ranked) = match args.session.as_deref().map(SessionRef::parse) {
        Some(SessionRef::File(path)) => {
            (search_file(cli, args, &path, &query, limit, offset)?, false)
        }
        session => {
            let archive = super::db::open(cli, super::db::Access::Read)?;
            let session = match session {
                Some(SessionRef::Archive(prefix)) => Some(archive.resolve_session(&prefix)?),
                _ => None,
            };
            let filter = sessiontree::backend::sqlite::SearchFilter {
                session: session.as_deref(),
                cwd: args.cwd.as_deref(),
                role: args.role.as_deref(),
            };
            (archive.search_page(&query, &filter, limit, offset)?, true)
        }
    };
    let colour = !cli.json && args.color.enabled();
    let mut text = String::new();
    for h in &hits {
        let name = h
            .session_name
            .as_ref()
            .map_or_else(|| "-".to_owned(), |n| truncate(&n.to_string(), 24));
        text.push_str(&format!(
            "{} {} {} {} {:>10}: {}\n",
            super::field(&h.session_id),
            super::field(
                h.session_created_at
                    .get(..10)
                    .unwrap_or(&h.session_created_at)
            ),
            super::field(&name),
            super::field(&h.entry_id),
            super::field(&h.role),
            shown_snippet(&h.snippet, colour)
        ));
    }
    if hits.is_empty() {
        text.push_str("no matches\n");
    } else if hits.len() == limit && ranked {
        text.push_str(&format!(
            "(page {}; more may follow: --page {})\n",
            args.page,
            args.page + 1
        ));
    }
    let list: Vec<Value> = hits
        .iter()
        .map(|h| {
            json!({
                "session": h.session_id,
                "sessionName": h.session_name.as_ref().map(|n| n.to_string()),
                "sessionCreatedAt": h.session_created_at,
                "entry": h.entry_id,
                "role": h.role,
                "snippet": h.snippet,
                "rank": if ranked { json!(h.rank) } else { Value::Null },
            })
        })
        .collect();
    Ok(Report::new(json!({"hits": list, "page": args.page}), text))
}

/// `search --session FILE.jsonl`: the file's messages scanned in log order,
/// matched as the index would match them; `limit` hits after `skip`.
fn search_file(
    cli: &Cli,
    args: &SearchArgs,
    path: &std::path::Path,
    query: &str,
    limit: usize,
    skip: usize,
) -> Result<Vec<SearchHit>> {
    use sessiontree::search::{
        groups_match, query_groups, searchable_text, snippet, SNIPPET_TOKENS,
    };
    let storage = sessiontree::backend::jsonl::JsonlStorage::open(path, cli.durability.into())?;
    let meta = storage.metadata()?;
    let name = storage.session_name()?;
    // `OR`, `-word` and groups as the archives read them (a malformed query
    // is refused before the scan).
    let alternatives = sessiontree::search::boolean::alternatives(query)?;
    let terms = sessiontree::search::boolean::marked_terms(query);
    let groups = query_groups(query);
    let matches = |text: &str| match &alternatives {
        Some(alts) => sessiontree::search::boolean::alternatives_match(alts, text),
        None => groups_match(&groups, text),
    };
    Ok(storage
        .all_entries()
        .iter()
        .filter_map(|e| {
            let (role, text) = searchable_text(e)?;
            let wanted = args.role.as_deref().is_none_or(|r| r == role);
            (wanted && matches(&text)).then(|| SearchHit {
                session_id: meta.id.clone(),
                entry_id: e.id().to_owned(),
                role,
                session_name: name.clone(),
                session_created_at: meta.created_at.clone(),
                snippet: snippet(&text, &terms, SNIPPET_TOKENS),
                rank: 0.0,
            })
        })
        .skip(skip)
        .take(limit)
        .collect())
}

/// Arguments of `stats`.
#[derive(Debug, Args)]
pub struct StatsArgs {
    /// One session (id, prefix or `.jsonl` path); the whole archive's usage
    /// (each entry once across forks) when absent.
    pub session: Option<String>,
    /// Archive usage from this date (UTC) or ISO time on.
    #[arg(long)]
    pub since: Option<String>,
    /// Archive usage before this ISO time, or up to the end of this date (UTC).
    #[arg(long)]
    pub until: Option<String>,
    /// Only sessions of this directory or below (relative paths resolved
    /// against the current directory).
    #[arg(long)]
    pub cwd: Option<String>,
    /// Group archive usage by these, in order (repeat or comma-separate:
    /// `--by project,model`); default `project`. `day` and `week` also draw a
    /// chart of cost over time.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub by: Vec<super::spend::By>,
}

/// `stats`.
pub fn stats(cli: &Cli, args: &StatsArgs) -> Result<Report> {
    if args.session.is_some()
        && (args.since.is_some()
            || args.until.is_some()
            || args.cwd.is_some()
            || !args.by.is_empty())
    {
        return Err(Error::Usage(
            "--since, --until, --cwd and --by sum the archive's usage: give them without a SESSION"
                .into(),
        ));
    }
    if let Some(s) = &args.session {
        let storage = target::open_for_reading(cli, s)?;
        let contract = storage.contract()?;
        if contract == sessiontree::Contract::App {
            return stats_app(storage);
        }
        let st = storage.session_stats()?;
        let text = format!(
            "messages {}  tokens {} (cached {}, uncached {})  cost ${:.4}  entries {}  rules {}\n",
            st.message_count,
            st.total_tokens,
            st.cached_tokens,
            st.uncached_tokens,
            st.cost_total,
            storage.entry_count()?,
            contract.as_str()
        );
        let mut j = st.to_json();
        j["entries"] = json!(storage.entry_count()?);
        j["contract"] = json!(contract.as_str());
        return Ok(Report::new(j, text));
    }
    let query = sessiontree::usage::UsageQuery {
        since_ms: match &args.since {
            Some(t) => Some(super::spend::time_arg("--since", t, false)?),
            None => None,
        },
        until_ms: match &args.until {
            Some(t) => Some(super::spend::time_arg("--until", t, true)?),
            None => None,
        },
        cwd_under: match &args.cwd {
            Some(d) => Some(super::spend::resolve_dir(d)?),
            None => None,
        },
    };
    let archive = super::db::open(cli, super::db::Access::Read)?;
    let mut report = super::spend::archive_stats(
        &*archive,
        &query,
        &args.by,
        super::columns::terminal_width(),
    )?;
    // What the archive holds (a fork's copies included), from the session rows.
    let totals = archive.totals()?;
    if let Ok(Value::Object(mut j)) = serde_json::from_str::<Value>(&report.json) {
        j.insert("sessions".into(), json!(totals.sessions));
        j.insert("entries".into(), json!(totals.entries));
        j.insert("messageCount".into(), json!(totals.stats.message_count));
        report.json = Value::Object(j).to_string();
    }
    Ok(report)
}
