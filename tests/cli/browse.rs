//! The reading commands: `ls`, `tree` (against its snapshot), `branch`,
//! `context`, `history`, `search` and `stats`, and what their human-readable
//! output lets through to the terminal.

use super::*;

/// Five small sessions over two working directories and three months.
fn listing(sb: &Sandbox) {
    let sessions = [
        (
            "01950000-0000-7000-8000-000000000101",
            "/work/a",
            "2025-01-10T09:00:00.000Z",
            "rust lifetimes",
            Some("Lifetimes"),
        ),
        (
            "01950000-0000-7000-8000-000000000102",
            "/work/b",
            "2025-02-10T09:00:00.000Z",
            "sqlite pragmas",
            Some("SQLite tuning"),
        ),
        (
            "01950000-0000-7000-8000-000000000103",
            "/work/a",
            "2025-02-20T09:00:00.000Z",
            "rust traits",
            None,
        ),
        (
            "01950000-0000-7000-8000-000000000104",
            "/work/b",
            "2025-03-05T09:00:00.000Z",
            "fts5 ranking",
            Some("FTS ranking notes"),
        ),
        (
            "01950000-0000-7000-8000-000000000105",
            "/work/a",
            "2025-03-15T09:00:00.000Z",
            "rust macros",
            Some("macro_rules"),
        ),
    ];
    for (id, cwd, created, topic, name) in sessions {
        small_session(id, cwd, created, topic, name).save(sb, "sessions");
    }
    sb.import(&[&sb.path("sessions")]);
}

