//! Reading sessions in full and what `check` tolerates: `show` (text,
//! Markdown, HTML; an entry, a path), `export --html`, and `check`'s warning
//! for a root whose parent is missing (a file cut from a longer one), which
//! pi opens and reads here tolerate.

use super::*;
use std::ops::Add;

const SHOW_ID: &str = "01950000-5555-7000-8000-000000000001";

/// A 1×1 PNG, base64.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

/// A session with what `show` must render in full: a long user message,
/// markup, thinking, a tool call, a tool result, an image, a bash run.
fn show_session(sb: &Sandbox) -> PathBuf {
    let long = "word ".repeat(200) + "THE-END";
    let lines = [
        format!(
            r#"{{"type":"session","version":3,"id":"{SHOW_ID}","timestamp":"2025-03-01T10:00:00.000Z","cwd":"/home/ada/show"}}"#
        ),
        format!(
            r#"{{"type":"message","id":"u0000001","parentId":null,"timestamp":"2025-03-01T10:00:01.000Z","message":{{"role":"user","content":[{{"type":"text","text":"{long}\nsecond line <script>alert(1)</script> & more"}},{{"type":"image","mimeType":"image/png","data":"{PNG}"}}],"timestamp":1}}}}"#
        ),
        r#"{"type":"message","id":"a0000001","parentId":"u0000001","timestamp":"2025-03-01T10:00:02.000Z","message":{"role":"assistant","content":[{"type":"thinking","thinking":"Let me read the file first."},{"type":"toolCall","id":"call1","name":"read","arguments":{"path":"/home/ada/show/src/main.rs","limit":20}}],"provider":"anthropic","model":"claude-sonnet-4-5","stopReason":"toolUse","timestamp":2,"usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}}}"#.to_owned(),
        r#"{"type":"message","id":"r0000001","parentId":"a0000001","timestamp":"2025-03-01T10:00:03.000Z","message":{"role":"toolResult","toolCallId":"call1","toolName":"read","content":[{"type":"text","text":"fn main() {\n    println!(\"hi\");\n}"}],"isError":false,"timestamp":3}}"#.to_owned(),
        r#"{"type":"message","id":"a0000002","parentId":"r0000001","timestamp":"2025-03-01T10:00:04.000Z","message":{"role":"assistant","content":[{"type":"text","text":"It prints `hi`:\n\n```rust\nprintln!(\"hi\");\n```"}],"provider":"anthropic","model":"claude-sonnet-4-5","stopReason":"stop","timestamp":4,"usage":{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,"cost":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}}}"#.to_owned(),
        r#"{"type":"message","id":"u0000002","parentId":"a0000001","timestamp":"2025-03-01T10:00:05.000Z","message":{"role":"user","content":"a side branch","timestamp":5}}"#.to_owned(),
        r#"{"type":"leaf","id":"l0000001","parentId":"u0000002","timestamp":"2025-03-01T10:00:06.000Z","targetId":"a0000002"}"#.to_owned(),
    ];
    sb.write("pi/show.jsonl", &(lines.join("\n") + "\n"))
}

#[test]
fn show_prints_the_active_path_in_full_as_text() {
    let sb = Sandbox::new();
    let file = show_session(&sb);
    sb.import(&[&file]);
    let text = sb.run(&["show", "01950000-5555"]).ok().to_owned();
    // Every entry of the active path, in order, nothing cut.
    let order: Vec<usize> = ["u0000001", "a0000001", "r0000001", "a0000002"]
        .iter()
        .map(|id| text.find(&format!("· {id} ·")).expect(id))
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{text}");
    assert!(
        !text.contains("u0000002"),
        "the side branch is not on the path"
    );
    assert!(text.contains(&("word ".repeat(200) + "THE-END")), "{text}");
    assert!(!text.contains('…'), "{text}");
    assert!(
        text.contains("[thinking]\nLet me read the file first."),
        "{text}"
    );
    assert!(
        text.contains(
            "[tool call: read]\n{\n  \"limit\": 20,\n  \"path\": \"/home/ada/show/src/main.rs\"\n}"
        ),
        "{text}"
    );
    assert!(text.contains("toolResult [read]"), "{text}");
    assert!(
        text.contains("fn main() {\n    println!(\"hi\");\n}"),
        "{text}"
    );
    assert!(text.contains("[image: image/png, "), "{text}");
    assert!(
        text.contains("assistant · anthropic/claude-sonnet-4-5"),
        "{text}"
    );
    // The same from the file, without the archive.
    assert_eq!(sb.run(&["show", s(&file)]).ok(), text);
    // --from: the path ending at an entry.
    let from = sb
        .run(&["show", "01950000-5555", "--from", "u0000002"])
        .ok()
        .to_owned();
    assert!(
        from.contains("· u0000002 ·") && !from.contains("· r0000001 ·"),
        "{from}"
    );
}

