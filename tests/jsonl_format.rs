//! pi's JSONL format (spec §10–11): every bad-input case with its code, message
//! and line number, and the file untouched; the real pi files; exact round trips;
//! the progress that importing, exporting and checking report; many files
//! imported several to a transaction exactly as one at a time.

mod support;

use sessiontree::backend::jsonl::JsonlStorage;
use sessiontree::backend::sqlite::Archive;
use sessiontree::convert::{
    export_jsonl, export_to_file_with_progress, import_jsonl, import_jsonl_files,
    import_jsonl_with_progress, train_dictionary_for, ImportOutcome,
};
use sessiontree::{Durability, Entry, ErrorCode, Session, SessionStorage};
use std::path::{Path, PathBuf};

const HEADER: &str = r#"{"type":"session","version":3,"id":"s1","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/work"}"#;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/fixtures/pi-sessions")
        .join(name)
}

fn write(dir: &tempfile::TempDir, text: &[u8]) -> PathBuf {
    let p = dir.path().join("s.jsonl");
    std::fs::write(&p, text).expect("write");
    p
}

/// Opening `text` fails with `code` and exactly `message` (after the path), and the file is untouched.
fn refused(text: &str, code: ErrorCode, message: &str) {
    refused_by(text, code, message, |p| {
        JsonlStorage::open(p, Durability::Full)
    });
}

/// [`refused`] by the SDK contract's rules (pi-agent-core 0.83's checks),
/// and opened by the app's (pi 1.6 skips the line).
fn refused_as_sdk(text: &str, code: ErrorCode, message: &str) {
    refused_by(text, code, message, |p| {
        JsonlStorage::open_as(p, Durability::Full, sessiontree::Contract::Sdk)
    });
    let dir = tempfile::tempdir().expect("dir");
    let p = write(&dir, text.as_bytes());
    let s = JsonlStorage::open(&p, Durability::Full).expect("an app file opens as pi 1.6 opens it");
    assert!(
        s.skipped_lines()
            .iter()
            .any(|l| !matches!(l.why, sessiontree::backend::jsonl::SkipReason::Blank)),
        "{text:?}"
    );
}

fn refused_by(
    text: &str,
    code: ErrorCode,
    message: &str,
    open: impl Fn(&Path) -> sessiontree::Result<JsonlStorage>,
) {
    let dir = tempfile::tempdir().expect("dir");
    let p = write(&dir, text.as_bytes());
    let err = open(&p).expect_err(text);
    assert_eq!(err.code(), code, "{text:?}: {err}");
    assert_eq!(
        err.to_string(),
        format!("Invalid JSONL session file {}: {message}", p.display()),
        "{text:?}"
    );
    assert_eq!(
        std::fs::read(&p).expect("read"),
        text.as_bytes(),
        "a refused open changes nothing"
    );
}

fn entry_line(extra: &str) -> String {
    format!(
        r#"{{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{{"role":"user"}}{extra}}}"#
    )
}

#[test]
fn header_problems_are_invalid_session_in_pis_order() {
    use ErrorCode::InvalidSession as IS;
    refused("", IS, "missing session header");
    refused("\n  \n\t\n", IS, "missing session header");
    refused("not json\n", IS, "first line is not a valid session header");
    refused("[1,2]\n", IS, "first line is not a valid session header");
    refused("\u{feff}{\"type\":\"session\",\"version\":3,\"id\":\"s\",\"timestamp\":\"t\",\"cwd\":\"/\"}\n", IS, "first line is not a valid session header");
    refused(
        r#"{"type":"sessions","version":3}"#,
        IS,
        "first line is not a valid session header",
    );
    refused(
        r#"{"type":"session","version":4,"id":"s"}"#,
        IS,
        "unsupported session version",
    );
    refused(
        r#"{"type":"session","version":"3","id":"s"}"#,
        IS,
        "unsupported session version",
    );
    refused(
        r#"{"type":"session","version":3,"id":""}"#,
        IS,
        "session header is missing id",
    );
    refused(
        r#"{"type":"session","version":3,"id":7,"timestamp":"t"}"#,
        IS,
        "session header is missing id",
    );
    refused(
        r#"{"type":"session","version":3,"id":"s","cwd":"/"}"#,
        IS,
        "session header is missing timestamp",
    );
    refused(
        r#"{"type":"session","version":3,"id":"s","timestamp":"t","cwd":""}"#,
        IS,
        "session header is missing cwd",
    );
    refused(
        r#"{"type":"session","version":3,"id":"s","timestamp":"t","cwd":"/","parentSession":1}"#,
        IS,
        "session header parentSession must be a string",
    );
    refused(
        r#"{"type":"session","version":3,"id":"s","timestamp":"t","cwd":"/","metadata":[]}"#,
        IS,
        "session header metadata must be an object",
    );
    refused(
        r#"{"type":"session","version":3,"id":"s","timestamp":"t","cwd":"/","metadata":null}"#,
        IS,
        "session header metadata must be an object",
    );
}

