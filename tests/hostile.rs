//! Hostile input: random bytes, mutated real pi lines, deep nesting, huge
//! strings, invalid UTF-8, lone surrogates, CR-only and mixed line endings and
//! byte-order marks, through the JSONL reader, import, and the rpc protocol.
//! Nothing may panic; every failure is a contract error code; a refused
//! operation leaves the file's bytes or the archive's rows exactly as they were.
//!
//! Also: a 100 MB line (an inline base64 image) imports into SQLite and
//! exports back byte-identically, with the child process's peak memory
//! (VmHWM) bounded by a small multiple of the line (100 MB and 10 MB variants).
//!
//! `PROPTEST_CASES=N` runs more cases.

mod support;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use sessiontree::backend::jsonl::{
    read_session, read_session_leniently, Header, JsonlStorage, Leniency, ReadStart, SkipReason,
};
use sessiontree::backend::sqlite::{Archive, SqliteStorage};
use sessiontree::convert::{export_jsonl, import_jsonl};
use sessiontree::rules::SessionStats;
use sessiontree::{
    rpc, Durability, Entry, ErrorCode, Result, Session, SessionMetadata, SessionStorage,
};
use std::cell::RefCell;
use std::io::{Cursor, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use support::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------

fn quote(s: &str) -> String {
    serde_json::to_string(s).expect("string literal")
}

fn hostile_char() -> impl Strategy<Value = char> {
    prop_oneof![
        3 => any::<char>(),
        2 => prop::sample::select(vec![
            '"', '\\', '\n', '\r', '\t', '\0', '\u{7f}', '\u{2028}', '\u{2029}', '\u{feff}',
            '\u{a0}', '\u{fffd}', '🌍', '\'', '{', '}', '[', ']', ':', ',', 'é',
        ]),
        3 => prop::char::range('a', 'z'),
    ]
}

fn hostile_string() -> impl Strategy<Value = String> {
    prop::collection::vec(hostile_char(), 0..24).prop_map(|v| v.into_iter().collect())
}

/// JSON *text* (not values): so lone surrogate escapes, duplicate keys, odd
/// number spellings and deep nesting can be written.
fn json_text(ids: Vec<String>) -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        prop::sample::select(vec![
            "null",
            "true",
            "false",
            "0",
            "-0",
            "1e400",
            "-1.5e-7",
            "123456789012345678901234567890",
            "\"\\ud800\"",
            "\"a\\udc00b\"",
            "\"\\ud83d\\ude00\"",
            "\"\"",
            "\"   \"",
            "[]",
            "{}",
            "\"\\u0000\"",
        ])
        .prop_map(str::to_owned),
        hostile_string().prop_map(|s| quote(&s)),
        prop::sample::select(ids).prop_map(|s| quote(&s)),
        (1usize..3000).prop_map(|n| format!("{}{}", "[".repeat(n), "]".repeat(n))),
        (1usize..200).prop_map(|n| format!("{}1{}", "{\"a\":".repeat(n), "}".repeat(n))),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(|v| format!("[{}]", v.join(","))),
            prop::collection::vec((key(), inner), 0..5).prop_map(|kv| {
                let members: Vec<String> = kv
                    .iter()
                    .map(|(k, v)| format!("{}:{v}", quote(k)))
                    .collect();
                format!("{{{}}}", members.join(","))
            }),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec![
            "type", "id", "parentId", "timestamp", "message", "role", "content", "targetId",
            "label", "name", "summary", "firstKeptEntryId", "retainedTail", "usage", "__proto__",
            "constructor",
        ])
        .prop_map(str::to_owned),
        1 => hostile_string(),
    ]
}

const TYPES: &[&str] = &[
    "message",
    "thinking_level_change",
    "model_change",
    "active_tools_change",
    "compaction",
    "branch_summary",
    "custom",
    "custom_message",
    "label",
    "session_info",
    "leaf",
    "session",
    "",
];

/// An entry-shaped object: mostly valid, sometimes missing or mistyped fields.
fn entry_text(ids: Vec<String>) -> impl Strategy<Value = String> {
    let id = prop_oneof![
        3 => "[a-z0-9]{1,8}".prop_map(|s| quote(&s)),
        1 => prop::sample::select(ids.clone()).prop_map(|s| quote(&s)),
        1 => json_text(ids.clone()),
    ];
    let parent = prop_oneof![
        2 => Just("null".to_owned()),
        3 => prop::sample::select(ids.clone()).prop_map(|s| quote(&s)),
        1 => json_text(ids.clone()),
    ];
    let ty = prop_oneof![
        4 => prop::sample::select(TYPES).prop_map(quote),
        1 => json_text(ids.clone()),
    ];
    let extra = prop::collection::vec((key(), json_text(ids.clone())), 0..4);
    (ty, id, parent, extra, any::<u8>()).prop_map(|(ty, id, parent, extra, drop)| {
        let mut members = vec![
            format!("\"type\":{ty}"),
            format!("\"id\":{id}"),
            format!("\"parentId\":{parent}"),
            "\"timestamp\":\"2025-01-01T00:00:00.000Z\"".to_owned(),
        ];
        if drop < 40 {
            members.remove(usize::from(drop) % 4);
        }
        members.extend(extra.iter().map(|(k, v)| format!("{}:{v}", quote(k))));
        format!("{{{}}}", members.join(","))
    })
}

const METHODS: &[&str] = &[
    "getMetadata",
    "getLeafId",
    "setLeafId",
    "createEntryId",
    "appendEntry",
    "getEntry",
    "findEntries",
    "getLabel",
    "getSessionName",
    "getSessionStats",
    "getPathToRootOrCompaction",
    "getEntries",
    "appendMessage",
    "appendThinkingLevelChange",
    "appendModelChange",
    "appendActiveToolsChange",
    "appendCompaction",
    "appendCustomEntry",
    "appendCustomMessageEntry",
    "appendLabel",
    "appendSessionName",
    "moveTo",
    "getBranch",
    "buildContext",
    "getEntriesToFork",
];

const PARAMS: &[&str] = &[
    "leafId",
    "entry",
    "id",
    "type",
    "afterEntrySeq",
    "limit",
    "message",
    "thinkingLevel",
    "provider",
    "modelId",
    "activeToolNames",
    "summary",
    "firstKeptEntryId",
    "tokensBefore",
    "details",
    "fromHook",
    "usage",
    "retainedTail",
    "customType",
    "data",
    "content",
    "display",
    "targetId",
    "label",
    "name",
    "entryId",
    "fromId",
    "position",
];