#[test]
fn show_finds_one_entry_by_its_id_alone_or_in_a_session() {
    let sb = Sandbox::new();
    let file = show_session(&sb);
    sb.import(&[&file]);
    let one = sb.run(&["show", "r0000001"]).ok().to_owned();
    assert!(
        one.starts_with("── toolResult [read] · r0000001 · 2025-03-01T10:00:03.000Z ──\n"),
        "{one}"
    );
    assert_eq!(
        one.matches(" ── \n").count() + one.matches("──\n").count(),
        1,
        "{one}"
    );
    assert_eq!(
        sb.run(&["show", "r0000001", "--session", "01950000-5555"])
            .ok(),
        one
    );
    assert_eq!(
        sb.run(&["show", "r0000001", "--session", s(&file)]).ok(),
        one
    );
    let v = sb.json(&["show", "r0000001"]);
    assert_eq!(v["entries"][0]["id"], "r0000001");
    sb.run(&["show", "nothing1"]).fails(2, "usage");
    sb.run(&["show", "nothing1", "--session", "01950000-5555"])
        .fails(3, "not_found");
    sb.run(&["show", "01950000-5555", "--from", "nothing1"])
        .fails(3, "not_found");
}

#[test]
fn show_writes_markdown_and_a_self_contained_html_page() {
    let sb = Sandbox::new();
    let file = show_session(&sb);
    sb.import(&[&file]);
    let md = sb
        .run(&["show", "01950000-5555", "--format", "md"])
        .ok()
        .to_owned();
    assert!(md.starts_with(&format!("# {SHOW_ID}\n")), "{md}");
    assert!(md.contains("## user · `u0000001` ·"), "{md}");
    assert!(
        md.contains(&format!("![image](data:image/png;base64,{PNG})")),
        "{md}"
    );
    assert!(md.contains("**tool call** `read`\n\n```json\n{"), "{md}");
    // A fence longer than any backtick run inside the result it holds.
    assert!(
        md.contains("> *thinking*\n>\n> Let me read the file first."),
        "{md}"
    );

    let html = sb
        .run(&["show", "01950000-5555", "--format", "html"])
        .ok()
        .to_owned();
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    assert!(html.trim_end().ends_with("</html>"));
    assert!(html.contains("<style>"), "inline CSS");
    assert!(
        !html.contains("<link") && !html.contains("<script"),
        "{html}"
    );
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt; &amp; more"),
        "{html}"
    );
    assert!(html.contains(&format!("src=\"data:image/png;base64,{PNG}\"")));
    assert!(html.contains(&("word ".repeat(200) + "THE-END")));
    assert!(html.contains("&quot;path&quot;: &quot;/home/ada/show/src/main.rs&quot;"));

    // export --html: one page per session, as `show --format html` writes it.
    let out = sb.path("pages");
    let v = sb.json(&["export", "01950000-5555", "--out", s(&out), "--html"]);
    assert_eq!(v["exported"][0]["action"], "created", "{v}");
    let page = out.join(format!("{SHOW_ID}.html"));
    assert_eq!(read(&page), html);
    let v = sb.json(&["export", "--all", "--out", s(&out), "--html"]);
    assert_eq!(v["exported"][0]["action"], "unchanged", "{v}");
    // A page changed since is never silently replaced.
    std::fs::write(&page, "mine").expect("write");
    let r = sb.run(&[
        "--json",
        "export",
        "01950000-5555",
        "--out",
        s(&out),
        "--html",
    ]);
    assert_eq!(r.status, 2, "{r:#?}");
    assert_eq!(read(&page), "mine");
    let v = sb.json(&[
        "export",
        "01950000-5555",
        "--out",
        s(&out),
        "--html",
        "--force",
    ]);
    assert_eq!(v["exported"][0]["action"], "replaced", "{v}");
    assert_eq!(read(&out.join(format!("{SHOW_ID}.html.bak"))), "mine");
    assert_eq!(read(&page), html);
}

