//! The contract over stdio: JSON lines in, JSON lines out, one response per
//! request, in order, each flushed as soon as its request completes.
//!
//! Request: `{"id": any, "method": "<pi name>", "params": {…}}`. Response:
//! `{"id": …, "ok": true, "value": …}` or
//! `{"id": …, "ok": false, "error": {"code": "…", "message": "…"}}`.
//! Values are pi-shaped JSON; entries are returned as their exact text.
//!
//! This module serves the SDK contract (pi-agent-core 0.83.0's
//! `SessionStorage` and `Session`); [`app`] serves the app contract (pi
//! 1.6.0's `SessionManager`) over the same line protocol.

pub mod app;

use crate::entry::Entry;
use crate::error::{Error, Result};
use crate::json::{self, JsString, JsonText, ObjectWriter};
use crate::repo::visit_entries_to_fork;
use crate::rules::ForkPosition;
use crate::session::{BranchSummary, Compaction, Session};
use crate::storage::SessionStorage;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::io::{BufRead, Write};

#[derive(serde::Deserialize)]
struct Request {
    #[serde(default)]
    id: Option<Box<RawValue>>,
    method: String,
    #[serde(default)]
    params: Option<HashMap<String, Box<RawValue>>>,
}

/// The parameters of one request, read with pi's meaning of absent and `null`.
struct Params(HashMap<String, Box<RawValue>>);

impl Params {
    fn raw(&self, key: &str) -> Option<&RawValue> {
        self.0.get(key).map(AsRef::as_ref)
    }
    /// A parameter that is absent or `null` is "not given" (JavaScript's `??`).
    fn given(&self, key: &str) -> Option<&RawValue> {
        self.raw(key).filter(|r| r.get() != "null")
    }
    fn text(&self, key: &str) -> Option<JsonText> {
        self.raw(key).map(JsonText::from)
    }
    fn string(&self, key: &str) -> Result<Option<String>> {
        match self.given(key) {
            None => Ok(None),
            Some(r) => match json::parse_value_lossy(r.get()) {
                Ok(serde_json::Value::String(s)) => Ok(Some(s)),
                _ => Err(Error::Unknown(format!("params.{key} must be a string"))),
            },
        }
    }
    /// A string parameter as JavaScript holds it (lone surrogates kept).
    fn js_string(&self, key: &str) -> Result<Option<JsString>> {
        match self.given(key) {
            None => Ok(None),
            Some(r) => JsString::from_json_literal(r.get())
                .map(Some)
                .ok_or_else(|| Error::Unknown(format!("params.{key} must be a string"))),
        }
    }
    fn required_js_string(&self, key: &str) -> Result<JsString> {
        self.js_string(key)?
            .ok_or_else(|| Error::Unknown(format!("params.{key} is required")))
    }
    fn required_string(&self, key: &str) -> Result<String> {
        self.string(key)?
            .ok_or_else(|| Error::Unknown(format!("params.{key} is required")))
    }
    fn usize(&self, key: &str) -> Result<Option<usize>> {
        match self.given(key) {
            None => Ok(None),
            Some(r) => r
                .get()
                .parse::<f64>()
                .ok()
                .filter(|x| *x >= 0.0 && x.fract() == 0.0)
                .map(|x| Some(x as usize))
                .ok_or_else(|| {
                    Error::Unknown(format!("params.{key} must be a non-negative integer"))
                }),
        }
    }
}

fn opt_js_string(s: Option<JsString>) -> String {
    s.map_or_else(|| "null".to_owned(), |s| s.json().to_owned())
}

fn opt_string(s: Option<String>) -> String {
    s.map_or_else(|| "null".to_owned(), |s| json::string_literal(&s))
}

