//! The writing commands: `label`, `name`, `move` and `fork` on an archive
//! session and on a `.jsonl` file (then `check`), `export` and `delete`.

use super::*;

/// The ids of the `--json` tree's entries that carry a label, with it.
fn labels(tree: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = tree["lines"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| {
            let label = l["label"].as_str()?;
            Some((l["id"].as_str().expect("id").to_owned(), label.to_owned()))
        })
        .collect();
    out.sort();
    out
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect()
}

/// label, name and move on `session` (an archive id or a `.jsonl` path);
/// returns the ids of the entries they appended.
fn label_name_move(sb: &Sandbox, session: &str) -> Vec<String> {
    let mut appended = Vec::new();
    let entry = |appended: &mut Vec<String>, v: &Value, key: &str| {
        let id = v[key].as_str().expect("new entry id").to_owned();
        assert_eq!(id.len(), 8, "a fresh entry id is 8 characters: {id}");
        appended.push(id);
    };

    // label: set, shown, then cleared; the label entry becomes the leaf.
    let v = sb.json(&["label", session, "usr00005", " escapes "]);
    assert_eq!(
        (v["target"].as_str(), v["label"].as_str()),
        (Some("usr00005"), Some("escapes"))
    );
    entry(&mut appended, &v, "entry");
    assert_eq!(
        labels(&sb.json(&["tree", session, "--all", "--fold", "0"])),
        pairs(&[
            ("ast00013", "bench"),
            ("usr00001", "setup"),
            ("usr00004", "hand-written"),
            ("usr00005", "escapes")
        ])
    );
    assert_eq!(sb.json(&["tree", session])["leaf"], v["entry"]);
    let text = sb.run(&["label", session, "usr00001", "  "]);
    assert!(
        text.ok()
            .starts_with("cleared the label of usr00001 (entry "),
        "{text:#?}"
    );
    appended.push(text.ok()[37..45].to_owned());
    let v = sb.json(&["label", session, "usr00004", "hand-written"]);
    assert_eq!(v["label"], "hand-written");
    entry(&mut appended, &v, "entry");
    assert_eq!(
        labels(&sb.json(&["tree", session, "--all", "--fold", "0"])),
        pairs(&[
            ("ast00013", "bench"),
            ("usr00004", "hand-written"),
            ("usr00005", "escapes")
        ])
    );
    let err = sb.run(&["label", session, "nope", "x"]);
    assert!(
        err.fails(3, "not_found").contains("Entry nope not found"),
        "{err:#?}"
    );
    let err = sb.run(&["--json", "label", session, "nope", "x"]);
    assert_eq!(err.status, 3);
    assert_eq!(
        err.parse(),
        json!({"error": {"code": "not_found", "message": "Entry nope not found"}})
    );

    // name: CR/LF runs become one space, then trimmed.
    let v = sb.json(&["name", session, "  Tiny\r\n\nJSON  "]);
    assert_eq!(v["name"], "Tiny JSON");
    entry(&mut appended, &v, "entry");
    assert_eq!(
        sb.run(&["name", session, "tinyjson, final"]).ok(),
        "named \"tinyjson, final\"\n"
    );
    appended.push(
        sb.json(&["branch", session])["entries"]
            .as_array()
            .and_then(|a| a.last())
            .expect("last")["id"]
            .as_str()
            .expect("id")
            .to_owned(),
    );

    // move with a summary: back to the nom attempt.
    let v = sb.json(&[
        "move",
        session,
        "usr00002",
        "--summary",
        "Back to nom, with caching",
    ]);
    // It appends a `leaf` entry (whose id is not reported), then the summary.
    appended.push(String::new());
    entry(&mut appended, &v, "summary");
    assert_eq!(v["leaf"], v["summary"]);
    let branch = sb.json(&["branch", session]);
    let last = branch["entries"]
        .as_array()
        .and_then(|a| a.last())
        .expect("last")
        .clone();
    assert_eq!(last["type"], "branch_summary");
    assert_eq!(last["parentId"], "usr00002");
    assert_eq!(last["fromId"], "usr00002");
    assert_eq!(last["summary"], "Back to nom, with caching");
    let context = sb.json(&["context", session]);
    let messages = context["messages"].as_array().expect("messages");
    assert_eq!(messages.last().expect("last")["role"], "branchSummary");
    assert_eq!(
        messages.len(),
        6,
        "usr00001 … ast00002, usr00002, the summary"
    );
    let tree = sb.run(&["tree", session, "--all", "--fold", "0"]);
    assert_eq!(
        tree.ok().matches("[leaf → usr00002]").count(),
        1,
        "{}",
        tree.ok()
    );

    sb.run(&["move", session, "nope"]).fails(3, "not_found");

    // move to root: nothing is active, the context is empty.
    let v = sb.json(&["move", session, "root"]);
    assert_eq!(v, json!({"leaf": null, "summary": null}));
    appended.push(String::new());
    assert!(sb
        .run(&["tree", session])
        .ok()
        .starts_with("(the leaf stands before the first entry)\n"));
    assert_eq!(sb.json(&["context", session])["messages"], json!([]));
    assert_eq!(sb.json(&["branch", session])["entries"], json!([]));

    // And back, without a summary.
    let r = sb.run(&["move", session, "lbl00003"]);
    assert_eq!(r.ok(), "leaf is now lbl00003\n");
    appended.push(String::new());
    assert_eq!(sb.json(&["tree", session])["leaf"], "lbl00003");
    appended
}

