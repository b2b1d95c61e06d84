//! The JSONL backend: pi's version-3 session file, byte for byte.
//!
//! # Format
//! Line 1 is the session header, every further non-blank line one entry, each
//! `\n`-terminated (spec §10). Lines are split on `\n` only; a line blank after
//! JavaScript's `trim` is skipped anywhere; invalid UTF-8 reads as U+FFFD; line
//! numbers in errors count non-blank lines with the header as line 1.
//!
//! # Durability
//! Each append is one `write` of whole `\n`-terminated lines, then (with
//! [`Durability::Full`]) one `fsync`. A failed write or fsync poisons the store:
//! what reached the disk is unknown, so further writes are refused.
//!
//! # Recovery
//! A final line without `\n` that does not parse is a write torn by a crash.
//! pi refuses such a file; we open it without that line, report it through
//! [`JsonlStorage::torn_tail`], and cut it off before the next append. A final
//! line without `\n` that *does* parse is kept, and the next append first
//! writes the missing `\n` (pi would glue the two lines together).
//!
//! # Compatibility
//! Version 1 and 2 files open upgraded in memory, read-only: ids are assigned
//! deterministically (`v1-` + the line index), each entry chained to the
//! previous, `firstKeptEntryIndex` turned into `firstKeptEntryId`, and the
//! message role `hookMessage` renamed `custom`.

use super::LogIndex;
use crate::contract::Contract;
use crate::entry::{Entry, EntryProblem};
use crate::error::{Error, Result};
pub use crate::header::Header;
use crate::json::{self, js_trim, raw_value, OrderedObject};
use crate::storage::{Durability, SessionMetadata, SessionStorage};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// A final line that was cut short by a crash and left out when opening.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornTail {
    /// Its line number (non-blank lines, header = 1).
    pub line: u64,
    /// Where it starts in the file; the file is cut here before the next append.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
}

/// What reading a session file found besides its entries.
#[derive(Debug)]
pub struct ReadSummary {
    /// The header.
    pub header: Header,
    /// A torn final line that was left out.
    pub torn_tail: Option<TornTail>,
    /// The file's last line is complete but lacks its `\n`.
    pub missing_final_newline: bool,
    /// Entries read.
    pub entries: u64,
    /// Bytes read (including a torn tail).
    pub bytes: u64,
    /// Bytes up to the end of the last complete line (a torn tail excluded).
    pub complete_bytes: u64,
    /// Non-blank lines read, the header included, a torn tail excluded.
    pub lines: u64,
    /// An entry read is of a type only the SDK writes (`leaf`,
    /// `active_tools_change`): the session follows the SDK's rules.
    pub sdk_only_entries: bool,
}

/// Where reading starts: at the top, or after lines already read (a file pi
/// has appended to since).
#[derive(Debug, Clone)]
pub enum ReadStart {
    /// From byte 0; the first non-blank line is the header.
    Beginning,
    /// From `offset`, the header already known and `lines` non-blank lines read.
    After {
        /// The file's header.
        header: Header,
        /// Byte offset to continue from (the reader is already positioned there).
        offset: u64,
        /// Non-blank lines before `offset`, the header included.
        lines: u64,
    },
}

/// How leniently a file is read: as pi 1.6's `SessionManager` opens it
/// (the app contract), lines it skips are handed to a sink instead of
/// failing the read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Leniency {
    /// Skip lines pi skips (not JSON, blank, falsy JSON) and lines that are
    /// not entries the store can hold (not an object, no string id, …).
    pub skip_unusable: bool,
    /// The store needs unique ids: an entry whose id came before, or that is
    /// the missing parent of an earlier entry, is skipped too (SQLite and
    /// PostgreSQL); memory and JSONL keep them, as pi does.
    pub unique_ids: bool,
}

impl Leniency {
    /// pi 1.6's reading, for a store that keeps duplicate ids.
    pub const APP: Leniency = Leniency {
        skip_unusable: true,
        unique_ids: false,
    };
    /// pi 1.6's reading, for a store that needs unique ids (an archive).
    pub const APP_UNIQUE_IDS: Leniency = Leniency {
        skip_unusable: true,
        unique_ids: true,
    };
}

/// Why a line of a session file is not one of the session's entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SkipReason {
    /// Blank after JavaScript's `trim` (pi skips it).
    Blank,
    /// Not JSON (pi skips it).
    NotJson,
    /// JSON that is `null`, `false`, `0` or `""` (pi skips it).
    FalsyJson,
    /// JSON that pi reads as an entry but the store cannot hold: not an
    /// object, or an object without a string `id`, `type`, `timestamp` or a
    /// valid `parentId` (the problem, pi 0.83's wording).
    NotAnEntry(EntryProblem),
    /// A second session header (pi skips it when it indexes the entries).
    Header,
    /// A line before the header that pi skips (not JSON, falsy).
    BeforeHeader,
    /// An entry whose id an earlier entry has (pi indexes both, the later
    /// answering to the id; the store keeps the first).
    DuplicateId(String),
    /// An entry that is the missing parent of earlier entries (pi links
    /// them; the store, which placed them as roots, cannot).
    LateParent(String),
    /// A `message` entry whose `message` is `null` or absent (pi 1.6's
    /// context and statistics fail on it for good).
    NoMessage(String),
}

