//! The app contract over stdio: pi-coding-agent 1.6.0's `SessionManager`
//! methods by pi's names, with pi's parameter names, answered as pi's
//! JavaScript answers them (`sessiontree rpc --contract app`, and the Node
//! binding's `sessionManager`, through [`AppRpc::call`]).
//!
//! Conventions, as JavaScript sees the params object: a missing param is
//! `undefined`, `null` stays `null`; an `undefined` answer is `null`;
//! `appendUsage` answers the entry, the other writers the new id; where pi
//! throws, the answer is an error with pi's message.

use super::{answer, respond, respond_with_entries, respond_with_value};
use crate::app::{AppSession, BranchSummaryArgs, CompactionArgs, JsValue, UsageArgs, UsageCost};
use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::json::{self, JsString, ObjectWriter};
use crate::storage::SessionStorage;
use serde_json::value::RawValue;
use std::io::{BufRead, Write};

/// One session served under the app contract.
#[derive(Debug)]
pub struct AppRpc<S> {
    session: AppSession<S>,
    session_id: String,
    /// The session's header line as stored, where the caller has it.
    header: Option<String>,
}

/// The params object (`{}` when none was given).
struct Params(JsValue);

impl Params {
    fn parse(text: &str) -> Result<Params> {
        if json::js_trim(text).is_empty() {
            return Ok(Params(JsValue::Object(Vec::new())));
        }
        match JsValue::parse(text) {
            Ok(v @ JsValue::Object(_)) => Ok(Params(v)),
            Ok(JsValue::Null) => Ok(Params(JsValue::Object(Vec::new()))),
            _ => Err(Error::Unknown("params must be a JSON object".into())),
        }
    }
    /// The param (`None`: undefined).
    fn get(&self, key: &str) -> Option<&JsValue> {
        self.0.get(key)
    }
    fn owned(&self, key: &str) -> Option<JsValue> {
        self.get(key).cloned()
    }
    /// A param used as an id: the id when it is a string (without lone
    /// surrogates, which no stored id holds).
    fn id(&self, key: &str) -> Option<String> {
        self.get(key)
            .and_then(JsValue::as_js_str)
            .and_then(JsString::to_str)
    }
}

/// The entries' stored texts as one JSON array, written once into a text
/// of the answer's size.
fn entry_list(entries: &[Entry]) -> String {
    let len = entries.iter().map(|e| e.json().len() + 1).sum::<usize>() + 2;
    let mut out = String::with_capacity(len);
    out.push('[');
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(e.json());
    }
    out.push(']');
    out
}

fn opt_entry(e: Option<Entry>) -> String {
    e.map_or_else(|| "null".to_owned(), |e| e.json().to_owned())
}

fn id_literal(id: &str) -> String {
    json::string_literal(id)
}

impl<S: SessionStorage> AppRpc<S> {
    /// Serves `session`, whose id (as `ls --json` reports it) is `session_id`.
    pub fn new(session: AppSession<S>, session_id: String) -> Self {
        AppRpc {
            session,
            session_id,
            header: None,
        }
    }

    /// Answers `getHeader` with the session's stored header line (a JSONL
    /// file's, as pi parsed it) instead of one rebuilt from the metadata.
    pub fn with_header(mut self, header_json: String) -> Self {
        self.header = Some(header_json);
        self
    }

    /// The session.
    pub fn session(&self) -> &AppSession<S> {
        &self.session
    }

    /// The session, mutably.
    pub fn session_mut(&mut self) -> &mut AppSession<S> {
        &mut self.session
    }

    /// pi's `getHeader()`: the session line as pi holds it (rebuilt from
    /// the metadata where the stored line was not handed over).
    fn header(&self) -> Result<String> {
        if let Some(h) = &self.header {
            return Ok(h.clone());
        }
        let m = self.session.storage().metadata()?;
        let mut w = ObjectWriter::new();
        w.str("type", "session")
            .raw("version", "3")
            .str("id", &self.session_id)
            .str("timestamp", &m.created_at)
            .str("cwd", m.cwd.as_deref().unwrap_or(""));
        if let Some(p) = &m.parent_session {
            w.str("parentSession", p);
        }
        Ok(w.finish())
    }