/// The fork errors, the same for an archive session and a file.
fn fork_errors(sb: &Sandbox, session: &str) {
    let err = sb.run(&["fork", session, "--entry", "ast00013"]);
    assert!(
        err.fails(6, "invalid_fork_target")
            .contains("Entry ast00013 is not a user message"),
        "{err:#?}"
    );
    let err = sb.run(&["fork", session, "--entry", "nope", "--position", "at"]);
    assert!(
        err.fails(6, "invalid_fork_target")
            .contains("Entry nope not found"),
        "{err:#?}"
    );
    let err = sb.run(&["--json", "fork", session, "--entry", "nope"]);
    assert_eq!(err.status, 6);
    assert_eq!(err.parse()["error"]["code"], "invalid_fork_target");
    let err = sb.run(&[
        "fork",
        session,
        "--entry",
        "usr00004",
        "--position",
        "after",
    ]);
    assert_eq!(err.status, 2, "a bad value is a usage error: {err:#?}");
}

#[test]
fn writes_on_an_archive_session() {
    let sb = Sandbox::new();
    let original = tree_session().save(&sb, "sessions");
    sb.import(&[&original]);
    let appended = label_name_move(&sb, "01950000-aaaa");
    let ls = sb.json(&["ls", "--name", "TINYJSON"]);
    assert_eq!(ls["sessions"][0]["name"], "tinyjson, final");
    assert_eq!(ls["sessions"][0]["entries"], 36 + appended.len());

    // fork before a user message: the path to its parent.
    let v = sb.json(&["fork", TREE_ID, "--entry", "usr00004"]);
    assert_eq!(v["entries"], 8);
    assert_eq!(v["path"], Value::Null);
    let before = v["session"].as_str().expect("id").to_owned();
    assert_eq!(
        ids(&sb.json(&["branch", &before])["entries"]),
        [
            "mdl00001", "thk00001", "usr00001", "ast00001", "res00001", "ast00002", "lbl00001",
            "bsm00001"
        ]
    );
    // fork at an entry: its path, cut at the compaction as the contract says.
    let v = sb.json(&["fork", TREE_ID, "--entry", "usr00005", "--position", "at"]);
    assert_eq!(v["entries"], 3);
    let at = v["session"].as_str().expect("id").to_owned();
    assert_eq!(
        ids(&sb.json(&["branch", &at])["entries"]),
        ["ast00010", "cmp00001", "usr00005"]
    );
    // Without --entry: the whole log.
    let r = sb.run(&["fork", TREE_ID]);
    assert!(
        r.ok().starts_with("forked into ")
            && r.ok()
                .ends_with(&format!(" ({} entries)\n", 36 + appended.len())),
        "{r:#?}"
    );
    fork_errors(&sb, TREE_ID);
    sb.run(&["fork", "nope", "--entry", "usr00004"])
        .fails(3, "not_found");
    assert_eq!(
        sb.json(&["ls"])["sessions"].as_array().map(Vec::len),
        Some(4)
    );

    // The archive wrote pi lines: the export is the original plus them.
    let out = sb.path("out");
    sb.json(&["export", TREE_ID, "--out", s(&out)]);
    let exported = read(&out.join(tree_session().pi_path()));
    let original = read(&original);
    assert!(exported.starts_with(&original));
    let new_lines: Vec<Value> = exported[original.len()..]
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    assert_eq!(new_lines.len(), appended.len());
    for (line, id) in new_lines.iter().zip(&appended) {
        if !id.is_empty() {
            assert_eq!(line["id"], id.as_str());
        }
        assert!(
            line["timestamp"]
                .as_str()
                .is_some_and(|t| t.len() == 24 && t.ends_with('Z')),
            "{line}"
        );
    }

    let checked = sb.json(&["check"]);
    assert_eq!(
        (&checked["ok"], &checked["problems"]),
        (&json!(true), &json!([]))
    );
    // The cache's size is reported, in all and for the sessions with the most rows per entry.
    let cache = &checked["cache"];
    assert!(cache["rows"].as_i64().is_some_and(|r| r > 0), "{checked}");
    assert!(
        cache["rowsPerEntry"].as_f64().is_some_and(|r| r < 1.0),
        "{checked}"
    );
    assert!(
        cache["mostPerEntry"][0]["segments"]
            .as_i64()
            .is_some_and(|s| s >= 1),
        "{checked}"
    );
    let text = sb.run(&["check", TREE_ID]).ok().to_owned();
    assert!(
        text.starts_with(
            "ok: quick_check passed, every branch cache equals its rebuild, and every entry's stored text, blobs and search row check out\nchecked 1 sessions: 0 entries read (0 sessions read whole, 1 unchanged since the last check; `check --full` reads every entry again)\nbranch cache: "
        ),
        "{text}"
    );
    assert!(text.contains(&format!("  {TREE_ID}: ")), "{text}");
    sb.run(&["check", "nope"]).fails(3, "not_found");

    // A file with problems: listed, status 8. A missing file is an error.
    // The tree session's header, then a and b each other's parent, and c's parent missing.
    let broken = sb.write("broken.jsonl", &cli_fixture("cyclic-parents.jsonl"));
    let r = sb.run(&["--json", "check", s(&broken)]);
    assert_eq!(r.status, 8, "{r:#?}");
    let problems = r.parse()["problems"].clone();
    assert_eq!(
        problems[0],
        "entry a: Entry a is its own ancestor: the parentId chain has a cycle"
    );
    // c's missing parent is what pi opens (its path stops at c): a warning;
    // the active path through it still fails here, a problem.
    assert!(
        problems
            .as_array()
            .is_some_and(|p| p.contains(&json!("the active path: Entry zz not found"))),
        "{problems}"
    );
    assert!(
        r.parse()["warnings"][0]
            .as_str()
            .is_some_and(|w| w.starts_with("entry c names parent zz, which is not in the session")),
        "{r:#?}"
    );
    let r = sb.run(&["check", s(&broken)]);
    assert_eq!(r.status, 8);
    assert!(
        r.stdout
            .starts_with("problem: entry a: Entry a is its own ancestor"),
        "{r:#?}"
    );
    let header = &tree_session().lines[0];
    let bad_line = sb.write("bad-line.jsonl", &format!("{header}\n{{\n"));
    let r = sb.run(&["check", s(&bad_line)]);
    assert_eq!(r.status, 8);
    assert_eq!(
        r.stdout,
        "problem: line 2: kept in the file, pi skips it: not valid JSON\n"
    );
    sb.run(&["check", s(&sb.path("missing.jsonl"))])
        .fails(3, "not_found");
}