/// Why an archive refuses `e` at the door though pi 1.6 parses it
/// ([`crate::storage::unreadable_later`]): the line is kept verbatim and reported.
fn unreadable_later(e: &Entry) -> Option<SkipReason> {
    crate::storage::unreadable_later(e).map(|u| match u {
        crate::storage::Unreadable::NoMessage(id) => SkipReason::NoMessage(id),
    })
}

impl SkipReason {
    /// What pi 1.6 does with such a line, and what was done instead, in a
    /// phrase that follows `kept verbatim, `.
    pub fn describe(&self) -> String {
        match self {
            SkipReason::Blank => "pi skips it: a blank line".into(),
            SkipReason::NotJson => "pi skips it: not valid JSON".into(),
            SkipReason::FalsyJson => "pi skips it: JSON null, false, 0 or \"\"".into(),
            SkipReason::NotAnEntry(EntryProblem::NotObject) => {
                "not stored as an entry: JSON but not an object (pi 1.6 reads it as an entry without an id)".into()
            }
            SkipReason::NotAnEntry(problem) => format!(
                "not stored as an entry: it {} (pi 1.6 reads it as an entry)",
                problem.reason()
            ),
            SkipReason::Header => "pi skips it: a second session header".into(),
            SkipReason::BeforeHeader => "pi skips it: a line before the session header that is not JSON".into(),
            SkipReason::DuplicateId(id) => format!(
                "not stored as an entry: its id {id:?} is an earlier entry's (pi 1.6 reads both, the later answering to the id; the archive keeps the first)"
            ),
            SkipReason::LateParent(id) => format!(
                "not stored as an entry: {id:?} is the parent of earlier entries, which the archive stored as roots (pi 1.6 links them)"
            ),
            SkipReason::NoMessage(id) => format!(
                "not stored as an entry: message entry {id:?} has no message (null), on which pi 1.6's context and statistics fail"
            ),
        }
    }
}

/// A line of a session file that is not one of its entries, kept verbatim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedLine {
    /// Its line number in the file (every `\n` counted, 1-based; after an
    /// import's earlier lines, counted from them).
    pub line: u64,
    /// Entries of this read before it; `-1`: before the header.
    pub entries_before: i64,
    /// Its bytes, without the `\n`.
    pub text: Vec<u8>,
    /// Why it is not an entry.
    pub why: SkipReason,
}

/// Whether a JSON value's text is one JavaScript reads as falsy
/// (`null`, `false`, `0`, `""`, `-0`, `0.0`, …): pi skips those lines.
fn falsy_json(text: &str) -> bool {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Null) => true,
        Ok(serde_json::Value::Bool(b)) => !b,
        Ok(serde_json::Value::String(s)) => s.is_empty(),
        Ok(serde_json::Value::Number(n)) => n.as_f64().is_some_and(|f| f == 0.0),
        _ => false,
    }
}

/// Strips what JSON allows around a value but a stored entry should not carry
/// (a line holds no line feed, so this is the rest of JSON's whitespace).
fn stored_text(line: &str) -> &str {
    json::trim_json_whitespace(line)
}

/// Reads a session file from `reader` line by line, handing each entry to
/// `sink` as soon as it is parsed, so memory stays bounded by the longest line.
/// Applies pi's rules: split on `\n`, skip lines blank after trimming, invalid
/// UTF-8 as U+FFFD, line numbers counting non-blank lines.
pub fn read_session<R: BufRead>(
    reader: R,
    path: &Path,
    sink: impl FnMut(&Header, Entry) -> Result<()>,
) -> Result<ReadSummary> {
    read_session_from(reader, path, ReadStart::Beginning, sink)
}