#[test]
fn entry_problems_are_invalid_entry_naming_the_non_blank_line() {
    use ErrorCode::InvalidEntry as IE;
    let with = |line: &str| {
        format!(
            "{HEADER}\n\n{}\n   \n{line}\n{}\n",
            entry_line(""),
            entry_line("")
        )
    };
    refused_as_sdk(&with("{oops"), IE, "line 3 is not valid JSON");
    refused_as_sdk(&with("42"), IE, "line 3 is not a valid session entry");
    refused_as_sdk(&with("null"), IE, "line 3 is not a valid session entry");
    refused_as_sdk(&with("[]"), IE, "line 3 is missing entry type");
    refused_as_sdk(
        &with(r#"{"id":"b","parentId":null,"timestamp":"t"}"#),
        IE,
        "line 3 is missing entry type",
    );
    refused_as_sdk(
        &with(r#"{"type":5,"id":"b","parentId":null,"timestamp":"t"}"#),
        IE,
        "line 3 is missing entry type",
    );
    refused_as_sdk(
        &with(r#"{"type":"x","id":"","parentId":null,"timestamp":"t"}"#),
        IE,
        "line 3 is missing entry id",
    );
    refused_as_sdk(
        &with(r#"{"type":"x","id":1,"parentId":null,"timestamp":"t"}"#),
        IE,
        "line 3 is missing entry id",
    );
    refused_as_sdk(
        &with(r#"{"type":"x","id":"b","timestamp":"t"}"#),
        IE,
        "line 3 has invalid parentId",
    );
    refused_as_sdk(
        &with(r#"{"type":"x","id":"b","parentId":false,"timestamp":"t"}"#),
        IE,
        "line 3 has invalid parentId",
    );
    refused_as_sdk(
        &with(r#"{"type":"x","id":"b","parentId":null,"timestamp":""}"#),
        IE,
        "line 3 is missing timestamp",
    );
    refused_as_sdk(
        &with(r#"{"type":"leaf","id":"b","parentId":null,"timestamp":"t"}"#),
        IE,
        "line 3 has invalid targetId",
    );
    refused_as_sdk(
        &with(r#"{"type":"leaf","id":"b","parentId":null,"timestamp":"t","targetId":[]}"#),
        IE,
        "line 3 has invalid targetId",
    );
}

#[test]
fn lenient_inputs_open_like_pi() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // Blank lines anywhere (even before the header), CRLF endings, an empty-string
    // parent, dangling parents and leaf targets, and invalid UTF-8 all open.
    let mut text = format!("\n \n{HEADER}\r\n").into_bytes();
    text.extend_from_slice(br#"{"type":"message","id":"a","parentId":"","timestamp":"t","message":{"role":"user","content":"caf"#);
    text.extend_from_slice(&[0xff, 0xfe]);
    text.extend_from_slice(b"\"}}\r\n\r\n");
    text.extend_from_slice(br#"{"type":"message","id":"b","parentId":"nowhere","timestamp":"t","message":{"role":"user"}}"#);
    text.extend_from_slice(b"\n");
    let p = write(&dir, &text);
    let s = JsonlStorage::open(&p, Durability::Full)?;
    assert_eq!(s.entry_count()?, 2);
    assert!(s
        .entry("a")?
        .expect("a")
        .json()
        .contains("caf\u{fffd}\u{fffd}"));
    assert_eq!(s.path_to_root_or_compaction(Some("a"))?.len(), 1);
    assert_eq!(
        s.path_to_root_or_compaction(Some("b"))
            .expect_err("dangling")
            .code(),
        ErrorCode::InvalidSession
    );
    Ok(())
}

#[test]
fn refused_api_appends_leave_the_file_unchanged() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let p = write(&dir, format!("{HEADER}\n{}\n", entry_line("")).as_bytes());
    let before = std::fs::read(&p)?;
    for bad in [
        "{",
        "[]",
        r#"{"type":"x","id":"b","timestamp":"t"}"#,
        r#"{"type":"leaf","id":"c","parentId":null,"timestamp":"t","targetId":1}"#,
    ] {
        assert_eq!(
            Entry::from_json(bad).expect_err(bad).code(),
            ErrorCode::InvalidEntry
        );
    }
    let mut s = JsonlStorage::open(&p, Durability::Full)?;
    assert_eq!(
        s.set_leaf_id(Some("ghost")).expect_err("unknown").code(),
        ErrorCode::NotFound
    );
    let mut session = Session::new(s);
    assert_eq!(
        session
            .append_label("ghost", Some("x"))
            .expect_err("unknown")
            .code(),
        ErrorCode::NotFound
    );
    assert_eq!(std::fs::read(&p)?, before);
    Ok(())
}

#[test]
fn torn_last_line_is_left_out_reported_and_cut_before_the_next_append(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let good = format!("{HEADER}\n{}\n", entry_line(""));
    let p = write(&dir, format!("{good}{{\"type\":\"mess").as_bytes());
    let mut s = JsonlStorage::open(&p, Durability::Full)?;
    let torn = s.torn_tail().cloned().expect("torn tail reported");
    assert_eq!((torn.line, torn.offset), (3, good.len() as u64));
    assert_eq!(s.entry_count()?, 1);
    s.append_entry(Entry::from_json(
        r#"{"type":"message","id":"b","parentId":"a","timestamp":"t","message":{"role":"user"}}"#,
    )?)?;
    drop(s);
    let text = std::fs::read_to_string(&p)?;
    assert_eq!(text, format!("{good}{{\"type\":\"message\",\"id\":\"b\",\"parentId\":\"a\",\"timestamp\":\"t\",\"message\":{{\"role\":\"user\"}}}}\n"));
    // A torn line that is not last is corruption, not a crash artefact.
    let p2 = dir.path().join("mid.jsonl");
    std::fs::write(
        &p2,
        format!("{HEADER}\n{{\"type\":\"mess\n{}\n", entry_line("")),
    )?;
    assert_eq!(
        JsonlStorage::open_as(&p2, Durability::Full, sessiontree::Contract::Sdk)
            .expect_err("corrupt")
            .code(),
        ErrorCode::InvalidEntry
    );
    // pi 1.6 skips it (an app file): opened without it.
    assert_eq!(JsonlStorage::open(&p2, Durability::Full)?.entry_count()?, 1);
    // A complete last line without its newline is kept, and the next append adds the newline first.
    let p3 = dir.path().join("nonl.jsonl");
    std::fs::write(&p3, format!("{HEADER}\n{}", entry_line("")))?;
    let mut s = JsonlStorage::open(&p3, Durability::Full)?;
    assert!(s.torn_tail().is_none());
    s.set_leaf_id(None)?;
    drop(s);
    assert_eq!(JsonlStorage::open(&p3, Durability::Full)?.entry_count()?, 2);
    Ok(())
}

#[test]
fn real_pi_version_1_files_open_upgraded_and_read_only() -> Result<(), Box<dyn std::error::Error>> {
    for (name, entries) in [
        ("before-compaction.jsonl", 1002),
        ("large-session.jsonl", 1018),
    ] {
        let path = fixture(name);
        let before = std::fs::read(&path)?;
        let mut s = JsonlStorage::open(&path, Durability::Full)?;
        assert_eq!(s.header().version, 1);
        assert_eq!(s.entry_count()?, entries, "{name}");
        let all = s.entries(0, None)?;
        assert_eq!(all[0].id(), "v1-00001");
        assert_eq!(all[0].parent_id(), None);
        assert_eq!(all[1].parent_id(), Some("v1-00001"));
        let leaf = s.leaf_id()?.expect("leaf");
        assert_eq!(leaf, all.last().expect("entries").id());
        let branch = s.path_to_root_or_compaction(Some(&leaf))?;
        assert!(!branch.is_empty());
        assert_eq!(
            s.set_leaf_id(None).expect_err("read-only").code(),
            ErrorCode::InvalidSession
        );
        assert_eq!(
            std::fs::read(&path)?,
            before,
            "the fixture is never written"
        );
    }
    // firstKeptEntryIndex 293 / 551 (line indexes, header = 0) became ids.
    let s = JsonlStorage::open(fixture("before-compaction.jsonl"), Durability::Full)?;
    let compactions = s.find_entries("compaction")?;
    let kept: Vec<_> = compactions
        .iter()
        .map(|c| c.facts().first_kept_entry_id.clone())
        .collect();
    assert_eq!(
        kept,
        [Some("v1-00293".to_owned()), Some("v1-00551".to_owned())]
    );
    assert!(compactions
        .iter()
        .all(|c| !c.json().contains("firstKeptEntryIndex")));
    let leaf = s.leaf_id()?.expect("leaf");
    let branch = s.path_to_root_or_compaction(Some(&leaf))?;
    assert_eq!(
        branch[0].id(),
        "v1-00551",
        "the walk stops at the last compaction's first kept entry"
    );
    Ok(())
}

#[test]
fn version_2_hook_messages_become_custom() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let p = write(
        &dir,
        br#"{"type":"session","version":2,"id":"s","timestamp":"t","cwd":"/"}
{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"hookMessage","customType":"x","content":"hi"}}
{"type":"message","id":"b","parentId":"a","timestamp":"t","message":{"role":"hook\u004dessage","content":"escaped, as JSON.parse reads it"}}
{"type":"message","id":"c","parentId":"b","timestamp":"t","message":{"role":"user","content":"about hookMessage"}}
"#,
    );
    let s = JsonlStorage::open(&p, Durability::Full)?;
    assert_eq!(s.header().version, 2);
    assert_eq!(
        s.entry("a")?.expect("a").json(),
        r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"custom","customType":"x","content":"hi"}}"#
    );
    assert_eq!(
        s.entry("b")?.expect("b").json(),
        r#"{"type":"message","id":"b","parentId":"a","timestamp":"t","message":{"role":"custom","content":"escaped, as JSON.parse reads it"}}"#
    );
    assert_eq!(
        s.entry("c")?.expect("c").json(),
        r#"{"type":"message","id":"c","parentId":"b","timestamp":"t","message":{"role":"user","content":"about hookMessage"}}"#
    );
    Ok(())
}

#[test]
fn version_3_files_reexport_byte_for_byte() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let text = format!(
        "{}\n{}\n{}\n{}\n",
        r#"{"type":"session","version":3,"id":"s9","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/w","metadata":{"z":1,"a":[1.0]}}"#,
        r#"{"type":"message","id":"a","parentId":null,"timestamp":"t","message":{"role":"user","content":"\ud83d x 1.50"},"extra":1e2}"#,
        r#"{"type":"leaf","id":"l","parentId":"a","timestamp":"t","targetId":null}"#,
        r#"{"type":"message","id":"b","parentId":null,"timestamp":"t","message":{"role":"assistant","content":[]}}"#,
    );
    let p = write(&dir, text.as_bytes());
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let report = import_jsonl(&archive, &p)?;
    let mut out = Vec::new();
    export_jsonl(&archive.open_session(&report.session_id)?, &mut out)?;
    assert_eq!(String::from_utf8(out)?, text);
    // The JSONL backend's own view is exact too.
    let s = JsonlStorage::open(&p, Durability::Full)?;
    let mut again = format!("{}\n", s.header().json);
    for e in s.all_entries() {
        again.push_str(e.json());
        again.push('\n');
    }
    assert_eq!(again, text);
    Ok(())
}

#[test]
fn a_bad_line_is_kept_verbatim_and_the_rest_imports() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let text = format!("{HEADER}\n{}\nbroken\n{}\n", entry_line(""), entry_line(""));
    let p = write(&dir, text.as_bytes());
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let report = import_jsonl(&archive, &p)?;
    let kept: Vec<(u64, String)> = report
        .report
        .kept
        .iter()
        .map(|k| (k.line, k.why.describe()))
        .collect();
    assert_eq!(kept[0], (3, "pi skips it: not valid JSON".to_owned()));
    assert_eq!(
        kept[1].0, 4,
        "the repeated id a: the archive keeps the first"
    );
    assert_eq!(report.entries, 1);
    let mut out = Vec::new();
    export_jsonl(&archive.open_session(&report.session_id)?, &mut out)?;
    assert_eq!(String::from_utf8(out)?, text, "byte-identical");
    Ok(())
}

/// A generated linear session file of about `mb` MB in `dir`: its path and id.
fn generated_session(dir: &Path, mb: usize) -> (PathBuf, String) {
    let report = sessiontree_bench::gen::generate(
        dir,
        &sessiontree_bench::gen::GenOptions {
            shape: sessiontree_bench::gen::Shape::Linear,
            entries: mb * 1_000_000 / 900,
            seed: 11,
            ..Default::default()
        },
    )
    .expect("generate");
    let s = &report.sessions[0];
    (s.path.clone(), s.id.clone())
}

/// Where the first line that ends past the middle of `text` ends (after its
/// `\n`): a cut that leaves whole lines on both sides.
fn first_line_end_past_half(text: &[u8]) -> usize {
    let half = text.len() / 2;
    half + text[half..]
        .iter()
        .position(|&b| b == b'\n')
        .expect("a line end")
        + 1
}

/// Imports `path` and returns what progress heard, checking it only ever grew.
fn import_hearing(archive: &Archive, path: &Path) -> (sessiontree::convert::FileImport, Vec<u64>) {
    let mut heard = Vec::new();
    let r = import_jsonl_with_progress(archive, path, &mut |at| heard.push(at)).expect("import");
    assert!(
        heard.windows(2).all(|w| w[0] < w[1]),
        "progress went back or repeated: {heard:?}"
    );
    (r, heard)
}

#[test]
fn import_reports_bytes_read_as_it_goes() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let (full, _) = generated_session(&dir.path().join("gen"), 4);
    let text = std::fs::read(&full)?;
    let size = text.len() as u64;
    assert!(size > 3_000_000, "a multi-MB file: {size} bytes");

    // A new file: heard several times on the way, last at its size.
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let (r, heard) = import_hearing(&archive, &full);
    assert!(heard.len() > 2, "heard only {heard:?} for {size} bytes");
    assert_eq!(heard.last(), Some(&size));
    assert_eq!(r.bytes_read, size);

    // Unchanged: nothing read, nothing heard.
    let (r, heard) = import_hearing(&archive, &full);
    assert_eq!(r.outcome, ImportOutcome::Unchanged);
    assert_eq!(heard, Vec::<u64>::new());

    // Appended to: the prefix hashed, then the new lines read, to the file's size.
    let cut = first_line_end_past_half(&text);
    let file = dir.path().join("grows.jsonl");
    std::fs::write(&file, &text[..cut])?;
    let archive = Archive::open(dir.path().join("b.db"), Durability::Relaxed)?;
    let (_, heard) = import_hearing(&archive, &file);
    assert_eq!(heard.last(), Some(&(cut as u64)));
    std::fs::write(&file, &text)?;
    let (r, heard) = import_hearing(&archive, &file);
    assert_eq!(r.outcome, ImportOutcome::Appended);
    assert_eq!(r.bytes_read, size - cut as u64);
    assert!(heard.len() > 2, "heard only {heard:?}");
    assert!(
        heard.iter().any(|&at| at > cut as u64),
        "the new lines: {heard:?}"
    );
    assert_eq!(heard.last(), Some(&size));
    Ok(())
}

#[test]
fn export_and_check_report_progress() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let (file, id) = generated_session(&dir.path().join("gen"), 1);
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    import_jsonl(&archive, &file)?;
    let storage = archive.open_session(&id)?;
    let entries = storage.entry_count()? as u64;

    let mut heard = Vec::new();
    let out = dir.path().join("out.jsonl");
    export_to_file_with_progress(&storage, &out, false, &mut |n| heard.push(n))?;
    assert!(
        heard.len() > 1,
        "heard only {heard:?} for {entries} entries"
    );
    assert!(heard.windows(2).all(|w| w[0] < w[1]), "{heard:?}");
    assert_eq!(heard.last(), Some(&entries));
    assert_eq!(std::fs::read(&out)?, std::fs::read(&file)?);

    let mut heard = Vec::new();
    let problems =
        archive.check_with_progress(None, &mut |done, total| heard.push((done, total)))?;
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(heard, [(0, 1), (1, 1)]);
    Ok(())
}

/// A session written in the archive since its import: once export has
/// caught the file up, it imports as unchanged; when pi appends to the file
/// and the archive moves on too, import merges pi's entries by id.
#[test]
fn import_merges_pi_lines_into_a_session_written_since() -> Result<(), Box<dyn std::error::Error>> {
    use sessiontree::convert::{export_to_file, ExportOutcome};
    use sessiontree::JsonText;
    use std::io::Write;
    let dir = tempfile::tempdir()?;
    let (generated, id) = generated_session(&dir.path().join("gen"), 1);
    let file = dir.path().join("pi.jsonl");
    std::fs::copy(&generated, &file)?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    import_jsonl(&archive, &file)?;
    let user = |text: &str| {
        JsonText::parse(&format!(
            r#"{{"role":"user","content":"{text}","timestamp":1}}"#
        ))
    };

    // Written in the archive; export appends the new entry to pi's file
    // (a prefix of the session), and import then has nothing to do.
    let mut session = Session::new(archive.open_session(&id)?);
    session.append_message(&user("in the archive")?)?;
    assert!(matches!(
        export_to_file(session.storage(), &file, false)?,
        ExportOutcome::Appended { .. }
    ));
    drop(session);
    assert_eq!(
        import_jsonl(&archive, &file)?.outcome,
        ImportOutcome::Unchanged
    );
    assert_eq!(
        import_jsonl(&archive, &file)?.outcome,
        ImportOutcome::Unchanged
    );

    // pi appends to the file, the archive moves on too: refused, nothing mixed in.
    let mut session = Session::new(archive.open_session(&id)?);
    let leaf = session.storage().leaf_id()?;
    session.append_message(&user("archive again")?)?;
    drop(session);
    let line = format!(
        "{{\"type\":\"message\",\"id\":\"pi-later\",\"parentId\":{},\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{}}}\n",
        leaf.map_or("null".to_owned(), |l| format!("\"{l}\"")),
        user("from pi")?.as_str()
    );
    std::fs::OpenOptions::new()
        .append(true)
        .open(&file)?
        .write_all(line.as_bytes())?;
    let before = archive.open_session(&id)?.entry_count()?;
    let merged = import_jsonl(&archive, &file)?;
    assert_eq!(
        (merged.outcome, merged.entries),
        (ImportOutcome::Appended, 1)
    );
    let storage = archive.open_session(&id)?;
    assert_eq!(storage.entry_count()?, before + 1);
    assert!(storage.contains_entry("pi-later")?);
    drop(storage);
    assert_eq!(
        import_jsonl(&archive, &file)?.outcome,
        ImportOutcome::Unchanged
    );

    // A session pi alone writes keeps importing its appends.
    let other = dir.path().join("other.jsonl");
    std::fs::copy(&generated, &other)?;
    let archive2 = Archive::open(dir.path().join("b.db"), Durability::Relaxed)?;
    import_jsonl(&archive2, &other)?;
    let root = format!(
        "{{\"type\":\"message\",\"id\":\"pi-alone\",\"parentId\":null,\"timestamp\":\"2026-01-01T00:00:00.000Z\",\"message\":{}}}\n",
        user("from pi")?.as_str()
    );
    std::fs::OpenOptions::new()
        .append(true)
        .open(&other)?
        .write_all(root.as_bytes())?;
    let r = import_jsonl(&archive2, &other);
    assert!(
        matches!(&r, Ok(f) if f.outcome == ImportOutcome::Appended),
        "{:?}",
        r.map(|f| f.outcome)
    );
    assert!(archive2.open_session(&id)?.contains_entry("pi-alone")?);
    Ok(())
}

/// Import records written before the prefix hash became [`WideFnv`]-tagged
/// (a bare FNV-1a 64 in hex) still recognise their file: unchanged, then
/// appended to (and the record then takes the new form), while a changed
/// prefix is merged by entry id.
#[test]
fn an_import_record_of_the_bytewise_hash_still_recognises_its_file(
) -> Result<(), Box<dyn std::error::Error>> {
    fn fnv1a(bytes: &[u8]) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        format!("{h:016x}")
    }
    let dir = tempfile::tempdir()?;
    let (full, _) = generated_session(&dir.path().join("gen"), 1);
    let text = std::fs::read(&full)?;
    let cut = first_line_end_past_half(&text);
    let file = dir.path().join("grows.jsonl");
    std::fs::write(&file, &text[..cut])?;
    let db = dir.path().join("a.db");
    let archive = Archive::open(&db, Durability::Relaxed)?;
    import_jsonl(&archive, &file)?;
    let stored = |db: &Path| -> String {
        rusqlite::Connection::open(db)
            .and_then(|c| c.query_row("SELECT prefix_hash FROM imports", [], |r| r.get(0)))
            .expect("the import record")
    };
    assert!(stored(&db).starts_with("fnv4:"), "{}", stored(&db));
    // As an archive imported by an older build holds it (size and mtime
    // forgotten, so the prefix is hashed again).
    let legacy = |db: &Path, hash: &str| {
        rusqlite::Connection::open(db)
            .and_then(|c| {
                c.execute(
                    "UPDATE imports SET prefix_hash = ?1, file_mtime = 0",
                    [hash],
                )
            })
            .expect("rewriting the import record");
    };
    legacy(&db, &fnv1a(&text[..cut]));
    assert_eq!(
        import_jsonl(&archive, &file)?.outcome,
        ImportOutcome::Unchanged
    );
    legacy(&db, &fnv1a(&text[..cut]));
    std::fs::write(&file, &text)?;
    let r = import_jsonl(&archive, &file)?;
    assert_eq!(r.outcome, ImportOutcome::Appended);
    assert_eq!(r.bytes_read, (text.len() - cut) as u64);
    assert!(stored(&db).starts_with("fnv4:"), "{}", stored(&db));
    // A legacy record whose prefix no longer matches is a changed file:
    // merged by entry id, which finds nothing new in it.
    legacy(&db, &fnv1a(b"something else"));
    std::fs::write(&file, [&text[..], b"\n"].concat())?;
    let merged = import_jsonl(&archive, &file)?;
    assert_eq!(
        (merged.outcome, merged.entries),
        (ImportOutcome::Unchanged, 0)
    );
    Ok(())
}

