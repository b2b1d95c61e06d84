//! SESSION arguments (full ids, prefixes, paths), errors with and without
//! `--json`, and `--help`.

use super::*;

#[test]
fn session_arguments_by_id_prefix_and_path() {
    let sb = Sandbox::new();
    let path = tree_session().save(&sb, "sessions");
    small_session(
        "01950000-0000-7000-8000-000000000101",
        "/w",
        "2025-01-01T00:00:00.000Z",
        "one",
        None,
    )
    .save(&sb, "sessions");
    small_session(
        "01950000-0000-7000-8000-000000000102",
        "/w",
        "2025-01-02T00:00:00.000Z",
        "two",
        None,
    )
    .save(&sb, "sessions");
    sb.import(&[&sb.path("sessions")]);

    // Full id, unique prefixes, and the file itself all name the same session.
    let full = sb.run(&["tree", TREE_ID]).ok().to_owned();
    for arg in [
        "01950000-a",
        "01950000-aaaa-7000-8000-00000000000",
        s(&path),
    ] {
        assert_eq!(sb.run(&["tree", arg]).ok(), full, "{arg}");
    }
    assert_eq!(
        sb.json(&["stats", "01950000-0000-7000-8000-000000000102"])["totalMessages"],
        2
    );

    // Ambiguous: several sessions start so.
    for arg in ["0195", "01950000-0000-7000-8000-00000000010"] {
        let r = sb.run(&["stats", arg]);
        let err = r.fails(2, "usage");
        assert!(
            err.contains(&format!(
                "session prefix {arg:?} is ambiguous; give more characters"
            )),
            "{err}"
        );
        // Like git, the candidates are listed.
        assert!(
            err.contains("\n  01950000-0000-7000-8000-000000000101")
                && err.contains("\n  01950000-0000-7000-8000-000000000102"),
            "{err}"
        );
    }
    // Unknown, empty, a missing file.
    let r = sb.run(&["branch", "abc"]);
    assert_eq!(
        r.fails(3, "not_found"),
        "sessiontree: error [not_found]: Session not found: abc\n"
    );
    sb.run(&["branch", ""]).fails(3, "not_found");
    let missing = sb.path("missing.jsonl");
    let err = sb.run(&["tree", s(&missing)]);
    assert!(err.fails(3, "not_found").contains(s(&missing)), "{err:#?}");
    // An app file (the pi program's) opens as pi 1.6 opens it, the line it
    // cannot use skipped.
    let lenient = sb.write(
        "lenient.jsonl",
        &format!("{}\n[1]\n", tree_session().lines[0]),
    );
    assert_eq!(sb.run(&["tree", s(&lenient)]).ok(), "empty session\n");
    // A broken SDK file (it holds a `leaf` entry) is named with its line.
    let broken = sb.write(
        "broken.jsonl",
        &format!(
            "{}\n[1]\n{}\n",
            tree_session().lines[0],
            r#"{"type":"leaf","id":"l1","parentId":null,"timestamp":"2025-01-01T00:00:00.000Z","targetId":null}"#
        ),
    );
    let err = sb.run(&["tree", s(&broken)]);
    assert!(
        err.fails(5, "invalid_entry").contains(&format!(
            "Invalid JSONL session file {}: line 2 ",
            broken.display()
        )),
        "{err:#?}"
    );
    let err = sb.run(&["--json", "tree", s(&broken)]);
    assert_eq!(err.parse()["error"]["code"], "invalid_entry");
    // A directory that is no session file: the id lookup fails.
    sb.run(&["tree", s(&sb.path("sessions"))])
        .fails(3, "not_found");
}

#[test]
fn a_bare_session_id_is_an_archive_session_even_if_a_file_has_that_name() {
    let sb = Sandbox::new();
    let file = small_session(
        "01950000-0000-7000-8000-00000000e001",
        "/p",
        "2025-01-01T00:00:00.000Z",
        "shadow",
        None,
    )
    .save(&sb, "sessions");
    sb.import(&[file.as_path()]);
    // A file in the working directory named like the session id prefix.
    sb.write("01950000", "not a session file\n");
    let branch = sb.json(&["branch", "01950000"]);
    assert!(
        !branch["entries"].as_array().expect("entries").is_empty(),
        "{branch}"
    );
    // A path still names a file.
    sb.run(&["branch", "./01950000"])
        .fails(4, "invalid_session");
}

