//! The compact archive (schema version 6): every entry comes back byte for
//! byte whatever its encoding (compressed with the archive's dictionary,
//! plain, with blobs out of line), equal blobs are stored once and leave
//! with their last entry, the migration from version 5 keeps every text and
//! every search answer, and kill -9 during `compact` or the migration loses
//! nothing (`COMPACT_CRASH_TRIALS`, default 3 of each). `sessiontree sql`
//! reads the compressed text.

mod support;

use rusqlite::types::Value as SqlValue;
use sessiontree::backend::sqlite::{Archive, CompactOptions};
use sessiontree::convert::{export_jsonl, import_jsonl, train_dictionary_for};
use sessiontree::storage::SessionStorage;
use sessiontree::Durability;
use sessiontree_bench::gen::{generate, GenOptions, Shape};
use std::path::{Path, PathBuf};
use std::time::Duration;
use support::*;

type R = Result<(), Box<dyn std::error::Error>>;

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Canonical base64 of `n` pseudo-random bytes (an image does not compress).
fn image(n: usize, seed: u64) -> String {
    let mut rng = Rng::new(seed);
    let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let v = chunk
            .iter()
            .enumerate()
            .fold(0u32, |v, (i, &b)| v | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                B64[(v >> (18 - 6 * i)) as usize & 63] as char
            } else {
                '='
            });
        }
    }
    out
}

fn header(id: &str) -> String {
    format!(
        r#"{{"type":"session","version":3,"id":"{id}","timestamp":"2025-03-01T10:00:00.000Z","cwd":"/work/p"}}"#
    )
}

fn line(id: usize, parent: Option<usize>, role: &str, content: &str) -> String {
    let parent = parent.map_or("null".to_owned(), |p| format!("\"e{p:05}\""));
    format!(
        r#"{{"type":"message","id":"e{id:05}","parentId":{parent},"timestamp":"2025-03-01T10:00:{:02}.000Z","message":{{"role":"{role}","content":{content}}}}}"#,
        id % 60
    )
}