/// What an archive holds as its users see it, whatever order its rows were
/// written in: every session's summary and exported file, and what a few
/// searches find.
fn archive_view(archive: &Archive) -> Result<Vec<String>, Box<dyn std::error::Error>> {
    let mut sessions = archive.list(&Default::default())?;
    sessions.sort_by(|a, b| a.metadata.id.cmp(&b.metadata.id));
    let mut view = Vec::new();
    for summary in &sessions {
        view.push(format!("{summary:?}"));
        let mut exported = Vec::new();
        export_jsonl(&archive.open_session(&summary.metadata.id)?, &mut exported)?;
        view.push(String::from_utf8(exported)?);
    }
    for word in ["the", "error", "test", "file*"] {
        let mut hits: Vec<String> = archive
            .search(word, None, None, None, 100_000)?
            .into_iter()
            .map(|h| format!("{word}: {} {} {}", h.session_id, h.entry_id, h.snippet))
            .collect();
        hits.sort();
        view.extend(hits);
    }
    Ok(view)
}

/// Imports `paths` with `import_jsonl_files` into one archive and one at a
/// time with `import_jsonl` into another (both with the dictionary trained
/// from all of them first): the outcomes must match file for file, and the
/// archives must hold the same. Returns the outcomes.
fn grouped_like_one_at_a_time(
    dir: &Path,
    paths: &[PathBuf],
) -> Result<Vec<Result<ImportOutcome, ErrorCode>>, Box<dyn std::error::Error>> {
    let grouped_db = dir.join("grouped.db");
    let grouped = Archive::open(&grouped_db, Durability::Full)?;
    let mut heard: Vec<Vec<u64>> = vec![Vec::new(); paths.len()];
    let results = import_jsonl_files(&grouped, paths, &mut |i, at| heard[i].push(at))?;
    let single_db = dir.join("single.db");
    let single = Archive::open(&single_db, Durability::Full)?;
    train_dictionary_for(&single, paths)?;
    let outcome = |r: &sessiontree::Result<sessiontree::convert::FileImport>| {
        r.as_ref().map(|f| f.outcome.clone()).map_err(|e| e.code())
    };
    let mut outcomes = Vec::new();
    for (i, path) in paths.iter().enumerate() {
        let alone = import_jsonl(&single, path);
        assert_eq!(outcome(&results[i]), outcome(&alone), "{}", path.display());
        if let (Err(a), Err(b)) = (&results[i], &alone) {
            assert_eq!(
                a.to_string(),
                b.to_string(),
                "the same error, naming file and line"
            );
        }
        if let Ok(r) = &results[i] {
            if r.outcome == ImportOutcome::Imported {
                // A file of a group that was rolled back is read again.
                let size = std::fs::metadata(path)?.len();
                assert!(heard[i].iter().all(|&at| at <= size), "{:?}", heard[i]);
                assert_eq!(heard[i].last().copied(), Some(size));
            }
        }
        outcomes.push(outcome(&results[i]));
    }
    assert_eq!(archive_view(&grouped)?, archive_view(&single)?);
    drop((grouped, single));
    support::assert_archive_ok(&grouped_db);
    // Imported again, every file that landed is unchanged.
    let grouped = Archive::open(&grouped_db, Durability::Full)?;
    for (r, again) in results
        .iter()
        .zip(import_jsonl_files(&grouped, paths, &mut |_, _| {})?)
    {
        if r.is_ok() {
            assert!(
                matches!(
                    again.as_ref().map(|a| &a.outcome),
                    Ok(ImportOutcome::Unchanged | ImportOutcome::AlreadyPresent)
                ),
                "{again:?}"
            );
        }
    }
    Ok(outcomes)
}

