//! The doors of issue 40: an export that grows a pi file never leaves it
//! torn, `check FILE` reports a torn last line, export follows no link out
//! of `--out`, stored text cannot forge rows of human output, `sql` makes no
//! file and stops at its limits, and import reads only regular files with a
//! capped line.

use super::*;
use std::time::{Duration, Instant};

const ID: &str = "01950000-d00d-7000-8000-000000000001";

/// A pi file of `entries` linear messages of about `body` bytes each.
fn linear_file(sb: &Sandbox, rel: &str, entries: usize, body: usize) -> PathBuf {
    let mut text = format!(
        r#"{{"type":"session","version":3,"id":"{ID}","timestamp":"2025-03-01T10:00:00.000Z","cwd":"/home/ada/doors"}}"#
    );
    text.push('\n');
    let filler = "lorem ipsum dolor ".repeat(body / 18 + 1);
    let mut parent = "null".to_owned();
    for i in 0..entries {
        let id = format!("e{i:07}");
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        text.push_str(&format!(
            r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2025-03-01T10:00:01.000Z","message":{{"role":"{role}","content":"{i} {filler}","timestamp":1}}}}"#
        ));
        text.push('\n');
        parent = format!("\"{id}\"");
    }
    sb.write(rel, &text)
}

/// The one `.jsonl` file below `dir`.
fn only_jsonl(dir: &Path) -> PathBuf {
    let mut found = Vec::new();
    for d in std::fs::read_dir(dir).expect("out dir") {
        let d = d.expect("entry").path();
        if d.is_dir() {
            for f in std::fs::read_dir(&d).expect("session dir") {
                let f = f.expect("entry").path();
                if f.extension().is_some_and(|e| e == "jsonl") {
                    found.push(f);
                }
            }
        }
    }
    assert_eq!(found.len(), 1, "{found:?}");
    found.remove(0)
}

/// The first `n` lines of `text` (each with its `\n`).
fn first_lines(text: &[u8], n: usize) -> Vec<u8> {
    let mut end = 0;
    for _ in 0..n {
        end += text[end..]
            .iter()
            .position(|&b| b == b'\n')
            .expect("a line")
            + 1;
    }
    text[..end].to_vec()
}

/// An export that grows a file (a prefix of the session) puts the whole
/// new file in place by one rename: the old inode is left as it was (so no
/// reader can ever see it half-appended), the mode is kept, and the file
/// equals a fresh export.
#[test]
fn an_appending_export_replaces_the_file_whole_keeping_its_mode() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let sb = Sandbox::new();
    let src = linear_file(&sb, "pi/s.jsonl", 40, 200);
    sb.import(&[&src]);
    let out = sb.path("out");
    sb.run(&["export", ID, "--out", s(&out)]).ok();
    let file = only_jsonl(&out);
    let full = std::fs::read(&file).expect("export");
    let prefix = first_lines(&full, 11);
    std::fs::write(&file, &prefix).expect("cut");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let old = std::fs::File::open(&file).expect("old file");
    let old_ino = old.metadata().expect("meta").ino();
    let r = sb.run(&["--json", "export", ID, "--out", s(&out)]).json();
    assert_eq!(r["exported"][0]["action"], "appended", "{r}");
    assert_eq!(std::fs::read(&file).expect("grown"), full);
    let meta = std::fs::metadata(&file).expect("meta");
    assert_eq!(meta.permissions().mode() & 0o777, 0o640);
    assert_ne!(meta.ino(), old_ino, "the file was appended to in place");
    // The old file, still open, was never written.
    let mut held = Vec::new();
    std::io::Read::read_to_end(&mut &old, &mut held).expect("read old");
    assert_eq!(held, prefix);
}