/// One request line (without its line ending), usually well formed.
fn request_text(ids: Vec<String>) -> impl Strategy<Value = String> {
    let method = prop_oneof![
        6 => prop::sample::select(METHODS).prop_map(quote),
        1 => json_text(ids.clone()),
    ];
    let value = prop_oneof![
        3 => prop::sample::select(ids.clone()).prop_map(|s| quote(&s)),
        3 => json_text(ids.clone()),
        2 => entry_text(ids.clone()),
        1 => hostile_string().prop_map(|s| quote(&s)),
        1 => prop::sample::select(vec!["0", "1", "2.5", "-1", "1e300", "true", "\"at\"", "\"before\""]).prop_map(str::to_owned),
    ];
    let params = prop::collection::vec((prop::sample::select(PARAMS), value), 0..5);
    let id = prop_oneof![Just("1".to_owned()), json_text(ids.clone())];
    (id, method, params, any::<u8>()).prop_map(|(id, method, params, shape)| {
        let members: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{}:{v}", quote(k)))
            .collect();
        let params = format!("{{{}}}", members.join(","));
        match shape {
            0..=5 => format!("{{\"method\":{method}}}"),
            6..=9 => format!("{{\"id\":{id},\"method\":{method},\"params\":{id}}}"),
            _ => format!("{{\"id\":{id},\"method\":{method},\"params\":{params}}}"),
        }
    })
}

/// Byte-level damage to a line.
#[derive(Debug, Clone)]
enum Damage {
    None,
    Flip(usize, u8),
    Truncate(usize),
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Bom,
    WrapDeep(usize),
    HugeString(usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    let token = prop::sample::select(vec![
        b"\xef\xbb\xbf".to_vec(),
        b"\r".to_vec(),
        b"\r\n".to_vec(),
        b"\n".to_vec(),
        b"\"".to_vec(),
        b"\\".to_vec(),
        b"\\ud800".to_vec(),
        b"\\udfff\\ud800".to_vec(),
        b"\xff".to_vec(),
        b"\xc3".to_vec(),
        b"\xed\xa0\x80".to_vec(),
        b"\x00".to_vec(),
        b",\"id\":\"dup\"".to_vec(),
        b",\"parentId\":7".to_vec(),
        b"{\"type\":".to_vec(),
        b"null".to_vec(),
        b"\xc2\xa0".to_vec(),
        b"\x0b".to_vec(),
    ]);
    prop_oneof![
        4 => Just(Damage::None),
        2 => (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Damage::Flip(p, b)),
        2 => any::<usize>().prop_map(Damage::Truncate),
        3 => (any::<usize>(), token).prop_map(|(p, t)| Damage::Insert(p, t)),
        1 => (any::<usize>(), 1usize..20).prop_map(|(p, n)| Damage::Delete(p, n)),
        1 => Just(Damage::Bom),
        1 => (1usize..400).prop_map(Damage::WrapDeep),
        1 => (1usize..300_000).prop_map(Damage::HugeString),
    ]
}

fn apply(line: &[u8], d: &Damage) -> Vec<u8> {
    let mut v = line.to_vec();
    let at = |p: usize, len: usize| if len == 0 { 0 } else { p % (len + 1) };
    match d {
        Damage::None => {}
        Damage::Flip(p, b) => {
            if !v.is_empty() {
                let i = p % v.len();
                v[i] = *b;
            }
        }
        Damage::Truncate(p) => v.truncate(at(*p, v.len())),
        Damage::Insert(p, t) => {
            let i = at(*p, v.len());
            v.splice(i..i, t.iter().copied());
        }
        Damage::Delete(p, n) => {
            let i = at(*p, v.len());
            let j = (i + n).min(v.len());
            v.drain(i..j);
        }
        Damage::Bom => v
            .splice(0..0, b"\xef\xbb\xbf".iter().copied())
            .for_each(drop),
        Damage::WrapDeep(n) => {
            let mut w = b"[".repeat(*n);
            w.extend_from_slice(&v);
            w.extend_from_slice(&b"]".repeat(*n));
            v = w;
        }
        Damage::HugeString(n) => {
            // Inside the first string value, when there is one.
            if let Some(i) = v.windows(3).position(|w| w == b"\":\"") {
                let fill = "x".repeat(*n);
                v.splice(i + 3..i + 3, fill.bytes());
            }
        }
    }
    v
}

// ---------------------------------------------------------------------------
// The JSONL reader
// ---------------------------------------------------------------------------

/// pi's fixture sessions upgraded to version 3 lines (real content), plus
/// their raw version-1 lines.
struct Corpus {
    v3: Vec<String>,
    v1: Vec<String>,
}

fn corpus() -> &'static Corpus {
    static CORPUS: std::sync::OnceLock<Corpus> = std::sync::OnceLock::new();
    CORPUS.get_or_init(|| {
        let raw = fixture_lines();
        let mut v3 = Vec::new();
        if let Some(dir) = fixtures_dir() {
            for f in std::fs::read_dir(dir).expect("fixtures").flatten() {
                if f.path().extension().is_some_and(|e| e == "jsonl") {
                    let s =
                        JsonlStorage::open(f.path(), Durability::Relaxed).expect("fixture opens");
                    v3.extend(
                        s.all_entries()
                            .iter()
                            .filter(|e| e.json().len() < 20_000)
                            .map(|e| e.json().to_owned()),
                    );
                }
            }
        }
        if v3.is_empty() {
            v3 = raw.iter().skip(1).cloned().collect();
        }
        Corpus { v3, v1: raw }
    })
}

fn ending() -> impl Strategy<Value = &'static [u8]> {
    prop::sample::select(vec![
        &b"\n"[..],
        b"\n",
        b"\n",
        b"\r\n",
        b"\r",
        b"",
        b"\n\n",
        b"  \n",
    ])
}