#[test]
fn writes_on_a_jsonl_path() {
    let sb = Sandbox::new();
    let path = tree_session().save(&sb, "sessions");
    let p = s(&path);
    sb.import(&[&path]);
    let before = read(&path);
    let appended = label_name_move(&sb, p);
    let after = read(&path);
    assert!(after.starts_with(&before), "only appended to");
    assert_eq!(after[before.len()..].lines().count(), appended.len());

    // The archive catches up by importing the appended lines, and then shows
    // exactly what the file shows.
    let r = sb.import(&[&path]);
    assert_eq!(
        (r["appended"].clone(), r["entries"].clone()),
        (json!(1), json!(appended.len()))
    );
    assert_eq!(sb.run(&["tree", p]).ok(), sb.run(&["tree", TREE_ID]).ok());
    assert_eq!(sb.json(&["stats", p]), sb.json(&["stats", TREE_ID]));
    assert_eq!(sb.json(&["context", p]), sb.json(&["context", TREE_ID]));

    // fork of a file: a new file next to it, pointing back at it.
    let v = sb.json(&["fork", p, "--entry", "usr00004"]);
    assert_eq!(v["entries"], 8);
    let id = v["session"].as_str().expect("id");
    let fork_path = PathBuf::from(v["path"].as_str().expect("path"));
    assert_eq!(fork_path.parent(), path.parent());
    assert!(fork_path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with(&format!("_{id}.jsonl"))));
    let text = read(&fork_path);
    let header: Value = serde_json::from_str(text.lines().next().expect("header")).expect("json");
    assert_eq!(header["version"], 3);
    assert_eq!(header["id"], id);
    assert_eq!(header["cwd"], "/home/ada/tinyjson");
    assert_eq!(
        header["parentSession"],
        s(&std::fs::canonicalize(&path).expect("canonical"))
    );
    assert_eq!(
        ids(&sb.json(&["branch", s(&fork_path)])["entries"]),
        [
            "mdl00001", "thk00001", "usr00001", "ast00001", "res00001", "ast00002", "lbl00001",
            "bsm00001"
        ]
    );
    let v = sb.json(&["fork", p, "--entry", "usr00005", "--position", "at"]);
    assert_eq!(v["entries"], 3);
    fork_errors(&sb, p);
    // check validates a file too.
    assert_eq!(
        sb.run(&["check", p]).ok(),
        format!(
            "ok: {p} is a valid session file ({} entries)\n",
            36 + appended.len()
        )
    );
    assert_eq!(
        sb.json(&["check", s(&fork_path)]),
        json!({"ok": true, "problems": [], "warnings": []})
    );
    sb.run(&["fork", s(&sb.path("missing.jsonl")), "--entry", "usr00004"])
        .fails(3, "not_found");
    // The forks import like any pi file.
    let r = sb.import(&[&sb.path("sessions")]);
    assert_eq!(
        (r["imported"].clone(), r["unchanged"].clone()),
        (json!(2), json!(1))
    );
    assert_eq!(sb.json(&["check"])["ok"], true);
}