/// A session holding what stresses the encodings: the same image many times
/// and a second image, text that does not compress, lone surrogates,
/// replacement characters, a 2 MB line, non-canonical base64.
fn crafted(dir: &Path, id: &str, copies: usize) -> PathBuf {
    let shot = image(30_000, 1);
    let other = image(20_000, 2);
    let mut rng = Rng::new(7);
    let noise: String = (0..6_000)
        .map(|_| B64[rng.below(64) as usize] as char)
        .collect();
    let mut lines = vec![header(id)];
    let mut n = 0;
    let mut push = |role: &str, content: String, lines: &mut Vec<String>| {
        lines.push(line(n, n.checked_sub(1), role, &content));
        n += 1;
    };
    for i in 0..copies {
        push(
            "user",
            format!(
                r#"[{{"type":"text","text":"screenshot {i}"}},{{"type":"image","data":"{shot}","mimeType":"image/png"}}]"#
            ),
            &mut lines,
        );
        push(
            "toolResult",
            format!(r#"[{{"type":"text","text":"step {i} done: cargo test passed"}}]"#),
            &mut lines,
        );
    }
    push(
        "user",
        format!(
            r#"[{{"type":"image","data":"{other}","mimeType":"image/png"}},{{"type":"image","data":"{shot}","mimeType":"image/png"}}]"#
        ),
        &mut lines,
    );
    push(
        "assistant",
        format!(
            r#"[{{"type":"text","text":"{noise} \ud800 lone \udfff and \ufffd\ufffd replaced"}}]"#
        ),
        &mut lines,
    );
    // Base64 whose last quad "AB==" decodes but re-encodes as "AA==".
    push("user", format!(r#""{}B==""#, "A".repeat(9_001)), &mut lines);
    push(
        "toolResult",
        format!(r#""{}""#, "line of build output\\n".repeat(100_000)),
        &mut lines,
    );
    let path = dir.join(format!("{id}.jsonl"));
    std::fs::write(&path, lines.join("\n") + "\n").expect("write crafted session");
    path
}

/// The files every test here imports: the crafted session, generated shapes
/// and pi's own files when present.
fn corpus(dir: &Path) -> Vec<PathBuf> {
    let mut files = vec![crafted(dir, "crafted", 12)];
    for (shape, entries) in [
        (Shape::Forked, 1_500),
        (Shape::Regenerate, 600),
        (Shape::Caterpillar, 800),
    ] {
        let out = dir.join(shape.as_str());
        let report = generate(
            &out,
            &GenOptions {
                shape,
                entries,
                seed: 11,
                ..GenOptions::default()
            },
        )
        .expect("generate");
        files.extend(report.sessions.into_iter().map(|s| s.path));
    }
    if let Some(fixtures) = fixtures_dir() {
        for f in std::fs::read_dir(fixtures).expect("fixtures") {
            files.push(f.expect("fixture").path());
        }
    }
    files
}

/// A session of the archive, where it came from, and its export right
/// after the import.
type Imported = (String, PathBuf, Vec<u8>);

fn export(archive: &Archive, id: &str) -> Vec<u8> {
    let mut out = Vec::new();
    export_jsonl(&archive.open_session(id).expect("open"), &mut out).expect("export");
    out
}

/// Imports `files`; a version-3 file must export as the very bytes imported
/// (older versions are migrated on import, so only their exports are kept).
fn import_all(archive: &Archive, files: &[PathBuf]) -> Vec<Imported> {
    train_dictionary_for(archive, files).expect("train");
    files
        .iter()
        .map(|f| {
            let id = import_jsonl(archive, f).expect("import").session_id;
            let exported = export(archive, &id);
            let source = std::fs::read(f).expect("read source");
            if source.starts_with(br#"{"type":"session","version":3"#) {
                assert!(
                    exported == source,
                    "{id} ({}) does not come back byte for byte",
                    f.display()
                );
            }
            (id, f.clone(), exported)
        })
        .collect()
}

fn assert_exports_identical(archive: &Archive, sessions: &[Imported]) {
    for (id, file, exported) in sessions {
        assert!(
            export(archive, id) == *exported,
            "{id} ({}) changed",
            file.display()
        );
    }
}

fn count(archive: &Archive, sql: &str) -> i64 {
    match archive.query_read_only(sql).expect("query").rows[0][0] {
        SqlValue::Integer(n) => n,
        ref other => panic!("{sql}: {other:?}"),
    }
}

fn assert_checks_out(archive: &Archive) {
    let problems = archive.check(None).expect("check runs");
    assert!(problems.is_empty(), "{problems:?}");
}

/// Most entries are stored encoded (compressed with the dictionary).
fn assert_mostly_encoded(archive: &Archive) {
    let encoded = count(
        archive,
        "SELECT count(*) FROM entries WHERE typeof(json) = 'blob'",
    );
    assert!(encoded > 1_000, "{encoded} entries encoded");
}

#[test]
fn every_entry_comes_back_exactly_and_blobs_are_stored_once() -> R {
    let dir = tempfile::tempdir()?;
    let files = corpus(dir.path());
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let sessions = import_all(&archive, &files);
    assert!(archive.has_dictionary()?, "the import trained a dictionary");
    assert_exports_identical(&archive, &sessions);
    assert_checks_out(&archive);
    // Compressed with the dictionary, and blobs (two images, and the
    // non-canonical base64 kept as its text). Plain TEXT for entries that
    // nothing helps is covered by the codec's unit tests: with a dictionary
    // even random base64 compresses.
    assert_mostly_encoded(&archive);
    const CRAFTED: &str = "FROM entry_blobs r JOIN sessions s USING (session_key) JOIN blobs b USING (blob_id) WHERE s.id = 'crafted'";
    assert_eq!(
        count(
            &archive,
            &format!("SELECT count(DISTINCT blob_id) {CRAFTED}")
        ),
        3,
        "13 copies of one image, one other, one odd"
    );
    assert_eq!(
        count(
            &archive,
            &format!("SELECT count(DISTINCT blob_id) {CRAFTED} AND b.encoding = 0")
        ),
        1
    );
    assert_eq!(count(&archive, &format!("SELECT count(*) {CRAFTED}")), 15);
    let all_blobs = count(&archive, "SELECT count(*) FROM blobs");
    // The search index reads snippets from the compressed text.
    let hits = archive.search("cargo test passed", Some("crafted"), None, None, 3)?;
    assert_eq!(hits.len(), 3);
    assert!(
        hits.iter()
            .all(|h| h.snippet.contains("[cargo] [test] [passed]")),
        "{hits:?}"
    );

    // The archive's bytes: the file and its write-ahead log (an import
    // commits in batches, so its last pages may still be in the log).
    let wal = archive.path().with_file_name(format!(
        "{}-wal",
        archive
            .path()
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
    ));
    let before =
        std::fs::metadata(archive.path())?.len() + std::fs::metadata(&wal).map_or(0, |m| m.len());
    let report = archive.compact(&mut |_, _| {})?;
    assert_eq!(
        report.entries,
        count(&archive, "SELECT count(*) FROM entries") as u64
    );
    assert!(report.bytes_after <= before, "{report:?}");
    assert_exports_identical(&archive, &sessions);
    assert_checks_out(&archive);
    assert_eq!(
        count(&archive, "SELECT count(*) FROM dictionaries"),
        1,
        "the import's dictionary is gone"
    );

    // Blobs leave with the last entry that holds them.
    archive.delete_session("crafted")?;
    assert_eq!(count(&archive, "SELECT count(*) FROM blobs"), all_blobs - 3);
    assert_eq!(count(&archive, &format!("SELECT count(*) {CRAFTED}")), 0);
    assert!(archive.check(None)?.is_empty());
    Ok(())
}

#[test]
fn many_copies_of_one_image_cost_one_copy() -> R {
    let dir = tempfile::tempdir()?;
    let copies = 60;
    let file = crafted(dir.path(), "shots", copies);
    let jsonl = std::fs::metadata(&file)?.len();
    let one_copy = image(30_000, 1).len() as u64;
    // Copies of `shot` in the file: one per step plus one in the last-but-three entry.
    let rest = jsonl - (copies as u64 + 1) * one_copy;
    let empty = {
        let a = Archive::open(dir.path().join("empty.db"), Durability::Relaxed)?;
        a.storage_split()?.total()
    };
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    import_all(&archive, &[file]);
    let used = archive.storage_split()?.total() - empty;
    assert!(
        used as f64 <= 1.1 * (one_copy + rest) as f64,
        "{used} bytes for one {one_copy}-byte image and {rest} bytes of the rest"
    );
    Ok(())
}

/// The queries migration tests ask before and after.
const ANSWERED: [&str; 6] = [
    "cargo test",
    "screenshot",
    "session",
    "compaction",
    "error",
    "lone",
];

/// Every hit of each of [`ANSWERED`], as a set of (session, entry, role).
/// Sets, not ranked lists: since schema version 8 ranking no longer counts
/// repeats of a word (search::Ranking).
fn search_answers(archive: &Archive) -> Vec<std::collections::BTreeSet<(String, String, String)>> {
    ANSWERED
        .iter()
        .map(|q| {
            archive
                .search(q, None, None, None, 1_000)
                .expect("search")
                .into_iter()
                .map(|h| (h.session_id, h.entry_id, h.role))
                .collect()
        })
        .collect()
}

#[test]
fn migration_6_keeps_every_text_and_every_search_answer() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("a.db");
    let files = corpus(dir.path());
    let sessions = {
        let archive = Archive::open(&db, Durability::Relaxed)?;
        import_all(&archive, &files)
    };
    downgrade_to_version_5(&db)?;
    let old = {
        let conn = rusqlite::Connection::open(&db)?;
        let plain: i64 = conn.query_row(
            "SELECT count(*) FROM entries WHERE typeof(json) = 'text'",
            [],
            |r| r.get(0),
        )?;
        assert!(plain > 1_000, "a version-5 archive stores plain text");
        // The version-5 answers, from SQL: the index then kept its own text.
        let mut st = conn.prepare(
            "SELECT s.id, e.id, m.role FROM message_text m JOIN entries e ON e.entry_key = m.rowid
             JOIN sessions s ON s.session_key = e.session_key WHERE message_text MATCH ?1",
        )?;
        ANSWERED
            .iter()
            .map(|q| {
                let words = q
                    .split(' ')
                    .map(|w| format!("\"{w}\""))
                    .collect::<Vec<_>>()
                    .join(" ");
                st.query_map([words], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
                    .and_then(Iterator::collect)
                    .expect("a version-5 search")
            })
            .collect::<Vec<_>>()
    };
    let archive = Archive::open(&db, Durability::Relaxed)?;
    assert_eq!(
        search_answers(&archive),
        old,
        "search answers changed with the migration"
    );
    assert_exports_identical(&archive, &sessions);
    assert_checks_out(&archive);
    assert_mostly_encoded(&archive);
    Ok(())
}

/// Queries of every kind the grammar has: words, phrases, prefixes, words
/// FTS5 splits into several tokens, folded accents, no token at all.
const MIGRATION_8_QUERIES: &[&str] = &[
    "session",
    "cargo test",
    "\"cargo test\"",
    "\"test cargo\"",
    "compact*",
    "sess* \"the file\"",
    "foo-bar",
    "packages/coding-agent",
    "Café",
    "error \"at line\"",
    "---",
];

/// Every hit of `query` as a set of (session, entry), via the archive.
fn hit_set(archive: &Archive, query: &str) -> std::collections::BTreeSet<(String, String)> {
    archive
        .search(query, None, None, None, 1_000)
        .expect("search")
        .into_iter()
        .map(|h| (h.session_id, h.entry_id))
        .collect()
}

#[test]
fn migration_8_finds_what_the_positional_index_found() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("a.db");
    let files = corpus(dir.path());
    let sessions = {
        let archive = Archive::open(&db, Durability::Relaxed)?;
        import_all(&archive, &files)
    };
    downgrade_to_version_7(&db)?;
    // The version-7 answers, from SQL on the positional index.
    let old: Vec<_> = {
        let conn = rusqlite::Connection::open(&db)?;
        let mut st = conn.prepare(
            "SELECT s.id, e.id FROM message_text m JOIN entries e ON e.entry_key = m.rowid
             JOIN sessions s ON s.session_key = e.session_key WHERE message_text MATCH ?1",
        )?;
        MIGRATION_8_QUERIES
            .iter()
            .map(|q| {
                let fts = sessiontree::search::fts_query(q);
                st.query_map([fts], |r| Ok((r.get(0)?, r.get(1)?)))
                    .and_then(Iterator::collect)
                    .expect("a version-7 search")
            })
            .collect::<Vec<std::collections::BTreeSet<(String, String)>>>()
    };
    // And filtered by role, which version 10 moves from the index to `entries`.
    let by_role: Vec<((&str, &str), std::collections::BTreeSet<String>)> = {
        let conn = rusqlite::Connection::open(&db)?;
        let mut st = conn.prepare(
            "SELECT e.id FROM message_text m JOIN entries e ON e.entry_key = m.rowid
             WHERE message_text MATCH ?1 AND m.role = ?2",
        )?;
        ["session", "\"cargo test\"", "error"]
            .into_iter()
            .flat_map(|q| ["user", "assistant", "toolResult"].map(|role| (q, role)))
            .map(|(q, role)| {
                let fts = sessiontree::search::fts_query(q);
                let hits = st
                    .query_map([fts.as_str(), role], |r| r.get(0))
                    .and_then(Iterator::collect)
                    .expect("a version-7 search by role");
                ((q, role), hits)
            })
            .collect()
    };
    let found: Vec<usize> = old.iter().map(|hits| hits.len()).collect();
    assert!(
        found.iter().filter(|&&n| n > 0).count() >= 7,
        "the queries find something: {found:?}"
    );
    assert!(
        by_role.iter().filter(|(_, hits)| !hits.is_empty()).count() >= 4,
        "the queries find something in several roles"
    );
    let archive = Archive::open(&db, Durability::Relaxed)?;
    for ((q, role), old) in &by_role {
        let new: std::collections::BTreeSet<String> = archive
            .search(q, None, None, Some(role), 1_000)?
            .into_iter()
            .map(|h| h.entry_id)
            .collect();
        assert_eq!(&new, old, "{q} in {role} messages");
    }
    for (q, old) in MIGRATION_8_QUERIES.iter().zip(&old) {
        let new = hit_set(&archive, q);
        assert!(
            &new == old,
            "{q}: {} hits after the migration, {} before; only after: {:?}, only before: {:?}",
            new.len(),
            old.len(),
            new.difference(old).take(5).collect::<Vec<_>>(),
            old.difference(&new).take(5).collect::<Vec<_>>()
        );
    }
    // Pages of a confirmed query are the pages of its whole answer.
    let all = archive.search_page("\"the file\"", &Default::default(), 1_000, 0)?;
    let paged: Vec<_> = (0..4)
        .flat_map(|page| {
            archive
                .search_page("\"the file\"", &Default::default(), 3, page * 3)
                .expect("a page")
        })
        .map(|h| h.entry_id)
        .collect();
    let first: Vec<_> = all.iter().take(12).map(|h| h.entry_id.clone()).collect();
    assert_eq!(paged, first);
    // So are a role-filtered query's (the role is checked as a page is read).
    for role in ["user", "assistant", "toolResult"] {
        let filter = sessiontree::listing::SearchFilter {
            role: Some(role),
            ..Default::default()
        };
        let all = archive.search_page("session", &filter, 1_000, 0)?;
        assert!(all.iter().all(|h| h.role == role), "{role}: {all:?}");
        let paged: Vec<_> = (0..4)
            .flat_map(|page| {
                archive
                    .search_page("session", &filter, 3, page * 3)
                    .expect("a page")
            })
            .map(|h| h.entry_id)
            .collect();
        let first: Vec<_> = all.iter().take(12).map(|h| h.entry_id.clone()).collect();
        assert_eq!(paged, first, "{role}");
    }
    assert_exports_identical(&archive, &sessions);
    assert_checks_out(&archive);
    Ok(())
}

/// Starts `args` on the archive, kills it -9 after `delay`, and proves the
/// archive opens, checks out and holds every text.
fn kill_and_verify(db: &Path, sessions: &[Imported], args: &[&str], delay: Duration) {
    let mut child = std::process::Command::new(bin())
        .arg("--db")
        .arg(db)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start sessiontree");
    std::thread::sleep(delay);
    let _ = child.kill();
    let _ = child.wait();
    let archive = Archive::open(db, Durability::Relaxed).expect("the archive opens after kill -9");
    let problems = archive.check(None).expect("check runs");
    assert!(
        problems.is_empty(),
        "after kill -9 at {delay:?} of {args:?}: {problems:?}"
    );
    assert_exports_identical(&archive, sessions);
}

#[test]
fn kill9_during_compact_or_the_migration_loses_nothing() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("a.db");
    let files = corpus(dir.path());
    let sessions = {
        let archive = Archive::open(&db, Durability::Relaxed)?;
        import_all(&archive, &files)
    };
    let mut rng = Rng::from_env("COMPACT_CRASH_SEED", "compact crash trials");
    let trials = env_usize("COMPACT_CRASH_TRIALS", 3);
    for _ in 0..trials {
        let delay = Duration::from_millis(rng.below(1_200));
        kill_and_verify(&db, &sessions, &["compact", "--quiet"], delay);
    }
    for _ in 0..trials {
        downgrade_to_version_5(&db)?;
        let delay = Duration::from_millis(rng.below(1_200));
        kill_and_verify(&db, &sessions, &["ls"], delay);
    }
    Ok(())
}

#[test]
fn sql_reads_compressed_text_and_never_writes() -> R {
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("a.db");
    let files = corpus(dir.path());
    let sessions = {
        let archive = Archive::open(&db, Durability::Relaxed)?;
        import_all(&archive, &files)
    };
    let (_, file, _) = &sessions[0];
    let first_entry = std::fs::read_to_string(file)?
        .lines()
        .nth(1)
        .expect("an entry")
        .to_owned();
    let out = run_cli([
        "--db",
        db.to_str().expect("utf-8 path"),
        "--json",
        "sql",
        "SELECT entry_text(e.entry_key) AS text, decode_entry(e.json) AS again FROM entries e JOIN sessions s USING (session_key) WHERE s.id = 'crafted' AND e.seq = 0",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(answer["rows"][0]["text"], first_entry.as_str());
    assert_eq!(answer["rows"][0]["again"], first_entry.as_str());
    let before = archive_dump(&db);
    let refused = run_cli([
        "--db",
        db.to_str().expect("utf-8 path"),
        "sql",
        "DELETE FROM sessions",
    ]);
    assert_eq!(
        refused.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(
        archive_dump(&db),
        before,
        "a refused statement changed the archive"
    );
    let missing = dir.path().join("typo.db");
    let out = run_cli([
        "--db",
        missing.to_str().expect("utf-8 path"),
        "sql",
        "SELECT 1",
    ]);
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("typo.db"));
    assert!(
        !missing.exists(),
        "sql created an archive at a mistyped path"
    );
    Ok(())
}

/// One file imported into an archive without a dictionary trains the first
/// one itself (while its reader parses ahead): its entries are compressed
/// with it, export gives back the very bytes, and a second import reuses it.
#[test]
fn an_import_trains_the_first_dictionary_while_it_reads() -> R {
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("forked");
    let report = generate(
        &out,
        &GenOptions {
            shape: Shape::Forked,
            entries: 3_000,
            seed: 5,
            ..GenOptions::default()
        },
    )?;
    let file = report.sessions[0].path.clone();
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    assert!(!archive.has_dictionary()?);
    let id = import_jsonl(&archive, &file)?.session_id;
    assert!(archive.has_dictionary()?, "the import trained a dictionary");
    assert_eq!(count(&archive, "SELECT count(*) FROM dictionaries"), 1);
    let with_dictionary = count(
        &archive,
        // The body's tag: compressed (bit 0) with a dictionary (bit 1), perhaps with blobs (bit 2)
        // and a trailing message (bit 3).
        "SELECT count(*) FROM entries WHERE typeof(json) = 'blob' AND substr(hex(json), 1, 2) IN ('03', '07', '0B', '0F')",
    );
    assert!(
        with_dictionary > 2_500,
        "{with_dictionary} of 3000 entries compressed with the dictionary"
    );
    assert!(
        export(&archive, &id) == std::fs::read(&file)?,
        "byte for byte"
    );
    assert_checks_out(&archive);
    // Another file: the archive's dictionary is kept, not trained again.
    let other = generate(
        &dir.path().join("linear"),
        &GenOptions {
            entries: 2_000,
            seed: 6,
            ..GenOptions::default()
        },
    )?;
    import_jsonl(&archive, &other.sessions[0].path)?;
    assert_eq!(count(&archive, "SELECT count(*) FROM dictionaries"), 1);
    assert_checks_out(&archive);
    Ok(())
}

/// An archive filled by appends alone (pi through `rpc` or the Node binding)
/// has no import to train from: once a writer has appended
/// `TRAIN_AFTER_APPENDING` bytes without a dictionary, it trains the first one
/// from the archive's entries and re-encodes those already stored, and the
/// session still exports byte for byte.
#[test]
fn an_archive_filled_by_appends_trains_its_first_dictionary() -> R {
    use sessiontree::backend::sqlite::TRAIN_AFTER_APPENDING;
    use sessiontree::SessionStorage;
    let dir = tempfile::tempdir()?;
    let report = generate(
        &dir.path().join("gen"),
        &GenOptions {
            shape: Shape::Forked,
            entries: 2_500,
            seed: 9,
            ..GenOptions::default()
        },
    )?;
    let file = report.sessions[0].path.clone();
    let text = std::fs::read_to_string(&file)?;
    let mut lines = text.lines();
    let head = sessiontree::header::Header::parse(lines.next().ok_or("empty")?, &file)?;
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let mut session =
        archive.create_session(&sessiontree::convert::new_session_from_header(&head))?;
    let mut appended = 0;
    let mut trained_at = None;
    for line in lines {
        session.append_entry(sessiontree::Entry::from_json(line)?)?;
        appended += line.len();
        if trained_at.is_none() && archive.has_dictionary()? {
            trained_at = Some(appended);
        }
    }
    let trained_at = trained_at.ok_or("no dictionary was trained")?;
    assert!(
        (TRAIN_AFTER_APPENDING..TRAIN_AFTER_APPENDING + (64 << 10)).contains(&trained_at),
        "trained after {trained_at} bytes"
    );
    let total = count(&archive, "SELECT count(*) FROM entries");
    let with_dictionary = count(
        &archive,
        "SELECT count(*) FROM entries WHERE typeof(json) = 'blob' AND substr(hex(json), 1, 2) IN ('03', '07', '0B', '0F')",
    );
    assert!(
        with_dictionary * 10 > total * 9,
        "{with_dictionary} of {total} entries use the dictionary, the ones stored before it too"
    );
    assert!(
        export(&archive, &head.id) == std::fs::read(&file)?,
        "byte for byte"
    );
    assert_checks_out(&archive);
    Ok(())
}

/// After `compact`: most entries are members of blocks, and every block is
/// what block.rs promises: consecutive rows of one session, each the child
/// of the one before, at most `BLOCK_ENTRIES` members and `BLOCK_BYTES` of
/// text, none of them holding a blob.
fn assert_blocks_hold_parent_chains(archive: &Archive) {
    use sessiontree::backend::sqlite::internals::{place, BLOCK_BYTES, BLOCK_ENTRIES};
    let rows = archive
        .query_read_only(
            "SELECT e.session_key, e.json, entry_text(e.entry_key),
                    (SELECT count(*) FROM entry_blobs r WHERE r.entry_key = e.entry_key)
             FROM entries e ORDER BY e.entry_key",
        )
        .expect("query")
        .rows;
    let mut members = 0;
    let mut blocks = 0;
    // (block, session, next index, bytes, id of the previous member)
    let mut open: Option<(i64, i64, usize, usize, String)> = None;
    for row in &rows {
        let [SqlValue::Integer(session), json, SqlValue::Text(text), SqlValue::Integer(blobs)] =
            &row[..]
        else {
            panic!("{row:?}");
        };
        let entry = sessiontree::entry::Entry::from_json(text).expect("entry text");
        let id = entry.id().to_owned();
        let Some((block, index)) = place(json.into()) else {
            open = None;
            continue;
        };
        members += 1;
        assert_eq!(*blobs, 0, "a member of block {block} holds a blob");
        if index == 0 {
            blocks += 1;
            open = Some((block, *session, 1, text.len(), id));
            continue;
        }
        let (b, s, next, bytes, previous) = open.take().expect("a member after its block's start");
        assert_eq!(
            (b, s, next),
            (block, *session, index),
            "block {block} is not side by side"
        );
        assert_eq!(
            entry.parent_id(),
            Some(previous.as_str()),
            "block {block} forks"
        );
        assert!(
            index < BLOCK_ENTRIES && bytes + text.len() <= BLOCK_BYTES,
            "block {block} too big"
        );
        open = Some((b, s, next + 1, bytes + text.len(), id));
    }
    assert!(
        members * 2 > rows.len() && blocks * 4 < members,
        "{members} of {} entries in {blocks} blocks",
        rows.len()
    );
}

/// The share of the entries table's pages left unused, in percent.
fn unused_percent(archive: &Archive) -> i64 {
    count(
        archive,
        "SELECT sum(unused) * 100 / sum(pgsize) FROM dbstat WHERE name = 'entries'",
    )
}

#[test]
fn compact_packs_parent_chains_into_blocks_and_every_text_comes_back() -> R {
    let dir = tempfile::tempdir()?;
    let files = corpus(dir.path());
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let sessions = import_all(&archive, &files);
    assert_eq!(
        count(&archive, "SELECT count(*) FROM entry_blocks"),
        0,
        "imports store entries alone"
    );
    let unused_before = unused_percent(&archive);
    let report = archive.compact(&mut |_, _| {})?;
    assert_eq!(
        report.blocks_refused, 0,
        "every block decodes to its members"
    );
    // Re-encoded rows are written again whole, so their pages fill up (an
    // UPDATE that shrank them left every page as full as before: on a 98 MB
    // pi home 5 % of the pages unused after the import, 25 % after such a
    // compact, 7 % now; 8 % and 11 % on this corpus).
    let unused = unused_percent(&archive);
    assert!(
        unused <= unused_before.max(15),
        "{unused} % of the entries' pages unused after compact, {unused_before} % before"
    );
    assert_blocks_hold_parent_chains(&archive);
    assert_exports_identical(&archive, &sessions);
    assert_checks_out(&archive);
    // Every entry read alone, in an order that never meets a block's
    // members one after another, is its text.
    let texts = archive
        .query_read_only("SELECT s.id, e.id, entry_text(e.entry_key) FROM entries e JOIN sessions s USING (session_key) ORDER BY (e.entry_key * 7919) % 10007")?
        .rows;
    for row in texts.iter().take(400) {
        let [SqlValue::Text(session), SqlValue::Text(id), SqlValue::Text(text)] = &row[..] else {
            panic!("{row:?}");
        };
        let got = archive.open_session(session)?.entry(id)?.expect("entry");
        assert_eq!(got.json(), text, "{session} {id}");
    }
    // A second compact at another level retrains the dictionary and
    // replaces every block; none is left behind.
    let before = count(&archive, "SELECT max(block_id) FROM entry_blocks");
    let again = archive.compact_with(CompactOptions::at_level(4)?, &mut |_, _| {})?;
    assert!(!again.dictionary_kept);
    assert!(count(&archive, "SELECT min(block_id) FROM entry_blocks") > before);
    assert_blocks_hold_parent_chains(&archive);
    assert_exports_identical(&archive, &sessions);
    // A session takes its blocks with it.
    let (first, ..) = &sessions[1];
    archive.delete_session(first)?;
    assert_eq!(
        count(&archive, "SELECT count(*) FROM entry_blocks b WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_key = b.session_key)"),
        0
    );
    assert_exports_identical(&archive, &sessions[2..]);
    assert_checks_out(&archive);
    Ok(())
}

/// A block a process has decoded is never answered for another: ids are
/// never reused, even when entry keys are (a session deleted from the end
/// of the table, the archive compacted so that no search row it left
/// keeps its keys, another imported in its place and compacted, all by a
/// second handle of the archive).
#[test]
fn a_block_kept_by_a_reader_is_never_stale() -> R {
    let dir = tempfile::tempdir()?;
    let mut files = Vec::new();
    for (seed, shape) in [
        (21, Shape::Forked),
        (22, Shape::Forked),
        (23, Shape::Regenerate),
    ] {
        let out = dir.path().join(format!("g{seed}"));
        let options = GenOptions {
            shape,
            entries: 700,
            seed,
            ..GenOptions::default()
        };
        files.push(generate(&out, &options)?.sessions.remove(0).path);
    }
    let db = dir.path().join("a.db");
    let reader = Archive::open(&db, Durability::Relaxed)?;
    let sessions = import_all(&reader, &files[..2]);
    reader.compact(&mut |_, _| {})?;
    let keys_of = |a: &Archive, id: &str| {
        a.query_read_only(&format!("SELECT e.entry_key FROM entries e JOIN sessions s USING (session_key) WHERE s.id = '{id}'"))
            .expect("keys")
            .rows
            .into_iter()
            .map(|r| format!("{:?}", r[0]))
            .collect::<std::collections::BTreeSet<_>>()
    };
    // The reader decodes the last session's blocks (and keeps the last).
    assert_exports_identical(&reader, &sessions);
    let last = &sessions[1].0;
    let old_keys = keys_of(&reader, last);
    {
        let writer = Archive::open(&db, Durability::Relaxed)?;
        writer.delete_session(last)?;
        writer.compact(&mut |_, _| {})?;
        let replaced = import_all(&writer, &files[2..]);
        assert!(
            !keys_of(&writer, &replaced[0].0).is_disjoint(&old_keys),
            "the new session reuses the deleted one's entry keys"
        );
        writer.compact(&mut |_, _| {})?;
        assert_exports_identical(&reader, &replaced);
    }
    assert_exports_identical(&reader, &sessions[..1]);
    Ok(())
}

#[test]
fn check_names_a_member_whose_block_is_gone() -> R {
    let dir = tempfile::tempdir()?;
    let files = corpus(dir.path());
    let db = dir.path().join("a.db");
    let archive = Archive::open(&db, Durability::Relaxed)?;
    import_all(&archive, &files[1..2]);
    archive.compact(&mut |_, _| {})?;
    assert_checks_out(&archive);
    let gone = count(&archive, "SELECT max(block_id) FROM entry_blocks");
    rusqlite::Connection::open(&db)?
        .execute("DELETE FROM entry_blocks WHERE block_id = ?1", [gone])?;
    let reopened = Archive::open(&db, Durability::Relaxed)?;
    let problems = reopened.check(None)?;
    assert!(
        problems
            .iter()
            .any(|p| p.contains(&format!("entry block {gone} is missing"))),
        "{problems:?}"
    );
    Ok(())
}

/// Readers running while `compact` replaces every block get the answers they
/// got before: a member row and the block it names are read in one snapshot
/// (search, `sql`'s `entry_text`, `check`, exports), never a member of one
/// commit with the blocks of the next.
#[test]
fn readers_during_compact_never_see_a_block_half_replaced() -> R {
    let dir = tempfile::tempdir()?;
    let mut files = Vec::new();
    for (seed, shape) in [(31, Shape::Forked), (32, Shape::Linear)] {
        let options = GenOptions {
            shape,
            entries: 800,
            seed,
            ..GenOptions::default()
        };
        let out = dir.path().join(format!("g{seed}"));
        files.push(generate(&out, &options)?.sessions.remove(0).path);
    }
    let db = dir.path().join("a.db");
    let archive = Archive::open(&db, Durability::Relaxed)?;
    let sessions = import_all(&archive, &files);
    archive.compact(&mut |_, _| {})?;
    let answers = search_answers(&archive);
    let texts = "SELECT count(*), sum(length(entry_text(entry_key))) FROM entries";
    let text_sizes = archive.query_read_only(texts)?.rows;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let rounds = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|scope| -> R {
        let readers: Vec<_> = (0..3)
            .map(|which| {
                let (archive, stop, rounds) = (archive.clone(), &stop, &rounds);
                let (answers, text_sizes, sessions) = (&answers, &text_sizes, &sessions);
                scope.spawn(move || -> Result<(), String> {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        if which < 2 {
                            if search_answers(&archive) != *answers {
                                return Err("a search answered otherwise".into());
                            }
                            let sizes =
                                archive.query_read_only(texts).map_err(|e| e.to_string())?;
                            if sizes.rows != *text_sizes {
                                return Err("entry_text answered otherwise".into());
                            }
                        } else {
                            let problems =
                                archive.check_consistency(None).map_err(|e| e.to_string())?;
                            if !problems.is_empty() {
                                return Err(format!("check: {problems:?}"));
                            }
                            for (id, _, bytes) in sessions.iter() {
                                if export(&archive, id) != *bytes {
                                    return Err(format!("the export of {id} differs"));
                                }
                            }
                        }
                        rounds.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        // Each compact gives every member a new block (each at another
        // level than the one before, so that none keeps the dictionary and
        // its blocks); readers race it for a while (a stale read shows
        // within a few rounds).
        let writer = Archive::open(&db, Durability::Relaxed)?;
        let mut compacts = 0;
        while compacts < 3
            || (rounds.load(std::sync::atomic::Ordering::Relaxed) < 12 && compacts < 30)
        {
            let level = CompactOptions::at_level(2 + compacts % 2)?;
            assert!(!writer.compact_with(level, &mut |_, _| {})?.dictionary_kept);
            compacts += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for reader in readers {
            reader.join().expect("reader")?;
        }
        Ok(())
    })?;
    assert!(
        rounds.into_inner() >= 12,
        "the readers ran while compact did"
    );
    assert_exports_identical(&archive, &sessions);
    Ok(())
}

/// A repeat `compact` at the same level keeps the dictionary and leaves
/// alone what is encoded with it: the second run compresses nothing and
/// writes nothing; after appends to one session, a third compresses only
/// the appended entries (issue 42.2: a repeat compact cost as much as the
/// first). Another level retrains and compresses everything again.
#[test]
fn a_repeat_compact_compresses_only_what_changed() -> R {
    use sessiontree::SessionStorage;
    let dir = tempfile::tempdir()?;
    let mut files = Vec::new();
    for (seed, shape) in [(41, Shape::Forked), (42, Shape::Linear)] {
        let out = dir.path().join(format!("g{seed}"));
        let options = GenOptions {
            shape,
            entries: 900,
            seed,
            ..GenOptions::default()
        };
        files.push(generate(&out, &options)?.sessions.remove(0).path);
    }
    // The linear session is imported without its last 60 lines, appended
    // after the second compact.
    let text = std::fs::read_to_string(&files[1])?;
    let lines: Vec<&str> = text.lines().collect();
    let (kept_lines, later) = lines.split_at(lines.len() - 60);
    let cut = dir.path().join("cut.jsonl");
    std::fs::write(&cut, kept_lines.join("\n") + "\n")?;
    let whole = std::mem::replace(&mut files[1], cut);
    let archive = Archive::open(dir.path().join("a.db"), Durability::Relaxed)?;
    let sessions = import_all(&archive, &files);
    let first = archive.compact(&mut |_, _| {})?;
    assert!(
        !first.dictionary_kept,
        "the import's dictionary is retrained"
    );
    assert_eq!(first.entries_encoded, first.entries);
    let blocks = count(&archive, "SELECT count(*) FROM entry_blocks");
    let newest = count(&archive, "SELECT max(block_id) FROM entry_blocks");
    assert!(blocks > 20, "{blocks} blocks");

    let second = archive.compact(&mut |_, _| {})?;
    assert!(second.dictionary_kept);
    assert_eq!(
        second.entries, first.entries,
        "every entry is accounted for"
    );
    assert_eq!(
        (
            second.entries_encoded,
            second.reencoded,
            second.dictionaries_removed
        ),
        (0, 0, 0)
    );
    assert_eq!(count(&archive, "SELECT count(*) FROM entry_blocks"), blocks);
    assert_eq!(
        count(&archive, "SELECT max(block_id) FROM entry_blocks"),
        newest
    );
    assert_exports_identical(&archive, &sessions);

    let mut session = archive.open_session(&sessions[1].0)?;
    for line in later {
        session.append_entry(sessiontree::Entry::from_json(line)?)?;
    }
    drop(session);
    let third = archive.compact(&mut |_, _| {})?;
    assert!(third.dictionary_kept);
    assert_eq!(third.entries, first.entries + 60);
    assert!(
        (2..=60).contains(&third.entries_encoded),
        "{} entries compressed again, 60 appended",
        third.entries_encoded
    );
    assert_eq!(
        third.reencoded, third.entries_encoded,
        "each one packed in a block"
    );
    assert_eq!(
        count(
            &archive,
            &format!("SELECT count(*) FROM entry_blocks WHERE block_id <= {newest}")
        ),
        blocks,
        "the blocks before are left"
    );
    assert!(count(&archive, "SELECT max(block_id) FROM entry_blocks") > newest);
    assert_blocks_hold_parent_chains(&archive);
    assert_exports_identical(&archive, &sessions[..1]);
    assert!(
        export(&archive, &sessions[1].0) == std::fs::read(&whole)?,
        "the appended session exports as the whole file"
    );
    assert_checks_out(&archive);

    let other = archive.compact_with(CompactOptions::at_level(5)?, &mut |_, _| {})?;
    assert!(!other.dictionary_kept, "another level retrains");
    assert_eq!(other.entries_encoded, other.entries);
    assert_eq!(
        count(
            &archive,
            &format!("SELECT count(*) FROM entry_blocks WHERE block_id <= {newest}")
        ),
        0,
        "every block is new"
    );
    assert_checks_out(&archive);
    Ok(())
}
