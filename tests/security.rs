//! Security: every SQL statement is parameterized, so ids, labels, names,
//! working directories and search queries full of quotes, SQL and FTS5 syntax
//! are stored and found as data, through the library and the CLI; export
//! never writes outside `--out` (a crafted header timestamp like `../../x` is
//! refused); import refuses a header id that is a path and stores other
//! hostile headers as data without touching paths; session ids are
//! validated before they become file names.

mod support;

use serde_json::{json, Value};
use sessiontree::backend::jsonl::{Header, JsonlStorage};
use sessiontree::backend::sqlite::{Archive, ListQuery};
use sessiontree::convert::import_jsonl;
use sessiontree::repo::jsonl::JsonlRepo;
use sessiontree::repo::sqlite::SqliteRepo;
use sessiontree::repo::{CreateOptions, ForkOptions, SessionRepo};
use sessiontree::{Durability, ErrorCode, JsonText, SessionMetadata, SessionStorage};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use support::*;

/// Strings that would break string-built SQL or FTS5 queries.
const HOSTILE: &[&str] = &[
    "'; DROP TABLE entries; --",
    "\"; DROP TABLE sessions; --",
    "' OR '1'='1",
    "\"",
    "'",
    "''",
    "NEAR(",
    "NEAR(a b, 2)",
    "*",
    "-",
    "a*",
    "-x",
    "col:term",
    "\"unbalanced",
    "AND OR NOT",
    "^start",
    "%",
    "_",
    "\\",
    "x\0y",
    "🌍 ünï",
    "robert'); DELETE FROM labels; --",
];

fn tables(db: &Path) -> Vec<String> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut st = conn
        .prepare("SELECT name FROM sqlite_master WHERE type IN ('table', 'trigger', 'index') ORDER BY name")
        .unwrap();
    st.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

