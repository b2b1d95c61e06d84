//! Environment faults: read-only files and directories, missing directories,
//! a full disk. Each gives a clear `storage` error (naming what failed) and
//! leaves the store as it was: file bytes identical, archive rows identical,
//! `check` clean. A JSONL store that failed a write is poisoned: it refuses
//! further writes, and nothing half-written stays in the file.
//!
//! Read-only is made with permission bits, or with `chattr +i` when the tests
//! run as root (root ignores permission bits); a case the environment cannot
//! set up is skipped with the reason printed. A full disk is simulated with
//! SQLite's `PRAGMA max_page_count` on every pooled connection, and for the
//! binary (JSONL and SQLite) with a file-size limit (`ulimit -f`, SIGXFSZ
//! ignored, so writes past it fail with EFBIG like ENOSPC would).

mod support;

use serde_json::json;
use sessiontree::backend::jsonl::JsonlStorage;
use sessiontree::backend::sqlite::Archive;
use sessiontree::repo::sqlite::SqliteRepo;
use sessiontree::repo::{CreateOptions, SessionRepo};
use sessiontree::{Durability, ErrorCode, JsonText, Session, SessionStorage};
use std::path::Path;
use std::process::Command;
use support::*;

fn skip(why: &str) {
    eprintln!("SKIPPED: {why}");
}

fn archive_with_session(db: &Path, id: &str, entries: usize) -> Archive {
    let archive = Archive::open(db, Durability::Full).expect("archive");
    let mut repo = SqliteRepo::new(archive.clone());
    let mut s = repo
        .create(&CreateOptions {
            id: Some(id.into()),
            cwd: "/work/project".into(),
            ..CreateOptions::default()
        })
        .expect("create");
    for i in 0..entries {
        s.append_message(&JsonText::from(
            json!({"role": "user", "content": format!("m{i}")}),
        ))
        .unwrap();
    }
    drop(s);
    archive
}

fn jsonl_with_entries(path: &Path, n: usize) -> JsonlStorage {
    let mut s = new_jsonl(path, "faults", Durability::Full);
    let mut parent: Option<String> = None;
    for i in 0..n {
        let id = format!("e{i}");
        s.append_entry(message_entry(
            &id,
            parent.as_deref(),
            "user",
            &format!("m{i}"),
        ))
        .unwrap();
        parent = Some(id);
    }
    s
}

/// Appending to a session file made read-only: `storage`, the store is
/// poisoned (refuses further writes even once the file is writable again),
/// and the file is byte-identical; a fresh open works again.
#[test]
fn jsonl_append_to_read_only_file_poisons() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro.jsonl");
    drop(jsonl_with_entries(&path, 3));
    let before = std::fs::read(&path).unwrap();
    let mut s = JsonlStorage::open(&path, Durability::Full).unwrap();
    let guard = match ReadOnly::make(&path) {
        Ok(g) => g,
        Err(why) => return skip(&why),
    };
    let err = s
        .append_entry(message_entry("x1", Some("e2"), "user", "refused"))
        .expect_err("read-only");
    assert_eq!(err.code(), ErrorCode::Storage, "{err}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "names the file: {err}"
    );
    drop(guard);
    let err = s
        .append_entry(message_entry("x2", Some("e2"), "user", "poisoned"))
        .expect_err("poisoned");
    assert_eq!(err.code(), ErrorCode::Storage, "{err}");
    assert!(err.to_string().contains("refuses further writes"), "{err}");
    let err = s.set_leaf_id(Some("e0")).expect_err("poisoned");
    assert_eq!(err.code(), ErrorCode::Storage);
    assert!(
        std::fs::read(&path).unwrap() == before,
        "nothing was written"
    );
    assert_eq!(
        s.all_entries().len(),
        3,
        "nothing refused is in memory either"
    );
    let mut fresh = JsonlStorage::open(&path, Durability::Full).unwrap();
    fresh
        .append_entry(message_entry("x3", Some("e2"), "user", "after"))
        .unwrap();
    assert_eq!(
        JsonlStorage::open(&path, Durability::Full)
            .unwrap()
            .all_entries()
            .len(),
        4
    );
}

/// Creating a session file in a read-only directory: `storage`, nothing left behind.
#[test]
fn jsonl_create_in_read_only_directory() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("sessions");
    std::fs::create_dir(&sub).unwrap();
    let _guard = match ReadOnly::make(&sub) {
        Ok(g) => g,
        Err(why) => return skip(&why),
    };
    let header =
        sessiontree::backend::jsonl::Header::new("c", "2025-01-01T00:00:00.000Z", "/p", None, None);
    let err = JsonlStorage::create(sub.join("c.jsonl"), header, Durability::Full)
        .expect_err("read-only dir");
    assert_eq!(err.code(), ErrorCode::Storage, "{err}");
    assert_eq!(
        std::fs::read_dir(&sub).unwrap().count(),
        0,
        "nothing left behind"
    );
}