/// A session file built from real lines, damaged here and there.
fn hostile_file() -> impl Strategy<Value = (bool, Vec<u8>)> {
    let c = corpus();
    // Most lines intact, so that damage is found among real lines.
    let line_damage = prop::option::weighted(0.3, damage());
    let lines = prop::collection::vec((0..c.v3.len().max(1), line_damage, ending()), 0..8);
    let header_damage = prop::option::weighted(0.2, damage());
    let bom = prop::bool::weighted(0.1);
    (any::<bool>(), lines, header_damage, bom).prop_map(|(v1, lines, header_damage, bom)| {
        let header_damage = header_damage.unwrap_or(Damage::None);
        let c = corpus();
        let mut out = Vec::new();
        if bom {
            out.extend_from_slice(b"\xef\xbb\xbf");
        }
        let header = if v1 {
            c.v1[0].clone()
        } else {
            Header::new("hostile", "2025-01-01T00:00:00.000Z", "/p", None, None).json
        };
        let header_damage = if matches!(header_damage, Damage::HugeString(_) | Damage::WrapDeep(_))
        {
            Damage::None
        } else {
            header_damage
        };
        out.extend(apply(header.as_bytes(), &header_damage));
        out.push(b'\n');
        let pool = if v1 { &c.v1[1..] } else { &c.v3[..] };
        for (i, d, end) in lines {
            if pool.is_empty() {
                break;
            }
            out.extend(apply(
                pool[i % pool.len()].as_bytes(),
                &d.unwrap_or(Damage::None),
            ));
            out.extend_from_slice(end);
        }
        (v1, out)
    })
}

/// Checks what the reader made of `bytes`: no panic, a contract error or
/// entries that are exact lines of the file.
fn check_read(bytes: &[u8]) -> std::result::Result<Vec<Entry>, ErrorCode> {
    // As `JsonlStorage::open` reads: leniently, as pi 1.6 opens it, unless
    // the file is an SDK file (a `leaf` or `active_tools_change` entry) with
    // a line pi 0.83 refuses: then strictly, the SDK's refusal.
    let mut lenient_entries = Vec::new();
    let mut problem_lines = false;
    let lenient = read_session_leniently(
        Cursor::new(bytes),
        Path::new("hostile.jsonl"),
        ReadStart::Beginning,
        Leniency::APP,
        |_, e| {
            lenient_entries.push(e);
            Ok(())
        },
        |l| {
            problem_lines |= !matches!(l.why, SkipReason::Blank);
            Ok(())
        },
    );
    let mut entries = Vec::new();
    let r = match lenient {
        Ok(summary) if !(problem_lines && summary.sdk_only_entries) => {
            entries = lenient_entries;
            Ok(summary)
        }
        _ => read_session(Cursor::new(bytes), Path::new("hostile.jsonl"), |_, e| {
            entries.push(e);
            Ok(())
        }),
    };
    match r {
        Ok(summary) => {
            assert_eq!(summary.entries as usize, entries.len());
            assert!(summary.complete_bytes <= bytes.len() as u64);
            let text = String::from_utf8_lossy(bytes);
            for e in &entries {
                let again = Entry::from_stored_line(e.json()).expect("a read entry re-parses");
                assert_eq!(again.id(), e.id());
                if summary.header.version == 3 {
                    assert!(text.contains(e.json()), "stored text is a line of the file");
                }
            }
            Ok(entries)
        }
        Err(e) => {
            assert!(
                matches!(
                    e.code(),
                    ErrorCode::InvalidSession | ErrorCode::InvalidEntry
                ),
                "reading memory fails only as invalid_session/invalid_entry: {e}"
            );
            Err(e.code())
        }
    }
}

proptest! {
    #![proptest_config(config())]

    /// Random bytes: no panic, a contract error or a valid read.
    #[test]
    fn reader_survives_random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..3000)) {
        let _ = check_read(&bytes);
        let _ = Entry::from_stored_line(&String::from_utf8_lossy(&bytes));
        let _ = Entry::from_json(&String::from_utf8_lossy(&bytes));
    }

    /// Random bytes after a valid header: the reader gets past line 1.
    #[test]
    fn reader_survives_random_lines(lines in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 0..12)) {
        let mut bytes = Header::new("h", "2025-01-01T00:00:00.000Z", "/p", None, None).json.into_bytes();
        bytes.push(b'\n');
        for l in lines {
            bytes.extend(l);
            bytes.push(b'\n');
        }
        let _ = check_read(&bytes);
    }
}

