//! Memory bounds a caller relies on, measured as the child process's peak
//! resident set (`VmHWM`): an rpc answer of any length is written as it is
//! read, so `getEntries` and `findEntries` over a whole large session grow
//! the process by about SQLite's page cache, not by the size of the answer;
//! a whole-session `fork` and `check` stay far below the session's size.
//! CI-sized by default; `MEMORY_MB=1000` runs it on a session of about 1 GB.

mod support;

use serde_json::json;
use sessiontree::backend::sqlite::Archive;
use sessiontree::convert::import_jsonl;
use sessiontree::Durability;
use std::time::Duration;
use support::*;

fn peak_rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse().ok())
        })
        .unwrap_or(0)
}

fn session_mb() -> usize {
    std::env::var("MEMORY_MB")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30)
}

/// Runs the binary with `args` to the end, polling its peak RSS (`VmHWM`
/// only grows, so the last reading before it exits is its peak); returns
/// whether it succeeded and the peak in MB.
fn run_measured(args: &[&std::ffi::OsStr]) -> (bool, u64) {
    let mut child = std::process::Command::new(bin())
        .args(args)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut peak = 0;
    loop {
        peak = peak.max(peak_rss_kb(child.id()));
        if let Some(status) = child.try_wait().unwrap() {
            return (status.success(), peak / 1024);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A whole-session `fork` copies the log as it reads it, and `check`
/// verifies a session without holding its text: both stay far below the
/// session's size.
#[test]
fn fork_and_check_of_a_large_session_take_bounded_memory() {
    if !std::path::Path::new("/proc/self/status").exists() {
        eprintln!("no /proc: peak RSS cannot be read here; skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mb = session_mb();
    let (db, id) = large_archive(dir.path(), mb);
    let os = |s: &str| std::ffi::OsString::from(s);
    // A fork holds two connections' page caches (16 MB each) and a zstd
    // context, whatever the session's size; check holds each entry's id and
    // place in the tree (about 100 bytes an entry), not its text. On two
    // threads (the fork is a second session as large, so both are checked
    // at once) each thread holds that for its own session, with its own two
    // connections' page caches.
    let bounds = [
        (vec![os("fork"), os(&id)], 80),
        (vec![os("check"), os("--jobs"), os("1")], 48 + mb as u64 / 4),
        (
            vec![os("check"), os("--full"), os("--jobs"), os("2")],
            48 + 32 + 2 * (mb as u64 / 4),
        ),
    ];
    for (command, bound_mb) in bounds {
        let mut args = vec![os("--db"), db.clone().into_os_string()];
        args.extend(command.iter().cloned());
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let (ok, peak_mb) = run_measured(&refs);
        assert!(ok, "{command:?} failed");
        eprintln!("{command:?} on a {mb} MB session: peak RSS {peak_mb} MB");
        assert!(
            peak_mb < bound_mb,
            "{command:?} peaked at {peak_mb} MB for a {mb} MB session (bound {bound_mb} MB)"
        );
    }
}

/// `sql` writes its rows as SQLite makes them: the peak RSS of a query
/// whose answer is ten times longer grows by less than SQLite's page cache,
/// where holding the result grew it by several times the answer.
#[test]
fn sql_streams_its_rows_in_bounded_memory() {
    if !std::path::Path::new("/proc/self/status").exists() {
        eprintln!("no /proc: peak RSS cannot be read here; skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // A third of the others' size keeps it cheap in CI: holding the result
    // still grows the process by several times the larger answer.
    let mb = (session_mb() / 3).max(4);
    let (db, _) = large_archive(dir.path(), mb);
    let entries = mb * 1_000_000 / 900;
    let os = |s: &str| std::ffi::OsString::from(s);
    let mut peaks = Vec::new();
    for rows in [entries / 10, entries] {
        let query = format!("SELECT entry_text(entry_key) FROM entries LIMIT {rows}");
        let args = [
            os("--db"),
            db.clone().into_os_string(),
            os("--json"),
            os("sql"),
            os(&query),
        ];
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let (ok, peak_mb) = run_measured(&refs);
        assert!(ok, "sql failed");
        eprintln!("sql of {rows} entries' text ({mb} MB session): peak RSS {peak_mb} MB");
        peaks.push(peak_mb);
    }
    // The larger answer is about 0.9 × `mb` MB longer.
    assert!(
        peaks[1] < peaks[0] + 12,
        "sql grew from {} MB to {} MB with an answer {} MB longer",
        peaks[0],
        peaks[1],
        mb * 9 / 10
    );
}

/// An archive holding one generated linear session of about `mb` MB.
fn large_archive(dir: &std::path::Path, mb: usize) -> (std::path::PathBuf, String) {
    let report = sessiontree_bench::gen::generate(
        &dir.join("files"),
        &sessiontree_bench::gen::GenOptions {
            shape: sessiontree_bench::gen::Shape::Linear,
            entries: mb * 1_000_000 / 900,
            seed: 5,
            ..Default::default()
        },
    )
    .unwrap();
    let session = &report.sessions[0];
    let db = dir.join("m.db");
    import_jsonl(
        &Archive::open(&db, Durability::Relaxed).unwrap(),
        &session.path,
    )
    .unwrap();
    (db, session.id.clone())
}

#[test]
fn rpc_lists_of_entries_stream_in_bounded_memory() {
    if !std::path::Path::new("/proc/self/status").exists() {
        eprintln!("no /proc: peak RSS cannot be read here; skipped");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mb = session_mb();
    let (db, id) = large_archive(dir.path(), mb);
    let entries = mb * 1_000_000 / 900;
    let mut rpc = RpcChild::spawn([
        std::ffi::OsStr::new("--db"),
        db.as_os_str(),
        std::ffi::OsStr::new("rpc"),
        std::ffi::OsStr::new(&id),
    ]);
    let (_, line) = rpc.request("getSessionStats", json!({}));
    rpc.send_raw(format!("{line}\n").as_bytes());
    rpc.recv(Duration::from_secs(30)).expect("stats");
    let baseline = peak_rss_kb(rpc.pid());
    for (method, params) in [
        ("getEntries", json!({})),
        ("findEntries", json!({"type": "message"})),
    ] {
        let (_, line) = rpc.request(method, params);
        rpc.send_raw(format!("{line}\n").as_bytes());
        let answer = rpc.recv(Duration::from_secs(120)).expect("an answer");
        let listed = answer["value"].as_array().map_or(0, Vec::len);
        assert!(listed > entries / 2, "{method}: {listed} entries");
        let grown_mb = peak_rss_kb(rpc.pid()).saturating_sub(baseline) / 1024;
        eprintln!(
            "{method}: {listed} entries ({mb} MB session), peak RSS grew {grown_mb} MB over {} MB",
            baseline / 1024
        );
        // SQLite's page cache is 16 MB; the answer itself is about `mb` MB.
        assert!(
            grown_mb < 24,
            "{method} grew the process by {grown_mb} MB for a {mb} MB answer"
        );
    }
}

/// No command recurses over tree depth or fork nesting: a 30,000-entry
/// caterpillar (a dead-end side entry at every spine entry, so every fork is
/// nested under the previous one) goes through `tree`, `check`, `export`,
/// `fork` (whole, and at the deepest entry), `branch` and `context`.
/// `DEEP_ENTRIES=1000000` runs the issue's full size.
#[test]
fn every_command_takes_deep_and_bushy_trees() {
    let entries: usize = std::env::var("DEEP_ENTRIES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30_000);
    let dir = tempfile::tempdir().unwrap();
    let report = sessiontree_bench::gen::generate(
        &dir.path().join("files"),
        &sessiontree_bench::gen::GenOptions {
            shape: sessiontree_bench::gen::Shape::Caterpillar,
            entries,
            fork_every: Some(1),
            compaction_every: 0,
            seed: 9,
            ..Default::default()
        },
    )
    .unwrap();
    let session = &report.sessions[0];
    assert!(session.max_depth > entries / 3, "{:?}", session.max_depth);
    let db = dir.path().join("deep.db");
    import_jsonl(
        &Archive::open(&db, Durability::Relaxed).unwrap(),
        &session.path,
    )
    .unwrap();
    let out = dir.path().join("out");
    let db_arg = db.display().to_string();
    let file_arg = session.path.display().to_string();
    let out_arg = out.display().to_string();
    let leaf = session.leaf_id.clone().expect("a leaf");
    for args in [
        vec!["tree", &session.id],
        vec!["tree", &session.id, "--all"],
        vec!["tree", &file_arg],
        vec!["check"],
        vec!["check", &file_arg],
        vec!["export", "--all", "--out", &out_arg],
        vec!["fork", &session.id],
        vec!["fork", &session.id, "--entry", &leaf, "--position", "at"],
        vec!["branch", &session.id],
        vec!["context", &session.id],
    ] {
        let result = std::process::Command::new(bin())
            .args(["--db", &db_arg])
            .args(&args)
            .stdout(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(
            result.status.success(),
            "{args:?}: {}\n{}",
            result.status,
            String::from_utf8_lossy(&result.stderr)
        );
    }
}

/// A linear session of `entries` entries without compactions (its active
/// path is the whole log), in an archive; its id, and the id of the entry
/// a tenth of the way down (a path a tenth as long).
fn path_archive(dir: &std::path::Path, entries: usize) -> (std::path::PathBuf, String, String) {
    let report = sessiontree_bench::gen::generate(
        &dir.join("files"),
        &sessiontree_bench::gen::GenOptions {
            shape: sessiontree_bench::gen::Shape::Linear,
            entries,
            compaction_every: 0,
            seed: 7,
            ..Default::default()
        },
    )
    .unwrap();
    let session = &report.sessions[0];
    let db = dir.join("p.db");
    import_jsonl(
        &Archive::open(&db, Durability::Relaxed).unwrap(),
        &session.path,
    )
    .unwrap();
    // Line 0 is the header.
    let text = std::fs::read_to_string(&session.path).unwrap();
    let line = text.lines().nth(entries / 10 + 1).unwrap();
    let tenth: serde_json::Value = serde_json::from_str(line).unwrap();
    let tenth = tenth["id"].as_str().unwrap().to_owned();
    (db, session.id.clone(), tenth)
}

/// Every whole-path answer (CLI `branch` and `context`, both forms; rpc
/// `getBranch`, `getEntriesToFork`, `getPathToRootOrCompaction`,
/// `buildContext`) is written as the path is read: the process's peak RSS
/// for a path ten times longer grows by about SQLite's page cache (16 MB),
/// where holding the path grew it by more than the path (at 40,000
/// entries, 36 MB). A child process per command is slow in a debug build,
/// so CI runs the in-process count below instead; this one runs with
/// `SESSIONTREE_SCALE_TESTS=1` (1,000,000 entries, or `PATH_ENTRIES`).
#[test]
fn whole_path_answers_stream_in_bounded_memory() {
    if !std::path::Path::new("/proc/self/status").exists() {
        eprintln!("no /proc: peak RSS cannot be read here; skipped");
        return;
    }
    if std::env::var_os("SESSIONTREE_SCALE_TESTS").is_none() {
        eprintln!("SESSIONTREE_SCALE_TESTS unset: the child-RSS run is skipped");
        return;
    }
    let entries = std::env::var("PATH_ENTRIES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let (db, id, tenth) = path_archive(dir.path(), entries);
    let os = |s: &str| std::ffi::OsString::from(s);
    for command in [
        vec!["--json", "branch"],
        vec!["branch"],
        vec!["--json", "context"],
        vec!["context"],
    ] {
        let mut peaks = Vec::new();
        for from in [Some(tenth.as_str()), None] {
            let mut args = vec![os("--db"), db.clone().into_os_string()];
            args.extend(command.iter().map(|a| os(a)));
            args.push(os(&id));
            if let Some(from) = from {
                args.extend([os("--from"), os(from)]);
            }
            let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
            let (ok, peak_mb) = run_measured(&refs);
            assert!(ok, "{command:?} failed");
            peaks.push(peak_mb);
        }
        eprintln!(
            "{command:?}: peak RSS {} MB for a tenth of the path, {} MB for all {entries} entries",
            peaks[0], peaks[1]
        );
        assert!(
            peaks[1] < peaks[0] + 24,
            "{command:?} grew from {} MB to {} MB with a path ten times longer",
            peaks[0],
            peaks[1]
        );
    }
    let mut rpc = RpcChild::spawn([
        std::ffi::OsStr::new("--db"),
        db.as_os_str(),
        std::ffi::OsStr::new("rpc"),
        std::ffi::OsStr::new(&id),
    ]);
    // The leaf is the last entry of a linear session.
    let leaf = rpc.call("getLeafId", json!({}))["value"]
        .as_str()
        .unwrap()
        .to_owned();
    rpc.call("getSessionStats", json!({}));
    let baseline = peak_rss_kb(rpc.pid());
    for (method, params) in [
        ("getBranch", json!({})),
        (
            "getEntriesToFork",
            json!({"entryId": leaf, "position": "at"}),
        ),
        ("getPathToRootOrCompaction", json!({"leafId": leaf})),
        ("buildContext", json!({})),
    ] {
        let (_, line) = rpc.request(method, params);
        rpc.send_raw(format!("{line}\n").as_bytes());
        let answer = rpc.recv(Duration::from_secs(600)).expect("an answer");
        let value = &answer["value"];
        let listed = value
            .as_array()
            .or_else(|| value["messages"].as_array())
            .map_or(0, Vec::len);
        assert!(
            listed >= entries / 2,
            "{method}: {listed} of {entries}: {answer}"
        );
        let grown_mb = peak_rss_kb(rpc.pid()).saturating_sub(baseline) / 1024;
        eprintln!(
            "{method}: {listed} entries, peak RSS grew {grown_mb} MB over {} MB",
            baseline / 1024
        );
        // SQLite's page cache is 16 MB; the answer is 0.9 KB an entry.
        assert!(
            grown_mb < 24,
            "{method} grew the process by {grown_mb} MB for a {entries}-entry path"
        );
    }
}

/// Bytes of Rust heap this thread holds and the most it held since
/// [`heap::reset_peak`]: SQLite's own allocations (its page cache) are not
/// counted, nor other tests' threads, so the count is what the reading code
/// itself keeps.
mod heap {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    thread_local! {
        static HELD: Cell<isize> = const { Cell::new(0) };
        static PEAK: Cell<isize> = const { Cell::new(0) };
    }

    /// The system allocator, counting this thread's bytes.
    pub struct Counting;

    fn add(bytes: isize) {
        // `try_with`: a thread being torn down has no counters left.
        let _ = HELD.try_with(|held| {
            let now = held.get() + bytes;
            held.set(now);
            let _ = PEAK.try_with(|peak| peak.set(peak.get().max(now)));
        });
    }

    // SAFETY: every call is passed to `System` unchanged; the counting
    // touches only const-initialised thread locals, which never allocate.
    #[allow(unsafe_code)]
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            add(layout.size() as isize);
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            add(-(layout.size() as isize));
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            add(new_size as isize - layout.size() as isize);
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }

    /// Starts a measurement: the peak is what is held now.
    pub fn reset_peak() -> isize {
        let now = HELD.with(Cell::get);
        PEAK.with(|p| p.set(now));
        now
    }

    /// The most held since [`reset_peak`].
    pub fn peak() -> isize {
        PEAK.with(Cell::get)
    }
}

#[global_allocator]
static COUNTING: heap::Counting = heap::Counting;

/// The CI-sized count behind the child-RSS run above: on a 4,000-entry path
/// (3.7 MB of text) every whole-path answer the rpc and the CLI make (the
/// rpc's `serve`, and the session calls the CLI's `branch` and `context`
/// make) peaks at well under a tenth of the path in Rust heap on this
/// thread, where holding the path took more than all of it.
#[test]
fn whole_path_answers_hold_no_path_in_the_heap() {
    use sessiontree::{Session, SessionStorage};
    let entries = 4_000;
    let dir = tempfile::tempdir().unwrap();
    let (db, id, _) = path_archive(dir.path(), entries);
    let archive = Archive::open(&db, Durability::Relaxed).unwrap();
    let text_bytes = {
        let st = archive.open_session(&id).unwrap();
        let mut n = 0;
        st.visit_entries(0, None, &mut |t| {
            n += t.len();
            Ok(())
        })
        .unwrap();
        n as isize
    };
    let leaf = archive
        .open_session(&id)
        .unwrap()
        .leaf_id()
        .unwrap()
        .unwrap();
    let bound = text_bytes / 10;
    let measure = |what: &str, run: &mut dyn FnMut()| {
        let before = heap::reset_peak();
        run();
        let grown = heap::peak() - before;
        eprintln!("{what}: peak heap grew {grown} bytes for a path of {text_bytes} bytes");
        assert!(
            grown < bound,
            "{what} held {grown} bytes at once for a path of {text_bytes} bytes"
        );
    };
    let leaf_q = serde_json::to_string(&leaf).unwrap();
    for request in [
        r#"{"id":1,"method":"getBranch","params":{}}"#.to_owned(),
        format!(
            r#"{{"id":2,"method":"getEntriesToFork","params":{{"entryId":{leaf_q},"position":"at"}}}}"#
        ),
        format!(
            r#"{{"id":3,"method":"getPathToRootOrCompaction","params":{{"leafId":{leaf_q}}}}}"#
        ),
        r#"{"id":4,"method":"buildContext","params":{}}"#.to_owned(),
    ] {
        let mut session = Some(Session::new(archive.open_session(&id).unwrap()));
        // The answer's length is counted as it is written, not kept.
        let mut out = CountingSink(0);
        measure(&request, &mut || {
            let session = session.take().unwrap();
            sessiontree::rpc::serve(Ok(session), request.as_bytes(), &mut out).unwrap();
        });
        assert!(
            out.0 > text_bytes as usize * 7 / 10,
            "{request}: {} bytes",
            out.0
        );
    }
    let session = Session::new(archive.open_session(&id).unwrap());
    let mut seen = 0;
    measure("Session::visit_branch (CLI branch)", &mut || {
        session
            .visit_branch(None, &mut |_| {
                seen += 1;
                Ok(())
            })
            .unwrap();
    });
    assert_eq!(seen, entries);
    let mut out = CountingSink(0);
    measure("Session::context_stream (CLI context)", &mut || {
        let ctx = session.context_stream(None).unwrap();
        ctx.write_json(&mut out).unwrap();
    });
    assert!(
        out.0 > text_bytes as usize * 7 / 10,
        "context: {} bytes",
        out.0
    );
}

/// An output that counts the bytes written to it and keeps none.
struct CountingSink(usize);

impl std::io::Write for CountingSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// An app-contract session (pi 1.6's rules: `getBranch` walks to the root
/// across compactions) of shape `shape` with `entries` entries and a
/// compaction about every `every`, in an archive at `dir/<name>.db`; the
/// archive, the session's id and its file.
fn app_archive(
    dir: &std::path::Path,
    name: &str,
    shape: sessiontree_bench::gen::Shape,
    entries: usize,
    every: usize,
) -> (std::path::PathBuf, String, std::path::PathBuf) {
    let report = sessiontree_bench::gen::generate(
        &dir.join(name),
        &sessiontree_bench::gen::GenOptions {
            shape,
            entries,
            compaction_every: every,
            seed: 11,
            ..Default::default()
        },
    )
    .unwrap();
    let session = &report.sessions[0];
    let db = dir.join(format!("{name}.db"));
    sessiontree::convert::import_jsonl_with(
        &Archive::open(&db, Durability::Relaxed).unwrap(),
        &session.path,
        &sessiontree::convert::ImportOptions {
            rules: Some(sessiontree::Contract::App),
        },
        &mut |_| {},
    )
    .unwrap();
    (db, session.id.clone(), session.path.clone())
}

/// The most Rust heap this thread held at once while `run` ran, over what
/// it held before.
fn heap_peak_of(run: &mut dyn FnMut()) -> isize {
    let before = heap::reset_peak();
    run();
    heap::peak() - before
}

/// pi 1.6's `getBranch` under the app contract, on a 4,000-entry path
/// crossing about ten compactions: the rpc's `serve` and the session read
/// the CLI's `branch` makes peak at well under a tenth of the path in Rust
/// heap, where the whole-path read they replaced holds more than the path;
/// their answers are byte for byte the whole-path read's. The binding's
/// `call` makes the answer's one text and holds nothing beside it.
#[test]
fn app_get_branch_holds_no_path_in_the_heap() {
    use sessiontree::app::AppSession;
    use sessiontree::rpc::app::{serve, AppRpc};
    let entries = 4_000;
    let dir = tempfile::tempdir().unwrap();
    let (db, id, _) = app_archive(
        dir.path(),
        "app",
        sessiontree_bench::gen::Shape::Linear,
        entries,
        400,
    );
    let archive = Archive::open(&db, Durability::Relaxed).unwrap();
    let open = || AppSession::open(archive.open_session(&id).unwrap()).unwrap();
    let app = open();
    // The whole-path read: what the answers must equal, and what holding
    // the path costs (the count sees it, or this test could not fail).
    let mut path = Vec::new();
    let held = heap_peak_of(&mut || path = app.branch(None).unwrap());
    let compactions = path
        .iter()
        .filter(|e| *e.entry_type() == sessiontree::EntryType::Compaction)
        .count();
    assert!(compactions >= 5, "{compactions} compactions on the path");
    assert!(path.len() > entries * 9 / 10, "{} entries", path.len());
    let list = |p: &[sessiontree::Entry]| {
        let texts: Vec<&str> = p.iter().map(|e| e.json()).collect();
        format!("[{}]", texts.join(","))
    };
    let expected = list(&path);
    let text_bytes = expected.len() as isize;
    eprintln!("AppSession::branch (the whole-path read): peak heap grew {held} bytes");
    assert!(held > text_bytes, "the whole path held {held} bytes");
    // A start between two compactions: its path crosses the rest of them.
    let mid = path[path.len() / 2].id().to_owned();
    let expected_mid = list(&app.branch(Some(&mid)).unwrap());
    drop(path);
    let bound = text_bytes / 10;
    let mid_q = serde_json::to_string(&mid).unwrap();
    for (request, answer) in [
        (
            r#"{"id":1,"method":"getBranch","params":{}}"#.to_owned(),
            &expected,
        ),
        (
            format!(r#"{{"id":1,"method":"getBranch","params":{{"fromId":{mid_q}}}}}"#),
            &expected_mid,
        ),
    ] {
        let rpc = AppRpc::new(open(), id.clone());
        let mut out = CountingSink(0);
        let mut rpc = Some(rpc);
        let grown = heap_peak_of(&mut || {
            serve(Ok(rpc.take().unwrap()), request.as_bytes(), &mut out).unwrap();
        });
        eprintln!(
            "app rpc {request}: peak heap grew {grown} bytes for a path of {text_bytes} bytes"
        );
        assert!(grown < bound, "{request} held {grown} bytes at once");
        let mut written = Vec::new();
        serve(
            Ok(AppRpc::new(open(), id.clone())),
            request.as_bytes(),
            &mut written,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(written).unwrap(),
            format!("{{\"id\":1,\"ok\":true,\"value\":{answer}}}\n"),
            "{request}"
        );
    }
    // The CLI's `branch` of an app session writes each entry as this hands it out.
    let mut out = CountingSink(0);
    let grown = heap_peak_of(&mut || {
        app.visit_branch(None, &mut |e| {
            std::io::Write::write_all(&mut out, e.json().as_bytes())
                .map_err(|e| sessiontree::Error::io("writing", e))
        })
        .unwrap();
    });
    eprintln!("AppSession::visit_branch (CLI branch): peak heap grew {grown} bytes");
    assert!(grown < bound, "visit_branch held {grown} bytes at once");
    assert_eq!(out.0 as isize, text_bytes - 2 - (entries_on(&expected) - 1));
    // The binding's `call`: the answer's text, grown as it is written
    // (a growing text's capacity is at most twice its length), nothing else.
    let mut rpc = AppRpc::new(open(), id.clone());
    let mut answer = String::new();
    let grown = heap_peak_of(&mut || answer = rpc.call("getBranch", "{}").unwrap());
    eprintln!(
        "AppRpc::call (binding): peak heap grew {grown} bytes for a {text_bytes}-byte answer"
    );
    assert_eq!(answer, expected);
    assert!(
        grown < 2 * text_bytes + bound,
        "call held {grown} bytes at once for a {text_bytes}-byte answer"
    );
    // The CLI's JSON form, byte for byte.
    let cli = std::process::Command::new(bin())
        .args(["--db".as_ref(), db.as_os_str()])
        .args(["--json", "branch", &id])
        .output()
        .unwrap();
    assert!(
        cli.status.success(),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    assert_eq!(
        String::from_utf8(cli.stdout).unwrap(),
        format!("{{\"entries\":{expected}}}\n")
    );
}

/// The entries in a JSON list of entries (each an object: top-level commas).
fn entries_on(list: &str) -> isize {
    serde_json::from_str::<Vec<&serde_json::value::RawValue>>(list)
        .unwrap()
        .len() as isize
}

/// The streamed `getBranch` hands out exactly the whole-path read's
/// entries from every 97th entry of sessions with forks, compactions and a
/// dangling root (a file cut from a longer one), on SQLite and on the JSONL
/// file itself, before and after a `resetLeaf` and an append.
#[test]
fn app_streamed_branch_is_the_whole_path() {
    use sessiontree::app::AppSession;
    use sessiontree::backend::jsonl::JsonlStorage;
    use sessiontree::Entry;
    use sessiontree_bench::gen::Shape;
    let dir = tempfile::tempdir().unwrap();
    fn check<S: sessiontree::SessionStorage>(app: &AppSession<S>, what: &str) -> usize {
        let ids: Vec<String> = app
            .storage()
            .entries(0, None)
            .unwrap()
            .iter()
            .map(|e| e.id().to_owned())
            .collect();
        let mut starts: Vec<Option<&str>> = vec![None, Some("no such id")];
        starts.extend(ids.iter().step_by(97).map(|s| Some(s.as_str())));
        let mut compared = 0;
        for from in starts {
            let whole: Vec<String> = app
                .branch(from)
                .unwrap()
                .iter()
                .map(|e| e.json().to_owned())
                .collect();
            let mut streamed: Vec<String> = Vec::new();
            app.visit_branch(from, &mut |e: Entry| {
                streamed.push(e.json().to_owned());
                Ok(())
            })
            .unwrap();
            assert_eq!(streamed, whole, "{what} from {from:?}");
            compared += whole.len();
        }
        compared
    }
    let mut compared = 0;
    for (name, shape, every) in [
        ("forked", Shape::Forked, 60),
        ("dangling", Shape::DanglingRoot, 90),
        ("dangling-nc", Shape::DanglingRoot, 0),
    ] {
        let (db, id, file) = app_archive(dir.path(), name, shape, 1_200, every);
        let archive = Archive::open(&db, Durability::Relaxed).unwrap();
        let mut app = AppSession::open(archive.open_session(&id).unwrap()).unwrap();
        compared += check(&app, &format!("{name} on SQLite"));
        app.reset_leaf();
        app.append_message(Some(
            sessiontree::app::JsValue::parse(r#"{"role":"user","content":"again"}"#).unwrap(),
        ))
        .unwrap();
        compared += check(&app, &format!("{name} on SQLite, appended"));
        let app =
            AppSession::open(JsonlStorage::open(&file, Durability::Relaxed).unwrap()).unwrap();
        compared += check(&app, &format!("{name} on JSONL"));
    }
    assert!(compared > 5_000, "{compared} entries compared");
}

/// Runs the binary with `args` and `input` on its stdin to the end, polling
/// its peak RSS as [`run_measured`] does, its output counted and let go;
/// returns whether it succeeded, the peak in MB and the output's bytes.
fn run_measured_counting(args: &[&std::ffi::OsStr], input: &[u8]) -> (bool, u64, u64) {
    use std::io::{Read, Write};
    let mut child = std::process::Command::new(bin())
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input).unwrap();
    drop(stdin);
    let mut stdout = child.stdout.take().unwrap();
    let counter = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        let mut n = 0u64;
        while let Ok(k @ 1..) = stdout.read(&mut buf) {
            n += k as u64;
        }
        n
    });
    let mut peak = 0;
    loop {
        peak = peak.max(peak_rss_kb(child.id()));
        if let Some(status) = child.try_wait().unwrap() {
            return (status.success(), peak / 1024, counter.join().unwrap());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// pi 1.6's `getBranch` under the app contract at scale: rpc `--contract
/// app` and CLI `branch` (both forms) of an app session whose path crosses
/// a compaction about every 500 entries peak at about the same RSS for the
/// whole path as for a tenth of it (before streaming, 1,000,000 entries took
/// 1.1 GB for rpc `getBranch` and 1.56 GB for `branch`). Runs with
/// `SESSIONTREE_SCALE_TESTS=1` (1,000,000 entries, or `PATH_ENTRIES`).
#[test]
fn app_get_branch_streams_in_bounded_memory() {
    if !std::path::Path::new("/proc/self/status").exists() {
        eprintln!("no /proc: peak RSS cannot be read here; skipped");
        return;
    }
    if std::env::var_os("SESSIONTREE_SCALE_TESTS").is_none() {
        eprintln!("SESSIONTREE_SCALE_TESTS unset: the child-RSS run is skipped");
        return;
    }
    let entries = std::env::var("PATH_ENTRIES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let (db, id, file) = app_archive(
        dir.path(),
        "scale",
        sessiontree_bench::gen::Shape::Linear,
        entries,
        500,
    );
    // Line 0 is the header; the entry a tenth of the way down.
    let tenth = {
        use std::io::BufRead;
        let line = std::io::BufReader::new(std::fs::File::open(&file).unwrap())
            .lines()
            .nth(entries / 10 + 1)
            .unwrap()
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        v["id"].as_str().unwrap().to_owned()
    };
    let os = |s: &str| std::ffi::OsString::from(s);
    let tenth_q = serde_json::to_string(&tenth).unwrap();
    let rpc_tenth = format!(r#"{{"id":1,"method":"getBranch","params":{{"fromId":{tenth_q}}}}}"#);
    let rpc_all = r#"{"id":1,"method":"getBranch","params":{}}"#.to_owned();
    let runs = [
        (
            "rpc --contract app getBranch",
            vec!["rpc", "--contract", "app", &id],
            [(None, rpc_tenth), (None, rpc_all)],
        ),
        (
            "--json branch",
            vec!["--json", "branch", &id],
            [(Some(tenth.as_str()), String::new()), (None, String::new())],
        ),
        (
            "branch",
            vec!["branch", &id],
            [(Some(tenth.as_str()), String::new()), (None, String::new())],
        ),
    ];
    for (what, command, inputs) in runs {
        let mut peaks = Vec::new();
        let mut sizes = Vec::new();
        for (from, input) in inputs {
            let mut args = vec![os("--db"), db.clone().into_os_string()];
            args.extend(command.iter().map(|a| os(a)));
            if let Some(from) = from {
                args.extend([os("--from"), os(from)]);
            }
            let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
            let (ok, peak_mb, bytes) = run_measured_counting(&refs, input.as_bytes());
            assert!(ok, "{what} failed");
            peaks.push(peak_mb);
            sizes.push(bytes);
        }
        eprintln!(
            "{what}: peak RSS {} MB for a tenth of the path ({} bytes out), {} MB for all {entries} entries ({} bytes out)",
            peaks[0], sizes[0], peaks[1], sizes[1]
        );
        assert!(
            sizes[1] > sizes[0] * 8,
            "{what}: {} bytes for the whole path, {} for a tenth",
            sizes[1],
            sizes[0]
        );
        assert!(
            peaks[1] < peaks[0] + 24,
            "{what} grew from {} MB to {} MB with a path ten times longer",
            peaks[0],
            peaks[1]
        );
    }
}