    /// One call: pi's method name and its params object as JSON text (`{}`
    /// or empty when none); the value as JSON text (`null` for pi's
    /// `undefined`), or the error pi would throw.
    pub fn call(&mut self, method: &str, params_json: &str) -> Result<String> {
        let p = Params::parse(params_json)?;
        let s = &mut self.session;
        Ok(match method {
            "getSessionId" => id_literal(&self.session_id),
            "getHeader" => self.header()?,
            "getCwd" => {
                let cwd = s.storage().metadata()?.cwd.unwrap_or_default();
                id_literal(&cwd)
            }
            "getSessionFile" => s.storage().metadata()?.path.map_or_else(
                || "null".into(),
                |p| {
                    // As pi holds it: resolved to an absolute path.
                    id_literal(&std::path::absolute(&p).map_or(p, |a| a.display().to_string()))
                },
            ),
            "getLeafId" => s.leaf_id().map_or_else(|| "null".into(), id_literal),
            "getLeafEntry" => opt_entry(s.leaf_entry()?),
            "getEntry" => match p.id("id") {
                Some(id) => opt_entry(s.entry(&id)?),
                None => "null".into(),
            },
            "getEntries" => {
                let mut out = String::from("[");
                s.storage().visit_entries(0, None, &mut |text| {
                    if out.len() > 1 {
                        out.push(',');
                    }
                    out.push_str(&text);
                    Ok(())
                })?;
                out.push(']');
                out
            }
            "getEntryCount" => s.entry_count()?.to_string(),
            "getBranch" => {
                // Written into the answer's one text as the path is read:
                // the entries are never held beside it.
                let mut out = String::from("[");
                visit_branch_of(s, &p, &mut |e| {
                    if out.len() > 1 {
                        out.push(',');
                    }
                    out.push_str(e.json());
                    Ok(())
                })?;
                out.push(']');
                out
            }
            "getTree" => s.tree_json_text()?,
            "getLabel" => {
                let key = p
                    .get("id")
                    .map_or_else(|| "undefined".into(), JsValue::to_json);
                match s.label_by_key(&key)? {
                    Some(l) => l.label.to_json(),
                    None => "null".into(),
                }
            }
            "getSessionName" => s
                .storage()
                .session_name()?
                .map_or_else(|| "null".into(), |n| n.json().to_owned()),
            "getChildren" => match p.get("parentId") {
                Some(JsValue::Null) => entry_list(&s.children(None)?),
                Some(JsValue::String(_)) => match p.id("parentId") {
                    Some(id) => entry_list(&s.children(Some(&id))?),
                    None => "[]".into(),
                },
                _ => "[]".into(),
            },
            "buildContextEntries" => entry_list(&s.context_entries()?),
            "buildSessionProjection" => s.session_projection_json()?,
            "buildSessionContext" => s.session_context_json()?,
            "getSessionStats" => s.session_stats()?.to_json_text(),
            "getUsageCostBreakdown" => UsageCost::list_json(&s.usage_cost_breakdown()?),
            "appendMessage" => id_literal(&s.append_message(p.owned("message"))?),
            "appendThinkingLevelChange" => {
                id_literal(&s.append_thinking_level_change(p.owned("thinkingLevel"))?)
            }
            "appendModelChange" => {
                id_literal(&s.append_model_change(p.owned("provider"), p.owned("modelId"))?)
            }
            "appendUsage" => s
                .append_usage(UsageArgs {
                    kind: p.owned("kind"),
                    provider: p.owned("provider"),
                    model: p.owned("model"),
                    usage: p.owned("usage"),
                    note: p.owned("note"),
                })?
                .json()
                .to_owned(),
            "appendCompaction" => id_literal(&s.append_compaction(CompactionArgs {
                summary: p.owned("summary"),
                first_kept_entry_id: p.owned("firstKeptEntryId"),
                tokens_before: p.owned("tokensBefore"),
                details: p.owned("details"),
                from_hook: p.owned("fromHook"),
                usage: p.owned("usage"),
            })?),
            "appendCustomEntry" => {
                id_literal(&s.append_custom_entry(p.owned("customType"), p.owned("data"))?)
            }
            "appendSessionInfo" => id_literal(&s.append_session_info(p.get("name"))?),
            "appendCustomMessageEntry" => id_literal(&s.append_custom_message_entry(
                p.owned("customType"),
                p.owned("content"),
                p.owned("display"),
                p.owned("details"),
            )?),
            "appendContextEdit" => {
                id_literal(&s.append_context_edit(p.get("targetId"), p.get("replacement"))?)
            }
            "appendLabelChange" => {
                id_literal(&s.append_label_change(p.get("targetId"), p.owned("label"))?)
            }
            "branch" => {
                let target = p.get("branchFromId");
                match p.id("branchFromId") {
                    Some(id) => s.branch_to(&id)?,
                    None => {
                        return Err(Error::EntryNotFound(
                            JsValue::js_to_string(target).to_string_lossy(),
                        ))
                    }
                }
                "null".into()
            }
            "resetLeaf" => {
                s.reset_leaf();
                "null".into()
            }
            "branchWithSummary" => {
                let args = BranchSummaryArgs {
                    summary: p.owned("summary"),
                    details: p.owned("details"),
                    from_hook: p.owned("fromHook"),
                    usage: p.owned("usage"),
                };
                let from = match p.get("branchFromId") {
                    Some(JsValue::Null) => None,
                    other => match p.id("branchFromId") {
                        Some(id) => Some(id),
                        None => {
                            return Err(Error::EntryNotFound(
                                JsValue::js_to_string(other).to_string_lossy(),
                            ))
                        }
                    },
                };
                id_literal(&s.branch_with_summary(from.as_deref(), args)?)
            }
            other => return Err(Error::Unknown(format!("unknown method {other:?}"))),
        })
    }
}