#[test]
fn export_is_byte_identical_for_v3_and_upgrades_v1() {
    let sb = Sandbox::new();
    let tree = tree_session();
    let original = tree.save(&sb, "sessions");
    let small = small_session(
        "01950000-0000-7000-8000-0000000000e1",
        "C:\\Users\\ada",
        "2025-01-01T00:00:00.000Z",
        "windows",
        None,
    );
    let small_path = small.save(&sb, "sessions");
    sb.import(&[&sb.path("sessions"), &pi_fixtures()]);

    // One session, by prefix: the same bytes at the same place in pi's layout.
    let out = sb.path("out");
    let v = sb.json(&["export", "01950000-aaaa", "--out", s(&out)]);
    let exported = out.join(tree.pi_path());
    assert_eq!(
        v,
        json!({"exported": [{"session": TREE_ID, "path": s(&exported), "action": "created", "backup": null}], "failed": []})
    );
    assert_eq!(
        std::fs::read(&exported).expect("exported"),
        std::fs::read(&original).expect("original")
    );

    // Everything.
    let all = sb.path("all");
    let r = sb.run(&["export", "--all", "--out", s(&all)]);
    assert_eq!(r.ok().lines().count(), 4, "{r:#?}");
    assert_eq!(read(&all.join(tree.pi_path())), read(&original));
    assert_eq!(read(&all.join(small.pi_path())), read(&small_path));
    assert!(
        small.pi_path().starts_with("--C--Users-ada--/"),
        "{}",
        small.pi_path()
    );

    // A version-1 file comes out as the upgraded version 3.
    let v1 = read(&find_file(&all, &format!("_{COMPACTION_ID}.jsonl")));
    let lines: Vec<Value> = v1
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    assert_eq!(lines.len(), 1003);
    assert_eq!(lines[0]["type"], "session");
    assert_eq!(lines[0]["version"], 3);
    assert_eq!(lines[0]["id"], COMPACTION_ID);
    for (i, e) in lines.iter().enumerate().skip(1) {
        assert_eq!(e["id"], format!("v1-{i:05}"));
        let parent = if i == 1 {
            Value::Null
        } else {
            json!(format!("v1-{:05}", i - 1))
        };
        assert_eq!(e["parentId"], parent);
    }
    let compactions: Vec<&Value> = lines.iter().filter(|e| e["type"] == "compaction").collect();
    assert_eq!(compactions.len(), 2);
    for c in compactions {
        assert!(
            c["firstKeptEntryId"]
                .as_str()
                .is_some_and(|id| id.starts_with("v1-")),
            "{c}"
        );
        assert!(c.get("firstKeptEntryIndex").is_none());
    }
    // The upgraded file reads as the archive session does, and is a fixed point.
    let exported_v1 = find_file(&all, &format!("_{COMPACTION_ID}.jsonl"));
    assert_eq!(
        sb.run(&["tree", s(&exported_v1)]).ok(),
        sb.run(&["tree", COMPACTION_ID]).ok()
    );
    let sb2 = Sandbox::new();
    sb2.import(&[&exported_v1]);
    let again = sb2.path("again");
    sb2.json(&["export", COMPACTION_ID, "--out", s(&again)]);
    assert_eq!(read(&find_file(&again, ".jsonl")), v1);

    // Errors: nothing named, an unknown session.
    sb.run(&["export", "--out", s(&out)]).fails(2, "usage");
    sb.run(&["export", "nope", "--out", s(&out)])
        .fails(3, "not_found");
}