/// The files of a generated archive of `sessions` sessions (compacted now
/// and then) under `dir/sessions`, in pi's layout.
fn generated_archive(dir: &Path, entries: usize, sessions: usize, seed: u64) -> Vec<PathBuf> {
    let report = sessiontree_bench::gen::generate(
        &dir.join("sessions"),
        &sessiontree_bench::gen::GenOptions {
            shape: sessiontree_bench::gen::Shape::Archive,
            entries,
            sessions: Some(sessions),
            compaction_every: 40,
            seed,
            ..Default::default()
        },
    )
    .expect("generate");
    report.sessions.iter().map(|s| s.path.clone()).collect()
}

#[test]
fn many_small_files_import_several_to_a_transaction_exactly_as_one_at_a_time(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // ~5.4 MB in 60 files: more than one group of files.
    let paths = generated_archive(dir.path(), 6_000, 60, 23);
    let outcomes = grouped_like_one_at_a_time(dir.path(), &paths)?;
    assert!(outcomes.iter().all(|o| *o == Ok(ImportOutcome::Imported)));
    Ok(())
}

#[test]
fn a_bad_file_or_a_session_met_twice_among_many_fails_alone(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let mut paths = generated_archive(dir.path(), 600, 12, 29);
    // The fourth file's first JSON line is no header (a bad line in the
    // middle imports, kept verbatim, as pi 1.6 opens it).
    let text = std::fs::read(&paths[3])?;
    std::fs::write(&paths[3], [&b"{\"hello\":1}\n"[..], &text[..]].concat())?;
    // The second file's session under another name, and the first file named twice.
    let copy = dir.path().join("sessions/copy.jsonl");
    std::fs::copy(&paths[1], &copy)?;
    paths.insert(6, copy);
    paths.push(paths[0].clone());
    let outcomes = grouped_like_one_at_a_time(dir.path(), &paths)?;
    assert_eq!(outcomes[3], Err(ErrorCode::InvalidSession));
    assert_eq!(outcomes[6], Ok(ImportOutcome::AlreadyPresent));
    assert_eq!(outcomes.last(), Some(&Ok(ImportOutcome::Unchanged)));
    let imported = outcomes
        .iter()
        .filter(|o| **o == Ok(ImportOutcome::Imported))
        .count();
    assert_eq!(imported, 11);
    Ok(())
}