/// kill -9 at spread instants of an export that appends to a pi file:
/// every trial leaves the old prefix or the whole session, never a torn
/// line, and `check FILE` (whose parse is pi 1.6's) passes.
#[test]
fn a_killed_appending_export_never_leaves_a_torn_line() {
    let sb = Sandbox::new();
    let src = linear_file(&sb, "pi/s.jsonl", 3000, 600);
    sb.import(&[&src]);
    let out = sb.path("out");
    let started = Instant::now();
    sb.run(&["export", ID, "--out", s(&out)]).ok();
    let took = started.elapsed();
    let file = only_jsonl(&out);
    let full = std::fs::read(&file).expect("export");
    let prefix = first_lines(&full, 5);
    let trials = 8u32;
    let (mut whole, mut old) = (0, 0);
    for trial in 0..trials {
        std::fs::write(&file, &prefix).expect("cut");
        let mut child = sb
            .command()
            .args(["export", ID, "--out", s(&out)])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn export");
        // Spread over the export's run, a little past its end.
        std::thread::sleep(took * (trial + 1) * 5 / (trials * 4));
        let _ = child.kill();
        let _ = child.wait();
        let now = std::fs::read(&file).expect("file after the kill");
        assert!(
            now == prefix || now == full,
            "trial {trial}: {} bytes, neither the old {} nor the new {} (last byte {:?})",
            now.len(),
            prefix.len(),
            full.len(),
            now.last()
        );
        if now == full {
            whole += 1;
        } else {
            old += 1;
        }
        let check = sb.run(&["check", s(&file)]);
        assert_eq!(check.status, 0, "trial {trial}: {check:#?}");
    }
    eprintln!("{trials} kills: {old} left the old file, {whole} the whole new one");
}