/// Through the library: hostile session ids, working directories, entry
/// ids, labels, names and search queries round-trip as data.
#[test]
fn hostile_strings_round_trip_through_the_library() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("sec.db");
    let archive = Archive::open(&db, Durability::Relaxed).unwrap();
    let schema = tables(&db);
    let mut repo = SqliteRepo::new(archive.clone());
    for (i, h) in HOSTILE.iter().enumerate() {
        let id = format!("{h}#{i}");
        let cwd = format!("/work/{h}");
        let mut s = repo
            .create(&CreateOptions {
                id: Some(id.clone()),
                cwd: cwd.clone(),
                ..CreateOptions::default()
            })
            .unwrap_or_else(|e| panic!("create {id:?}: {e}"));
        let entry_id = format!("{h}@{i}");
        let e = message_entry(&entry_id, None, "user", &format!("needle{i} says {h}"));
        s.storage_mut().append_entry(e.clone()).unwrap();
        s.append_label(&entry_id, Some(h)).unwrap();
        s.append_session_name(&format!("name {h}")).unwrap();
        drop(s);

        let s = archive
            .open_session(&id)
            .unwrap_or_else(|e| panic!("open {id:?}: {e}"));
        assert_eq!(s.metadata().unwrap().cwd.as_deref(), Some(cwd.as_str()));
        assert_eq!(
            s.entry(&entry_id).unwrap().map(|x| x.json().to_owned()),
            Some(e.json().to_owned())
        );
        let trimmed = sessiontree::json::js_trim(h);
        let expected_label =
            (!trimmed.is_empty()).then(|| sessiontree::json::JsString::new(trimmed));
        assert_eq!(s.label(&entry_id).unwrap(), expected_label, "label {h:?}");
        assert_eq!(
            s.session_name().unwrap(),
            Some(sessiontree::json::JsString::new(
                sessiontree::json::js_trim(&format!("name {h}"))
            ))
        );
        assert_eq!(s.find_entries(h).unwrap().len(), 0, "a type filter is data");
        assert!(s.entry(h).unwrap().is_none());
        assert!(s.label(h).unwrap().is_none());

        // Listing filters and prefix lookups take the text literally.
        let by_cwd = archive
            .list(&ListQuery {
                cwd: Some(cwd.clone()),
                ..ListQuery::default()
            })
            .unwrap();
        assert_eq!(
            by_cwd
                .iter()
                .map(|r| r.metadata.id.clone())
                .collect::<Vec<_>>(),
            vec![id.clone()],
            "cwd {cwd:?}"
        );
        let by_name = archive
            .list(&ListQuery {
                name_contains: Some(h.to_string()),
                ..ListQuery::default()
            })
            .unwrap();
        assert!(
            by_name.iter().any(|r| r.metadata.id == id),
            "name filter {h:?}"
        );
        assert!(
            by_name.iter().all(|r| r
                .name
                .as_ref()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
                .contains(trimmed)),
            "name filter {h:?} is literal"
        );
        let prefixed = archive.sessions_with_prefix(&id, 5).unwrap();
        assert_eq!(prefixed, vec![id.clone()], "prefix {id:?}");
    }
    // `%` and `_` are not wildcards anywhere.
    assert!(archive
        .sessions_with_prefix("%", 100)
        .unwrap()
        .iter()
        .all(|s| s.starts_with('%')));
    assert!(archive
        .sessions_with_prefix("_", 100)
        .unwrap()
        .iter()
        .all(|s| s.starts_with('_')));
    let all = archive.list(&ListQuery::default()).unwrap();
    assert_eq!(all.len(), HOSTILE.len());

    // Search: every hostile query is data (never an FTS5 syntax error); the
    // words in it are found where they were written. Only the search
    // grammar's own mistakes (a lone `-`, a `)` closing nothing, a query of
    // only exclusions: `-`, `NEAR(a b, 2)`, `-x`) are refused, as `usage`
    // errors that say where.
    for (i, h) in HOSTILE.iter().enumerate() {
        match archive.search(h, None, None, None, 50) {
            Err(e)
                if e.code().as_str() == "usage" && e.to_string().starts_with("search query: ") =>
            {
                assert!(
                    ["-", "NEAR(a b, 2)", "-x"].contains(h),
                    "{h:?} refused: {e}"
                );
            }
            found => {
                let hits = found.unwrap_or_else(|e| panic!("search {h:?} failed: {e}"));
                if h.chars().any(char::is_alphanumeric) {
                    assert!(
                        hits.iter().any(|x| x.session_id == format!("{h}#{i}")),
                        "search {h:?} finds its message"
                    );
                }
                let needle = format!("needle{i} {h}");
                let hits = archive.search(&needle, None, None, None, 50).unwrap();
                assert_eq!(hits.len(), 1, "search {needle:?}");
            }
        }
        let hits = archive
            .search(
                "says",
                Some(&format!("{h}#{i}")),
                Some(&format!("/work/{h}")),
                Some("user"),
                50,
            )
            .unwrap();
        assert_eq!(hits.len(), 1, "session/cwd/role filters for {h:?}");
    }
    for q in ["", "   ", "\"\"", "\0", "NEAR", "OR", "*:*"] {
        archive
            .search(q, None, None, None, 5)
            .unwrap_or_else(|e| panic!("search {q:?} failed: {e}"));
    }
    assert_eq!(tables(&db), schema, "the schema is untouched");
    let problems = archive.check(None).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    // Deleting one hostile session deletes that one only.
    archive
        .delete_session(&format!("{}#0", HOSTILE[0]))
        .unwrap();
    assert_eq!(
        archive.list(&ListQuery::default()).unwrap().len(),
        HOSTILE.len() - 1
    );
}

fn cli(db: &Path, args: &[&str]) -> std::process::Output {
    let mut all: Vec<&OsStr> = vec![OsStr::new("--db"), db.as_os_str()];
    all.extend(args.iter().map(OsStr::new));
    run_cli(all)
}

fn cli_json(db: &Path, args: &[&str]) -> Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let out = cli(db, &a);
    assert!(
        out.status.success(),
        "sessiontree {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e})"))
}