/// A session file whose directory vanished while it was open: `storage`
/// (not `not_found`: the session was found, writing it failed), poisoned.
#[test]
fn jsonl_directory_removed_while_open() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("gone");
    std::fs::create_dir(&sub).unwrap();
    let path = sub.join("s.jsonl");
    drop(jsonl_with_entries(&path, 2));
    let mut s = JsonlStorage::open(&path, Durability::Full).unwrap();
    std::fs::remove_dir_all(&sub).unwrap();
    let err = s
        .append_entry(message_entry("x", Some("e1"), "user", "lost"))
        .expect_err("no file");
    assert_eq!(err.code(), ErrorCode::Storage, "{err}");
    let err = s
        .append_entry(message_entry("y", Some("e1"), "user", "lost"))
        .expect_err("poisoned");
    assert_eq!(err.code(), ErrorCode::Storage, "{err}");
    assert!(!sub.exists(), "nothing re-created");
}

/// A missing directory for an archive: `storage` naming the path. For a JSONL
/// file that does not exist: `not_found`.
#[test]
fn missing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("no/such/dir/a.db");
    let err = Archive::open(&db, Durability::Full).expect_err("missing dir");
    assert_eq!(err.code(), ErrorCode::Storage, "{err}");
    assert!(
        err.to_string().contains(&db.display().to_string()),
        "names the path: {err}"
    );
    assert!(!dir.path().join("no").exists(), "nothing created");
    let err = JsonlStorage::open(dir.path().join("no/such.jsonl"), Durability::Full)
        .expect_err("missing");
    assert_eq!(err.code(), ErrorCode::NotFound, "{err}");
}

/// A read-only archive file: opening it, or writing through it, gives
/// `storage`; every row stays as it was.
#[test]
fn sqlite_read_only_archive_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ro.db");
    drop(archive_with_session(&db, "ro", 3));
    let before = archive_dump(&db);
    let guard = match ReadOnly::make(&db) {
        Ok(g) => g,
        Err(why) => return skip(&why),
    };
    match Archive::open(&db, Durability::Full) {
        Err(e) => {
            eprintln!("open refused: {e}");
            assert_eq!(e.code(), ErrorCode::Storage, "{e}")
        }
        Ok(archive) => {
            let mut s = Session::new(archive.open_session("ro").expect("reads work"));
            assert_eq!(s.storage().entry_count().unwrap(), 3, "reads work");
            let err = s
                .append_message(&JsonText::from(json!({"role": "user", "content": "x"})))
                .expect_err("read-only file");
            eprintln!("open worked, append refused: {err}");
            assert_eq!(err.code(), ErrorCode::Storage, "{err}");
        }
    }
    // The CLI too.
    let out = run_cli([
        std::ffi::OsStr::new("--db"),
        db.as_os_str(),
        std::ffi::OsStr::new("name"),
        std::ffi::OsStr::new("ro"),
        std::ffi::OsStr::new("new name"),
    ]);
    assert_eq!(
        out.status.code(),
        Some(7),
        "exit status of a storage error: {:?}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("[storage]"));
    drop(guard);
    assert_eq!(archive_dump(&db), before, "the archive is unchanged");
    assert_archive_ok(&db);
}

/// An archive in a read-only directory (SQLite cannot create its WAL there):
/// `storage`, unchanged.
#[test]
fn sqlite_archive_in_read_only_directory() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("d");
    std::fs::create_dir(&sub).unwrap();
    let db = sub.join("a.db");
    drop(archive_with_session(&db, "rodir", 2));
    let before = archive_dump(&db);
    // The last read-write connection to close checkpoints and removes the
    // WAL and shared-memory files; only then does the directory matter.
    {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let _: i64 = conn
            .query_row("SELECT count(*) FROM sessions", [], |r| r.get(0))
            .unwrap();
    }
    for ext in ["db-wal", "db-shm"] {
        assert!(!db.with_extension(ext).exists(), "{ext} left behind");
    }
    let guard = match ReadOnly::make(&sub) {
        Ok(g) => g,
        Err(why) => return skip(&why),
    };
    match Archive::open(&db, Durability::Full) {
        Err(e) => {
            eprintln!("open refused: {e}");
            assert_eq!(e.code(), ErrorCode::Storage, "{e}")
        }
        Ok(archive) => {
            let mut s = Session::new(archive.open_session("rodir").expect("reads work"));
            let err = s
                .append_message(&JsonText::from(json!({"role": "user", "content": "x"})))
                .expect_err("read-only dir");
            eprintln!("open worked, append refused: {err}");
            assert_eq!(err.code(), ErrorCode::Storage, "{err}");
        }
    }
    // A new archive cannot be created there either.
    let err = Archive::open(sub.join("new.db"), Durability::Full).expect_err("read-only dir");
    assert_eq!(err.code(), ErrorCode::Storage, "{err}");
    drop(guard);
    assert!(!sub.join("new.db").exists());
    assert_eq!(archive_dump(&db), before, "the archive is unchanged");
    assert_archive_ok(&db);
}