#[test]
fn show_escapes_control_characters_on_a_terminal_only() {
    let sb = Sandbox::new();
    let id = hostile_session(&sb);
    // Into a pipe the text is exact (a file written with `>`)...
    let piped = sb.run(&["show", id]).ok().to_owned();
    assert!(piped.contains(HOSTILE), "{piped}");
    // ...and HTML escapes what a browser would not show.
    let html = sb.run(&["show", id, "--format", "html"]).ok().to_owned();
    assert!(html.contains("&#x1b;[31mred"), "{html}");
}

/// A pi file whose root names a parent that is not there, cut after a
/// compaction: pi opens it, and so do `tree` and `context` here.
fn cut_session(sb: &Sandbox) -> PathBuf {
    let line = |id: &str, parent: &str| {
        format!(
            r#"{{"type":"message","id":"{id}","parentId":"{parent}","timestamp":"2025-03-01T10:00:01.000Z","message":{{"role":"user","content":"{id} text","timestamp":1}}}}"#
        )
    };
    sb.write(
        "pi/cut.jsonl",
        &[
            r#"{"type":"session","version":3,"id":"01950000-cccc-7000-8000-000000000001","timestamp":"2025-03-01T10:00:00.000Z","cwd":"/home/ada/cut"}"#.to_owned(),
            line("c0000001", "c75b2564"),
            line("c0000002", "c0000001"),
            r#"{"type":"compaction","id":"k0000001","parentId":"c0000002","timestamp":"2025-03-01T10:00:02.000Z","summary":"so far","firstKeptEntryId":"c0000002","tokensBefore":1000}"#.to_owned(),
            line("c0000003", "k0000001"),
        ]
        .join("\n")
        .add("\n"),
    )
}

const CUT_WARNING: &str = "session 01950000-cccc-7000-8000-000000000001: entry c0000001 names parent c75b2564, which is not in the session (a file cut from a longer one?); pi opens it and a path through it stops there, at c0000001";

#[test]
fn check_warns_about_a_missing_parent_that_reads_tolerate() {
    let sb = Sandbox::new();
    let file = cut_session(&sb);
    sb.import(&[&file]);
    // What a reader does: fine.
    sb.run(&["tree", "01950000-cccc", "--no-pager"]).ok();
    sb.run(&["context", "01950000-cccc"]).ok();
    for args in [&["check"][..], &["check", "01950000-cccc"][..]] {
        let r = sb.run(args);
        let text = r.ok();
        assert!(text.starts_with("ok: "), "{text}");
        assert!(
            text.contains(&format!("warning: {CUT_WARNING}\n")),
            "{text}"
        );
        let v = sb.json(args);
        assert_eq!(v["ok"], true, "{v}");
        assert_eq!(v["problems"], json!([]), "{v}");
        assert_eq!(v["warnings"], json!([CUT_WARNING]), "{v}");
    }
    // The file, checked without importing it, says the same.
    let v = sb.json(&["check", s(&file)]);
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(
        v["warnings"],
        json!([CUT_WARNING.trim_start_matches("session 01950000-cccc-7000-8000-000000000001: ")])
    );
}

/// Two named sessions to complete: `01950000-1111…` "Parser refactor" and
/// `01950000-2222…` "pager work".
fn two_named_sessions(sb: &Sandbox) {
    let a = small_session(
        "01950000-1111-7000-8000-000000000001",
        "/home/ada/p",
        "2025-03-01T10:00:00.000Z",
        "parsing",
        Some("Parser refactor"),
    )
    .save(sb, "pi/a");
    let b = small_session(
        "01950000-2222-7000-8000-000000000001",
        "/home/ada/p",
        "2025-03-02T10:00:00.000Z",
        "paging",
        Some("pager work"),
    )
    .save(sb, "pi/b");
    sb.import(&[&a, &b]);
}