/// A pi file with a hostile header and hostile entries.
fn hostile_file(path: &Path, id: &str, cwd: &str, timestamp: &str) -> Vec<sessiontree::Entry> {
    let header = Header::new(id, timestamp, cwd, None, None);
    std::fs::write(path, format!("{}\n", header.json)).unwrap();
    let mut s = JsonlStorage::open(path, Durability::Relaxed).unwrap();
    let mut parent: Option<String> = None;
    for (i, h) in HOSTILE
        .iter()
        .enumerate()
        .filter(|(_, h)| !h.contains('\0'))
    {
        let eid = format!("{h}${i}");
        s.append_entry(message_entry(
            &eid,
            parent.as_deref(),
            "user",
            &format!("word{i} {h}"),
        ))
        .unwrap();
        parent = Some(eid);
    }
    s.all_entries().to_vec()
}

/// Through the CLI: import, ls, name, label, search, branch and export with
/// hostile ids, cwd, labels, names and queries; the export is byte-identical.
#[test]
fn hostile_strings_round_trip_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("cli.db");
    let src = dir.path().join("src.jsonl");
    let id = "'; DROP TABLE entries; -- \"x\"";
    let cwd = "/work/'; DROP TABLE sessions; --/NEAR(*)";
    let entries = hostile_file(&src, id, cwd, "2025-01-01T00:00:00.000Z");
    let r = cli_json(&db, &["import", "--quiet", src.to_str().unwrap()]);
    assert_eq!(r["imported"], json!(1), "{r}");
    let schema = tables(&db);

    let ls = cli_json(&db, &["ls"]);
    assert_eq!(ls["sessions"][0]["id"], json!(id), "{ls}");
    assert_eq!(ls["sessions"][0]["cwd"], json!(cwd));
    let ls = cli_json(&db, &["ls", "--cwd", cwd]);
    assert_eq!(ls["sessions"].as_array().unwrap().len(), 1, "{ls}");

    let name = "Robert'); DROP TABLE labels; -- \"NEAR(\"";
    cli_json(&db, &["name", "--", id, name]);
    let ls = cli_json(&db, &["ls", "--name", "DROP TABLE labels"]);
    assert_eq!(ls["sessions"][0]["name"], json!(name), "{ls}");
    let ls = cli_json(&db, &["ls", "--name", "%"]);
    assert_eq!(
        ls["sessions"].as_array().unwrap().len(),
        0,
        "% is not a wildcard: {ls}"
    );

    let target = entries[0].id().to_owned();
    let label = "x' OR 1=1; --";
    cli_json(&db, &["label", "--", id, &target, label]);
    let archive = Archive::open(&db, Durability::Relaxed).unwrap();
    assert_eq!(
        archive
            .open_session(id)
            .unwrap()
            .label(&target)
            .unwrap()
            .map(|l| l.to_string_lossy())
            .as_deref(),
        Some(label)
    );

    for (i, h) in HOSTILE
        .iter()
        .enumerate()
        .filter(|(_, h)| !h.contains('\0'))
    {
        if ["-", "NEAR(a b, 2)", "-x"].contains(h) {
            // The grammar's mistakes: refused (see above).
            continue;
        }
        let r = cli_json(&db, &["search", "--", h]);
        if h.chars().any(char::is_alphanumeric) {
            let hits = r["hits"].as_array().unwrap();
            assert!(
                hits.iter().any(|x| x["entry"] == json!(format!("{h}${i}"))),
                "search {h:?}: {r}"
            );
        }
        let r = cli_json(
            &db,
            &[
                "search",
                "--session",
                id,
                "--cwd",
                cwd,
                "--",
                &format!("word{i}"),
            ],
        );
        assert_eq!(
            r["hits"].as_array().unwrap().len(),
            1,
            "search word{i}: {r}"
        );
    }
    let branch = cli_json(&db, &["branch", "--", id]);
    assert!(!branch["entries"].as_array().unwrap().is_empty());

    // rpc on the hostile id.
    let mut child = RpcChild::spawn([
        OsStr::new("--db"),
        db.as_os_str(),
        OsStr::new("rpc"),
        OsStr::new(id),
    ]);
    let r = child.call("getEntry", json!({"id": entries[3].id()}));
    assert_eq!(r["value"], entries[3].value());
    let r = child.call("getLabel", json!({"id": target}));
    assert_eq!(r["value"], json!(label));
    drop(child.finish());

    assert_eq!(tables(&db), schema, "the schema is untouched");
    let out = dir.path().join("out");
    cli_json(&db, &["export", "--out", out.to_str().unwrap(), "--", id]);
    let files = files_under(&out);
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].starts_with(&out));
    let exported = std::fs::read(&files[0]).unwrap();
    let original = std::fs::read(&src).unwrap();
    // The export holds the imported file plus the two entries written since.
    assert!(
        exported.starts_with(&original),
        "the export keeps every imported byte"
    );
    let check = cli(&db, &["check"]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(read) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in read.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// Export refuses a session whose id or timestamp would put the file outside
/// `--out`; import stores such a header as data and touches no path.
#[test]
fn export_refuses_path_traversal() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("a/b/c");
    std::fs::create_dir_all(&root).unwrap();
    let db = root.join("t.db");
    let cases = [
        ("../../x", "/p", "2025-01-01T00:00:00.000Z"),
        (
            "../../../../../../../../tmp/evil",
            "/p",
            "2025-01-01T00:00:00.000Z",
        ),
        ("a/b", "/p", "2025-01-01T00:00:00.000Z"),
        ("..", "/p", "2025-01-01T00:00:00.000Z"),
        ("back\\slash", "/p", "2025-01-01T00:00:00.000Z"),
        ("ts", "/p", "../../../escape"),
        ("ts2", "/p", "/abs/olute"),
    ];
    let src_dir = dir.path().join("src");
    std::fs::create_dir(&src_dir).unwrap();
    for (i, (id, cwd, ts)) in cases.iter().enumerate() {
        let src = src_dir.join(format!("t{i}.jsonl"));
        hostile_file(&src, id, cwd, ts);
        let before = files_under(dir.path());
        let archive = Archive::open(&db, Durability::Relaxed).unwrap();
        if *id == ".." || id.contains(['/', '\\']) {
            // An id that could never be exported is refused at import.
            let err = import_jsonl(&archive, &src).expect_err("a path as a session id");
            assert_eq!(err.code(), ErrorCode::InvalidSession, "{err}");
            assert!(err.to_string().contains("cannot be a file name"), "{err}");
            assert!(!archive.has_session(id).unwrap());
            continue;
        }
        let r = import_jsonl(&archive, &src).unwrap_or_else(|e| panic!("import {id:?}: {e}"));
        assert_eq!(r.session_id, *id, "the header is stored as data");
        drop(archive);
        let after: Vec<PathBuf> = files_under(dir.path())
            .into_iter()
            .filter(|p| !p.to_string_lossy().contains("t.db"))
            .collect();
        let before: Vec<PathBuf> = before
            .into_iter()
            .filter(|p| !p.to_string_lossy().contains("t.db"))
            .collect();
        assert_eq!(after, before, "import of {id:?} created files");

        let out = root.join(format!("out{i}"));
        let res = cli(
            &db,
            &["--json", "export", "--out", out.to_str().unwrap(), "--", id],
        );
        assert!(
            !res.status.success(),
            "export of {id:?} / {ts:?} must be refused"
        );
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&res.stdout),
            String::from_utf8_lossy(&res.stderr)
        );
        assert!(
            text.contains("refused") || text.contains("invalid_session"),
            "{text}"
        );
        let everything = files_under(dir.path());
        for f in &everything {
            let inside = f.starts_with(&src_dir) || f.starts_with(&root);
            assert!(inside, "export of {id:?} wrote {f:?}");
            assert!(!f.starts_with(&out), "export of {id:?} wrote {f:?}");
        }
    }
    assert!(!Path::new("/tmp/evil.jsonl").exists());
    // `export --all` refuses those and exports nothing outside either.
    let out = root.join("all");
    let res = cli(&db, &["export", "--all", "--out", out.to_str().unwrap()]);
    assert!(
        !res.status.success(),
        "export --all with traversal ids must report failure"
    );
    for f in files_under(dir.path()) {
        assert!(
            f.starts_with(&src_dir) || f.starts_with(&root),
            "export --all wrote {f:?}"
        );
    }
}