#[test]
fn export_refuses_to_write_outside_the_directory() {
    let sb = Sandbox::new();
    let evil = small_session(
        "../../escaped",
        "/p",
        "2025-01-01T00:00:00.000Z",
        "escape",
        None,
    );
    let good = small_session(
        "01950000-0000-7000-8000-0000000000f1",
        "/p",
        "2025-01-02T00:00:00.000Z",
        "fine",
        None,
    );
    sb.write("in/evil.jsonl", &evil.text());
    good.save(&sb, "in");
    // Import refuses an id that could never be exported, naming the file.
    let imported = sb.run(&["--json", "import", s(&sb.path("in"))]);
    assert_eq!(imported.status, 2, "{imported:#?}");
    let v = imported.parse();
    assert_eq!(
        (v["imported"].as_u64(), v["failed"][0]["code"].as_str()),
        (Some(1), Some("invalid_session"))
    );
    assert!(
        v["failed"][0]["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("evil.jsonl")),
        "{v}"
    );
    // An archive written before import checked ids may hold one: export
    // still refuses it.
    {
        let archive = sessiontree::backend::sqlite::Archive::open(
            sb.default_db(),
            sessiontree::Durability::Relaxed,
        )
        .expect("archive");
        let text = evil.text();
        let mut lines = text.lines();
        let header = lines.next().expect("header");
        let new = sessiontree::backend::sqlite::NewSession {
            header: header.to_owned(),
            ..sessiontree::backend::sqlite::NewSession::sdk(
                "../../escaped",
                "2025-01-01T00:00:00.000Z",
                "/p",
            )
        };
        archive
            .create_session_with(&new, lines.map(sessiontree::Entry::from_json))
            .expect("an old archive's session");
    }
    let out = sb.path("box/out");

    // The refused session is reported; the others are exported (status 2, as import).
    let r = sb.run(&["--json", "export", "--all", "--out", s(&out)]);
    assert_eq!(r.status, 2, "{r:#?}");
    let v = r.parse();
    assert_eq!(
        v["exported"],
        json!([{"session": good.id, "path": s(&out.join(good.pi_path())), "action": "created", "backup": null}])
    );
    assert_eq!(v["failed"].as_array().map(Vec::len), Some(1));
    assert_eq!(v["failed"][0]["session"], "../../escaped");
    assert_eq!(v["failed"][0]["code"], "invalid_session");
    let msg = v["failed"][0]["message"].as_str().expect("message");
    assert!(msg.contains("refused") && msg.contains(s(&out)), "{msg}");
    let r = sb.run(&["export", "../../escaped", "--out", s(&out)]);
    assert_eq!(r.status, 2);
    assert!(
        r.stdout.starts_with(
            "failed [invalid_session]: ../../escaped: session \"../../escaped\" would export to "
        ),
        "{r:#?}"
    );

    let written = walk(sb.dir.path());
    assert!(
        written
            .iter()
            .all(|f| !f.to_string_lossy().contains("escaped")),
        "{written:?}"
    );
    assert!(
        written
            .iter()
            .all(|f| !f.to_string_lossy().ends_with(".tmp")),
        "{written:?}"
    );
}

/// `export` never destroys a file: into pi's own directory it creates what is
/// missing, leaves identical files alone, appends to a file that is a prefix
/// of the archive's copy, and refuses a longer or different file (pi appended
/// since the import) unless `--force`, which keeps a backup.
#[test]
fn export_never_destroys_a_file_that_differs() {
    let sb = Sandbox::new();
    let f = small_session(
        "01950000-bbbb-7000-8000-000000000001",
        "/home/ada/safe",
        "2025-03-01T10:00:00.000Z",
        "safety",
        None,
    );
    let src = f.save(&sb, "pi");
    sb.import(&[&src]);
    let full = read(&src);
    let out = sb.path("pi");
    let export = |extra: &[&str]| {
        let mut args = vec!["--json", "export", "--all", "--out", s(&out)];
        args.extend_from_slice(extra);
        sb.run(&args)
    };
    let action = |r: &Run| r.parse()["exported"][0]["action"].clone();

    // The very file it came from: unchanged.
    let r = export(&[]);
    assert_eq!(r.status, 0, "{r:#?}");
    assert_eq!(action(&r), json!("unchanged"));
    assert_eq!(read(&src), full);

    // pi's file is a prefix (the archive has more): the rest is appended.
    let first_line = full.find('\n').expect("header line") + 1;
    std::fs::write(&src, &full[..first_line + 5]).expect("truncate");
    let r = export(&[]);
    assert_eq!(action(&r), json!("appended"), "{r:#?}");
    assert_eq!(read(&src), full);

    // pi appended a line since the import: merged by id (pi's line goes
    // into the archive, nothing of pi's file is lost), the file untouched.
    let longer = format!(
        "{full}{}\n",
        r#"{"type":"custom","id":"zz","parentId":null,"timestamp":"2025-03-02T00:00:00.000Z","customType":"pi-later"}"#
    );
    std::fs::write(&src, &longer).expect("append");
    let r = export(&[]);
    assert_eq!(r.status, 0, "{r:#?}");
    assert_eq!(r.parse()["exported"][0]["merge"]["imported"], 1, "{r:#?}");
    assert_eq!(read(&src), longer);

    // A file that differs inside (one id, two contents): a conflict, refused,
    // naming the step that resolves it.
    let different = longer.replacen("safety", "SAFETY", 1);
    std::fs::write(&src, &different).expect("rewrite");
    let r = export(&[]);
    assert_eq!(r.status, 2, "{r:#?}");
    assert!(
        r.parse()["failed"][0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("--force"),
        "{r:#?}"
    );
    assert_eq!(read(&src), different);
    let full = longer;

    // --force replaces it and keeps the old file beside it.
    let r = export(&["--force"]);
    assert_eq!(r.status, 0, "{r:#?}");
    assert_eq!(action(&r), json!("replaced"));
    let backup = PathBuf::from(r.parse()["exported"][0]["backup"].as_str().expect("backup"));
    assert_eq!(read(&src), full);
    assert_eq!(read(&backup), different);

    // No temporary file is left behind.
    let leftovers: Vec<_> = walk(&out)
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("sessiontree-tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// The one file below `dir` (recursively) whose name ends with `suffix`.
fn find_file(dir: &Path, suffix: &str) -> PathBuf {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with(suffix) {
                found.push(p);
            }
        }
    }
    assert_eq!(
        found.len(),
        1,
        "{suffix} below {}: {found:?}",
        dir.display()
    );
    found.pop().expect("one")
}

/// `delete` removes a session with everything derived from it (check finds no
/// orphan), the file then imports afresh; `check` reports orphans left by a
/// delete done by hand.
#[test]
fn delete_then_reimport_and_check_finds_orphans() {
    let sb = Sandbox::new();
    let f = small_session(
        "01950000-dddd-7000-8000-000000000001",
        "/home/ada/del",
        "2025-03-01T10:00:00.000Z",
        "deletion",
        Some("to delete"),
    );
    let src = f.save(&sb, "pi");
    let other = small_session(
        "01950000-eeee-7000-8000-000000000001",
        "/home/ada/keep",
        "2025-03-02T10:00:00.000Z",
        "keeping",
        None,
    )
    .save(&sb, "pi");
    sb.import(&[&src, &other]);
    let hits = |sb: &Sandbox| {
        sb.json(&["search", "deletion"])["hits"]
            .as_array()
            .map_or(0, Vec::len)
    };
    let before = hits(&sb);
    assert!(before > 0);

    let v = sb.json(&["delete", "01950000-dddd"]);
    assert_eq!(
        v["deleted"],
        json!(["01950000-dddd-7000-8000-000000000001"]),
        "{v}"
    );
    assert_eq!(sb.json(&["check"])["ok"], json!(true));
    assert_eq!(hits(&sb), 0);
    assert_eq!(
        sb.json(&["ls"])["sessions"].as_array().map(Vec::len),
        Some(1)
    );
    // Unknown ids fail alone; the command says so with exit 2.
    let r = sb.run(&["--json", "delete", "nope"]);
    assert_eq!(r.status, 2, "{r:#?}");
    assert_eq!(r.parse()["failed"][0]["code"], json!("not_found"));

    // The file imports afresh, whole.
    let v = sb.import(&[&src]);
    assert_eq!(v["imported"], json!(1), "{v}");
    assert_eq!(hits(&sb), before);

    // A delete by hand (foreign keys off, search rows left) is found by check.
    let conn = rusqlite::Connection::open(sb.default_db()).expect("db");
    conn.execute_batch(
        "PRAGMA foreign_keys = OFF;
         DELETE FROM sessions WHERE id = '01950000-dddd-7000-8000-000000000001';",
    )
    .expect("delete by hand");
    drop(conn);
    let r = sb.run(&["--json", "check"]);
    let v = r.parse();
    assert_eq!(v["ok"], json!(false), "{v}");
    let problems = v["problems"].to_string();
    for table in ["entries", "segments", "message_text", "imports"] {
        assert!(
            problems.contains(table),
            "{table} orphans reported: {problems}"
        );
    }
}

/// `export` takes `.jsonl` paths as every SESSION argument does: a pi file of
/// an older version comes out as version 3 in pi's layout, with no archive
/// needed, by the same never-destroy rules (again: unchanged).
#[test]
fn export_takes_a_jsonl_path_and_writes_it_as_version_3() {
    let sb = Sandbox::new();
    let Some(v1) = std::fs::read_dir(pi_fixtures())
        .ok()
        .and_then(|d| d.filter_map(|e| e.ok().map(|e| e.path())).min())
    else {
        eprintln!("no pi fixtures here; skipped");
        return;
    };
    let out = sb.path("out");
    let r = sb.json(&["export", s(&v1), "--out", s(&out)]);
    assert_eq!(r["failed"], json!([]), "{r}");
    let written = std::path::PathBuf::from(r["exported"][0]["path"].as_str().expect("path"));
    assert!(written.starts_with(&out), "{written:?}");
    let text = std::fs::read_to_string(&written).expect("exported file");
    let header: Value = serde_json::from_str(text.lines().next().expect("header")).expect("json");
    assert_eq!(header["version"], 3);
    assert!(
        !sb.default_db().exists(),
        "no archive was needed or created"
    );
    let again = sb.json(&["export", s(&v1), "--out", s(&out)]);
    assert_eq!(again["exported"][0]["action"], "unchanged", "{again}");
    // The rewritten file holds what importing the original gives.
    sb.import(&[&v1]);
    let id = header["id"].as_str().expect("id");
    let from_archive = sb.json(&["export", id, "--out", s(&out)]);
    assert_eq!(
        from_archive["exported"][0]["action"], "unchanged",
        "{from_archive}"
    );
}