/// A line's text as Node decodes it (invalid UTF-8 becomes U+FFFD). Valid
/// text, nearly every line, is borrowed after the fast check: the lossy
/// decoder goes byte by byte and cost 2 % of an import.
fn utf8_as_node_reads(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.into(),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// [`read_session`] from a given start (see [`ReadStart`]).
pub fn read_session_from<R: BufRead>(
    reader: R,
    path: &Path,
    start: ReadStart,
    sink: impl FnMut(&Header, Entry) -> Result<()>,
) -> Result<ReadSummary> {
    read_session_leniently(reader, path, start, Leniency::default(), sink, |_| Ok(()))
}

/// [`read_session_from`], skipping the lines `leniency` says pi 1.6 skips
/// (or the store cannot hold) and handing each to `skipped` instead of
/// failing; blank lines go there too. A first parsed line that is not a
/// header fails the read, as it fails pi's open.
pub fn read_session_leniently<R: BufRead>(
    mut reader: R,
    path: &Path,
    start: ReadStart,
    leniency: Leniency,
    mut sink: impl FnMut(&Header, Entry) -> Result<()>,
    mut skipped: impl FnMut(SkippedLine) -> Result<()>,
) -> Result<ReadSummary> {
    let io_err = |e| Error::io(format!("Failed to read session {}", path.display()), e);
    let mut buf = Vec::new();
    let (mut header, mut offset, mut number) = match start {
        ReadStart::Beginning => (None, 0, 0),
        ReadStart::After {
            header,
            offset,
            lines,
        } => (Some(header), offset, lines),
    };
    let mut upgrade = header.as_ref().map(|h: &Header| Upgrade::new(h.version));
    let mut torn_tail = None;
    let mut missing_final_newline = false;
    let mut entries = 0;
    let mut physical = number;
    let mut sdk_only_entries = false;
    let mut skipped_before_header = false;
    // Ids seen and parents wanted, for a store that needs unique ids.
    let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut wanted: std::collections::HashSet<String> = std::collections::HashSet::new();
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf).map_err(io_err)?;
        if n == 0 {
            break;
        }
        let line_offset = offset;
        offset += n as u64;
        physical += 1;
        let terminated = buf.last() == Some(&b'\n');
        let body = if terminated { &buf[..n - 1] } else { &buf[..] };
        let text = utf8_as_node_reads(body);
        let position = if header.is_some() { entries as i64 } else { -1 };
        let mut skip = |why: SkipReason| {
            skipped(SkippedLine {
                line: physical,
                entries_before: position,
                text: body.to_vec(),
                why,
            })
        };
        if js_trim(&text).is_empty() {
            // A blank last line without `\n` still needs one before an append.
            missing_final_newline = !terminated;
            if leniency.skip_unusable {
                skip(SkipReason::Blank)?;
            }
            continue;
        }
        number += 1;
        let Some(h) = &header else {
            if leniency.skip_unusable && terminated {
                let trimmed = stored_text(&text);
                if serde_json::from_str::<serde::de::IgnoredAny>(trimmed).is_err()
                    || falsy_json(trimmed)
                {
                    skip(SkipReason::BeforeHeader)?;
                    skipped_before_header = true;
                    continue;
                }
            }
            let h = Header::parse(&text, path)?;
            upgrade = Some(Upgrade::new(h.version));
            header = Some(h);
            // So does a header with nothing after it.
            missing_final_newline = !terminated;
            continue;
        };
        let stored = stored_text(&text);
        let parsed = match upgrade.as_mut() {
            Some(u) if h.version != 3 => u.entry(stored),
            _ => Entry::from_stored_line(stored),
        };
        if leniency.skip_unusable && (terminated || parsed.is_ok()) {
            let why = match &parsed {
                Err(EntryProblem::NotJson) => Some(SkipReason::NotJson),
                Err(_) if falsy_json(stored) => Some(SkipReason::FalsyJson),
                Err(_) if !stored.starts_with('{') => {
                    Some(SkipReason::NotAnEntry(EntryProblem::NotObject))
                }
                Err(problem) => Some(SkipReason::NotAnEntry(problem.clone())),
                Ok(e) if e.entry_type().as_str() == "session" => Some(SkipReason::Header),
                Ok(e) if leniency.unique_ids && seen.contains(e.id()) => {
                    Some(SkipReason::DuplicateId(e.id().to_owned()))
                }
                Ok(e) if leniency.unique_ids && wanted.contains(e.id()) => {
                    Some(SkipReason::LateParent(e.id().to_owned()))
                }
                Ok(e) if leniency.unique_ids => unreadable_later(e),
                Ok(_) => None,
            };
            if let Some(why) = why {
                missing_final_newline = !terminated;
                skip(why)?;
                continue;
            }
            if let (true, Ok(e)) = (leniency.unique_ids, &parsed) {
                seen.insert(e.id().to_owned());
                wanted.remove(e.id());
                if let Some(parent) = e.parent_id() {
                    if !seen.contains(parent) {
                        wanted.insert(parent.to_owned());
                    }
                }
            }
        }
        match parsed {
            Ok(entry) => {
                missing_final_newline = !terminated;
                entries += 1;
                sdk_only_entries |= Contract::is_sdk_only_type(entry.entry_type().as_str());
                sink(h, entry)?;
            }
            Err(_) if !terminated => {
                torn_tail = Some(TornTail {
                    line: number,
                    offset: line_offset,
                    len: n as u64,
                });
            }
            Err(problem) => {
                return Err(Error::InvalidLine {
                    path: path.to_owned(),
                    line: number,
                    reason: problem.reason().to_owned(),
                })
            }
        }
    }
    let header = header.ok_or_else(|| Error::InvalidHeader {
        path: path.to_owned(),
        // Lines were skipped where the header should be: none of them is one.
        reason: if skipped_before_header {
            "first line is not a valid session header"
        } else {
            "missing session header"
        }
        .to_owned(),
    })?;
    let complete_bytes = offset - torn_tail.as_ref().map_or(0, |t: &TornTail| t.len);
    let lines = number - u64::from(torn_tail.is_some());
    Ok(ReadSummary {
        header,
        torn_tail,
        missing_final_newline,
        entries,
        bytes: offset,
        complete_bytes,
        lines,
        sdk_only_entries,
    })
}