/// A JSONL repository validates session ids before they become file names:
/// `create` and `fork` with a traversal id are refused and write nothing.
#[test]
fn jsonl_repo_validates_session_ids() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sessions");
    let mut repo = JsonlRepo::new(&root, Durability::Relaxed);
    let mut ok = repo
        .create(&CreateOptions {
            cwd: "/p".into(),
            ..CreateOptions::default()
        })
        .expect("a fresh id is fine");
    ok.append_message(&JsonText::from(json!({"role": "user", "content": "hi"})))
        .unwrap();
    let source: SessionMetadata = ok.storage().metadata().unwrap();
    for bad in [
        "../../evil",
        "../x",
        "a/b",
        "a\\b",
        "x\0y",
        "/abs",
        "..",
        ".",
    ] {
        let r = repo.create(&CreateOptions {
            id: Some(bad.into()),
            cwd: "/p".into(),
            ..CreateOptions::default()
        });
        let e = r
            .err()
            .unwrap_or_else(|| panic!("create with id {bad:?} was accepted"));
        assert_ne!(
            e.code(),
            ErrorCode::Storage,
            "refused before touching the disk: {e}"
        );
        let r = repo.fork(
            &source,
            &ForkOptions {
                id: Some(bad.into()),
                ..ForkOptions::default()
            },
        );
        assert!(r.is_err(), "fork with id {bad:?} was accepted");
    }
    // The cwd is encoded into one directory name whatever it holds.
    let s = repo
        .create(&CreateOptions {
            cwd: "../../../etc".into(),
            ..CreateOptions::default()
        })
        .unwrap();
    assert!(Path::new(s.storage().metadata().unwrap().path.as_deref().unwrap()).starts_with(&root));
    for f in files_under(dir.path()) {
        assert!(f.starts_with(&root), "wrote {f:?} outside the repository");
    }
    assert_eq!(files_under(&root).len(), 2);
    assert!(!dir.path().join("evil.jsonl").exists());
}