/// Real pi lines, damaged: opening never panics; what opens can be appended
/// to and re-opens with exactly one more entry; what is refused is refused by
/// import too, with the archive unchanged; what opens imports to the same
/// entries (ids repeated are the one difference: SQLite refuses them).
#[test]
fn damaged_real_lines() {
    let dir = tempfile::tempdir().unwrap();
    let archive = Archive::open(dir.path().join("hostile.db"), Durability::Relaxed).unwrap();
    let case = AtomicUsize::new(0);
    let imported_cases = AtomicUsize::new(0);
    let mut runner = TestRunner::new(config());
    let result = runner.run(&hostile_file(), |(v1, bytes)| {
        let n = case.fetch_add(1, Ordering::Relaxed);
        let bytes = unique_session_id(bytes, v1, n);
        let path = dir.path().join(format!("case-{n}.jsonl"));
        std::fs::write(&path, &bytes).unwrap();
        let read = check_read(&bytes);
        let opened = JsonlStorage::open(&path, Durability::Relaxed);
        match (&read, &opened) {
            (Ok(entries), Ok(s)) => prop_assert_eq!(jsons(entries), jsons(s.all_entries())),
            (Err(code), Err(e)) => prop_assert_eq!(*code, e.code()),
            _ => prop_assert!(false, "reader and open disagree"),
        }
        prop_assert!(
            std::fs::read(&path).unwrap() == bytes,
            "open wrote to the file"
        );

        // Import into an archive: the same verdict, nothing half-imported.
        let before = archive_dump(archive.path());
        let imported = import_jsonl(&archive, &path);
        match (&opened, &imported) {
            (Ok(s), Ok(r)) => {
                if r.outcome == sessiontree::convert::ImportOutcome::Imported {
                    imported_cases.fetch_add(1, Ordering::Relaxed);
                    let got = archive_entries(&archive, &r.session_id);
                    // The archive keeps an id's first entry and leaves a late
                    // parent and a message entry without a message out (kept
                    // verbatim instead); otherwise the same.
                    let mut seen = std::collections::HashSet::new();
                    let unique = s
                        .all_entries()
                        .iter()
                        .all(|e| seen.insert(e.id().to_owned()));
                    let kept_out = r.report.kept.iter().any(|k| {
                        matches!(
                            k.why,
                            SkipReason::DuplicateId(_)
                                | SkipReason::LateParent(_)
                                | SkipReason::NoMessage(_)
                        )
                    });
                    if unique && !kept_out {
                        prop_assert_eq!(jsons(&got), jsons(s.all_entries()));
                    } else {
                        let all = jsons(s.all_entries());
                        prop_assert!(jsons(&got).iter().all(|j| all.contains(j)));
                    }
                    // Export gives back the file's bytes (a version 3 file
                    // without a torn tail, whose entry lines carry no
                    // whitespace around their JSON: a CR before `\n` is not kept)
                    // and which is valid UTF-8.
                    let padded = bytes.split(|&b| b == b'\n').any(|l| {
                        !l.iter().all(|b| b" \t\r".contains(b))
                            && (l.first().is_some_and(|b| b" \t\r".contains(b))
                                || l.last().is_some_and(|b| b" \t\r".contains(b)))
                    });
                    // Invalid UTF-8 in an entry is stored as U+FFFD, as Node reads it.
                    let utf8 = std::str::from_utf8(&bytes).is_ok();
                    if s.header().version == 3 && r.torn_tail.is_none() && !padded && utf8 {
                        let mut out = Vec::new();
                        export_jsonl(&archive.open_session(&r.session_id).unwrap(), &mut out)
                            .unwrap();
                        prop_assert!(out == bytes, "export is not the file imported");
                    }
                }
            }
            (Ok(s), Err(e)) => {
                // SQLite refuses, as invalid_entry, what JSONL (like pi) keeps:
                // a repeated id, or an entry stored after its own children.
                let mut seen = std::collections::HashSet::new();
                let dup = s
                    .all_entries()
                    .iter()
                    .any(|e| !seen.insert(e.id().to_owned()));
                let forward = e
                    .to_string()
                    .contains("missing parent of entries already stored");
                // An id that could never be exported as a file name (a path,
                // `..`): refused at the door, as documented, so that no export
                // writes outside its directory.
                let unexportable = sessiontree::layout::check_session_id(&s.header().id).is_err()
                    && e.code() == ErrorCode::InvalidSession;
                prop_assert!(
                    ((dup || forward) && e.code() == ErrorCode::InvalidEntry) || unexportable,
                    "import refused what opens: {}",
                    e
                );
                prop_assert!(
                    archive_dump(archive.path()) == before,
                    "a refused import changed the archive"
                );
            }
            // Import opens an SDK file as pi 1.6 would (its bad lines kept
            // verbatim), where the JSONL backend keeps the SDK's refusal.
            (Err(e), Ok(r)) => prop_assert!(
                r.outcome != sessiontree::convert::ImportOutcome::Imported
                    || e.code() == ErrorCode::InvalidEntry,
                "import took a file that does not open: {}",
                e
            ),
            (Err(_), Err(_)) => {
                prop_assert!(
                    archive_dump(archive.path()) == before,
                    "a refused import changed the archive"
                );
            }
        }

        // Append to what opened: the file re-opens with one more entry.
        if let Ok(mut s) = opened {
            let count = s.all_entries().len();
            let version = s.header().version;
            let extra = message_entry(
                &format!("new{n}"),
                None,
                "user",
                "appended after hostile input",
            );
            match s.append_entry(extra.clone()) {
                Ok(()) => {
                    let again = JsonlStorage::open(&path, Durability::Relaxed);
                    prop_assert!(
                        again.is_ok(),
                        "file no longer opens after an append: {:?}",
                        again.err().map(|e| e.to_string())
                    );
                    let again = again.unwrap();
                    prop_assert_eq!(again.all_entries().len(), count + 1);
                    prop_assert_eq!(again.all_entries().last().unwrap().json(), extra.json());
                    prop_assert!(again.torn_tail().is_none());
                }
                Err(e) => {
                    prop_assert!(version != 3, "a version 3 file refused an append: {}", e);
                    prop_assert_eq!(e.code(), ErrorCode::InvalidSession);
                    prop_assert!(
                        std::fs::read(&path).unwrap() == bytes,
                        "a refused append wrote"
                    );
                }
            }
        }
        let _ = std::fs::remove_file(&path);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let cases = case.load(Ordering::Relaxed);
    let imported = imported_cases.load(Ordering::Relaxed);
    eprintln!("damaged real lines: {cases} cases, {imported} imported whole");
    assert!(
        imported > 0,
        "no case got through import: the test proves little"
    );
}

/// The case `damaged_real_lines` met by chance, every time: damage made the
/// header's id a path (`/fae…`). pi (and the JSONL backend) opens the file;
/// import refuses it as `invalid_session`, since exporting it would write
/// outside the export directory, and writes nothing.
#[test]
fn an_id_that_is_a_path_opens_but_is_not_imported() {
    let dir = tempfile::tempdir().unwrap();
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed).unwrap();
    for id in ["/fae836b", "../up", "a/b", "..", "back\\slash"] {
        let header = Header::new(id, "2025-01-01T00:00:00.000Z", "/p", None, None).json;
        let entry = message_entry("u1", None, "user", "hello");
        let path = dir.path().join("case.jsonl");
        std::fs::write(&path, format!("{header}\n{}\n", entry.json())).unwrap();
        let opened = JsonlStorage::open(&path, Durability::Relaxed).unwrap();
        assert_eq!(opened.header().id, id);
        let before = archive_dump(archive.path());
        let e = import_jsonl(&archive, &path).unwrap_err();
        assert_eq!(e.code(), ErrorCode::InvalidSession, "{id}: {e}");
        assert!(e.to_string().contains("cannot be a file name"), "{id}: {e}");
        assert!(
            archive_dump(archive.path()) == before,
            "{id}: the refused import wrote"
        );
    }
}

/// Gives the header of case `n` its own session id, so each case imports as
/// a new session (damage may have made the id unrecognisable: then it stays).
fn unique_session_id(bytes: Vec<u8>, v1: bool, n: usize) -> Vec<u8> {
    let id = if v1 {
        serde_json::from_str::<serde_json::Value>(&corpus().v1[0])
            .ok()
            .and_then(|h| h["id"].as_str().map(str::to_owned))
    } else {
        Some("hostile".to_owned())
    };
    let Some(id) = id else {
        return bytes;
    };
    let needle = format!("\"id\":\"{id}\"");
    let Some(at) = bytes
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
    else {
        return bytes;
    };
    let mut out = bytes[..at].to_vec();
    out.extend_from_slice(format!("\"id\":\"{id}-{n}\"").as_bytes());
    out.extend_from_slice(&bytes[at + needle.len()..]);
    out
}

/// Line endings and byte-order marks, case by case, as pi reads them.
#[test]
fn line_endings_and_bom() {
    let dir = tempfile::tempdir().unwrap();
    let header = Header::new("le", "2025-01-01T00:00:00.000Z", "/p", None, None).json;
    let a = message_entry("a1", None, "user", "one");
    let b = message_entry("b2", Some("a1"), "assistant", "two");
    let open = |name: &str, bytes: Vec<u8>| {
        let p = dir.path().join(name);
        std::fs::write(&p, &bytes).unwrap();
        let r = JsonlStorage::open(&p, Durability::Relaxed);
        assert_eq!(std::fs::read(&p).unwrap(), bytes, "{name}: open wrote");
        (p, r)
    };
    // CRLF: a trailing \r is JSON whitespace; entries keep their exact text.
    let (_, r) = open(
        "crlf.jsonl",
        format!("{header}\r\n{}\r\n{}\r\n", a.json(), b.json()).into_bytes(),
    );
    assert_eq!(
        jsons(r.expect("crlf opens").all_entries()),
        jsons(&[a.clone(), b.clone()])
    );
    // Mixed endings and blank lines, even before the header.
    let (p, r) = open(
        "mixed.jsonl",
        format!("\n  \r\n{header}\n\r\n{}\r\n\n{}", a.json(), b.json()).into_bytes(),
    );
    let mut s = r.expect("mixed opens");
    assert_eq!(jsons(s.all_entries()), jsons(&[a.clone(), b.clone()]));
    let c = message_entry("c3", Some("b2"), "user", "three");
    s.append_entry(c.clone()).expect("append");
    let again = JsonlStorage::open(&p, Durability::Relaxed).expect("reopens");
    assert_eq!(
        jsons(again.all_entries()),
        jsons(&[a.clone(), b.clone(), c])
    );
    // CR only: one physical line; the header does not parse (as in pi).
    let (_, r) = open(
        "cr.jsonl",
        format!("{header}\r{}\r{}\r", a.json(), b.json()).into_bytes(),
    );
    assert_eq!(
        r.expect_err("cr-only refused").code(),
        ErrorCode::InvalidSession
    );
    // A BOM is not stripped: the header does not parse (as in pi).
    let (_, r) = open(
        "bom.jsonl",
        format!("\u{feff}{header}\n{}\n", a.json()).into_bytes(),
    );
    assert_eq!(
        r.expect_err("bom refused").code(),
        ErrorCode::InvalidSession
    );
    // A BOM before an entry line: that line is not JSON.
    let (_, r) = open(
        "bom2.jsonl",
        format!("{header}\n\u{feff}{}\n", a.json()).into_bytes(),
    );
    // pi 1.6 skips it, and so does the app file's open, keeping it.
    let s = r.expect("bom entry skipped");
    assert!(s.all_entries().is_empty());
    assert_eq!(s.skipped_lines()[0].line, 2);
    assert_eq!(s.skipped_lines()[0].why, SkipReason::NotJson);
    // Invalid UTF-8 inside a string reads as U+FFFD.
    let mut bytes = format!("{header}\n").into_bytes();
    bytes.extend_from_slice(b"{\"type\":\"message\",\"id\":\"u1\",\"parentId\":null,\"timestamp\":\"t\",\"message\":{\"role\":\"user\",\"content\":\"\xff\xfe bad \xc3\"}}\n");
    let (_, r) = open("utf8.jsonl", bytes);
    let s = r.expect("invalid utf-8 opens");
    assert!(s.all_entries()[0].json().contains('\u{fffd}'));
    // Lone surrogate escapes survive exactly.
    let lone = r#"{"type":"message","id":"s1","parentId":null,"timestamp":"t","message":{"role":"user","content":"\ud800 and \udc00"}}"#;
    let (p, r) = open("lone.jsonl", format!("{header}\n{lone}\n").into_bytes());
    let mut s = r.expect("lone surrogates open");
    assert_eq!(s.all_entries()[0].json(), lone);
    s.append_entry(message_entry("s2", Some("s1"), "user", "x"))
        .unwrap();
    assert_eq!(
        JsonlStorage::open(&p, Durability::Relaxed)
            .unwrap()
            .all_entries()[0]
            .json(),
        lone
    );
}

/// Import reads the header as open does (the first non-blank line), not as
/// listing does (line 1 only): leading blank lines or a CR inside the header
/// line do not make a file that opens unimportable.
#[test]
fn import_agrees_with_open_on_odd_headers() {
    let dir = tempfile::tempdir().unwrap();
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed).unwrap();
    let a = message_entry("a1", None, "user", "one");
    for (name, header_text) in [
        ("blank-first", "\n  \r\n{\"type\":\"session\",\"version\":3,\"id\":\"odd1\",\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/p\"}".to_owned()),
        ("cr-inside", "{\"type\":\"session\",\r\"version\":3,\"id\":\"odd2\",\"timestamp\":\"2025-01-01T00:00:00.000Z\",\"cwd\":\"/p\"}".to_owned()),
    ] {
        let p = dir.path().join(format!("{name}.jsonl"));
        std::fs::write(&p, format!("{header_text}\n{}\n", a.json())).unwrap();
        let s = JsonlStorage::open(&p, Durability::Relaxed).unwrap_or_else(|e| panic!("{name}: {e}"));
        let r = import_jsonl(&archive, &p).unwrap_or_else(|e| panic!("{name}: import refused a file that opens: {e}"));
        assert_eq!(jsons(&archive_entries(&archive, &r.session_id)), jsons(s.all_entries()), "{name}");
    }
}