fn listed(v: &Value) -> Vec<String> {
    v["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["id"].as_str().expect("id")[33..].to_owned())
        .collect()
}

#[test]
fn ls_filters_and_pages() {
    let sb = Sandbox::new();
    // Listing never creates an archive: none yet is `not_found`, naming it.
    let missing = sb.run(&["ls"]);
    assert!(missing.fails(3, "not_found").contains(s(&sb.default_db())));
    assert!(!sb.default_db().exists());
    // An import of nothing creates the archive, empty.
    let nothing = sb.path("nothing");
    std::fs::create_dir_all(&nothing).expect("mkdir");
    sb.run(&["import", "--quiet", s(&nothing)]).ok();
    assert_eq!(sb.run(&["ls"]).ok(), "no sessions\n");
    assert_eq!(
        sb.json(&["ls"]),
        json!({"sessions": [], "page": 1, "limit": 50, "total": 0})
    );
    listing(&sb);

    assert_eq!(
        listed(&sb.json(&["ls"])),
        ["105", "104", "103", "102", "101"]
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--cwd", "/work/a"])),
        ["105", "103", "101"]
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--since", "2025-02-15"])),
        ["105", "104", "103"]
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--since", "2025-02-10T09:00:00.000Z"])),
        ["105", "104", "103", "102"]
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--name", "sqlite"])),
        ["102"],
        "case-insensitive"
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--name", "n"])),
        ["104", "102"],
        "unnamed sessions never match"
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--cwd", "/work/b", "--since", "2025-03-01"])),
        ["104"]
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--cwd", "/nowhere"])),
        Vec::<String>::new()
    );

    let page = sb.json(&["ls", "--limit", "2", "--page", "2"]);
    assert_eq!(listed(&page), ["103", "102"]);
    assert_eq!(
        (page["page"].clone(), page["limit"].clone()),
        (json!(2), json!(2))
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--limit", "2", "--page", "3"])),
        ["101"]
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--limit", "2", "--page", "4"])),
        Vec::<String>::new()
    );
    assert_eq!(
        sb.run(&["ls", "--limit", "2", "--page", "4"]).ok(),
        "no sessions on page 4: 5 sessions make 3 page(s) of 2\n"
    );
    // A page that is not the last says how many more there are.
    let first_page = sb.run(&["ls", "--limit", "2"]).ok().to_owned();
    assert!(
        first_page.ends_with("1–2 of 5 sessions; 3 more — use --page 2\n"),
        "{first_page}"
    );
    assert!(sb
        .run(&["ls", "--limit", "2", "--page", "3"])
        .ok()
        .ends_with("5–5 of 5 sessions\n"));
    assert_eq!(page["total"], 5);
    // --cwd takes a directory and everything below it.
    assert_eq!(
        listed(&sb.json(&["ls", "--cwd", "/work"])),
        ["105", "104", "103", "102", "101"]
    );
    assert_eq!(
        listed(&sb.json(&["ls", "--cwd", "/work/a/"])),
        ["105", "103", "101"]
    );
    assert!(
        listed(&sb.json(&["ls", "--cwd", "/wor"])).is_empty(),
        "a directory, not a string prefix"
    );
    let r = sb.run(&["ls", "--page", "0"]);
    assert_eq!(r.status, 2, "a usage error: {r:#?}");
    assert!(r.stderr.contains("pages are numbered from 1"), "{r:#?}");

    let row = &sb.json(&["ls", "--name", "FTS"])["sessions"][0];
    assert_eq!(
        *row,
        json!({"id": "01950000-0000-7000-8000-000000000104", "createdAt": "2025-03-05T09:00:00.000Z",
               "lastActive": "2025-03-05T09:00:03.000Z", "cwd": "/work/b", "name": "FTS ranking notes", "entries": 3, "messages": 2,
               "cost": 0.25, "totalTokens": 520, "contract": "app"})
    );

    let text = sb.run(&["ls", "--cwd", "/work/b"]);
    let expected = "\
ID                                    LAST ACTIVE               ENTRIES    MSGS      COST  RULES  NAME                      CWD
01950000-0000-7000-8000-000000000104  2025-03-05T09:00:03.000Z        3       2    0.2500  app    FTS ranking notes         /work/b
01950000-0000-7000-8000-000000000102  2025-02-10T09:00:03.000Z        3       2    0.2500  app    SQLite tuning             /work/b
";
    assert_eq!(text.ok(), expected);

    let bad = sb.run(&["ls", "--since", "last tuesday"]);
    let err = bad.fails(2, "usage");
    assert!(
        err.contains("--since \"last tuesday\" is not an ISO-8601 date or time"),
        "{err}"
    );
}

/// Paging arithmetic never wraps: a page past any archive is a usage error.
#[test]
fn ls_paging_past_any_archive_is_a_usage_error() {
    let sb = Sandbox::new();
    let file = small_session(
        "01950000-acac-7000-8000-000000000001",
        "/w",
        "2025-03-01T10:00:00.000Z",
        "paging",
        None,
    )
    .save(&sb, "pi");
    sb.import(&[&file]);
    sb.run(&["ls", "--limit", "9223372036854775808", "--page", "3"])
        .fails(2, "usage");
    let v = sb.json(&["ls", "--limit", "9223372036854775808", "--page", "1"]);
    assert_eq!(v["sessions"].as_array().map(Vec::len), Some(1), "{v}");
}

#[test]
fn history_lists_leaf_moves_newest_first_from_archive_and_file() {
    let sb = Sandbox::new();
    let path = tree_session().save(&sb, "sessions");
    sb.import(&[&path]);
    let from_archive = sb.json(&["history", TREE_ID]);
    assert_eq!(
        from_archive["moves"],
        json!([
            {"id": "leaf0002", "timestamp": from_archive["moves"][0]["timestamp"], "from": "ast00012", "to": "nam00001"},
            {"id": "leaf0001", "timestamp": from_archive["moves"][1]["timestamp"], "from": "ast00004", "to": "lbl00001"},
        ])
    );
    assert_eq!(sb.json(&["history", s(&path)]), from_archive);
    assert_eq!(
        sb.json(&["history", TREE_ID, "--limit", "1"])["moves"],
        json!([from_archive["moves"][0]])
    );
    // Text: where the leaf was and where it went, with previews.
    let text = sb.run(&["history", TREE_ID]).ok().to_owned();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[0].contains("from ast00012 ") && lines[1].contains("to nam00001 "),
        "{text}"
    );
    // A move made now is the newest.
    sb.run(&["move", TREE_ID, "usr00001"]).ok();
    let moves = sb.json(&["history", TREE_ID])["moves"].clone();
    assert_eq!(
        (moves[0]["from"].as_str(), moves[0]["to"].as_str()),
        (Some("lbl00003"), Some("usr00001"))
    );
    sb.run(&["history", "nope"]).fails(3, "not_found");
}