/// Upgrades version 1 and 2 lines to version 3 as pi's migration does.
struct Upgrade {
    version: u32,
    /// Ids assigned so far, by index in the file's entry list (index 0 = header).
    ids: Vec<Option<String>>,
}

impl Upgrade {
    fn new(version: u32) -> Self {
        Upgrade {
            version,
            ids: vec![None],
        }
    }

    fn entry(&mut self, text: &str) -> Result<Entry, EntryProblem> {
        match self.entry_as_written(text) {
            Some(entry) => Ok(entry),
            None => self.entry_rebuilt(text),
        }
    }

    /// The id pi's version-1 migration gives the next entry (by its index
    /// in the file), and its parent: the last entry that got one.
    fn next_v1_id(&self) -> (String, Option<String>) {
        let id = format!("v1-{:05}", self.ids.len());
        (id, self.ids.iter().rev().flatten().next().cloned())
    }

    /// What [`Upgrade::entry_rebuilt`] makes of an entry as pi wrote it, without
    /// taking it apart: a compact object (the rebuilt one is compact) with no
    /// top-level member the upgrade replaces or removes, and no text that could
    /// spell the renamed role. A version-1 entry gets its id and parent
    /// appended, where setting them on the parsed object puts them. `None`
    /// for anything else, and for an entry that does not read (the rebuild
    /// then says why): the parse and rewrite of every line were a fifth of
    /// reading a version-1 file.
    fn entry_as_written(&mut self, text: &str) -> Option<Entry> {
        let finder = |needle: &str| memchr::memmem::find(text.as_bytes(), needle.as_bytes());
        if finder("hookMessage").is_some() || finder("\\u").is_some() {
            return None;
        }
        let keys = json::compact_object_keys(text)?;
        if self.version != 1 {
            let entry = Entry::from_stored_line(text).ok()?;
            self.ids.push(None);
            return Some(entry);
        }
        if keys
            .iter()
            .any(|k| matches!(*k, "id" | "parentId" | "firstKeptEntryIndex"))
        {
            return None;
        }
        let (id, parent) = self.next_v1_id();
        let mut upgraded = String::with_capacity(text.len() + 40);
        upgraded.push_str(&text[..text.len() - 1]);
        if !keys.is_empty() {
            upgraded.push(',');
        }
        upgraded.push_str("\"id\":");
        json::push_string_literal(&mut upgraded, &id);
        upgraded.push_str(",\"parentId\":");
        match parent {
            Some(parent) => json::push_string_literal(&mut upgraded, &parent),
            None => upgraded.push_str("null"),
        }
        upgraded.push('}');
        let entry = Entry::from_stored_line(&upgraded).ok()?;
        self.ids.push(Some(id));
        Some(entry)
    }

    /// The upgrade of one entry: parsed, its members set or renamed as pi's
    /// migrations do, written again.
    fn entry_rebuilt(&mut self, text: &str) -> Result<Entry, EntryProblem> {
        let Ok(mut obj) = OrderedObject::parse(text) else {
            self.ids.push(None);
            return Err(EntryProblem::NotJson);
        };
        if self.version == 1 {
            let (id, parent) = self.next_v1_id();
            obj.set("id", raw_value(&json::string_literal(&id)));
            let parent_json =
                parent.map_or_else(|| "null".to_owned(), |p| json::string_literal(&p));
            obj.set("parentId", raw_value(&parent_json));
            if obj.get("type").map(|t| t.get()) == Some("\"compaction\"") {
                if let Some(i) = obj
                    .get("firstKeptEntryIndex")
                    .and_then(|r| r.get().parse::<usize>().ok())
                {
                    if let Some(Some(target)) = self.ids.get(i) {
                        let target = json::string_literal(target);
                        obj.set("firstKeptEntryId", raw_value(&target));
                    }
                    obj.remove("firstKeptEntryIndex");
                }
            }
            self.ids.push(Some(id));
        } else {
            self.ids.push(None);
        }
        if obj.get("type").map(|t| t.get()) == Some("\"message\"") {
            // Only a message whose text spells `hookMessage`, or escapes a
            // character (`\u…` is the one escape that can make a letter), can
            // hold that role: the others are not parsed again.
            if let Some(message) = obj
                .get("message")
                .filter(|m| m.get().contains("hookMessage") || m.get().contains("\\u"))
            {
                if let Ok(mut m) = OrderedObject::parse(message.get()) {
                    // Compared as JSON.parse reads it (escapes decoded), as pi does.
                    let role = m
                        .get("role")
                        .and_then(|r| serde_json::from_str::<String>(r.get()).ok());
                    if role.as_deref() == Some("hookMessage") {
                        m.set("role", raw_value("\"custom\""));
                        obj.set("message", raw_value(&m.to_json()));
                    }
                }
            }
        }
        Entry::from_stored_line(&obj.to_json())
    }
}