/// A file whose last physical line lacks its '\n' — a header alone, or a
/// blank-looking line of JavaScript whitespace — takes an append and re-opens
/// with every entry (the append must not glue its line onto the last one).
#[test]
fn append_after_a_final_line_without_newline() {
    let dir = tempfile::tempdir().unwrap();
    let header = Header::new("nl", "2025-01-01T00:00:00.000Z", "/p", None, None).json;
    let a = message_entry("a1", None, "user", "one");
    let cases: Vec<(&str, String)> = vec![
        ("header-only", header.clone()),
        ("entry", format!("{header}\n{}", a.json())),
        ("spaces", format!("{header}\n{}\n   ", a.json())),
        ("nbsp", format!("{header}\n{}\n\u{a0}", a.json())),
        ("bom", format!("{header}\n{}\n\u{feff}", a.json())),
        ("vt", format!("{header}\n{}\n\u{b}", a.json())),
        ("cr", format!("{header}\n{}\r", a.json())),
    ];
    for (name, text) in cases {
        let p = dir.path().join(format!("{name}.jsonl"));
        std::fs::write(&p, &text).unwrap();
        let mut s =
            JsonlStorage::open(&p, Durability::Relaxed).unwrap_or_else(|e| panic!("{name}: {e}"));
        let before = s.all_entries().len();
        let b = message_entry("b2", None, "user", "two");
        s.append_entry(b.clone())
            .unwrap_or_else(|e| panic!("{name}: append: {e}"));
        let again = JsonlStorage::open(&p, Durability::Relaxed)
            .unwrap_or_else(|e| panic!("{name}: does not re-open after an append: {e}"));
        assert_eq!(again.all_entries().len(), before + 1, "{name}");
        assert_eq!(
            again.all_entries().last().unwrap().json(),
            b.json(),
            "{name}"
        );
    }
}