#[test]
fn of_two_files_holding_one_session_the_first_named_is_imported_whatever_its_size(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    // Over a group's 4 MB, so imported alone, after the groups.
    let (big, _) = generated_session(dir.path(), 5);
    let text = std::fs::read(&big)?;
    let small = dir.path().join("older-copy.jsonl");
    std::fs::write(
        &small,
        &text[..first_line_end_past_half(&text[..text.len() / 8])],
    )?;
    let mut paths = generated_archive(dir.path(), 300, 6, 37);
    paths.insert(1, big);
    paths.push(small);
    let outcomes = grouped_like_one_at_a_time(dir.path(), &paths)?;
    assert_eq!(outcomes[1], Ok(ImportOutcome::Imported));
    assert_eq!(outcomes.last(), Some(&Ok(ImportOutcome::AlreadyPresent)));
    Ok(())
}

#[test]
fn a_file_named_twice_is_imported_once_even_when_appended_to(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let paths = generated_archive(dir.path(), 300, 6, 41);
    let whole = std::fs::read(&paths[0])?;
    std::fs::write(&paths[0], &whole[..first_line_end_past_half(&whole)])?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Full)?;
    for r in import_jsonl_files(&archive, &paths, &mut |_, _| {})? {
        assert_eq!(r?.outcome, ImportOutcome::Imported);
    }
    std::fs::write(&paths[0], &whole)?;
    let twice = [paths[0].clone(), paths[0].clone(), paths[1].clone()];
    let outcomes: Vec<ImportOutcome> = import_jsonl_files(&archive, &twice, &mut |_, _| {})?
        .into_iter()
        .map(|r| r.map(|f| f.outcome))
        .collect::<Result<_, _>>()?;
    assert_eq!(
        outcomes,
        [
            ImportOutcome::Appended,
            ImportOutcome::Unchanged,
            ImportOutcome::Unchanged
        ]
    );
    let mut exported = Vec::new();
    let id = sessiontree::backend::jsonl::read_header(&paths[0])?.id;
    export_jsonl(&archive.open_session(&id)?, &mut exported)?;
    assert!(exported == whole, "the session is the whole file");
    Ok(())
}