/// `check FILE` calls a file whose last line is torn (no `\n`, not a whole
/// JSON value) damaged, naming the line: pi 1.6 drops it and glues its next
/// entry onto it.
#[test]
fn check_reports_a_torn_last_line() {
    let sb = Sandbox::new();
    let src = linear_file(&sb, "pi/s.jsonl", 3, 20);
    let mut text = read(&src);
    text.push_str(r#"{"type":"message","id":"torn","parentId":"e0000002","mess"#);
    std::fs::write(&src, text).expect("tear");
    let r = sb.run(&["check", s(&src)]);
    assert_eq!(r.status, 8, "{r:#?}");
    assert!(r.stdout.contains("line 5: torn last line"), "{r:#?}");
}

/// A link planted below `--out` (a session directory pointing elsewhere, or
/// the session file itself pointing at another file) is never written through.
#[test]
fn export_follows_no_link_out_of_out() {
    let sb = Sandbox::new();
    let src = linear_file(&sb, "pi/s.jsonl", 3, 20);
    sb.import(&[&src]);
    let out = sb.path("out");
    sb.run(&["export", ID, "--out", s(&out)]).ok();
    let file = only_jsonl(&out);
    let name = file.file_name().expect("name").to_owned();
    let dir = file.parent().expect("dir").to_owned();
    let full = std::fs::read(&file).expect("export");
    // The session directory a link to a directory outside.
    let outside = sb.path("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::remove_dir_all(&dir).expect("rm");
    std::os::unix::fs::symlink(&outside, &dir).expect("link");
    let r = sb.run(&["export", ID, "--out", s(&out)]);
    assert_eq!(r.status, 2, "{r:#?}");
    assert!(r.stdout.contains("symbolic link"), "{r:#?}");
    assert_eq!(std::fs::read_dir(&outside).expect("outside").count(), 0);
    // The file a link to another file (which is a prefix of the session).
    std::fs::remove_file(&dir).expect("unlink");
    std::fs::create_dir_all(&dir).expect("dir");
    let victim = sb.path("victim.jsonl");
    std::fs::write(&victim, first_lines(&full, 2)).expect("victim");
    std::os::unix::fs::symlink(&victim, dir.join(&name)).expect("link");
    for force in [false, true] {
        let mut args = vec!["export", ID, "--out", s(&out)];
        if force {
            args.push("--force");
        }
        let r = sb.run(&args);
        assert_eq!(r.status, 2, "{r:#?}");
        assert_eq!(read(&victim).as_bytes(), first_lines(&full, 2));
    }
    // HTML: a link where the page goes.
    let html_out = sb.path("html");
    std::fs::create_dir_all(&html_out).expect("html dir");
    std::os::unix::fs::symlink(&victim, html_out.join(format!("{ID}.html"))).expect("link");
    let r = sb.run(&["export", ID, "--html", "--out", s(&html_out), "--force"]);
    assert_eq!(r.status, 2, "{r:#?}");
    assert_eq!(read(&victim).as_bytes(), first_lines(&full, 2));
}

/// Stored ids, names, labels, roles and cwds holding line breaks are shown
/// escaped in every human output: no stored text starts a line of its own.
#[test]
fn stored_line_breaks_cannot_forge_rows() {
    let sb = Sandbox::new();
    let j = |s: &str| Value::from(s).to_string();
    let lines = [
        format!(
            r#"{{"type":"session","version":3,"id":"{ID}","timestamp":"2025-03-01T10:00:00.000Z","cwd":{}}}"#,
            j("/home/ada\nFORGED cwd")
        ),
        format!(
            r#"{{"type":"message","id":{},"parentId":null,"timestamp":"2025-03-01T10:00:01.000Z","message":{{"role":"user","content":"findme please","timestamp":1}}}}"#,
            j("u1\nFORGED id")
        ),
        format!(
            r#"{{"type":"message","id":"a1","parentId":{},"timestamp":"2025-03-01T10:00:02.000Z\nFORGED ts","message":{{"role":"assistant","content":[{{"type":"text","text":"findme too"}}],"provider":"p","model":"m","usage":{{"input":1,"output":1,"cacheRead":0,"cacheWrite":0,"totalTokens":2,"cost":{{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":0}}}},"timestamp":2}}}}"#,
            j("u1\nFORGED id")
        ),
        format!(
            r#"{{"type":"label","id":"l1","parentId":"a1","timestamp":"2025-03-01T10:00:03.000Z","targetId":"a1","label":{}}}"#,
            j("lab\nFORGED label")
        ),
        format!(
            r#"{{"type":"session_info","id":"n1","parentId":"l1","timestamp":"2025-03-01T10:00:04.000Z","name":{}}}"#,
            j("name\nFORGED name")
        ),
    ];
    let src = sb.write("pi/forge.jsonl", &(lines.join("\n") + "\n"));
    sb.import(&[&src]);
    let prefix = &ID[..13];
    for args in [
        vec!["ls"],
        vec!["tree", prefix],
        vec!["search", "findme"],
        vec!["stats"],
        vec!["stats", "--by", "project"],
        vec!["stats", prefix],
        vec!["show", prefix],
        vec!["show", prefix, "--format", "md"],
        vec!["branch", prefix],
        vec!["context", prefix],
        vec!["history", prefix],
        vec!["tree", s(&src)],
    ] {
        let r = sb.run(&args);
        assert_eq!(r.status, 0, "{r:#?}");
        for line in r.stdout.lines() {
            assert!(
                !line.trim_start().starts_with("FORGED"),
                "{args:?}: stored text made a row of its own:\n{}",
                r.stdout
            );
        }
    }
    // JSON stays exact.
    let ls = sb.json(&["ls"]);
    assert_eq!(ls["sessions"][0]["name"], "name\nFORGED name");
    assert_eq!(ls["sessions"][0]["cwd"], "/home/ada\nFORGED cwd");
}

/// `sql` makes no file: `VACUUM INTO` and `ATTACH` of a new path are refused
/// before anything is created.
#[test]
fn sql_creates_no_file() {
    let sb = Sandbox::new();
    let src = linear_file(&sb, "pi/s.jsonl", 3, 20);
    sb.import(&[&src]);
    let made = sb.path("made.db");
    for query in [
        format!("VACUUM INTO '{}'", made.display()),
        format!("ATTACH '{}' AS x", made.display()),
        format!("ATTACH 'file:{}?mode=rwc' AS x", made.display()),
    ] {
        let r = sb.run(&["sql", &query]);
        assert_ne!(r.status, 0, "{query}: {r:#?}");
        assert!(!made.exists(), "{query} created {}", made.display());
    }
    // Reading still works.
    let rows = sb.json(&["sql", "SELECT count(*) AS n FROM entries"]);
    assert_eq!(rows["rows"][0]["n"], 3);
}

/// `sql` stops at its limits with a clear message, exit 2, and what it
/// printed stays whole (valid JSON, saying why it stopped).
#[test]
fn sql_stops_at_its_limits() {
    let sb = Sandbox::new();
    let src = linear_file(&sb, "pi/s.jsonl", 30, 3000);
    sb.import(&[&src]);
    let r = sb.run(&["--json", "sql", "SELECT id FROM entries", "--max-rows", "7"]);
    assert_eq!(r.status, 2, "{r:#?}");
    let v = r.parse();
    assert_eq!(v["rows"].as_array().map(Vec::len), Some(7), "{v}");
    assert!(
        v["stopped"].as_str().unwrap_or("").contains("row limit"),
        "{v}"
    );
    assert!(r.stderr.contains("--max-rows"), "{r:#?}");
    // Exactly the cap is no stop.
    let r = sb.run(&[
        "--json",
        "sql",
        "SELECT id FROM entries LIMIT 7",
        "--max-rows",
        "7",
    ]);
    assert_eq!(r.status, 0, "{r:#?}");
    // Time: an endless recursive query ends.
    let started = Instant::now();
    let r = sb.run(&[
        "sql",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c",
        "--max-seconds",
        "0.5",
    ]);
    assert_eq!(r.status, 2, "{r:#?}");
    assert!(r.stderr.contains("time limit"), "{r:#?}");
    assert!(started.elapsed() < Duration::from_secs(20));
    // Bytes: one value, and all the rows.
    let r = sb.run(&[
        "sql",
        "SELECT entry_text(entry_key) FROM entries",
        "--max-value-mb",
        "0",
    ]);
    assert_eq!(r.status, 2, "{r:#?}");
    assert!(r.stderr.contains("--max-value-mb"), "{r:#?}");
    let r = sb.run(&[
        "sql",
        "SELECT entry_text(entry_key) FROM entries",
        "--max-output-mb",
        "0",
    ]);
    assert_eq!(r.status, 2, "{r:#?}");
    assert!(r.stderr.contains("--max-output-mb"), "{r:#?}");
}

/// Import opens only regular files: a FIFO named `*.jsonl` and a link to
/// `/dev/zero` are refused (naming them) instead of hanging or growing
/// without bound, and the other files import.
#[test]
fn import_reads_only_regular_files() {
    let sb = Sandbox::new();
    let good = linear_file(&sb, "pi/a/good.jsonl", 2, 20);
    let fifo = sb.path("pi/a/fifo.jsonl");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    let zero = sb.path("pi/a/zero.jsonl");
    std::os::unix::fs::symlink("/dev/zero", &zero).expect("link");
    let mut child = sb
        .command()
        .args(["--json", "import", s(&sb.path("pi"))])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn import");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("import hung on a FIFO or /dev/zero");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("a FIFO"), "{stdout}");
    assert!(stdout.contains("a device"), "{stdout}");
    let _ = good;
    let ls = sb.json(&["ls"]);
    assert_eq!(ls["total"], 1, "{ls}");
}

/// A line longer than the cap is an error naming the file and the line,
/// read in bounded memory; the session is not imported.
#[test]
fn import_caps_a_lines_length() {
    let sb = Sandbox::new();
    let mut text = read(&linear_file(&sb, "pi/long.jsonl", 2, 20));
    text.push_str(&format!(
        r#"{{"type":"message","id":"big","parentId":"e0000001","timestamp":"2025-03-01T10:00:01.000Z","message":{{"role":"user","content":"{}","timestamp":1}}}}"#,
        "x".repeat(3 << 20)
    ));
    text.push('\n');
    let src = sb.write("pi/long.jsonl", &text);
    let mut c = sb.command();
    c.env("SESSIONTREE_MAX_LINE_MB", "2");
    let r = sb.run_with(c, &["import", s(&src)]);
    assert_ne!(r.status, 0, "{r:#?}");
    let all = format!("{}{}", r.stdout, r.stderr);
    assert!(
        all.contains("long.jsonl") && all.contains("line 4 is longer than 2 MB"),
        "{r:#?}"
    );
    // Within the default cap it imports.
    sb.import(&[&src]);
}

/// What pi 1.6 reads, sessiontree reads: a `custom.data` and a
/// `branch_summary.details` nested past serde_json's recursion limit (128)
/// are read by `context` and `check`, in the file and in the archive.
#[test]
fn deep_custom_data_and_details_are_read() {
    let sb = Sandbox::new();
    let deep = format!("{}1{}", "[".repeat(300), "]".repeat(300));
    let lines = [
        format!(
            r#"{{"type":"session","version":3,"id":"{ID}","timestamp":"2025-03-01T10:00:00.000Z","cwd":"/x"}}"#
        ),
        r#"{"type":"message","id":"u1","parentId":null,"timestamp":"2025-03-01T10:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}"#.to_owned(),
        format!(
            r#"{{"type":"custom","id":"c1","parentId":"u1","timestamp":"2025-03-01T10:00:02.000Z","customType":"x","data":{deep}}}"#
        ),
        format!(
            r#"{{"type":"branch_summary","id":"b1","parentId":"c1","timestamp":"2025-03-01T10:00:03.000Z","fromId":"u1","summary":"s","details":{deep}}}"#
        ),
    ];
    let src = sb.write("pi/deep.jsonl", &(lines.join("\n") + "\n"));
    sb.run(&["check", s(&src)]).ok();
    sb.import(&[&src]);
    sb.run(&["check"]).ok();
    // An SDK session (a `leaf` entry) reads it by the SDK's context.
    let leaf = r#"{"type":"leaf","id":"l1","parentId":"b1","timestamp":"2025-03-01T10:00:04.000Z","targetId":"b1"}"#;
    let sdk = sb.write(
        "pi/deep-sdk.jsonl",
        &(lines
            .join("\n")
            .replace(ID, "01950000-d00d-7000-8000-000000000002")
            + "\n"
            + leaf
            + "\n"),
    );
    sb.import(&[&sdk]);
    let ctx = sb.json(&["context", "01950000-d00d-7000-8000-000000000002"]);
    assert_eq!(ctx["messages"][1]["role"], "branchSummary", "{ctx}");
    sb.run(&["check"]).ok();
}

/// A `message` entry whose message is `null` (or absent) is refused at the
/// door: import keeps the line (reported with its file and line) and the
/// session stays readable; an rpc append takes it as pi's appendEntry does.
#[test]
fn null_messages_are_refused_at_the_door() {
    let sb = Sandbox::new();
    let lines = [
        format!(
            r#"{{"type":"session","version":3,"id":"{ID}","timestamp":"2025-03-01T10:00:00.000Z","cwd":"/x"}}"#
        ),
        r#"{"type":"message","id":"u1","parentId":null,"timestamp":"2025-03-01T10:00:01.000Z","message":{"role":"user","content":"hi","timestamp":1}}"#.to_owned(),
        r#"{"type":"message","id":"n1","parentId":"u1","timestamp":"2025-03-01T10:00:02.000Z","message":null}"#.to_owned(),
    ];
    let src = sb.write("pi/bad.jsonl", &(lines.join("\n") + "\n"));
    let report = sb.import(&[&src]).to_string();
    assert!(
        report.contains("n1") && report.contains(r#""line":3"#),
        "{report}"
    );
    sb.run(&["check"]).ok();
    sb.run(&["stats", &ID[..13]]).ok();
    sb.run(&["context", &ID[..13]]).ok();
    // The file exports byte for byte (the lines are kept).
    let out = sb.path("out");
    sb.run(&["export", ID, "--out", s(&out)]).ok();
    assert_eq!(read(&only_jsonl(&out)), read(&src));
    // An append through rpc.
    let mut rpc = sb.command();
    rpc.args(["rpc", ID])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = rpc.spawn().expect("rpc");
    {
        use std::io::Write;
        let stdin = child.stdin.as_mut().expect("stdin");
        for (i, entry) in [
            r#"{"type":"message","id":"n2","parentId":"u1","timestamp":"2025-03-01T10:00:04.000Z","message":null}"#,
            r#"{"type":"message","id":"n3","parentId":"u1","timestamp":"2025-03-01T10:00:05.000Z"}"#,
        ]
        .iter()
        .enumerate()
        {
            writeln!(stdin, r#"{{"id":{i},"method":"appendEntry","params":{{"entry":{entry}}}}}"#)
                .expect("send");
        }
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("rpc output");
    let answers = String::from_utf8_lossy(&out.stdout);
    // appendEntry takes them as pi's appendEntry does (the SDK contract,
    // the same on every backend), and the session then reads as pi reads
    // it: its statistics fail, naming the entry, where the import kept the
    // same lines out of the entries.
    assert_eq!(
        answers.matches(r#""code":"invalid_entry""#).count(),
        0,
        "{answers}"
    );
    let r = sb.run(&["stats", &ID[..13]]);
    assert_ne!(r.status, 0, "{r:#?}");
}