/// Reads only the first physical line of a session file and parses its header
/// (what listing does; a file with leading blank lines is unlistable, as in pi).
pub fn read_header(path: &Path) -> Result<Header> {
    let file = File::open(path).map_err(|e| {
        Error::io(
            format!("Failed to read session header {}", path.display()),
            e,
        )
    })?;
    let mut first = Vec::new();
    BufReader::new(file)
        .read_until(b'\n', &mut first)
        .map_err(|e| {
            Error::io(
                format!("Failed to read session header {}", path.display()),
                e,
            )
        })?;
    let text = String::from_utf8_lossy(&first);
    // Node's line reader also ends a line at a lone `\r`.
    let line = text.split(['\n', '\r']).next().unwrap_or("");
    if js_trim(line).is_empty() {
        return Err(Error::InvalidHeader {
            path: path.to_owned(),
            reason: "missing session header".to_owned(),
        });
    }
    Header::parse(line, path)
}

/// The header as opening reads it: the first line that is JSON (not blank,
/// not malformed, not falsy: pi 1.6 skips those) — unlike [`read_header`],
/// which follows pi's listing and reads only line 1.
pub fn read_open_header(path: &Path) -> Result<Header> {
    let io = |e| {
        Error::io(
            format!("Failed to read session header {}", path.display()),
            e,
        )
    };
    let mut reader = BufReader::new(File::open(path).map_err(io)?);
    let mut buf = Vec::new();
    let mut skipped = false;
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf).map_err(io)? == 0 {
            return Err(Error::InvalidHeader {
                path: path.to_owned(),
                reason: if skipped {
                    "first line is not a valid session header"
                } else {
                    "missing session header"
                }
                .to_owned(),
            });
        }
        let terminated = buf.ends_with(b"\n");
        let body = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let text = String::from_utf8_lossy(body);
        if js_trim(&text).is_empty() {
            continue;
        }
        // pi 1.6 skips what is not JSON (or is falsy) before the header.
        let trimmed = stored_text(&text);
        if terminated
            && (serde_json::from_str::<serde::de::IgnoredAny>(trimmed).is_err()
                || falsy_json(trimmed))
        {
            skipped = true;
            continue;
        }
        return Header::parse(&text, path);
    }
}

/// A session stored as a pi JSONL file.
#[derive(Debug)]
pub struct JsonlStorage {
    path: PathBuf,
    header: Header,
    log: LogIndex,
    durability: Durability,
    file: Option<File>,
    torn_tail: Option<TornTail>,
    /// Bytes to cut the file to before the next append (a torn tail).
    truncate_to: Option<u64>,
    missing_final_newline: bool,
    poisoned: Option<String>,
    /// The contract it was told it follows; detected from the log when `None`.
    contract: Option<Contract>,
    /// Lines of the file pi skips, as read at open (the file keeps them).
    skipped: Vec<SkippedLine>,
}

/// What [`JsonlStorage::check`] found in a session file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileCheck {
    /// Entries read (0 when the file did not open).
    pub entries: usize,
    /// The problems found; empty for a valid session file.
    pub problems: Vec<String>,
    /// What pi tolerates and reads here tolerate too: entries whose parent
    /// is missing, where paths stop ([`crate::storage::contract_findings`]).
    pub warnings: Vec<String>,
}

