//! `browse` in a real terminal: tmux runs the binary in a pane of a known
//! size, the test types keys into it and reads the screen back, as a user
//! would. Skipped without tmux, unless `SESSIONTREE_REQUIRE_TMUX` is set.

use super::pane::Pane;
use super::{s, small_session, support, tree_session, Sandbox, TREE_ID};

/// An archive with the `tree` session and a small one of another project.
fn sandbox() -> Sandbox {
    let sb = Sandbox::new();
    let tree = tree_session().save(&sb, "pi");
    let other = small_session(
        "01960000-bbbb-7000-8000-000000000002",
        "/home/ada/webshop",
        "2025-04-01T09:00:00.000Z",
        "checkout flows",
        Some("webshop checkout"),
    )
    .save(&sb, "pi");
    sb.import(&[&tree, &other]);
    sb
}

/// The script a pane runs: `browse` in the sandbox, then its exit status and
/// the terminal's modes as `stty` reports them once it has left, on one
/// line: `EXITED 0 MODES icanon echo END`.
fn browse_script(sb: &Sandbox) -> String {
    format!(
        "cd {dir} && HOME={home} XDG_DATA_HOME={data} {bin} browse; \
         echo \"EXITED $? MODES $(stty -a | tr ' ;' '\\n\\n' | grep -xE -- '-?(icanon|echo)' | tr '\\n' ' ')END\"; sleep 60",
        dir = s(sb.dir.path()),
        home = s(&sb.home()),
        data = s(&sb.path("data")),
        bin = support::bin(),
    )
}

#[test]
fn browse_filters_opens_at_the_leaf_reads_renames_deletes_and_quits_cleanly() {
    let sb = sandbox();
    let Some(pane) = Pane::start("browse", &browse_script(&sb), 80, 24) else {
        return;
    };
    // The list: both sessions, newest first, the first previewed.
    let screen = pane.wait_for("2 sessions");
    assert!(screen.contains("webshop checkout"), "{screen}");
    assert!(screen.contains("tinyjson parser"), "{screen}");
    // Type a filter: only the matching session stays.
    pane.keys(&["/"]);
    pane.type_text("tinyjs");
    let screen = pane.wait_for("filter: tinyjs");
    assert!(!screen.contains("webshop checkout"), "{screen}");
    assert!(screen.contains("/home/ada/tinyjson"), "{screen}");
    // Open it: the tree, with the leaf line on screen.
    pane.keys(&["Enter", "Enter"]);
    let screen = pane.wait_for("← leaf");
    assert!(screen.contains(TREE_ID), "{screen}");
    let leaf_line = screen.lines().find(|l| l.contains("← leaf")).unwrap();
    assert!(leaf_line.contains("lbl00003"), "{screen}");
    // Read the entry above the leaf in full: more than the tree line holds at 80 columns.
    pane.keys(&["Up", "Enter"]);
    let screen = pane.wait_for("ast00013 assistant");
    assert!(
        screen.contains("serde_json is 3x faster on the twitter.json corpus; fine for now."),
        "{screen}"
    );
    pane.keys(&["q"]);
    pane.wait_for("← leaf");
    // Rename the session.
    pane.keys(&["r"]);
    pane.wait_for("New name");
    for _ in 0.."tinyjson parser".len() {
        pane.keys(&["BSpace"]);
    }
    pane.type_text("json, renamed");
    pane.keys(&["Enter"]);
    pane.wait_for("named \"json, renamed\"");
    // Back in the list the new name shows; delete asks first.
    pane.keys(&["q"]);
    pane.wait_for("json, renamed");
    pane.keys(&["d"]);
    pane.wait_for("Delete session");
    pane.keys(&["n"]);
    pane.wait_for("nothing deleted");
    pane.keys(&["d"]);
    pane.wait_for("Delete session");
    pane.keys(&["y"]);
    let screen = pane.wait_for(&format!("deleted {TREE_ID}"));
    assert!(screen.contains("no session matches"), "{screen}");
    // Quit: the shell gets the terminal back, out of raw mode.
    pane.keys(&["q"]);
    let screen = pane.wait_for("END");
    let modes = screen
        .lines()
        .find_map(|l| l.strip_prefix("EXITED 0 MODES "))
        .unwrap_or_else(|| panic!("{screen}"));
    assert_eq!(
        modes
            .trim_end_matches("END")
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["icanon", "echo"],
        "{screen}"
    );
    // The archive agrees.
    let ls = sb.json(&["ls"]);
    let ids: Vec<&str> = ls["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["01960000-bbbb-7000-8000-000000000002"], "{ls}");
}

#[test]
fn browse_searches_a_session_folds_and_resumes_in_pi() {
    let sb = sandbox();
    let Some(pane) = Pane::start("resume", &browse_script(&sb), 100, 30) else {
        return;
    };
    pane.wait_for("2 sessions");
    pane.keys(&["j", "Enter"]);
    pane.wait_for("← leaf");
    // A search within the session goes to its hit, unfolding the side branch it is on.
    pane.keys(&["/"]);
    pane.type_text("nom");
    pane.keys(&["Enter"]);
    let screen = pane.wait_for("hits for nom");
    assert!(screen.contains("usr00002"), "{screen}");
    // Help, then resume in pi: the browser closes and prints pi's command.
    pane.keys(&["?"]);
    pane.wait_for("Keys (any key closes)");
    pane.keys(&["Escape", "p"]);
    let screen = pane.wait_for("EXITED 0");
    let line = screen
        .lines()
        .find(|l| l.starts_with("pi --session "))
        .unwrap_or_else(|| panic!("{screen}"));
    let file = line.trim_start_matches("pi --session ").trim();
    assert!(
        file.starts_with(s(&sb.home().join(".pi/agent/sessions"))),
        "{screen}"
    );
    let text = std::fs::read_to_string(file).unwrap();
    assert!(text.contains(TREE_ID));
}

#[test]
fn browse_without_an_archive_or_a_terminal_says_so_and_leaves_nothing_behind() {
    let sb = Sandbox::new();
    let missing = sb.run(&["browse"]);
    assert!(
        missing.fails(3, "not_found").contains("archive.db"),
        "{missing:#?}"
    );
    assert!(!sb.default_db().exists(), "no archive created");
    let sb = sandbox();
    let piped = sb.run(&["browse"]);
    assert!(
        piped.fails(2, "usage").contains("needs a terminal"),
        "{piped:#?}"
    );
    assert_eq!(piped.stdout, "");
}

#[test]
fn browse_help_examples_run_in_a_terminal() {
    let sb = sandbox();
    let help = sb.run(&["browse", "--help"]).ok().to_owned();
    let examples: Vec<&str> = help
        .split_once("\nExamples:\n")
        .expect("examples")
        .1
        .lines()
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split(" #").next().unwrap().trim())
        .collect();
    assert_eq!(examples.len(), 2, "{help}");
    for (i, example) in examples.iter().enumerate() {
        let args = example.strip_prefix("sessiontree ").expect(example);
        let script = browse_script(&sb).replace(" browse;", &format!(" {args};"));
        let Some(pane) = Pane::start(&format!("help{i}"), &script, 100, 24) else {
            return;
        };
        pane.wait_for("2 sessions");
        pane.keys(&["q"]);
        pane.wait_for("EXITED 0");
    }
}