#[test]
fn complete_sessions_offers_ids_and_names_from_the_archive() {
    let sb = Sandbox::new();
    // No archive: nothing, and no error.
    let r = sb.run(&["complete-sessions", "0195"]);
    assert_eq!((r.status, r.stdout.as_str()), (0, ""), "{r:#?}");
    two_named_sessions(&sb);
    let all = sb.run(&["complete-sessions", "0195"]).ok().to_owned();
    assert_eq!(
        all,
        "01950000-2222-7000-8000-000000000001\n01950000-1111-7000-8000-000000000001\n"
    );
    // By name, any case: the id is what goes on the command line.
    assert_eq!(
        sb.run(&["complete-sessions", "PARSER"]).ok(),
        "01950000-1111-7000-8000-000000000001\n"
    );
    assert_eq!(
        sb.run(&["complete-sessions", "--shell", "fish", "01950000-2"])
            .ok(),
        "01950000-2222-7000-8000-000000000001\tpager work\n"
    );
    assert_eq!(
        sb.run(&["complete-sessions", "--shell", "zsh", "pa"]).ok(),
        "01950000-2222-7000-8000-000000000001:pager work\n01950000-1111-7000-8000-000000000001:Parser refactor\n"
    );
    assert_eq!(sb.run(&["complete-sessions", "nope"]).ok(), "");
    // Hidden: not in the help's command list.
    assert!(!sb.run(&["--help"]).ok().contains("complete-sessions"));
}

#[test]
fn the_bash_script_completes_session_arguments_from_the_archive() {
    let sb = Sandbox::new();
    two_named_sessions(&sb);
    let script = sb.write("sessiontree.bash", sb.run(&["completions", "bash"]).ok());
    let bin_dir = Path::new(support::bin()).parent().expect("bin dir");
    // COMP_WORDS and the arguments as bash gives them (command, word,
    // previous word), the completion function run in a subshell.
    let complete = |words: &[&str]| -> Vec<String> {
        let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
        let program = format!(
            "source {script}; COMP_WORDS=({words}); COMP_CWORD={cword}; _sessiontree_sessions sessiontree \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script = s(&script),
            words = quoted.join(" "),
            cword = words.len() - 1,
        );
        let mut c = std::process::Command::new("bash");
        c.env_clear()
            .env("HOME", sb.home())
            .env("XDG_DATA_HOME", sb.path("data"))
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    bin_dir.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .current_dir(sb.dir.path())
            .arg("-c")
            .arg(program);
        let run = c.output().expect("bash");
        assert!(run.status.success(), "{run:?}");
        String::from_utf8_lossy(&run.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let a = "01950000-1111-7000-8000-000000000001".to_owned();
    let b = "01950000-2222-7000-8000-000000000001".to_owned();
    assert_eq!(
        complete(&["sessiontree", "tree", "0195"]),
        [b.as_str(), a.as_str()]
    );
    assert_eq!(
        complete(&["sessiontree", "show", "01950000-1"]),
        [a.as_str()]
    );
    assert_eq!(
        complete(&["sessiontree", "--json", "branch", "pager"]),
        [b.as_str()]
    );
    assert_eq!(
        complete(&["sessiontree", "delete", &a, "01950000-2"]),
        [b.as_str()]
    );
    assert_eq!(
        complete(&["sessiontree", "search", "foo", "--session", "Pars"]),
        [a.as_str()]
    );
    // Not a session argument: clap's own completion (options, files).
    let second = complete(&["sessiontree", "label", &a, "0195"]);
    assert!(!second.contains(&b), "{second:?}");
    let option_value = complete(&["sessiontree", "tree", "--from", "0195"]);
    assert!(!option_value.contains(&b), "{option_value:?}");
    let options = complete(&["sessiontree", "tree", "--no-p"]);
    assert_eq!(options, ["--no-pager"]);
}