/// Runs one request against a session; returns the value as JSON text.
fn dispatch<S: SessionStorage>(
    session: &mut Session<S>,
    method: &str,
    p: &Params,
) -> Result<String> {
    let st = session.storage();
    Ok(match method {
        "getMetadata" => st.metadata()?.to_json().to_string(),
        "getLeafId" => opt_string(st.leaf_id()?),
        "setLeafId" => {
            let id = p.string("leafId")?;
            session.storage_mut().set_leaf_id(id.as_deref())?;
            "null".into()
        }
        "createEntryId" => json::string_literal(&st.create_entry_id()?),
        "appendEntry" => {
            let raw = p
                .raw("entry")
                .ok_or_else(|| Error::Unknown("params.entry is required".into()))?;
            let entry = Entry::from_json(raw.get())?;
            session.storage_mut().append_entry(entry)?;
            "null".into()
        }
        "getEntry" => st
            .entry(&p.required_string("id")?)?
            .map_or_else(|| "null".to_owned(), |e| e.json().to_owned()),
        "getLabel" => opt_js_string(st.label(&p.required_string("id")?)?),
        "getSessionName" => opt_js_string(st.session_name()?),
        "getSessionStats" => st.session_stats()?.to_json_text(),
        "getPathToRootOrCompaction" | "getBranch" | "getEntriesToFork" => {
            entry_list_text(|sink| {
                visit_entry_answer(session, method, p, &mut |e| sink(e.json().to_owned()))
            })?
        }
        "appendMessage" => {
            let m = p
                .text("message")
                .ok_or_else(|| Error::Unknown("params.message is required".into()))?;
            json::string_literal(&session.append_message(&m)?)
        }
        "appendThinkingLevelChange" => json::string_literal(
            &session.append_thinking_level_change(&p.required_js_string("thinkingLevel")?)?,
        ),
        "appendModelChange" => json::string_literal(&session.append_model_change(
            &p.required_js_string("provider")?,
            &p.required_js_string("modelId")?,
        )?),
        "appendActiveToolsChange" => {
            let names: Vec<JsString> = p
                .given("activeToolNames")
                .and_then(|r| serde_json::from_str::<Vec<&RawValue>>(r.get()).ok())
                .and_then(|list| {
                    list.iter()
                        .map(|r| JsString::from_json_literal(r.get()))
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| {
                    Error::Unknown("params.activeToolNames must be a list of strings".into())
                })?;
            json::string_literal(&session.append_active_tools_change(&names)?)
        }
        "appendCompaction" => {
            let c = Compaction {
                summary: p.text("summary").unwrap_or_else(|| JsonText::string("")),
                first_kept_entry_id: p.given("firstKeptEntryId").map(JsonText::from),
                tokens_before: p
                    .text("tokensBefore")
                    .unwrap_or_else(|| JsonText::from(serde_json::json!(0))),
                details: p.given("details").map(JsonText::from),
                from_hook: p.given("fromHook").map(JsonText::from),
                usage: p.given("usage").map(JsonText::from),
                retained_tail: p.given("retainedTail").map(JsonText::from),
            };
            json::string_literal(&session.append_compaction(&c)?)
        }
        "appendCustomEntry" => json::string_literal(&session.append_custom_entry(
            &p.required_js_string("customType")?,
            p.given("data").map(JsonText::from).as_ref(),
        )?),
        "appendCustomMessageEntry" => {
            let content = p
                .text("content")
                .ok_or_else(|| Error::Unknown("params.content is required".into()))?;
            let display = match p.given("display").map(RawValue::get) {
                None => None,
                Some("true") => Some(true),
                Some("false") => Some(false),
                Some(_) => return Err(Error::Unknown("params.display must be a boolean".into())),
            };
            json::string_literal(&session.append_custom_message_entry(
                &p.required_js_string("customType")?,
                &content,
                display,
                p.given("details").map(JsonText::from).as_ref(),
            )?)
        }
        "appendLabel" => {
            let target = p.required_string("targetId")?;
            let label = p.js_string("label")?;
            json::string_literal(&session.append_js_label(&target, label.as_ref())?)
        }
        "appendSessionName" => {
            json::string_literal(&session.append_js_session_name(&p.required_js_string("name")?)?)
        }
        "moveTo" => {
            let target = p.string("entryId")?;
            let summary = match p.given("summary") {
                None => None,
                Some(r) => {
                    let fields: HashMap<String, Box<RawValue>> = serde_json::from_str(r.get())
                        .map_err(|_| Error::Unknown("params.summary must be an object".into()))?;
                    let f = Params(fields);
                    Some(BranchSummary {
                        summary: f.raw("summary").map(JsonText::from),
                        details: f.raw("details").map(JsonText::from),
                        usage: f.raw("usage").map(JsonText::from),
                        from_hook: f.raw("fromHook").map(JsonText::from),
                    })
                }
            };
            opt_string(session.move_to(target.as_deref(), summary.as_ref())?)
        }
        "buildContext" => session
            .build_context(p.string("fromId")?.as_deref())?
            .to_json_text(),
        other => return Err(Error::Unknown(format!("unknown method {other:?}"))),
    })
}

/// Whether `method` answers with a whole path of entries ([`entry_answer`]).
fn is_path_method(method: &str) -> bool {
    matches!(
        method,
        "getPathToRootOrCompaction" | "getBranch" | "getEntriesToFork"
    )
}

/// The entries of a whole-path answer (`getBranch`, `getEntriesToFork`,
/// `getPathToRootOrCompaction`), handed to `sink` one at a time as the
/// store reads them ([`SessionStorage::visit_path`]): [`serve`] writes each
/// before the next is read, so the answer takes bounded memory.
fn visit_entry_answer<S: SessionStorage>(
    session: &Session<S>,
    method: &str,
    p: &Params,
    sink: &mut dyn FnMut(Entry) -> Result<()>,
) -> Result<()> {
    let st = session.storage();
    match method {
        "getPathToRootOrCompaction" => st.visit_path(p.string("leafId")?.as_deref(), sink),
        "getBranch" => session.visit_branch(p.string("fromId")?.as_deref(), sink),
        "getEntriesToFork" => {
            let position = match p.string("position")? {
                None => ForkPosition::Before,
                Some(name) => ForkPosition::from_name(&name)
                    .ok_or_else(|| Error::Unknown(format!("unknown fork position {name:?}")))?,
            };
            visit_entries_to_fork(st, p.string("entryId")?.as_deref(), position, sink)
        }
        other => Err(Error::Unknown(format!("unknown method {other:?}"))),
    }
}

/// A JSON list of the entry texts `visit` hands out.
fn entry_list_text(
    visit: impl FnOnce(&mut dyn FnMut(String) -> Result<()>) -> Result<()>,
) -> Result<String> {
    let mut out = String::from("[");
    visit(&mut |text| {
        if out.len() > 1 {
            out.push(',');
        }
        out.push_str(&text);
        Ok(())
    })?;
    out.push(']');
    Ok(out)
}

/// Answers one request in process, without stdio: `method` (a pi name) with
/// `params` (a JSON object, or empty for none) against `session`, the value
/// as JSON text (entries as their exact stored text). The same dispatch as
/// [`serve`], so an embedding (the Node binding) answers exactly as `rpc` does.
pub fn call<S: SessionStorage>(
    session: &mut Session<S>,
    method: &str,
    params: &str,
) -> Result<String> {
    let params = if json::js_trim(params).is_empty() {
        Params(HashMap::new())
    } else {
        let fields: Option<HashMap<String, Box<RawValue>>> = serde_json::from_str(params)
            .map_err(|e| Error::Unknown(format!("invalid params: {e}")))?;
        Params(fields.unwrap_or_default())
    };
    match method {
        "getEntries" => {
            let after = params.usize("afterEntrySeq")?.unwrap_or(0);
            let limit = params.usize("limit")?;
            let st = session.storage();
            entry_list_text(|sink| st.visit_entries(after, limit, sink))
        }
        "findEntries" => {
            let entry_type = params.required_string("type")?;
            let st = session.storage();
            entry_list_text(|sink| st.visit_entries_of_type(&entry_type, sink))
        }
        _ => dispatch(session, method, &params),
    }
}

/// An answer: the value as JSON text, or the error's code and message.
pub(crate) type Answer = std::result::Result<String, (&'static str, String)>;

pub(crate) fn answer(result: Result<String>) -> Answer {
    result.map_err(|e| (e.code().as_str(), e.to_string()))
}

pub(crate) fn respond(
    out: &mut impl Write,
    id: Option<&RawValue>,
    result: &Answer,
) -> std::io::Result<()> {
    let mut w = ObjectWriter::new();
    w.raw("id", id.map_or("null", RawValue::get));
    match result {
        Ok(value) => {
            w.raw("ok", "true").raw("value", value);
        }
        Err((code, message)) => {
            let mut err = ObjectWriter::new();
            err.str("code", code).str("message", message);
            w.raw("ok", "false").raw("error", &err.finish());
        }
    }
    out.write_all(w.finish().as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Answers with a list of entries, writing each as `visit` reads it. A
/// storage failure before the first entry is an ordinary error answer; one
/// after it ends the broken line early, followed by an error answer under the
/// same id.
pub(crate) fn respond_with_entries(
    out: &mut impl Write,
    id: Option<&RawValue>,
    visit: impl FnOnce(&mut dyn FnMut(String) -> Result<()>) -> Result<()>,
) -> std::io::Result<()> {
    let mut head = ObjectWriter::new();
    head.raw("id", id.map_or("null", RawValue::get))
        .raw("ok", "true")
        .raw("value", "[");
    let head = head.finish();
    // The writer's `[` ends the head: drop the object's closing brace.
    let head = &head[..head.len() - 1];
    let mut started = false;
    let mut io_error = None;
    let visited = visit(&mut |text| {
        let sep: &[u8] = if started { b"," } else { head.as_bytes() };
        started = true;
        out.write_all(sep)
            .and_then(|()| out.write_all(text.as_bytes()))
            .map_err(|e| {
                let error = Error::io(
                    "rpc: writing an answer",
                    std::io::Error::new(e.kind(), e.to_string()),
                );
                io_error = Some(e);
                error
            })
    });
    if let Some(e) = io_error {
        return Err(e);
    }
    match visited {
        Ok(()) => {
            if !started {
                out.write_all(head.as_bytes())?;
            }
            out.write_all(b"]}\n")?;
            out.flush()
        }
        Err(e) => {
            if started {
                out.write_all(b"\n")?;
            }
            respond(out, id, &answer(Err(e)))
        }
    }
}

/// Answers with a value that `write` writes as it makes it (after the
/// answer's head, before its closing brace). A failure of the output ends
/// the serving; any other failure ends the broken line early, followed by
/// an error answer under the same id (as [`respond_with_entries`]).
pub(crate) fn respond_with_value(
    out: &mut impl Write,
    id: Option<&RawValue>,
    write: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> std::io::Result<()> {
    let mut head = ObjectWriter::new();
    head.raw("id", id.map_or("null", RawValue::get))
        .raw("ok", "true")
        .raw("value", "0");
    let head = head.finish();
    // Up to the value's placeholder `0}`.
    out.write_all(&head.as_bytes()[..head.len() - 2])?;
    let mut recording = RecordingWriter {
        inner: &mut *out,
        failed: None,
    };
    let written = write(&mut recording);
    if let Some(e) = recording.failed {
        return Err(e);
    }
    match written {
        Ok(()) => {
            out.write_all(b"}\n")?;
            out.flush()
        }
        Err(e) => {
            out.write_all(b"\n")?;
            respond(out, id, &answer(Err(e)))
        }
    }
}

/// A writer that keeps its inner writer's first failure, so that a failure
/// of the output is told from a failure of the value being written.
struct RecordingWriter<'a, W: Write> {
    inner: &'a mut W,
    failed: Option<std::io::Error>,
}

impl<W: Write> Write for RecordingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf).inspect_err(|e| {
            self.failed
                .get_or_insert_with(|| std::io::Error::new(e.kind(), e.to_string()));
        })
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush().inspect_err(|e| {
            self.failed
                .get_or_insert_with(|| std::io::Error::new(e.kind(), e.to_string()));
        })
    }
}

/// Serves requests from `input` until it ends. If the source could not be
/// opened, every request is answered with that error.
pub fn serve<S: SessionStorage>(
    session: Result<Session<S>>,
    input: impl BufRead,
    mut output: impl Write,
) -> std::io::Result<()> {
    let mut session = session.map_err(|e| (e.code().as_str(), e.to_string()));
    for line in input.split(b'\n') {
        let line = line?;
        let text = String::from_utf8_lossy(&line);
        if json::js_trim(&text).is_empty() {
            continue;
        }
        let request: Request = match serde_json::from_str(&text) {
            Ok(r) => r,
            Err(e) => {
                // A request of the wrong shape is still answered under its id,
                // whenever the line is a JSON object that has one.
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
        let params = Params(request.params.unwrap_or_default());
        let id = request.id.as_deref();
        let result = match &mut session {
            // Lists of entries are written as they are read: an answer of
            // any length in bounded memory.
            Ok(s) if request.method == "getEntries" => {
                let st = s.storage();
                let window = params
                    .usize("afterEntrySeq")
                    .and_then(|after| Ok((after.unwrap_or(0), params.usize("limit")?)));
                match window {
                    Ok((after, limit)) => {
                        respond_with_entries(&mut output, id, |sink| {
                            st.visit_entries(after, limit, sink)
                        })?;
                        continue;
                    }
                    Err(e) => answer(Err(e)),
                }
            }
            Ok(s) if request.method == "findEntries" => match params.required_string("type") {
                Ok(entry_type) => {
                    let st = s.storage();
                    respond_with_entries(&mut output, id, |sink| {
                        st.visit_entries_of_type(&entry_type, sink)
                    })?;
                    continue;
                }
                Err(e) => answer(Err(e)),
            },
            // A whole path: written an entry at a time, never joined.
            Ok(s) if is_path_method(&request.method) => {
                respond_with_entries(&mut output, id, |sink| {
                    visit_entry_answer(s, &request.method, &params, &mut |e| {
                        sink(e.json().to_owned())
                    })
                })?;
                continue;
            }
            // The context: its messages made and written as the path is
            // read again, never held.
            Ok(s) if request.method == "buildContext" => {
                match params
                    .string("fromId")
                    .and_then(|from| s.context_stream(from.as_deref()))
                {
                    Ok(ctx) => {
                        respond_with_value(&mut output, id, |out| ctx.write_json(out))?;
                        continue;
                    }
                    Err(e) => answer(Err(e)),
                }
            }
            Ok(s) => answer(dispatch(s, &request.method, &params)),
            Err(open_error) => Err(open_error.clone()),
        };
        respond(&mut output, id, &result)?;
    }
    Ok(())
}
