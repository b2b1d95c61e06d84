//! `import`: pi's real files, pi's default directories, files appended to
//! or torn by pi, bad files among good ones, symlinked directories; and no
//! progress bar from any long command when stderr is not a terminal.

use super::*;

#[test]
fn import_real_pi_files_then_reimport_is_a_no_op() {
    let sb = Sandbox::new();
    let report = sb.import(&[&pi_fixtures()]);
    assert_eq!(report["files"], 2);
    assert_eq!(report["imported"], 2);
    assert_eq!(report["appended"], 0);
    assert_eq!(report["unchanged"], 0);
    assert_eq!(report["alreadyPresent"], 0);
    assert_eq!(report["failed"], json!([]));
    assert_eq!(report["tornTails"], json!([]));
    assert_eq!(report["entries"], 1002 + 1018);
    assert!(
        sb.default_db().is_file(),
        "the default archive is under XDG_DATA_HOME"
    );

    let again = sb.run(&["import", s(&pi_fixtures())]);
    let text = again.ok();
    assert!(
        text.starts_with(
            "2 files: 0 imported, 0 appended, 2 unchanged, 0 already present, 0 failed\n0 entries"
        ),
        "{text}"
    );
    let again = sb.json(&["import", s(&pi_fixtures())]);
    assert_eq!(
        (again["unchanged"].clone(), again["entries"].clone()),
        (json!(2), json!(0))
    );

    // The same session from another file is skipped, not duplicated.
    let copy = sb.write(
        "elsewhere/copy.jsonl",
        &read(&pi_fixtures().join("large-session.jsonl")),
    );
    let r = sb.import(&[&copy]);
    assert_eq!(
        (r["imported"].clone(), r["alreadyPresent"].clone()),
        (json!(0), json!(1))
    );

    // Version-1 files get ids v1-00001… chained in file order.
    let v = sb.json(&["branch", LARGE_ID]);
    let got = ids(&v["entries"]);
    assert_eq!(
        got.len(),
        1018,
        "no compaction: the whole file is the branch"
    );
    assert_eq!(got[0], "v1-00001");
    assert_eq!(got[1017], "v1-01018");
    assert_eq!(v["entries"][0]["parentId"], Value::Null);
    assert_eq!(v["entries"][1]["parentId"], "v1-00001");

    let ls = sb.json(&["ls"]);
    let listed: Vec<&str> = ls["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["id"].as_str().expect("id"))
        .collect();
    assert_eq!(listed, [COMPACTION_ID, LARGE_ID], "newest first");
    assert_eq!(ls["sessions"][0]["entries"], 1002);
    assert_eq!(ls["sessions"][0]["messages"], 990);
    assert_eq!(
        ls["sessions"][0]["cwd"],
        "/Users/badlogic/workspaces/pi-mono"
    );
    assert_eq!(ls["sessions"][0]["name"], Value::Null);

    // An app session's statistics are pi 1.6's `getSessionStats`.
    let st = sb.json(&["stats", COMPACTION_ID]);
    assert_eq!(st["totalMessages"], 990);
    assert_eq!(st["contract"], "app");
    assert_eq!(st["entries"], 1002);
    let total = sb.json(&["stats"]);
    assert_eq!(total["sessions"], 2);
    assert_eq!(total["entries"], 2020);
    assert_eq!(total["messageCount"], 990 + 914);
    assert_eq!(
        total["rows"][0]["project"],
        "/Users/badlogic/workspaces/pi-mono"
    );
    assert_eq!(total["total"]["cost"], 72.9261052);
    let checked = sb.json(&["check"]);
    assert_eq!(
        (&checked["ok"], &checked["problems"]),
        (&json!(true), &json!([]))
    );
    // Two unforked sessions: a segment and its ancestry row each, and two compactions.
    assert_eq!(checked["cache"]["rows"], 6);
}

#[test]
fn import_defaults_to_pis_sessions_dir_and_db_overrides_the_archive() {
    let sb = Sandbox::new();
    // ~/.pi/agent/sessions
    small_session(
        "01950000-0000-7000-8000-00000000d001",
        "/p",
        "2025-01-01T00:00:00.000Z",
        "home",
        None,
    )
    .save(&sb, "home/.pi/agent/sessions");
    // $PI_CODING_AGENT_DIR/sessions wins over it.
    small_session(
        "01950000-0000-7000-8000-00000000d002",
        "/p",
        "2025-01-01T00:00:00.000Z",
        "env",
        None,
    )
    .save(&sb, "agent/sessions");

    let r = sb.run(&["--json", "import"]).json();
    assert_eq!(
        (r["files"].clone(), r["imported"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(
        r["roots"],
        json!([s(&sb.home().join(".pi/agent/sessions"))])
    );
    assert_eq!(
        sb.json(&["ls"])["sessions"][0]["id"],
        "01950000-0000-7000-8000-00000000d001"
    );

    // Set but empty is unset, as in a shell: pi's default directory again.
    let mut c = sb.command();
    c.env("PI_CODING_AGENT_DIR", "");
    let r = sb.run_with(c, &["--json", "import"]).json();
    assert_eq!(
        r["roots"],
        json!([s(&sb.home().join(".pi/agent/sessions"))])
    );

    let mut c = sb.command();
    c.env("PI_CODING_AGENT_DIR", sb.path("agent"));
    let db = sb.path("other.db");
    let r = sb.run_with(c, &["--json", "--db", s(&db), "import"]).json();
    assert_eq!(r["imported"], 1);
    assert_eq!(r["roots"], json!([s(&sb.path("agent/sessions"))]));
    assert!(db.is_file());
    let ls = sb.json(&["--db", s(&db), "ls"]);
    assert_eq!(ls["sessions"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        ls["sessions"][0]["id"],
        "01950000-0000-7000-8000-00000000d002"
    );

    // No pi directory at all: not_found naming it and where it came from,
    // no archive made; `--demo` writes the demo into an archive of its own.
    let empty = Sandbox::new();
    let r = empty.run(&["import"]);
    let msg = r.fails(3, "not_found");
    assert!(
        msg.contains(s(&empty.home().join(".pi/agent/sessions"))) && msg.contains("--demo"),
        "{r:#?}"
    );
    assert!(!empty.default_db().exists(), "{r:#?}");
    let demo_db = empty.path("data/sessiontree/archive-demo.db");
    let r = empty.run(&["import", "--demo"]);
    let expected = format!(
        "demo sessions from {} imported into the demo archive {} (not into {}); browse it with: sessiontree --db {} ls\n",
        empty.path("data/sessiontree/demo-sessions").display(),
        demo_db.display(),
        empty.default_db().display(),
        demo_db.display()
    );
    assert!(r.ok().starts_with(&expected), "{r:#?}");
    assert!(!empty.default_db().exists(), "{r:#?}");
    assert_eq!(
        empty.json(&["import", "--demo"])["unchanged"],
        empty.json(&["--db", s(&demo_db), "stats"])["sessions"]
    );
    // A path that does not exist: not_found, naming it, nothing imported.
    let missing = empty.path("nowhere");
    let err = empty.run(&["import", s(&missing)]);
    assert!(err.fails(3, "not_found").contains(s(&missing)), "{err:#?}");
}

#[test]
fn appended_file_imports_only_the_new_lines() {
    let sb = Sandbox::new();
    let mut f = tree_session();
    let path = f.save(&sb, "sessions");
    let r = sb.import(&[&path]);
    assert_eq!(
        (r["imported"].clone(), r["entries"].clone()),
        (json!(1), json!(36))
    );
    let r = sb.import(&[&path]);
    assert_eq!(
        (r["unchanged"].clone(), r["entries"].clone()),
        (json!(1), json!(0))
    );

    // pi appends two entries: usr00008 "Publish it to crates.io" and its answer
    // ast00014 (the third of these lines, usr00009 "Thanks!", comes later).
    let mut later = cli_fixture_lines("tree-session.appended.jsonl").into_iter();
    let before = f.lines.len();
    f.lines.extend(later.by_ref().take(2));
    std::fs::write(&path, f.text()).expect("append");
    let r = sb.import(&[&path]);
    assert_eq!(
        (
            r["appended"].clone(),
            r["imported"].clone(),
            r["entries"].clone()
        ),
        (json!(1), json!(0), json!(f.lines.len() - before))
    );
    let branch = ids(&sb.json(&["branch", TREE_ID])["entries"]);
    assert_eq!(branch.last().map(String::as_str), Some("ast00014"));
    let hits = sb.json(&["search", "crates.io"]);
    assert_eq!(hits["hits"][0]["entry"], "usr00008");
    assert_eq!(sb.json(&["import", s(&path)])["unchanged"], 1);

    // pi is writing a line right now: the torn tail waits for the next import.
    let mut text = f.text();
    text.push_str(r#"{"type":"message","id":"usr00009","parentId":"ast00014","timest"#);
    std::fs::write(&path, &text).expect("torn");
    let r = sb.import(&[&path]);
    assert_eq!(r["appended"], 1);
    assert_eq!(r["entries"], 0);
    assert_eq!(
        r["tornTails"],
        json!([{"file": s(&path), "line": f.lines.len() + 1}])
    );
    f.lines.push(later.next().expect("usr00009"));
    std::fs::write(&path, f.text()).expect("complete");
    let r = sb.run(&["import", s(&path)]);
    assert!(
        r.ok().starts_with("1 files: 0 imported, 1 appended"),
        "{r:#?}"
    );
    let branch = ids(&sb.json(&["branch", TREE_ID])["entries"]);
    assert_eq!(branch.last().map(String::as_str), Some("usr00009"));

    // A file rewritten (an entry's content changed under its id) is a
    // conflict: refused, and the archive keeps its copy.
    std::fs::write(&path, f.text().replace("Thanks!", "Thank you!")).expect("rewrite");
    let r = sb.run(&["--json", "import", s(&path)]);
    assert_eq!(r.status, 2, "{r:#?}");
    let v = r.parse();
    assert_eq!(v["failed"][0]["code"], "invalid_session");
    let msg = v["failed"][0]["message"].as_str().expect("message");
    assert!(msg.contains("differ between pi's file"), "{msg}");
    assert_eq!(
        sb.json(&["search", "Thanks"])["hits"][0]["entry"],
        "usr00009"
    );
    assert_eq!(sb.json(&["check"])["ok"], true);
}

#[test]
fn a_line_pi_skips_is_kept_and_reported_with_file_and_line_and_a_file_without_header_fails() {
    let sb = Sandbox::new();
    let good_a = small_session(
        "01950000-0000-7000-8000-0000000000a1",
        "/p",
        "2025-01-01T00:00:00.000Z",
        "alpha",
        None,
    )
    .save(&sb, "in");
    // Line 3 (of 4) is not JSON: pi 1.6 skips it, and so does the import,
    // keeping it verbatim.
    let mut bad = small_session(
        "01950000-0000-7000-8000-0000000000b1",
        "/p",
        "2025-01-02T00:00:00.000Z",
        "beta",
        None,
    );
    bad.lines
        .insert(2, r#"{"type":"message","id":"oops","#.to_owned());
    let bad_path = bad.save(&sb, "in");
    // A file whose first line is not a session header: pi throws too.
    let no_header = sb.write("in/--p--/notes.jsonl", "{\"hello\":1}\n");

    let r = sb.run(&["import", s(&sb.path("in"))]);
    assert_eq!(r.status, 2, "{r:#?}");
    let text = &r.stdout;
    assert!(
        text.starts_with(
            "3 files: 2 imported, 0 appended, 0 unchanged, 0 already present, 1 failed\n"
        ),
        "{text}"
    );
    let line = format!(
        "{}:3: kept verbatim, pi skips it: not valid JSON\n",
        bad_path.display()
    );
    assert!(text.contains(&line), "names file and line:\n{text}");
    let header = format!(
        "failed [invalid_session]: Invalid JSONL session file {}: first line is not a valid session header\n",
        no_header.display()
    );
    assert!(text.contains(&header), "{text}");
    assert!(good_a.exists());
    // The archive answers without the line; export gives the file back.
    assert_eq!(
        sb.json(&["stats", "01950000-0000-7000-8000-0000000000b1"])["entries"],
        json!(bad.lines.len() - 2)
    );
    let out = sb.path("out");
    sb.run(&[
        "export",
        "01950000-0000-7000-8000-0000000000b1",
        "--out",
        s(&out),
    ])
    .ok();
    let exported = find_jsonl(&out);
    assert_eq!(
        std::fs::read(&exported).expect("exported"),
        std::fs::read(&bad_path).expect("source"),
        "byte-identical"
    );

    // The same in JSON: each kept line with its file and line.
    let sb2 = Sandbox::new();
    let v = sb2.import(&[&good_a, &bad_path]);
    assert_eq!(v["imported"], 2);
    let kept = v["keptLines"].as_array().expect("keptLines");
    assert_eq!(kept.len(), 1, "{v}");
    assert_eq!(kept[0]["file"], s(&bad_path));
    assert_eq!(kept[0]["line"], 3);
    assert_eq!(kept[0]["blank"], false);
    assert_eq!(sb2.json(&["check"])["ok"], true);
}

/// The one `.jsonl` file below `dir`.
fn find_jsonl(dir: &std::path::Path) -> std::path::PathBuf {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "jsonl") {
                found.push(p);
            }
        }
    }
    assert_eq!(found.len(), 1, "{found:?}");
    found.remove(0)
}

#[cfg(unix)]
#[test]
fn import_does_not_follow_symlinked_directories() {
    let sb = Sandbox::new();
    let file = small_session(
        "01950000-0000-7000-8000-00000000e002",
        "/p",
        "2025-01-01T00:00:00.000Z",
        "links",
        None,
    )
    .save(&sb, "tree");
    assert!(file.exists());
    // A loop back to the root, and a link to a directory elsewhere.
    std::os::unix::fs::symlink(sb.path("tree"), sb.path("tree/loop")).expect("symlink");
    let r = sb.json(&["import", sb.path("tree").to_str().expect("utf-8")]);
    assert_eq!(
        (r["files"].clone(), r["imported"].clone()),
        (json!(1), json!(1)),
        "{r}"
    );
}

/// A mistyped pi directory never fills a real archive with demo data:
/// `import` says what is missing and adds nothing; `--demo` writes its own
/// archive beside the real one and leaves the real one as it was.
#[test]
fn import_with_a_missing_pi_directory_leaves_a_real_archive_alone() {
    let sb = Sandbox::new();
    let f = small_session(
        "01950000-cccc-7000-8000-000000000001",
        "/home/ada/real",
        "2025-03-01T10:00:00.000Z",
        "real work",
        None,
    );
    let src = f.save(&sb, "pi");
    sb.import(&[&src]);
    let mut c = sb.command();
    c.env("PI_CODING_AGENT_DIR", sb.path("typo"));
    let r = sb.run_with(c, &["import"]);
    let msg = r.fails(3, "not_found").to_owned();
    assert!(msg.contains("typo") && msg.contains("--demo"), "{msg}");
    let listed = sb.json(&["ls"]);
    assert_eq!(
        listed["sessions"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );

    let before = std::fs::read(sb.default_db()).expect("archive");
    let mut c = sb.command();
    c.env("PI_CODING_AGENT_DIR", sb.path("typo"));
    let r = sb
        .run_with(c, &["--json", "import", "--demo", "--quiet"])
        .json();
    let demo_db = sb.path("data/sessiontree/archive-demo.db");
    assert_eq!(r["archive"], json!(s(&demo_db)), "{r}");
    assert_eq!(std::fs::read(sb.default_db()).expect("archive"), before);
    let listed = sb.json(&["ls", "--limit", "1000"]);
    assert_eq!(
        listed["sessions"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    let demo = sb.json(&["--db", s(&demo_db), "ls", "--limit", "1000"]);
    assert_eq!(demo["sessions"].as_array().map(Vec::len), Some(3), "{demo}");
    // Named explicitly, the demo archive is its own demo archive; paths and
    // --demo do not mix.
    let r = sb.json(&["--db", s(&demo_db), "import", "--demo"]);
    assert_eq!(
        (r["archive"].clone(), r["unchanged"].clone()),
        (json!(s(&demo_db)), json!(3))
    );
    let r = sb.run(&["import", "--demo", s(&src)]);
    assert_eq!(r.status, 2, "{r:#?}");
}

#[test]
fn long_commands_draw_no_progress_bar_when_stderr_is_not_a_terminal() {
    let sb = Sandbox::new();
    // A multi-MB file, so the import reports bytes within it as it goes.
    let gen = sessiontree_bench::gen::generate(
        &sb.path("gen"),
        &sessiontree_bench::gen::GenOptions {
            shape: sessiontree_bench::gen::Shape::Linear,
            entries: 3000,
            seed: 3,
            ..Default::default()
        },
    )
    .expect("generate");
    let file = &gen.sessions[0].path;
    let id = &gen.sessions[0].id;
    // Piped stdout and stderr, no --json, no --quiet: still no bar.
    let runs = [
        sb.run(&["import", s(file), s(&pi_fixtures())]),
        sb.run(&["export", id, "--out", s(&sb.path("out"))]),
        sb.run(&["check"]),
        sb.run(&["compact"]),
    ];
    for run in &runs {
        assert_eq!(run.status, 0, "{run:#?}");
        assert!(
            !run.stderr.contains('\u{1b}') && !run.stderr.contains('\r'),
            "a progress bar's escape sequences on stderr: {run:#?}"
        );
        assert_eq!(run.stderr, "", "{run:#?}");
        assert!(!run.stdout.contains('\u{1b}'), "{run:#?}");
    }
    assert!(
        runs[0].stdout.starts_with("3 files: 3 imported"),
        "{:#?}",
        runs[0]
    );
}

/// A session's entries and their search rows as another connection sees
/// them (one read transaction): (entries, entries with search text, search
/// rows), of the staged session if `staged`, else of all visible ones.
fn committed_rows(db: &Path, staged: bool) -> Option<(i64, i64, i64)> {
    let conn =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .ok()?;
    let which = if staged { "IS NOT NULL" } else { "IS NULL" };
    conn.execute_batch("BEGIN").ok()?;
    let counts = conn
        .query_row(
            &format!(
                "WITH e AS (SELECT entry_key, role_id FROM entries
                             WHERE session_key IN (SELECT session_key FROM sessions
                                                    WHERE staged_from {which}))
                 SELECT (SELECT count(*) FROM e),
                        (SELECT count(*) FROM e WHERE role_id IS NOT NULL),
                        (SELECT count(*) FROM message_text
                          WHERE rowid IN (SELECT entry_key FROM e))"
            ),
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .ok();
    let _ = conn.execute_batch("COMMIT");
    counts
}

/// Runs `import --quiet PATH` into `db` with the test batch knob `batch`
/// (`ROWS:PAUSE_MS`), calling `seen` with every state another connection
/// sees until it ends; the import must succeed.
fn import_watched(sb: &Sandbox, db: &Path, path: &Path, batch: &str, mut seen: impl FnMut()) {
    let mut child = sb
        .command()
        .args(["--db", s(db), "import", "--quiet", s(path)])
        .env("SESSIONTREE_TEST_BATCH", batch)
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn import");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while child.try_wait().expect("wait").is_none() {
        assert!(std::time::Instant::now() < deadline, "the import hung");
        seen();
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert!(child.wait().expect("wait").success());
}

/// A big file's import (written staged, in batches) commits batches of the
/// test knob's size, each with its entries' search rows: no state another
/// connection sees holds part of a batch, or entries whose search rows
/// follow in a later commit. (The batch's search rows count towards its
/// bound; bounded by time alone, the old batches ended anywhere.)
#[test]
fn a_staged_import_commits_whole_batches_with_their_search_rows() {
    let sb = Sandbox::new();
    let gen = sessiontree_bench::gen::generate(
        &sb.path("gen"),
        &sessiontree_bench::gen::GenOptions {
            shape: sessiontree_bench::gen::Shape::Linear,
            entries: 6000,
            seed: 5,
            ..Default::default()
        },
    )
    .expect("generate");
    let file = &gen.sessions[0].path;
    let size = std::fs::metadata(file).expect("size").len();
    assert!(
        size > 4 << 20,
        "a file imported alone, staged: {size} bytes"
    );
    let db = sb.path("batches.db");
    const ROWS: i64 = 250;
    let mut states = std::collections::BTreeSet::new();
    import_watched(&sb, &db, file, &format!("{ROWS}:10"), || {
        if let Some((entries, texts, rows)) = committed_rows(&db, true) {
            assert_eq!(entries % ROWS, 0, "a part of a batch committed");
            assert_eq!(rows, texts, "entries committed without their search rows");
            states.insert(entries);
        }
    });
    assert!(
        states.iter().filter(|&&n| n > 0).count() >= 2,
        "too few batches seen: {states:?}"
    );
    let (entries, texts, rows) = committed_rows(&db, false).expect("the archive");
    assert_eq!(entries, gen.sessions[0].entries as i64);
    assert_eq!(rows, texts);
}

/// Small files are written several to a transaction, and a group ends at
/// the end of the file that brings it to the batch's bound (here the test
/// knob's rows; otherwise the batch clock, search rows and commit
/// included), not at a size that could hold the lock for several batches.
#[test]
fn grouped_small_files_commit_in_bounded_groups() {
    let sb = Sandbox::new();
    let gen = sessiontree_bench::gen::generate(
        &sb.path("home"),
        &sessiontree_bench::gen::GenOptions {
            shape: sessiontree_bench::gen::Shape::Archive,
            entries: 1200,
            sessions: Some(12),
            seed: 6,
            ..Default::default()
        },
    )
    .expect("generate");
    assert_eq!(gen.sessions.len(), 12);
    let db = sb.path("groups.db");
    let mut partial = 0;
    import_watched(&sb, &db, &sb.path("home"), "1:15", || {
        let visible =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .and_then(|c| {
                    c.query_row(
                        "SELECT count(*) FROM sessions WHERE staged_from IS NULL",
                        [],
                        |r| r.get::<_, i64>(0),
                    )
                })
                .unwrap_or(0);
        if (1..12).contains(&visible) {
            partial += 1;
        }
    });
    assert!(partial > 0, "the 12 files were written in one transaction");
    let (entries, texts, rows) = committed_rows(&db, false).expect("the archive");
    let written: usize = gen.sessions.iter().map(|s| s.entries).sum();
    assert_eq!(entries, written as i64);
    assert_eq!(rows, texts);
}