/// Sets `PRAGMA max_page_count` on every connection of the archive's pool
/// (0 lifts the limit to SQLite's maximum).
fn limit_pages(archive: &Archive, extra_pages: i64) {
    let conns: Vec<_> = (0..8)
        .map(|_| archive.conn().expect("pooled connection"))
        .collect();
    for c in &conns {
        let pages: i64 = c.query_row("PRAGMA page_count", [], |r| r.get(0)).unwrap();
        let limit = if extra_pages == 0 {
            4_294_967_294
        } else {
            pages + extra_pages
        };
        let set: i64 = c
            .query_row(&format!("PRAGMA max_page_count = {limit}"), [], |r| {
                r.get(0)
            })
            .unwrap();
        assert!(set >= pages);
    }
}

/// A full disk under SQLite: the append fails with `storage`, every row and
/// the branch cache stay as they were, and the writer goes on once there is
/// room again.
#[test]
fn sqlite_disk_full_via_max_page_count() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("full.db");
    let archive = archive_with_session(&db, "full", 5);
    let mut s = Session::new(archive.open_session("full").unwrap());
    s.storage_mut().claim_writer().unwrap();
    let before = archive_dump(&db);
    let leaf = s.storage().leaf_id().unwrap();
    limit_pages(&archive, 2);
    let big = JsonText::from(json!({"role": "user", "content": "z".repeat(1 << 20)}));
    let err = s.append_message(&big).expect_err("disk full");
    assert_eq!(err.code(), ErrorCode::Storage, "{err}");
    assert!(
        err.to_string().to_lowercase().contains("full"),
        "says the disk is full: {err}"
    );
    // A batch that does not fit is refused whole.
    let batch: Vec<_> = (0..50)
        .map(|i| {
            message_entry(
                &format!("b{i}"),
                leaf.as_deref(),
                "user",
                &"y".repeat(20_000),
            )
        })
        .collect();
    let err = s
        .storage_mut()
        .append_entries(&batch)
        .expect_err("disk full");
    assert_eq!(err.code(), ErrorCode::Storage, "{err}");
    assert_eq!(
        archive_dump(&db),
        before,
        "a failed append changed the archive"
    );
    assert!(archive.check(None).unwrap().is_empty());
    assert_eq!(s.storage().leaf_id().unwrap(), leaf);
    limit_pages(&archive, 0);
    let id = s.append_message(&big).expect("room again");
    assert_eq!(s.storage().leaf_id().unwrap().as_deref(), Some(id.as_str()));
    assert!(archive.check(None).unwrap().is_empty());
}

/// `sh -c 'trap "" XFSZ; ulimit -f BLOCKS; exec sessiontree ARGS'`: writes
/// past the limit fail with EFBIG instead of killing the process.
fn with_file_size_limit(blocks: u64, args: &[&std::ffi::OsStr]) -> Option<RpcChild> {
    let sh = Path::new("/bin/sh");
    if !sh.exists() {
        skip("no /bin/sh to set a file-size limit");
        return None;
    }
    let mut cmd = Command::new(sh);
    cmd.arg("-c")
        .arg(format!(
            "trap '' XFSZ; ulimit -f {blocks} || exit 99; exec \"$0\" \"$@\""
        ))
        .arg(bin())
        .args(args);
    Some(RpcChild::spawn_command(&mut cmd))
}