/// A request line.
#[derive(serde::Deserialize)]
struct Request {
    #[serde(default)]
    id: Option<Box<RawValue>>,
    method: String,
    #[serde(default)]
    params: Option<Box<RawValue>>,
}

/// pi's `getBranch(fromId)` (`fromId ?? this.leafId`) handed to `sink` an
/// entry at a time, root first.
fn visit_branch_of<S: SessionStorage>(
    s: &AppSession<S>,
    p: &Params,
    sink: &mut dyn FnMut(Entry) -> Result<()>,
) -> Result<()> {
    match p.get("fromId") {
        None | Some(JsValue::Null) => s.visit_branch(None, sink),
        Some(JsValue::String(_)) => match p.id("fromId") {
            Some(id) if !id.is_empty() => s.visit_branch(Some(&id), sink),
            _ => Ok(()),
        },
        Some(_) => Ok(()),
    }
}

impl<S: SessionStorage> AppRpc<S> {
    /// The entries a method answers with that [`serve`] writes one at a
    /// time instead of joining them into one text (`buildContextEntries`);
    /// `None` for any other method.
    fn entry_answer(&mut self, method: &str) -> Option<Result<Vec<Entry>>> {
        match method {
            "buildContextEntries" => Some(self.session.context_entries()),
            _ => None,
        }
    }
}

/// Serves app-contract requests from `input` until it ends, one answer per
/// line, flushed. If the session could not be opened, every request is
/// answered with that error.
pub fn serve<S: SessionStorage>(
    rpc: Result<AppRpc<S>>,
    input: impl BufRead,
    mut output: impl Write,
) -> std::io::Result<()> {
    let mut rpc = rpc.map_err(|e| (e.code().as_str(), e.to_string()));
    for line in input.split(b'\n') {
        let line = line?;
        let text = String::from_utf8_lossy(&line);
        if json::js_trim(&text).is_empty() {
            continue;
        }
        let request: Request = match serde_json::from_str(&text) {
            Ok(r) => r,
            Err(e) => {
                let id = json::OrderedObject::parse(&text)
                    .ok()
                    .and_then(|o| o.get("id").map(|r| json::raw_value(r.get())));
                respond(
                    &mut output,
                    id.as_deref(),
                    &answer(Err(Error::Unknown(format!("invalid request: {e}")))),
                )?;
                continue;
            }
        };
        let id = request.id.as_deref();
        let result = match &mut rpc {
            // The whole log is written as it is read: bounded memory.
            Ok(r) if request.method == "getEntries" => {
                let st = r.session().storage();
                respond_with_entries(&mut output, id, |sink| st.visit_entries(0, None, sink))?;
                continue;
            }
            // pi's whole path, written an entry at a time as the store
            // reads it: never held, whatever its length.
            Ok(r) if request.method == "getBranch" => {
                let params = request.params.as_deref().map_or("", RawValue::get);
                let s = r.session();
                respond_with_entries(&mut output, id, |sink| {
                    let p = Params::parse(params)?;
                    visit_branch_of(s, &p, &mut |e| sink(e.json().to_owned()))
                })?;
                continue;
            }
            // The tree is the whole log by nature: held once, its answer
            // written as it is made rather than held beside it.
            Ok(r) if request.method == "getTree" => match r.session().tree_arena() {
                Ok(tree) => {
                    respond_with_value(&mut output, id, |w| tree.write_to(w))?;
                    continue;
                }
                Err(e) => answer(Err(e)),
            },
            Ok(r) => {
                let params = request.params.as_deref().map_or("", RawValue::get);
                match r.entry_answer(&request.method) {
                    // Written an entry at a time and let go as it is
                    // written: never joined into one text.
                    Some(Ok(entries)) => {
                        respond_with_entries(&mut output, id, |sink| {
                            entries
                                .into_iter()
                                .try_for_each(|e| sink(e.json().to_owned()))
                        })?;
                        continue;
                    }
                    Some(Err(e)) => answer(Err(e)),
                    None => answer(r.call(&request.method, params)),
                }
            }
            Err(open_error) => Err(open_error.clone()),
        };
        respond(&mut output, id, &result)?;
    }
    Ok(())
}