/// Archive session ids never become paths: an unknown or traversal-looking
/// id given to `--db … rpc` is `not_found`, and nothing is created. (A
/// SESSION argument naming an existing file is read as that file, by design
/// of the CLI; reading it writes nothing.)
#[test]
fn archive_session_ids_never_touch_paths() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("p.db");
    drop(Archive::open(&db, Durability::Relaxed).unwrap());
    for id in [
        "../../no/such/dir/x",
        "../../../../tmp/no-such-session",
        "..",
        "",
        "'; DROP TABLE sessions; --",
    ] {
        let mut child = RpcChild::spawn([
            OsStr::new("--db"),
            db.as_os_str(),
            OsStr::new("rpc"),
            OsStr::new(id),
        ]);
        let r = child.call("getLeafId", json!({}));
        let code = response_code(&r);
        assert!(
            matches!(code.as_deref(), Some("not_found" | "invalid_session")),
            "{id:?}: {r}"
        );
        let r = child.call(
            "appendMessage",
            json!({"message": {"role": "user", "content": "x"}}),
        );
        assert!(
            response_code(&r).is_some(),
            "{id:?}: an append to no session succeeded: {r}"
        );
        drop(child.finish());
    }
    let files: Vec<String> = files_under(dir.path())
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(files.iter().all(|f| f.starts_with("p.db")), "{files:?}");
    assert_eq!(tables(&db).len(), tables(&db).len());
    let archive = Archive::open(&db, Durability::Relaxed).unwrap();
    assert!(archive.list(&ListQuery::default()).unwrap().is_empty());
}