#[test]
fn errors_in_json_are_one_object_on_stdout() {
    let sb = Sandbox::new();
    let nothing = sb.path("nothing");
    std::fs::create_dir_all(&nothing).expect("mkdir");
    sb.run(&["import", "--quiet", s(&nothing)]).ok();
    let r = sb.run(&["--json", "tree", "nope"]);
    assert_eq!(r.status, 3);
    assert_eq!(
        r.parse(),
        json!({"error": {"code": "not_found", "message": "Session not found: nope"}})
    );
    assert_eq!(
        r.stderr,
        "sessiontree: error [not_found]: Session not found: nope\n"
    );
    // Without --json nothing goes to stdout.
    let r = sb.run(&["tree", "nope"]);
    assert_eq!((r.status, r.stdout.as_str()), (3, ""));
    // The archive cannot be created: storage.
    let blocker = sb.write("file", "not a directory");
    let db = blocker.join("archive.db");
    let r = sb.run(&["--json", "--db", s(&db), "import", s(&nothing)]);
    assert_eq!(r.status, 7, "{r:#?}");
    assert_eq!(r.parse()["error"]["code"], "storage");
    // A command that only reads never creates one: not_found, naming it.
    let r = sb.run(&["--json", "--db", s(&db), "ls"]);
    assert_eq!(r.status, 3, "{r:#?}");
    assert!(r.parse()["error"]["message"]
        .as_str()
        .is_some_and(|m| m.contains(s(&db))));
}

#[test]
fn help_describes_every_command() {
    let sb = Sandbox::new();
    let top = sb.run(&["--help"]);
    let commands = [
        "import", "ls", "tree", "branch", "context", "search", "stats", "export", "fork", "label",
        "name", "move", "check", "delete", "rpc",
    ];
    for c in commands {
        assert!(
            top.ok().contains(&format!("\n  {c} ")),
            "--help lists {c}:\n{}",
            top.ok()
        );
        let help = sb.run(&[c, "--help"]);
        let text = help.ok();
        assert!(text.contains(&format!("Usage: sessiontree {c}")), "{text}");
        assert!(
            text.contains("--json"),
            "{c} --help shows the global --json:\n{text}"
        );
    }
    assert!(sb.run(&["--version"]).ok().starts_with("sessiontree "));
    // Usage errors are clap's: status 2, a message on stderr.
    let r = sb.run(&["frobnicate"]);
    assert_eq!(r.status, 2);
    assert!(r.stderr.contains("unrecognized subcommand"), "{r:#?}");
}

/// A command line clap refuses is a usage error (exit 2) and, with `--json`,
/// the one JSON error object on stdout like every other failure.
#[test]
fn argument_errors_honour_json() {
    let sb = Sandbox::new();
    for args in [
        vec!["--json", "ls", "--since"],
        vec!["--json", "frobnicate"],
        vec!["--json", "search"],
        vec!["--json", "ls", "--limit", "many"],
    ] {
        let r = sb.run(&args);
        assert_eq!(r.status, 2, "{args:?}: {r:#?}");
        let v = r.parse();
        assert_eq!(v["error"]["code"], "usage", "{args:?}: {v}");
        assert!(v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
        assert!(
            r.stderr.starts_with("error: "),
            "clap's message stays on stderr"
        );
    }
    // Without --json, nothing on stdout.
    let r = sb.run(&["ls", "--since"]);
    assert_eq!((r.status, r.stdout.as_str()), (2, ""));
    assert_eq!(sb.run(&["--version"]).status, 0);
}

/// `completions SHELL` prints a completion script for every shell clap knows.
#[test]
fn completions_print_a_script_for_every_shell() {
    let sb = Sandbox::new();
    let bash = sb.run(&["completions", "bash"]);
    let script = bash.ok();
    assert!(script.starts_with("_sessiontree() {"), "{script}");
    for command in [
        "import",
        "ls",
        "tree",
        "search",
        "export",
        "check",
        "completions",
    ] {
        assert!(
            script.contains(&format!("sessiontree,{command})")),
            "the bash script completes {command}"
        );
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        let script = sb.run(&["completions", shell]).ok().to_owned();
        assert!(
            script.contains("sessiontree") && script.contains("search"),
            "{shell}: {script}"
        );
    }
    // The script goes out exactly (no escaping of its tabs); `--json` wraps it.
    let json = sb.json(&["completions", "bash"]);
    assert_eq!(json, json!({"shell": "bash", "script": script}));
    // An unknown or missing shell is clap's usage error.
    for args in [&["completions", "nushell"][..], &["completions"]] {
        let r = sb.run(args);
        assert_eq!((r.status, r.stdout.as_str()), (2, ""), "{r:#?}");
    }
    assert!(sb
        .run(&["completions", "nushell"])
        .stderr
        .contains("invalid value 'nushell'"));
    // Completions need no archive and create none.
    assert!(!sb.default_db().exists());
}

/// Copies the directory `from` into `to`, recursively.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for item in std::fs::read_dir(from).expect("list") {
        let item = item.expect("entry");
        let target = to.join(item.file_name());
        if item.file_type().expect("file type").is_dir() {
            copy_tree(&item.path(), &target);
        } else {
            std::fs::copy(item.path(), &target).expect("copy");
        }
    }
}