impl JsonlStorage {
    /// Checks a session file: that it opens (every line, the header), and
    /// every read of the contract on it ([`crate::storage::contract_problems`]).
    /// A missing file is an error (`not_found`); anything else wrong with it
    /// is a problem in the answer.
    pub fn check(path: impl AsRef<Path>) -> Result<FileCheck> {
        match JsonlStorage::open(path, Durability::Full) {
            Err(e) if e.code() == crate::error::ErrorCode::NotFound => Err(e),
            Err(e) => Ok(FileCheck {
                entries: 0,
                problems: vec![e.to_string()],
                warnings: Vec::new(),
            }),
            Ok(storage) => {
                // Lines pi 1.6 skips open, but they are damage all the same.
                let found = crate::storage::contract_findings(&storage)?;
                let mut problems: Vec<String> = storage
                    .skipped
                    .iter()
                    .filter(|l| !matches!(l.why, SkipReason::Blank))
                    .map(|l| format!("line {}: kept in the file, {}", l.line, l.why.describe()))
                    .collect();
                // pi 1.6 drops a torn last line and glues its next append
                // onto it, losing that entry too: damage, not a tolerance.
                if let Some(t) = &storage.torn_tail {
                    problems.push(format!(
                        "line {}: torn last line ({} bytes from byte {}, no final newline, not a complete JSON value): pi 1.6 drops it, and its next entry would be appended onto it and lost",
                        t.line, t.len, t.offset
                    ));
                }
                problems.extend(found.problems);
                Ok(FileCheck {
                    entries: storage.all_entries().len(),
                    problems,
                    warnings: found.warnings,
                })
            }
        }
    }

    /// Opens an existing session file by the rules of the contract its
    /// entries imply ([`Contract::detect`]): an app file (the pi program's)
    /// opens as pi 1.6 opens it, skipping the lines pi skips (kept in the
    /// file, handed out by [`JsonlStorage::skipped_lines`]); an SDK file (one
    /// with `leaf` or `active_tools_change` entries) opens by pi-agent-core
    /// 0.83's checks, a bad line failing the open.
    pub fn open(path: impl AsRef<Path>, durability: Durability) -> Result<Self> {
        let opened = Self::read(path.as_ref(), durability, Leniency::APP)?;
        let problem_lines = opened
            .skipped
            .iter()
            .any(|l| !matches!(l.why, SkipReason::Blank));
        if problem_lines && opened.contract()? == Contract::Sdk {
            return Self::open_as(path, durability, Contract::Sdk);
        }
        Ok(opened)
    }

    /// Opens an existing session file by `contract`'s rules (see
    /// [`JsonlStorage::open`]), whatever its entries imply; the storage
    /// answers that contract.
    pub fn open_as(
        path: impl AsRef<Path>,
        durability: Durability,
        contract: Contract,
    ) -> Result<Self> {
        let leniency = match contract {
            Contract::App => Leniency::APP,
            Contract::Sdk => Leniency::default(),
        };
        let mut opened = Self::read(path.as_ref(), durability, leniency)?;
        opened.contract = Some(contract);
        Ok(opened)
    }

    fn read(path: &Path, durability: Durability, leniency: Leniency) -> Result<Self> {
        let path = path.to_owned();
        let file = File::open(&path)
            .map_err(|e| Error::io(format!("Failed to read session {}", path.display()), e))?;
        let mut log = LogIndex::default();
        let mut skipped = Vec::new();
        let summary = read_session_leniently(
            BufReader::with_capacity(1 << 16, file),
            &path,
            ReadStart::Beginning,
            leniency,
            |_, e| {
                log.push(e);
                Ok(())
            },
            |line| {
                skipped.push(line);
                Ok(())
            },
        )?;
        Ok(JsonlStorage {
            path,
            header: summary.header,
            log,
            durability,
            file: None,
            truncate_to: summary.torn_tail.as_ref().map(|t| t.offset),
            torn_tail: summary.torn_tail,
            missing_final_newline: summary.missing_final_newline,
            poisoned: None,
            contract: None,
            skipped,
        })
    }

    /// Tells the storage whose rules the session follows (else detected
    /// from its entries): a session created through the SDK contract.
    pub fn set_contract(&mut self, contract: Contract) {
        self.contract = Some(contract);
    }

    /// The lines of the file pi skips (blank ones included), with their
    /// line numbers and why, as read at open.
    pub fn skipped_lines(&self) -> &[SkippedLine] {
        &self.skipped
    }