/// A full disk under the JSONL backend of the binary: the big append fails
/// with `storage`, the store is poisoned, and the file holds exactly what it
/// held before (no half-written line).
#[test]
fn jsonl_disk_full_via_file_size_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.jsonl");
    drop(jsonl_with_entries(&path, 3));
    // 1024 blocks is 512 KB or 1 MB depending on the shell; the file is far below.
    let Some(mut child) =
        with_file_size_limit(1024, &[std::ffi::OsStr::new("rpc"), path.as_os_str()])
    else {
        return;
    };
    let r = child.call(
        "appendMessage",
        json!({"message": {"role": "user", "content": "fits"}}),
    );
    assert_eq!(response_code(&r), None, "{r}");
    let before = std::fs::read(&path).unwrap();
    let r = child.call(
        "appendMessage",
        json!({"message": {"role": "user", "content": "z".repeat(4 << 20)}}),
    );
    assert_eq!(response_code(&r).as_deref(), Some("storage"), "{r}");
    let r = child.call(
        "appendMessage",
        json!({"message": {"role": "user", "content": "small"}}),
    );
    assert_eq!(
        response_code(&r).as_deref(),
        Some("storage"),
        "poisoned: {r}"
    );
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("refuses further writes"),
        "{r}"
    );
    let r = child.call("getEntries", json!({}));
    assert_eq!(
        r["value"].as_array().unwrap().len(),
        4,
        "nothing refused is served either"
    );
    drop(child.finish());
    let after = std::fs::read(&path).unwrap();
    assert!(
        after == before,
        "a half-written line stayed in the file: {} bytes, {} before",
        after.len(),
        before.len()
    );
    let s = JsonlStorage::open(&path, Durability::Full).unwrap();
    assert!(s.torn_tail().is_none());
    assert_eq!(s.all_entries().len(), 4);
}

/// A full disk under the SQLite backend of the binary: `storage`, the archive
/// unchanged and clean; later small appends fit again.
#[test]
fn sqlite_disk_full_via_file_size_limit() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("full.db");
    drop(archive_with_session(&db, "fsz", 3));
    let size = std::fs::metadata(&db).unwrap().len();
    assert!(size < 400 << 10, "the archive starts small ({size} B)");
    let args: Vec<&std::ffi::OsStr> = vec![
        std::ffi::OsStr::new("--db"),
        db.as_os_str(),
        std::ffi::OsStr::new("rpc"),
        std::ffi::OsStr::new("fsz"),
    ];
    let Some(mut child) = with_file_size_limit(1024, &args) else {
        return;
    };
    let r = child.call(
        "appendMessage",
        json!({"message": {"role": "user", "content": "fits"}}),
    );
    assert_eq!(response_code(&r), None, "{r}");
    drop(child.finish());
    let before = archive_dump(&db);
    let Some(mut child) = with_file_size_limit(1024, &args) else {
        return;
    };
    let r = child.call(
        "appendMessage",
        json!({"message": {"role": "user", "content": "z".repeat(4 << 20)}}),
    );
    assert_eq!(response_code(&r).as_deref(), Some("storage"), "{r}");
    let r = child.call("getEntries", json!({}));
    assert_eq!(r["value"].as_array().unwrap().len(), 4);
    let r = child.call(
        "appendMessage",
        json!({"message": {"role": "user", "content": "small again"}}),
    );
    let small_ok = response_code(&r).is_none();
    eprintln!(
        "after a failed big append, a small one {}: {r}",
        if small_ok { "fits" } else { "fails" }
    );
    drop(child.finish());
    let after = archive_dump(&db);
    if small_ok {
        assert_eq!(
            after.iter().filter(|r| r.starts_with("entries:")).count(),
            5
        );
    } else {
        assert_eq!(after, before, "a failed append changed the archive");
    }
    assert_archive_ok(&db);
    let archive = Archive::open(&db, Durability::Full).unwrap();
    assert!(archive_entries(&archive, "fsz")
        .iter()
        .all(|e| !e.json().contains("zzzz")));
}

/// Runs the binary on archive `db`: exit status and stdout + stderr.
fn cli_on(db: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut all = vec!["--db", db.to_str().expect("utf-8 path")];
    all.extend_from_slice(args);
    let out = run_cli(&all);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

/// An archive with one session, closed (its log checkpointed and removed).
fn closed_archive(db: &Path) {
    drop(archive_with_session(db, "s", 20));
    assert!(
        !db.with_file_name("a.db-wal").exists(),
        "the last connection removes the log"
    );
}

#[test]
fn an_empty_archive_is_an_error_not_no_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let file = std::fs::File::create(&db).unwrap();
    // Older than any creator's moment between making the file and its first page.
    file.set_modified(std::time::SystemTime::now() - std::time::Duration::from_secs(60))
        .unwrap();
    drop(file);
    // (`import --demo` writes a demo archive of its own, never this one.)
    for args in [&["ls"][..], &["name", "s", "x"], &["delete", "s"]] {
        let (code, text) = cli_on(&db, args);
        assert_eq!(code, Some(7), "{args:?}: {text}");
        assert!(text.contains("is empty (0 bytes)"), "{args:?}: {text}");
        assert!(text.contains(db.to_str().unwrap()), "{text}");
    }
    assert_eq!(std::fs::metadata(&db).unwrap().len(), 0, "nothing written");
    let err = Archive::open(&db, Durability::Full).expect_err("empty file");
    assert_eq!(err.code(), ErrorCode::Storage);
    // A path with no file is still a new archive.
    let fresh = dir.path().join("new.db");
    Archive::open(&fresh, Durability::Full).expect("created");
}