#[test]
fn help_examples_run_as_shown() {
    let Some(fixtures) = support::fixtures_dir() else {
        eprintln!(
            "skipped: pi's real session files (../shared/fixtures/pi-sessions) are not there"
        );
        return;
    };
    // What the examples assume: pi's files in pi's sessions directory, the
    // archive the README's transcript builds from them, and `session.jsonl`,
    // the first of them as pi writes files today (version 3; version 1
    // files are read-only).
    let base = Sandbox::new();
    copy_tree(
        &fixtures,
        &base.path("home/.pi/agent/sessions/--Users-badlogic-workspaces-pi-mono--"),
    );
    base.import(&[&base.path("home/.pi/agent/sessions")]);
    let exported = base.json(&["export", COMPACTION_ID, "--out", s(&base.path("exported"))]);
    let file = exported["exported"][0]["path"]
        .as_str()
        .expect("exported path");
    std::fs::copy(file, base.path("session.jsonl")).expect("session.jsonl");
    std::fs::remove_dir_all(base.path("exported")).expect("rm exported");

    let mut ran = 0;
    for command in base.subcommands() {
        let help = base.run(&[&command, "--help"]).ok().to_owned();
        let examples: Vec<&str> = help
            .split_once("\nExamples:\n")
            .unwrap_or_else(|| panic!("{command} --help ends with examples:\n{help}"))
            .1
            .lines()
            .take_while(|l| l.starts_with("  "))
            .map(str::trim)
            .collect();
        assert!(
            (2..=3).contains(&examples.len()),
            "{command}: 2 or 3 examples: {examples:#?}"
        );
        for example in examples {
            // Each example on its own, from the same starting point.
            let sb = Sandbox::new();
            copy_tree(base.dir.path(), sb.dir.path());
            let mut line = ShellLine::parse(example, &sb.home());
            // `sync`'s team archive is the PostgreSQL test server's, in a
            // fresh schema; without a server those examples are skipped.
            if command == "sync" {
                let Ok(server) = std::env::var("SESSIONTREE_TEST_PG") else {
                    eprintln!("skipped: {example} (no PostgreSQL server: SESSIONTREE_TEST_PG)");
                    continue;
                };
                let sep = if server.contains('?') { '&' } else { '?' };
                let schema = format!("help_{}_{ran}", std::process::id());
                for arg in &mut line.args {
                    if arg == "postgres://team@db.example/sessions" {
                        *arg = format!("{server}{sep}options=-csearch_path%3D{schema}");
                    }
                }
            }
            // `browse` needs a terminal: tests/cli/tui.rs runs its examples in tmux.
            if command == "browse" {
                continue;
            }
            // `watch` without `--once` runs until stopped: tests/cli/watch.rs runs it.
            if command == "watch" && !line.args.iter().any(|a| a == "--once") {
                continue;
            }
            assert!(
                line.args.first() == Some(&command),
                "{command}'s example runs {command}: {example}"
            );
            let run = sb.run_line(&line, sb.dir.path());
            assert_eq!(run.status, 0, "{example}\n{run:#?}");
            if let Some(file) = &line.redirect {
                let written = read(&sb.dir.path().join(file));
                assert!(written.contains("sessiontree"), "{example}: {written}");
            } else {
                assert!(!run.stdout.is_empty(), "{example} prints something");
            }
            ran += 1;
        }
    }
    assert!(ran >= 40, "{ran} examples");
    // The schemas the `sync` examples filled are left to the throw-away server.
}