    /// Creates a new session file holding only `header`; refuses to overwrite.
    pub fn create(path: impl AsRef<Path>, header: Header, durability: Durability) -> Result<Self> {
        let path = path.as_ref().to_owned();
        let context = || format!("Failed to create session {}", path.display());
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| Error::io(context(), e))?;
        }
        // Write the header to a temporary file and rename it into place, so a
        // crash leaves either no session or a whole header.
        let tmp = path.with_extension("jsonl.tmp");
        let mut f = File::create(&tmp).map_err(|e| Error::io(context(), e))?;
        f.write_all(format!("{}\n", header.json).as_bytes())
            .and_then(|()| {
                if durability == Durability::Full {
                    f.sync_all()
                } else {
                    Ok(())
                }
            })
            .map_err(|e| Error::io(context(), e))?;
        drop(f);
        if path.exists() {
            let _ = std::fs::remove_file(&tmp);
            return Err(Error::io(
                context(),
                std::io::Error::new(std::io::ErrorKind::AlreadyExists, "file exists"),
            ));
        }
        std::fs::rename(&tmp, &path).map_err(|e| Error::io(context(), e))?;
        if durability == Durability::Full {
            sync_dir(&path);
        }
        Ok(JsonlStorage {
            path,
            header,
            log: LogIndex::default(),
            durability,
            file: None,
            torn_tail: None,
            truncate_to: None,
            missing_final_newline: false,
            poisoned: None,
            contract: None,
            skipped: Vec::new(),
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The torn final line left out when the file was opened, if there was one.
    pub fn torn_tail(&self) -> Option<&TornTail> {
        self.torn_tail.as_ref()
    }

    /// Every entry, in order (cheap clones).
    pub fn all_entries(&self) -> &[Entry] {
        self.log.all()
    }

    fn write_lines(&mut self, entries: &[Entry]) -> Result<()> {
        if let Some(why) = &self.poisoned {
            return Err(Error::Poisoned(why.clone()));
        }
        if self.header.version != 3 {
            return Err(Error::ReadOnlyVersion {
                path: self.path.clone(),
                version: self.header.version,
            });
        }
        let mut buf = String::new();
        if self.missing_final_newline {
            buf.push('\n');
        }
        for e in entries {
            buf.push_str(e.json());
            buf.push('\n');
        }
        let path = self.path.clone();
        let first_id = entries.first().map_or("", Entry::id).to_owned();
        let result = (|| -> std::io::Result<()> {
            if self.file.is_none() {
                let f = OpenOptions::new().append(true).open(&path)?;
                if let Some(len) = self.truncate_to {
                    f.set_len(len)?;
                    f.sync_all()?;
                }
                self.file = Some(f);
            }
            let f = self.file.as_mut().expect("opened above");
            let len = f.metadata()?.len();
            if let Err(e) = f.write_all(buf.as_bytes()) {
                // A short write (disk full) must not leave half a line behind.
                let _ = f.set_len(len);
                return Err(e);
            }
            if self.durability == Durability::Full {
                f.sync_data()?;
            }
            Ok(())
        })();
        match result {
            Ok(()) => {
                self.truncate_to = None;
                self.missing_final_newline = false;
                Ok(())
            }
            Err(e) => {
                let context = format!(
                    "Failed to append session entry {first_id} to {}",
                    path.display()
                );
                // The session was found; its file vanishing is a storage failure.
                let e = if e.kind() == std::io::ErrorKind::NotFound {
                    std::io::Error::other(e)
                } else {
                    e
                };
                self.poisoned = Some(format!("{context}: {e}; the store refuses further writes"));
                self.file = None;
                Err(Error::io(context, e))
            }
        }
    }
}

/// Makes a rename durable; best effort where directories cannot be opened.
fn sync_dir(path: &Path) {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
}

impl SessionStorage for JsonlStorage {
    fn contract(&self) -> Result<Contract> {
        Ok(self.contract.unwrap_or_else(|| {
            Contract::detect(self.log.all().iter().map(|e| e.entry_type().as_str()))
        }))
    }
    fn kept_lines(&self) -> Result<crate::storage::KeptLines> {
        Ok(crate::storage::KeptLines {
            lines: self
                .skipped
                .iter()
                .map(|l| crate::storage::KeptLine {
                    position: l.entries_before,
                    text: l.text.clone(),
                })
                .collect(),
            open_end: self
                .missing_final_newline
                .then(|| i64::try_from(self.log.all().len()).unwrap_or(i64::MAX)),
        })
    }
    fn metadata(&self) -> Result<SessionMetadata> {
        Ok(self.header.metadata_for(&self.path))
    }
    fn append_entry(&mut self, entry: Entry) -> Result<()> {
        self.write_lines(std::slice::from_ref(&entry))?;
        self.log.push(entry);
        Ok(())
    }
    fn append_entries(&mut self, entries: &[Entry]) -> Result<()> {
        if entries.is_empty() {
            return Ok(());
        }
        self.write_lines(entries)?;
        for e in entries {
            self.log.push(e.clone());
        }
        Ok(())
    }
    super::log_index_reads!();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines pi never writes, each near the fast path's edge: whitespace,
    /// escaped or repeated keys, members the upgrade replaces, the renamed
    /// role, lone surrogates, broken JSON.
    const ODD_LINES: &[&str] = &[
        r#"{"type":"message","timestamp":"t","message":{"role":"user","content":"hi"}}"#,
        r#"{"type": "message","timestamp":"t","message":{"role":"user","content":"hi"}}"#,
        r#"{ "type":"message","timestamp":"t","message":{"role":"user","content":"hi"}}"#,
        r#"{"type":"message","timestamp":"t","message":{"role":"user","content":"hi"}} "#,
        r#"{"type":"message" ,"timestamp":"t","message":{"role": "user", "content": "hi"}}"#,
        r#"{"\u0074ype":"message","timestamp":"t","message":{"role":"user","content":"hi"}}"#,
        r#"{"type":"message","type":"message","timestamp":"t","message":{"role":"user","content":"a"}}"#,
        r#"{"type":"message","id":"mine","timestamp":"t","message":{"role":"user","content":"hi"}}"#,
        r#"{"type":"message","parentId":"p","timestamp":"t","message":{"role":"user","content":"hi"}}"#,
        r#"{"type":"message","timestamp":"t","message":{"role":"hookMessage","content":"hi"}}"#,
        r#"{"type":"message","timestamp":"t","message":{"role":"hook\u004dessage","content":"hi"}}"#,
        r#"{"type":"message","timestamp":"t","message":{"role":"user","content":"says hookMessage"}}"#,
        r#"{"type":"message","timestamp":"t","message":{"role":"user","content":"\ud800 alone"}}"#,
        r#"{"type":"compaction","timestamp":"t","summary":"s","firstKeptEntryIndex":1,"tokensBefore":5}"#,
        r#"{"type":"compaction","timestamp":"t","summary":"s","firstKeptEntryIndex":99,"tokensBefore":5}"#,
        r#"{"type":"compaction","timestamp":"t","summary":"s","tokensBefore":5}"#,
        r#"{"type":"thinking_level_change","timestamp":"t","thinkingLevel":"high"}"#,
        r#"{"type":"message","timestamp":"t","message":{"role":"user","content":"hi"},}"#,
        r#"{"type":"message","timestamp":tru,"message":{"role":"user","content":"hi"}}"#,
        r#"{"type":"message","timestamp":"t","message":{"role":"user","content":"hi"}"#,
        r#"{"type":"message","timestamp":"t","message":{"role":"user","content":"hi"}}}"#,
        r#"{}"#,
        r#"[]"#,
        r#""text""#,
        r#"{"type":"custom","customType":"x","data":{"a":[1,2,{"b":"}"}]},"timestamp":"t"}"#,
    ];

    /// Reads `lines` through [`Upgrade::entry`] and through the rebuild
    /// alone, from the same start: each line's entry (its exact text) or
    /// problem, and the ids assigned, must be the same. Returns how many
    /// lines the fast path took, and the entries read (version-2 lines).
    fn same_both_ways(version: u32, lines: &[&str]) -> (usize, Vec<String>) {
        let (mut fast, mut rebuilt) = (Upgrade::new(version), Upgrade::new(version));
        let (mut taken, mut read) = (0, Vec::new());
        for line in lines {
            taken += usize::from(Upgrade::new(version).entry_as_written(line).is_some());
            let a = fast.entry(line).map(|e| e.json().to_owned());
            let b = rebuilt.entry_rebuilt(line).map(|e| e.json().to_owned());
            assert_eq!(a, b, "version {version}: {line}");
            assert_eq!(fast.ids, rebuilt.ids, "version {version}: {line}");
            read.extend(a);
        }
        (taken, read)
    }

    /// Version 1 as written, then version 2: the lines themselves (most
    /// have no id, which version 2 requires) and the version-1 upgrade of
    /// each (ids given). Returns how many lines the fast path took of each.
    fn both_versions(lines: &[&str]) -> (usize, usize) {
        let (taken_1, upgraded) = same_both_ways(1, lines);
        same_both_ways(2, lines);
        let upgraded: Vec<&str> = upgraded.iter().map(String::as_str).collect();
        (taken_1, same_both_ways(2, &upgraded).0)
    }

    #[test]
    fn an_old_entry_upgrades_alike_as_written_and_rebuilt() {
        let (taken_1, taken_2) = both_versions(ODD_LINES);
        // The plain lines go the fast way; the odd ones do not.
        assert!((3..=8).contains(&taken_1), "{taken_1} fast");
        assert!(taken_2 >= 3, "{taken_2} fast");
    }

    #[test]
    fn pi_s_version_1_files_upgrade_alike_as_written_and_rebuilt() {
        for file in crate::pi_fixture_files() {
            let text = std::fs::read_to_string(file).expect("read");
            let lines: Vec<&str> = text.lines().skip(1).collect();
            let (taken_1, taken_2) = both_versions(&lines);
            for taken in [taken_1, taken_2] {
                assert!(
                    taken * 10 >= lines.len() * 9,
                    "{taken} of {} fast",
                    lines.len()
                );
            }
        }
    }
}
