//! Input that breaks naive code paths, through the command line: JSON nested
//! past a parser's recursion limit, parent cycles and self-parents.

use super::*;

const HEADER: &str = r#"{"type":"session","version":3,"id":"01950000-dddd-7000-8000-000000000001","timestamp":"2025-03-01T10:00:00.000Z","cwd":"/home/ada/deep"}"#;

/// A message whose content nests `depth` arrays deep.
fn deep_message(depth: usize) -> String {
    format!(
        r#"{{"role":"user","content":{}"deep"{},"timestamp":1}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

/// `context` passes stored message text through: a message nested 300 levels
/// deep (past serde_json's limit of 128) comes out exactly as stored in
/// `--json`, and the text form still shows its role, exit 0.
#[test]
fn context_passes_deeply_nested_messages_through_exactly() {
    let sb = Sandbox::new();
    let message = deep_message(300);
    let entry = format!(
        r#"{{"type":"message","id":"u0000001","parentId":null,"timestamp":"2025-03-01T10:00:01.000Z","message":{message}}}"#
    );
    let file = sb.write("pi/deep.jsonl", &format!("{HEADER}\n{entry}\n"));
    for source in [s(&file).to_owned(), {
        sb.import(&[&file]);
        "01950000-dddd".to_owned()
    }] {
        let r = sb.run(&["--json", "context", &source]);
        assert_eq!(r.status, 0, "{r:#?}");
        assert!(
            r.stdout.contains(&format!(r#""messages":[{message}]"#)),
            "{source}: the message is not passed through: {}",
            &r.stdout[..r.stdout.len().min(300)]
        );
        let text = sb.run(&["context", &source]);
        assert_eq!(text.status, 0, "{text:#?}");
        assert!(text.ok().contains("user: "), "{}", text.ok());
    }
}

/// An archive whose `PRAGMA integrity_check` fails refuses every write with a
/// clear `storage` error once `check` has found it (the damage marker), and
/// takes writes again after it is restored and checked.
#[test]
fn a_damaged_archive_refuses_writes_until_restored() {
    let sb = Sandbox::new();
    let f = small_session(
        "01950000-dddd-7000-8000-000000000002",
        "/home/ada/damage",
        "2025-03-01T10:00:00.000Z",
        "damage",
        Some("before"),
    );
    let src = f.save(&sb, "pi");
    sb.import(&[&src]);
    let db = sb.default_db();
    // Fold the WAL into the file and keep a copy: the backup to restore.
    let index_page = {
        let conn = rusqlite::Connection::open(&db).expect("open");
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .expect("checkpoint");
        let page_size: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .expect("page size");
        let root: i64 = conn
            .query_row(
                "SELECT rootpage FROM sqlite_schema WHERE name = 'entries_by_type'",
                [],
                |r| r.get(0),
            )
            .expect("index root page");
        (root - 1) * page_size
    };
    let backup = sb.path("backup.db");
    std::fs::copy(&db, &backup).expect("backup");
    // Damage one index page: its b-tree page type becomes invalid.
    let mut bytes = std::fs::read(&db).expect("read");
    bytes[index_page as usize] = 0;
    std::fs::write(&db, &bytes).expect("damage");

    let r = sb.run(&["--json", "check"]);
    assert_eq!(r.status, 8, "{r:#?}");
    let marker = db.with_file_name("archive.db.damaged");
    assert!(marker.is_file(), "check leaves the damage marker");
    let id = "01950000-dddd";
    for args in [
        vec!["name", id, "after"],
        vec!["label", id, "u0000001", "x"],
    ] {
        let w = sb.run(&args);
        let msg = w.fails(7, "storage");
        assert!(
            msg.contains("integrity_check") && msg.contains("archive.db.damaged"),
            "{args:?}: {msg}"
        );
    }
    // `delete` reports each session it could not delete (exit 2).
    let w = sb.run(&["delete", id]);
    assert_eq!(w.status, 2, "{w:#?}");
    assert!(
        w.stdout.contains("failed [storage]") && w.stdout.contains("archive.db.damaged"),
        "{w:#?}"
    );
    // Nothing was written to the damaged file; the backup goes back in place.
    std::fs::copy(&backup, &db).expect("restore");
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(db.with_file_name(format!("archive.db{suffix}")));
    }
    let r = sb.run(&["check"]);
    assert_eq!(r.status, 0, "{r:#?}");
    assert!(!marker.exists(), "a passing check removes the marker");
    assert_eq!(sb.run(&["name", id, "after"]).status, 0);
}

/// `check` on an archive finds what `check FILE` finds in the file it came
/// from: a self-parented entry (a cycle) and a root whose parent is missing
/// with no compaction cutting the walk there (a file cut from a longer one).
#[test]
fn archive_check_finds_cycles_and_cut_files_as_the_file_check_does() {
    let sb = Sandbox::new();
    let header = |n: u32| {
        format!(
            r#"{{"type":"session","version":3,"id":"01950000-dddd-7000-8000-00000000010{n}","timestamp":"2025-03-01T10:00:0{n}.000Z","cwd":"/home/ada/odd"}}"#
        )
    };
    let line = |id: &str, parent: &str| {
        format!(
            r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2025-03-01T10:00:01.000Z","message":{{"role":"user","content":"{id}","timestamp":1}}}}"#
        )
    };
    let cyclic = sb.write(
        "pi/cyclic.jsonl",
        &format!(
            "{}\n{}\n{}\n",
            header(1),
            line("u0000001", "null"),
            line("a0000001", "\"a0000001\"")
        ),
    );
    let cut = sb.write(
        "pi/cut.jsonl",
        &format!(
            "{}\n{}\n{}\n",
            header(2),
            line("c0000001", "\"gone0001\""),
            line("c0000002", "\"c0000001\"")
        ),
    );
    // The cut file's root is a warning (pi opens it, its path stopping
    // there); its active path, which walks into the missing parent, fails here.
    for (file, expected) in [
        (
            &cyclic,
            "problem: entry a0000001: Entry a0000001 is its own ancestor",
        ),
        (&cut, "problem: the active path: Entry gone0001 not found"),
        (&cut, "warning: entry c0000001 names parent gone0001"),
    ] {
        let r = sb.run(&["check", s(file)]);
        assert_eq!(r.status, 8, "{r:#?}");
        assert!(r.stdout.contains(expected), "{r:#?}");
    }
    sb.import(&[&cyclic, &cut]);
    let r = sb.run(&["--json", "check"]);
    assert_eq!(r.status, 8, "{r:#?}");
    let problems = r.parse()["problems"].to_string();
    for expected in [
        "entry a0000001: Entry a0000001 is its own ancestor",
        "the active path: Entry gone0001 not found",
    ] {
        assert!(problems.contains(expected), "{problems}");
    }
    let warnings = r.parse()["warnings"].to_string();
    assert!(
        warnings.contains("entry c0000001 names parent gone0001"),
        "{warnings}"
    );
}

/// Search costs a bounded amount per hit: a 1 MB message that matches the
/// query 60,000 times is found, with its snippet, at once (FTS5's own
/// `snippet()` over the whole text took 246 s for this).
#[test]
fn a_message_matching_many_times_is_searched_at_once() {
    let sb = Sandbox::new();
    let text = "needle haystack ".repeat(65_536);
    let entry = format!(
        r#"{{"type":"message","id":"u0000001","parentId":null,"timestamp":"2025-03-01T10:00:01.000Z","message":{{"role":"user","content":"{text}","timestamp":1}}}}"#
    );
    let file = sb.write(
        "pi/many.jsonl",
        &format!(
            "{}\n{entry}\n",
            HEADER.replace("000000000001", "000000000003")
        ),
    );
    sb.import(&[&file]);
    let started = std::time::Instant::now();
    let v = sb.json(&["search", "needle", "--limit", "1"]);
    let took = started.elapsed();
    eprintln!("1 MB, 65,536 matches: searched in {took:?}");
    assert_eq!(v["hits"][0]["entry"], "u0000001");
    assert!(
        v["hits"][0]["snippet"]
            .as_str()
            .is_some_and(|s| s.starts_with("[needle] haystack")),
        "{v}"
    );
    assert!(took < std::time::Duration::from_secs(5), "took {took:?}");
}