// ---------------------------------------------------------------------------
// The rpc protocol
// ---------------------------------------------------------------------------

/// Lends a storage to `rpc::serve` (which takes its session by value), so
/// that one store lives across many cases.
struct ByRef<'a, S>(&'a mut S);

impl<S: SessionStorage> SessionStorage for ByRef<'_, S> {
    fn metadata(&self) -> Result<SessionMetadata> {
        self.0.metadata()
    }
    fn stored_leaf_id(&self) -> Result<Option<String>> {
        self.0.stored_leaf_id()
    }
    fn append_entry(&mut self, entry: Entry) -> Result<()> {
        self.0.append_entry(entry)
    }
    fn append_entries(&mut self, entries: &[Entry]) -> Result<()> {
        self.0.append_entries(entries)
    }
    fn entry(&self, id: &str) -> Result<Option<Entry>> {
        self.0.entry(id)
    }
    fn find_entries(&self, entry_type: &str) -> Result<Vec<Entry>> {
        self.0.find_entries(entry_type)
    }
    fn label(&self, id: &str) -> Result<Option<sessiontree::json::JsString>> {
        self.0.label(id)
    }
    fn session_name(&self) -> Result<Option<sessiontree::json::JsString>> {
        self.0.session_name()
    }
    fn session_stats(&self) -> Result<SessionStats> {
        self.0.session_stats()
    }
    fn entries(&self, after: usize, limit: Option<usize>) -> Result<Vec<Entry>> {
        self.0.entries(after, limit)
    }
    fn entry_count(&self) -> Result<usize> {
        self.0.entry_count()
    }
    fn path_to_root_or_compaction(&self, id: Option<&str>) -> Result<Vec<Entry>> {
        self.0.path_to_root_or_compaction(id)
    }
    fn leaf_id(&self) -> Result<Option<String>> {
        self.0.leaf_id()
    }
    fn create_entry_id(&self) -> Result<String> {
        self.0.create_entry_id()
    }
    fn set_leaf_id(&mut self, id: Option<&str>) -> Result<()> {
        self.0.set_leaf_id(id)
    }
}

/// Serves `input`; checks every response is one contract answer per
/// non-blank line. Returns whether any request succeeded.
fn serve_checked<S: SessionStorage>(storage: &mut S, input: &[u8]) -> bool {
    let mut out = Vec::new();
    rpc::serve(
        Ok(Session::new(ByRef(storage))),
        Cursor::new(input),
        &mut out,
    )
    .expect("serving to memory does not fail");
    let expected = input
        .split(|&b| b == b'\n')
        .filter(|l| !sessiontree::json::js_trim(&String::from_utf8_lossy(l)).is_empty())
        .count();
    let text = String::from_utf8(out).expect("responses are UTF-8");
    assert!(text.is_empty() || text.ends_with('\n'));
    let responses: Vec<serde_json::Value> =
        text.lines().map(|l| parse_response(l.as_bytes())).collect();
    assert_eq!(responses.len(), expected, "one response per request line");
    let mut any_ok = false;
    for r in &responses {
        any_ok |= response_code(r).is_none();
    }
    any_ok
}

fn seed_entries() -> Vec<Entry> {
    let c = corpus();
    let mut out: Vec<Entry> =
        c.v3.iter()
            .take(40)
            .filter_map(|l| Entry::from_stored_line(l).ok())
            .collect();
    let mut seen = std::collections::HashSet::new();
    out.retain(|e| seen.insert(e.id().to_owned()));
    out
}

fn rpc_input(ids: Vec<String>) -> impl Strategy<Value = Vec<u8>> {
    (request_text(ids), damage(), ending(), any::<bool>()).prop_map(|(req, d, end, two)| {
        let d = if matches!(d, Damage::HugeString(n) if n > 100_000) {
            Damage::None
        } else {
            d
        };
        let mut v = apply(req.as_bytes(), &d);
        v.extend_from_slice(end);
        if two {
            // A second, valid read request on the same stream.
            v.extend_from_slice(b"\n{\"id\":2,\"method\":\"getLeafId\"}\n");
        }
        v
    })
}