#[test]
fn tree_snapshot() {
    let sb = Sandbox::new();
    let path = tree_session().save(&sb, "sessions");
    sb.import(&[&path]);
    let text = sb.run(&["tree", TREE_ID]).ok().to_owned();

    let snapshot = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/tree.txt");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::create_dir_all(snapshot.parent().expect("dir")).expect("mkdir");
        std::fs::write(&snapshot, &text).expect("write snapshot");
    }
    let expected = std::fs::read_to_string(&snapshot)
        .expect("tests/snapshots/tree.txt (run with UPDATE_SNAPSHOTS=1 to create it)");
    assert_eq!(
        text, expected,
        "tree output changed; if deliberate, rerun with UPDATE_SNAPSHOTS=1\n--- got ---\n{text}"
    );

    // The same from the file itself, through the alias, and by prefix.
    assert_eq!(sb.run(&["tree", s(&path)]).ok(), expected);
    assert_eq!(sb.run(&["show", "01950000-aaaa"]).ok(), expected);

    // No folding, every branch: every entry has its line, and each fork one.
    let all = sb.run(&["tree", TREE_ID, "--all", "--fold", "0"]);
    assert_eq!(all.ok().lines().count(), 36 + 2);
    assert!(!all.ok().contains('⋮'));
    assert!(all.ok().contains(
        "├─ 1 other branch (5 entries)\n│  └─   usr00002 user: Parse numbers with the nom crate\n"
    ));

    // A subtree.
    let sub = sb.run(&["tree", TREE_ID, "--from", "nam00001"]);
    let expected_sub = "\
* nam00001 [name] tinyjson parser
├─ 1 other branch (3 entries): usr00006 user: Benchmark it against serde_json
* usr00007 user: Benchmark it against serde_json with criterion
* ast00013 [bench] assistant: serde_json is 3x faster on the twitter.json corpus; fine for…
* lbl00003 [label ast00013 → bench]  ← leaf
";
    assert_eq!(sub.ok(), expected_sub);
    sb.run(&["tree", TREE_ID, "--from", "nope"])
        .fails(3, "not_found");

    // JSON: the lines of the text, one object each.
    let v = sb.json(&["tree", TREE_ID]);
    assert_eq!(v["leaf"], "lbl00003");
    let lines = v["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), expected.lines().count());
    assert_eq!(
        lines[2],
        json!({"kind": "entry", "level": 0, "id": "usr00001", "type": "message",
               "active": true, "leaf": false, "label": "setup",
               "preview": "user: Set up a Rust crate for a tiny JSON parser"})
    );
    assert_eq!(
        lines[7],
        json!({"kind": "branches", "level": 0, "at": "lbl00001", "branches": 1,
               "entries": 5, "heads": ["usr00002"], "unfolded": false})
    );
    assert_eq!(
        lines[12],
        json!({"kind": "fold", "level": 0, "entries": 10, "sideBranches": 0, "active": true})
    );
    assert_eq!(lines.last().expect("last")["leaf"], true);
    // With every branch: every entry once; a block's first entry names its fork.
    let v = sb.json(&["tree", TREE_ID, "--all", "--fold", "0"]);
    let entries: Vec<&Value> = v["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .filter(|l| l["kind"] == "entry")
        .collect();
    assert_eq!(entries.len(), 36);
    let nom = entries
        .iter()
        .find(|e| e["id"] == "usr00002")
        .expect("usr00002");
    assert_eq!(
        (
            &nom["active"],
            &nom["label"],
            &nom["level"],
            &nom["branchOf"]
        ),
        (&json!(false), &Value::Null, &json!(1), &json!("lbl00001"))
    );
}

#[test]
fn branch_context_and_stats() {
    let sb = Sandbox::new();
    let f = tree_session();
    let path = f.save(&sb, "sessions");
    sb.import(&[&path]);

    // The active path, cut at the compaction (its first kept entry included).
    let v = sb.json(&["branch", TREE_ID]);
    assert_eq!(
        ids(&v["entries"]),
        [
            "ast00010", "cmp00001", "usr00005", "ast00011", "nam00001", "usr00007", "ast00013",
            "lbl00003"
        ]
    );
    // Entries come back exactly as written.
    let line_of = |id: &str| -> Value {
        let l = f
            .lines
            .iter()
            .find(|l| l.contains(&format!(r#""id":"{id}""#)))
            .expect("line");
        serde_json::from_str(l).expect("json")
    };
    assert_eq!(v["entries"][1], line_of("cmp00001"));
    let text = sb.run(&["branch", TREE_ID]);
    let expected = "\
ast00010  assistant: All 12 tests pass; the parser handles numbers, strings and arrays.
cmp00001  [compaction: 48k tokens] Hand-written parser in src/parser.rs; 12 tests pass.
usr00005  user: Add \\u escapes to strings
ast00011  assistant: Strings now decode \\uXXXX escapes, surrogate pairs included.
nam00001  [name] tinyjson parser
usr00007  user: Benchmark it against serde_json with criterion
ast00013  assistant: serde_json is 3x faster on the twitter.json corpus; fine for now.
lbl00003  [label ast00013 → bench]
";
    assert_eq!(text.ok(), expected);
    let from = sb.json(&["branch", TREE_ID, "--from", "usr00004"]);
    assert_eq!(
        ids(&from["entries"]),
        [
            "mdl00001", "thk00001", "usr00001", "ast00001", "res00001", "ast00002", "lbl00001",
            "bsm00001", "usr00004"
        ]
    );
    assert_eq!(
        sb.json(&["branch", s(&path)]),
        v,
        "a .jsonl path reads the same"
    );
    sb.run(&["branch", TREE_ID, "--from", "nope"])
        .fails(3, "not_found");

    // The model's context: the compaction summary, the kept entry, then what
    // follows. Its state comes from the same path, so the thinking level set
    // before the compaction is not seen.
    let c = sb.json(&["context", TREE_ID]);
    assert_eq!(c["thinkingLevel"], "off");
    assert_eq!(
        c["model"],
        json!({"provider": "anthropic", "modelId": "claude-sonnet-4-5"})
    );
    assert_eq!(c["activeToolNames"], Value::Null);
    let roles: Vec<&str> = c["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().expect("role"))
        .collect();
    assert_eq!(
        roles,
        [
            "compactionSummary",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant"
        ]
    );
    assert_eq!(
        c["messages"][0]["summary"],
        "Hand-written parser in src/parser.rs; 12 tests pass."
    );
    assert_eq!(c["messages"][0]["tokensBefore"], 48_200);
    let text = sb.run(&["context", TREE_ID]);
    let expected = "\
thinking: off  model: anthropic/claude-sonnet-4-5  tools: -
compactionSummary: Hand-written parser in src/parser.rs; 12 tests pass.
        assistant: All 12 tests pass; the parser handles numbers, strings and arrays.
             user: Add \\u escapes to strings
        assistant: Strings now decode \\uXXXX escapes, surrogate pairs included.
             user: Benchmark it against serde_json with criterion
        assistant: serde_json is 3x faster on the twitter.json corpus; fine for now.
";
    assert_eq!(text.ok(), expected);
    // From the abandoned branch: its summary is not there, the nom turn is.
    let c = sb.json(&["context", TREE_ID, "--from", "ast00003"]);
    let roles: Vec<&str> = c["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["role"].as_str().expect("role"))
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "toolResult",
            "assistant",
            "user",
            "assistant"
        ]
    );
    // From the retried branch: the branch summary is a message.
    let c = sb.json(&["context", TREE_ID, "--from", "usr00004"]);
    assert_eq!(
        c["messages"][4],
        json!({"role": "branchSummary", "summary": "Tried nom for numbers; compile times doubled, abandoned.", "fromId": "lbl00001", "timestamp": c["messages"][4]["timestamp"]})
    );

    // Statistics over every branch: 26 messages, 13 assistant usages and the compaction's.
    let st = sb.json(&["stats", TREE_ID]);
    assert_eq!(
        st,
        json!({"messageCount": 26, "cachedTokens": 5200, "uncachedTokens": 2300,
               "totalTokens": 7960, "costTotal": 3.75, "entries": 36, "contract": "sdk"})
    );
    assert_eq!(sb.json(&["stats", s(&path)]), st);
    assert_eq!(
        sb.run(&["stats", TREE_ID]).ok(),
        "messages 26  tokens 7960 (cached 5200, uncached 2300)  cost $3.7500  entries 36  rules sdk\n"
    );
    // The archive: usage by project from the usage facts.
    let all = sb.json(&["stats"]);
    assert_eq!(
        all,
        json!({"by": ["project"], "since": null, "until": null, "cwd": null,
               "rows": [{"project": "/home/ada/tinyjson", "entries": 14, "input": 2300, "output": 460,
                         "cacheRead": 5200, "cacheWrite": 0, "tokens": 7960, "cost": 3.75}],
               "total": {"entries": 14, "input": 2300, "output": 460, "cacheRead": 5200,
                         "cacheWrite": 0, "tokens": 7960, "cost": 3.75}})
    );
    assert_eq!(
        sb.run(&["stats"]).ok(),
        "PROJECT              ENTRIES          TOKENS          COST\n\
         /home/ada/tinyjson        14            7960        3.7500\n\
         TOTAL                     14            7960        3.7500\n"
    );
}

#[test]
fn search_with_filters() {
    let sb = Sandbox::new();
    tree_session().save(&sb, "sessions");
    listing(&sb);
    sb.import(&[&sb.path("sessions")]);

    let hits = |args: &[&str]| -> Vec<(String, String, String)> {
        let mut all = vec!["search"];
        all.extend_from_slice(args);
        sb.json(&all)["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .map(|h| {
                (
                    h["session"].as_str().expect("session")[24..].to_owned(),
                    h["entry"].as_str().expect("entry").to_owned(),
                    h["role"].as_str().expect("role").to_owned(),
                )
            })
            .collect()
    };
    let mut serde = hits(&["serde_json"]);
    serde.sort();
    assert_eq!(
        serde,
        [
            ("000000000001".into(), "ast00013".into(), "assistant".into()),
            ("000000000001".into(), "usr00006".into(), "user".into()),
            ("000000000001".into(), "usr00007".into(), "user".into()),
        ]
    );
    assert_eq!(
        hits(&["serde_json", "--role", "assistant"]),
        [("000000000001".into(), "ast00013".into(), "assistant".into())]
    );
    assert_eq!(hits(&["serde_json", "--role", "user"]).len(), 2);
    assert_eq!(hits(&["serde_json", "--limit", "1"]).len(), 1);
    // All words must match, in any order.
    assert_eq!(hits(&["criterion", "benchmark"]).len(), 1);

    let mut rust = hits(&["rust"]);
    rust.sort();
    assert_eq!(rust.len(), 7, "{rust:?}");
    let rust_a = hits(&["rust", "--cwd", "/work/a", "--role", "user"]);
    assert_eq!(rust_a.len(), 3);
    assert_eq!(
        hits(&["rust", "--session", "01950000-0000-7000-8000-000000000103"]).len(),
        2
    );
    assert_eq!(
        hits(&["rust", "--session", "01950000-aaaa", "--role", "user"]).len(),
        1,
        "by prefix"
    );
    sb.run(&["search", "rust", "--session", "01950000-0000"])
        .fails(2, "usage");
    sb.run(&["search", "rust", "--session", "nope"])
        .fails(3, "not_found");
    assert_eq!(hits(&["nothing-like-this"]).len(), 0);
    assert_eq!(
        sb.run(&["search", "nothing-like-this"]).ok(),
        "no matches\n"
    );
    // User text is never FTS5 syntax.
    for q in ["\"unbalanced", "rust AND", "NEAR(", "*", "a:b", "-x", "^"] {
        sb.run(&["search", "--", q]).ok();
    }

    let v = sb.json(&["search", "escapes", "--role", "user"]);
    let hit = &v["hits"][0];
    assert_eq!(hit["session"], TREE_ID);
    assert_eq!(hit["entry"], "usr00005");
    assert_eq!(hit["role"], "user");
    assert_eq!(hit["snippet"], "Add \\u [escapes] to strings");
    assert!(hit["rank"].is_number());
    assert_eq!(hit["sessionName"], "tinyjson parser");
    assert_eq!(hit["sessionCreatedAt"], "2025-03-01T10:00:00.000Z");
    // Each hit shows the session's date and name.
    assert_eq!(
        sb.run(&["search", "escapes", "--role", "user"]).ok(),
        format!(
            "{TREE_ID} 2025-03-01 tinyjson parser usr00005       user: Add \\u [escapes] to strings\n"
        )
    );

    // Phrases keep word order; a trailing `*` matches a prefix.
    assert_eq!(hits(&["criterion benchmark"]).len(), 1);
    assert_eq!(hits(&["\"benchmark criterion\""]).len(), 0);
    assert_eq!(hits(&["serde_js*"]).len(), 3);
    assert!(
        sb.json(&["search", "escap*"])["hits"][0]["snippet"]
            .as_str()
            .is_some_and(|s| s.contains("[escapes]")),
        "the prefix match is highlighted"
    );
    // Pages: the same hits, one page at a time.
    let mut paged: Vec<_> = (1..=7)
        .flat_map(|page| hits(&["rust", "--limit", "1", "--page", &page.to_string()]))
        .collect();
    paged.sort();
    assert_eq!(paged, rust);
    assert!(hits(&["rust", "--limit", "1", "--page", "8"]).is_empty());
    // Bad options are usage errors, before any search runs.
    for bad in [
        vec!["search", "rust", "--role", "bogus"],
        vec!["search", "rust", "--limit", "1001"],
        vec!["search", "rust", "--limit", "0"],
        vec!["search", "rust", "--page", "0"],
    ] {
        assert_eq!(sb.run(&bad).status, 2, "{bad:?}");
    }
}

/// Escape sequences and other control characters in stored text never reach
/// the terminal raw: every human-readable output shows them escaped.
#[test]
fn control_characters_in_stored_text_never_reach_the_terminal() {
    let sb = Sandbox::new();
    let hostile = HOSTILE;
    let id = hostile_session(&sb);
    for args in [
        vec!["ls"],
        vec!["tree", id],
        vec!["branch", id],
        vec!["context", id],
        vec!["search", "red"],
        vec!["stats", id],
        vec!["label", id, "u0000001", hostile],
        vec!["name", id, hostile],
        vec!["tree", id],
    ] {
        let r = sb.run(&args);
        assert_eq!(r.status, 0, "{r:#?}");
        for c in ['\u{1b}', '\r', '\t', '\u{7}', '\u{202e}', '\u{9b}'] {
            assert!(
                !r.stdout.contains(c),
                "{args:?} printed {c:?} raw: {:?}",
                r.stdout
            );
            assert!(
                !r.stderr.contains(c),
                "{args:?} printed {c:?} raw to stderr"
            );
        }
    }
    // The text is still there, visibly.
    assert!(sb.run(&["context", id]).ok().contains("\\u{1b}[31mred"));
    // Errors that quote stored or given text are safe too.
    let r = sb.run(&["branch", "\u{1b}[2J"]);
    assert!(!r.stderr.contains('\u{1b}'), "{r:#?}");
}

/// Commands that only read open the archive read-only: they work in a
/// directory nobody may write to, and write nothing there.
#[test]
fn read_commands_work_in_a_read_only_directory() {
    let sb = Sandbox::new();
    let src = tree_session().save(&sb, "pi");
    sb.import(&[&src]);
    let dir = sb.default_db().parent().expect("dir").to_owned();
    let before: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    let guard = match support::ReadOnly::make(&dir) {
        Ok(g) => g,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let out = sb.path("exported");
    for args in [
        vec!["ls"],
        vec!["tree", TREE_ID],
        vec!["branch", TREE_ID],
        vec!["context", TREE_ID],
        vec!["history", TREE_ID],
        vec!["search", "serde_json"],
        vec!["stats"],
        vec!["stats", TREE_ID],
        vec!["export", "--all", "--out", s(&out)],
    ] {
        let r = sb.run(&args);
        assert_eq!(r.status, 0, "{args:?} in a read-only directory: {r:#?}");
    }
    // A write is refused (storage), not silently lost.
    assert_eq!(sb.run(&["name", TREE_ID, "x"]).status, 7);
    drop(guard);
    let after: Vec<_> = std::fs::read_dir(&dir)
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(before, after, "nothing was created beside the archive");
}

/// `ls` columns line up whatever the names hold: wide (CJK) characters count
/// two columns, a tab is shown escaped and measured as shown.
#[test]
fn ls_columns_line_up_with_wide_names_and_tabs() {
    let sb = Sandbox::new();
    let names = ["日本語のセッション名です", "tab\there", "plain"];
    for (i, name) in names.iter().enumerate() {
        let f = small_session(
            &format!("01950000-eeee-7000-8000-00000000000{i}"),
            "/home/ada/cols",
            &format!("2025-03-0{}T10:00:00.000Z", i + 1),
            "columns",
            Some(name),
        );
        let src = f.save(&sb, &format!("pi{i}"));
        sb.import(&[&src]);
    }
    let text = sb.run(&["ls"]).ok().to_owned();
    let cwd_columns: Vec<usize> = text
        .lines()
        .skip(1)
        .map(|line| {
            let at = line.find("/home/ada/cols").expect("cwd column");
            line[..at]
                .chars()
                .map(|c| {
                    if ('\u{3000}'..='\u{9fff}').contains(&c) {
                        2
                    } else {
                        1
                    }
                })
                .sum()
        })
        .collect();
    assert_eq!(cwd_columns.len(), 3, "{text}");
    assert!(
        cwd_columns.iter().all(|&c| c == cwd_columns[0]),
        "the CWD column starts at {cwd_columns:?}:\n{text}"
    );
    assert!(text.contains("tab\\there"), "{text}");
}

/// `search --session FILE.jsonl` scans the file and finds the entries the
/// archive's index finds for the same session (in log order, unranked).
#[test]
fn search_in_a_jsonl_file_finds_what_the_index_finds() {
    let sb = Sandbox::new();
    let src = tree_session().save(&sb, "pi");
    sb.import(&[&src]);
    let entries = |v: &Value| {
        let mut ids: Vec<String> = v["hits"]
            .as_array()
            .expect("hits")
            .iter()
            .map(|h| h["entry"].as_str().expect("entry").to_owned())
            .collect();
        ids.sort();
        ids
    };
    for query in [
        vec!["serde_json"],
        vec!["parser"],
        vec!["\"recursive descent\""],
        vec!["pars*", "--role", "user"],
    ] {
        let mut in_file = vec!["search"];
        in_file.extend(&query);
        in_file.extend(["--session", s(&src)]);
        let mut in_archive = vec!["search"];
        in_archive.extend(&query);
        in_archive.extend(["--session", TREE_ID]);
        let (f, a) = (sb.json(&in_file), sb.json(&in_archive));
        assert_eq!(entries(&f), entries(&a), "{query:?}: {f} vs {a}");
    }
    assert_eq!(
        sb.run(&["search", "nothing-like-this", "--session", s(&src)])
            .ok(),
        "no matches\n"
    );
}

/// `search --color always` colours the matches (and adds no other escape
/// sequence); piped (`auto`) or `never`, they stay in brackets.
#[test]
fn search_colours_matches_only_when_asked_or_on_a_terminal() {
    let sb = Sandbox::new();
    let src = tree_session().save(&sb, "pi");
    sb.import(&[&src]);
    let plain = sb.run(&["search", "escapes"]).ok().to_owned();
    assert!(
        plain.contains("[escapes]") && !plain.contains('\u{1b}'),
        "{plain}"
    );
    assert_eq!(
        sb.run(&["search", "escapes", "--color", "never"]).ok(),
        plain
    );
    let coloured = sb
        .run(&["search", "escapes", "--color", "always"])
        .ok()
        .to_owned();
    assert!(
        coloured.contains("\u{1b}[1;31mescapes\u{1b}[0m"),
        "{coloured:?}"
    );
    assert_eq!(
        coloured
            .replace("\u{1b}[1;31m", "[")
            .replace("\u{1b}[0m", "]"),
        plain,
        "colour is the only difference"
    );
    let json = sb.run(&["--json", "search", "escapes", "--color", "always"]);
    assert!(!json.ok().contains('\u{1b}'));
}