#[test]
fn a_truncated_archive_or_a_damaged_header_is_refused_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    closed_archive(&db);
    let whole = std::fs::read(&db).unwrap();
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "half",
            whole[..whole.len() / 2].to_vec(),
            "a truncated archive",
        ),
        (
            "header cut",
            whole[..60].to_vec(),
            "shorter than SQLite's 100-byte header",
        ),
        (
            "magic",
            flipped(&whole, 3),
            "does not start with SQLite's header",
        ),
        ("page size", flipped(&whole, 16), "damaged SQLite header"),
    ];
    for (what, bytes, says) in cases {
        std::fs::write(&db, &bytes).unwrap();
        for args in [&["ls"][..], &["name", "s", "x"]] {
            let (code, text) = cli_on(&db, args);
            assert_eq!(code, Some(7), "{what} {args:?}: {text}");
            assert!(text.contains(says), "{what} {args:?}: {text}");
        }
        assert_eq!(
            std::fs::read(&db).unwrap(),
            bytes,
            "{what}: nothing written"
        );
        // `check` lists what is wrong (exit 8), not "run sessiontree check".
        let (code, text) = cli_on(&db, &["check"]);
        assert_eq!(code, Some(8), "{what}: {text}");
        assert!(text.contains(says), "{what}: {text}");
        let _ = std::fs::remove_file(sessiontree::backend::sqlite::damage_marker(&db));
    }
}

fn flipped(bytes: &[u8], at: usize) -> Vec<u8> {
    let mut out = bytes.to_vec();
    out[at] ^= 0x5a;
    out
}

#[test]
fn a_deleted_wal_under_a_live_writer_refuses_the_next_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let archive = Archive::open(&db, Durability::Full).expect("archive");
    let mut repo = SqliteRepo::new(archive.clone());
    let mut s = repo
        .create(&CreateOptions {
            id: Some("s".into()),
            cwd: "/work/project".into(),
            ..CreateOptions::default()
        })
        .expect("create");
    s.append_message(&JsonText::from(
        json!({"role": "user", "content": "before"}),
    ))
    .expect("append");
    let wal = dir.path().join("a.db-wal");
    assert!(wal.exists());
    std::fs::remove_file(&wal).unwrap();
    let err = s
        .append_message(&JsonText::from(json!({"role": "user", "content": "after"})))
        .expect_err("the log is gone: this write would be lost");
    assert_eq!(err.code(), ErrorCode::Storage);
    assert!(err.to_string().contains("a.db-wal"), "{err}");
    assert!(err.to_string().contains("was deleted"), "{err}");
    // Another process that recreates the log does not hide it.
    drop(Archive::open_read_only(&db).map(|a| a.conn().map(|c| c.execute_batch("SELECT 1"))));
    let err = s
        .append_message(&JsonText::from(json!({"role": "user", "content": "later"})))
        .expect_err("still refused");
    assert_eq!(err.code(), ErrorCode::Storage, "{err}");
}

#[test]
fn check_lists_the_damage_of_an_archive_sqlite_cannot_open() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    closed_archive(&db);
    // Every page but the first overwritten in part: the schema's own pages too.
    let mut bytes = std::fs::read(&db).unwrap();
    for page in (1..bytes.len() / 4096).step_by(2) {
        bytes[page * 4096..page * 4096 + 64].fill(0xff);
    }
    std::fs::write(&db, &bytes).unwrap();
    let (code, text) = cli_on(&db, &["check"]);
    assert_eq!(code, Some(8), "{text}");
    assert!(text.contains("problem: "), "{text}");
    assert!(text.contains("malformed"), "{text}");
    assert!(!text.contains("Run `sessiontree check`"), "{text}");
    // The damage marker now refuses writes, naming the file.
    let (code, text) = cli_on(&db, &["name", "s", "x"]);
    assert_eq!(code, Some(7), "{text}");
    assert!(text.contains("a.db"), "{text}");
}