/// The rpc protocol over a JSONL file: contract answers only; a refused
/// request leaves the file byte-identical, an accepted one only appends; the
/// file always re-opens to what the store holds.
#[test]
fn rpc_hostile_requests_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rpc.jsonl");
    let mut s = new_jsonl(&path, "rpc-jsonl", Durability::Relaxed);
    let seed = seed_entries();
    s.append_entries(&seed).unwrap();
    let ids: Vec<String> = seed
        .iter()
        .map(|e| e.id().to_owned())
        .chain(["missing".to_owned()])
        .collect();
    let store = RefCell::new(s);
    let mut runner = TestRunner::new(config());
    let result = runner.run(&rpc_input(ids), |input| {
        let mut s = store.borrow_mut();
        let before = std::fs::read(&path).unwrap();
        let any_ok = serve_checked(&mut *s, &input);
        let after = std::fs::read(&path).unwrap();
        if any_ok {
            prop_assert!(
                after.starts_with(&before),
                "an accepted request rewrote the file"
            );
        } else {
            prop_assert_eq!(&after, &before, "a refused request changed the file");
        }
        let again = JsonlStorage::open(&path, Durability::Relaxed);
        prop_assert!(
            again.is_ok(),
            "the file no longer opens: {:?}",
            again.err().map(|e| e.to_string())
        );
        prop_assert_eq!(jsons(again.unwrap().all_entries()), jsons(s.all_entries()));
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// The rpc protocol over an SQLite session: contract answers only; a refused
/// request leaves every table identical; `check` passes throughout.
#[test]
fn rpc_hostile_requests_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rpc.db");
    let archive = Archive::open(&db, Durability::Relaxed).unwrap();
    let seed = seed_entries();
    let new = sessiontree::backend::sqlite::NewSession::sdk(
        "rpc-sqlite",
        "2025-01-01T00:00:00.000Z",
        "/p",
    );
    archive
        .create_session_with(&new, seed.iter().cloned().map(Ok))
        .unwrap();
    let ids: Vec<String> = seed
        .iter()
        .map(|e| e.id().to_owned())
        .chain(["missing".to_owned()])
        .collect();
    let storage: SqliteStorage = archive.open_session("rpc-sqlite").unwrap();
    let store = RefCell::new(storage);
    let cases = AtomicUsize::new(0);
    let mut runner = TestRunner::new(config());
    let result = runner.run(&rpc_input(ids), |input| {
        let mut s = store.borrow_mut();
        let before = archive_dump(&db);
        let entries_before = jsons(&s.entries(0, None).unwrap());
        let any_ok = serve_checked(&mut *s, &input);
        let entries_after = jsons(&s.entries(0, None).unwrap());
        if any_ok {
            prop_assert!(
                entries_after.starts_with(&entries_before),
                "an accepted request rewrote the log"
            );
        } else {
            prop_assert_eq!(
                &archive_dump(&db),
                &before,
                "a refused request changed the archive"
            );
        }
        if cases.fetch_add(1, Ordering::Relaxed).is_multiple_of(16) {
            let problems = archive.check_consistency(None).unwrap();
            prop_assert!(problems.is_empty(), "{:?}", problems);
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(archive.check_consistency(None).unwrap().is_empty());
}

/// The real binary on a hostile stream: BOM, CR-only, invalid UTF-8, deep
/// nesting, a 20 MB line; one contract answer per line, then a clean exit.
#[test]
fn rpc_binary_hostile_stream() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bin.jsonl");
    drop(new_jsonl(&path, "bin", Durability::Relaxed));
    let deep = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
    let huge = "A".repeat(20 << 20);
    let mut input = Vec::new();
    input.extend_from_slice(b"\xef\xbb\xbf{\"id\":1,\"method\":\"getLeafId\"}\n");
    input.extend_from_slice(b"{\"id\":2,\"method\":\"getLeafId\"}\r{\"id\":3}\r\n");
    input.extend_from_slice(b"{\"id\":4,\"method\":\"appendMessage\",\"params\":{\"message\":{\"role\":\"user\",\"content\":\"\xff\xfe\"}}}\n");
    input.extend_from_slice(
        format!("{{\"id\":5,\"method\":\"appendMessage\",\"params\":{{\"message\":{deep}}}}}\n")
            .as_bytes(),
    );
    input.extend_from_slice(format!("{{\"id\":{deep},\"method\":\"getLeafId\"}}\n").as_bytes());
    input.extend_from_slice(format!("{{\"id\":6,\"method\":\"appendMessage\",\"params\":{{\"message\":{{\"role\":\"user\",\"content\":\"{huge}\"}}}}}}\n").as_bytes());
    input.extend_from_slice(b"{\"id\":7,\"method\":\"appendMessage\",\"params\":{\"message\":{\"role\":\"user\",\"content\":\"\\ud800\"}}}\n");
    input.extend_from_slice(b"{\"id\":8,\"method\":\"buildContext\"}\n");
    input.extend_from_slice(b"{\"id\":9,\"method\":\"getBranch\"}\n");
    input.extend_from_slice(b"\x00\x01\x02\n");
    input.extend_from_slice(b"{\"id\":10,\"method\":\"getEntries\",\"params\":{\"afterEntrySeq\":1e300,\"limit\":-0}}\n");
    let mut child = RpcChild::spawn([std::ffi::OsStr::new("rpc"), path.as_os_str()]);
    let writer = child.send_in_background(input);
    let responses = child.finish();
    writer.join().unwrap();
    assert_eq!(responses.len(), 11, "one answer per line");
    let codes: Vec<Option<String>> = responses.iter().map(response_code).collect();
    eprintln!("answers: {codes:?}");
    assert_eq!(
        codes[0].as_deref(),
        Some("unknown"),
        "a BOM makes the request unparsable"
    );
    assert_eq!(
        codes[2], None,
        "invalid UTF-8 reads as U+FFFD: {:?}",
        responses[2]
    );
    assert_eq!(codes[5], None, "a 20 MB message is stored");
    assert_eq!(codes[6], None, "a lone surrogate is stored");
    let s = JsonlStorage::open(&path, Durability::Relaxed).expect("reopens");
    let stored: Vec<&Entry> = s.all_entries().iter().collect();
    assert!(
        stored.iter().any(|e| e.json().contains(&huge)),
        "the 20 MB message is whole"
    );
    assert!(
        stored.iter().any(|e| e.json().contains("\\ud800")),
        "the lone surrogate is exact"
    );
}

// ---------------------------------------------------------------------------
// Huge entries: import and export with bounded memory
// ---------------------------------------------------------------------------

/// The peak resident set of this process (kB).
fn vm_hwm_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn vm_rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Not a test on its own: the child process of the huge-entry tests, which
/// re-run this binary with `HUGE_MODE` set so that each step's peak memory is
/// its own.
#[test]
#[ignore = "child process of huge_entry_* (runs only when HUGE_MODE is set)"]
fn huge_entry_child() {
    let Ok(mode) = std::env::var("HUGE_MODE") else {
        return;
    };
    let db = PathBuf::from(std::env::var("HUGE_DB").unwrap());
    let file = PathBuf::from(std::env::var("HUGE_FILE").unwrap());
    let base = vm_rss_kb();
    let archive = Archive::open(&db, Durability::Full).unwrap();
    let started = std::time::Instant::now();
    match mode.as_str() {
        "import" => {
            let r = import_jsonl(&archive, &file).expect("import");
            assert_eq!(r.entries, 2);
        }
        "export" => {
            let id = std::env::var("HUGE_ID").unwrap();
            let s = archive.open_session(&id).unwrap();
            let out = std::fs::File::create(&file).unwrap();
            let mut w = std::io::BufWriter::new(out);
            export_jsonl(&s, &mut w).expect("export");
        }
        other => panic!("unknown HUGE_MODE {other}"),
    }
    println!(
        "HUGE_RESULT base_kb={base} hwm_kb={} secs={:.2}",
        vm_hwm_kb(),
        started.elapsed().as_secs_f64()
    );
}

fn run_child(mode: &str, db: &Path, file: &Path, id: &str) -> (u64, u64, f64) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "huge_entry_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HUGE_MODE", mode)
        .env("HUGE_DB", db)
        .env("HUGE_FILE", file)
        .env("HUGE_ID", id)
        .output()
        .expect("run child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{mode} child failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.contains("HUGE_RESULT"))
        .unwrap_or_else(|| panic!("no result from the {mode} child: {stdout}"));
    let field = |name: &str| -> &str {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{name}=")))
            .unwrap()
    };
    (
        field("base_kb").parse().unwrap(),
        field("hwm_kb").parse().unwrap(),
        field("secs").parse().unwrap(),
    )
}

/// Files equal, compared in chunks (they are large).
fn same_bytes(a: &Path, b: &Path) -> bool {
    let (mut fa, mut fb) = (
        std::fs::File::open(a).unwrap(),
        std::fs::File::open(b).unwrap(),
    );
    if fa.metadata().unwrap().len() != fb.metadata().unwrap().len() {
        return false;
    }
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = fa.read(&mut ba).unwrap();
        if n == 0 {
            return true;
        }
        fb.read_exact(&mut bb[..n]).unwrap();
        if ba[..n] != bb[..n] {
            return false;
        }
    }
}

/// Peak memory allowed over the child's starting RSS: a multiple of the line
/// plus a fixed allowance (SQLite's page cache, buffers). Measured: import
/// 4.2x of a 100 MB line (the read buffer, the entry's text, SQLite's bound
/// copy and record, the parse for the search index), export 1.0x.
const MEMORY_FACTOR: u64 = 5;
const MEMORY_SLACK: u64 = 32 << 20;

fn huge_entry_round_trip(line_bytes: usize) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("huge.jsonl");
    let db = dir.path().join("huge.db");
    let out = dir.path().join("export.jsonl");
    let id = format!("huge-{line_bytes}");
    {
        // An inline base64 "image" in a user message, and one small entry after it.
        use std::io::Write;
        let header = Header::new(&id, "2025-01-01T00:00:00.000Z", "/p", None, None).json;
        let prefix = r#"{"type":"message","id":"img1","parentId":null,"timestamp":"2025-01-01T00:00:01.000Z","message":{"role":"user","content":[{"type":"text","text":"look"},{"type":"image","mimeType":"image/png","data":""#;
        let suffix = r#""}]}}"#;
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let data_len = line_bytes - prefix.len() - suffix.len();
        let mut w = std::io::BufWriter::new(std::fs::File::create(&src).unwrap());
        writeln!(w, "{header}").unwrap();
        w.write_all(prefix.as_bytes()).unwrap();
        let chunk: Vec<u8> = (0..1 << 16)
            .map(|i| alphabet[(i * 7 + i / 64) % 64])
            .collect();
        let mut left = data_len;
        while left > 0 {
            let n = left.min(chunk.len());
            w.write_all(&chunk[..n]).unwrap();
            left -= n;
        }
        w.write_all(suffix.as_bytes()).unwrap();
        w.write_all(b"\n").unwrap();
        writeln!(
            w,
            "{}",
            message_entry("after", Some("img1"), "assistant", "nice picture").json()
        )
        .unwrap();
        w.flush().unwrap();
    }
    let (base, hwm, secs) = run_child("import", &db, &src, &id);
    let import_peak = hwm.saturating_sub(base) * 1024;
    eprintln!(
        "import of a {} MB line: peak +{} MB over start ({:.2}x the line), {secs:.1} s",
        line_bytes >> 20,
        import_peak >> 20,
        import_peak as f64 / line_bytes as f64
    );
    let (base, hwm, secs) = run_child("export", &db, &out, &id);
    let export_peak = hwm.saturating_sub(base) * 1024;
    eprintln!(
        "export of a {} MB line: peak +{} MB over start ({:.2}x the line), {secs:.1} s",
        line_bytes >> 20,
        export_peak >> 20,
        export_peak as f64 / line_bytes as f64
    );
    assert!(
        same_bytes(&src, &out),
        "export is not byte-identical to the imported file"
    );
    assert!(
        import_peak <= MEMORY_FACTOR * line_bytes as u64 + MEMORY_SLACK,
        "import peak {import_peak} B exceeds {MEMORY_FACTOR}x the {line_bytes} B line"
    );
    assert!(
        export_peak <= MEMORY_FACTOR * line_bytes as u64 + MEMORY_SLACK,
        "export peak {export_peak} B exceeds {MEMORY_FACTOR}x the {line_bytes} B line"
    );
    let archive = Archive::open(&db, Durability::Relaxed).unwrap();
    assert!(archive.check(None).unwrap().is_empty());
}

#[test]
fn huge_entry_10mb_round_trip() {
    huge_entry_round_trip(10 << 20);
}

/// The full-size case of the issue (about 6 s and 0.5 GB in a debug build).
#[test]
fn huge_entry_100mb_round_trip() {
    huge_entry_round_trip(100 << 20);
}
