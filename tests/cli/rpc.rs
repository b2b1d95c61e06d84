//! `rpc` started from the command line: stored escapes come back as pi
//! wrote them, and malformed requests are answered under their own id.

use super::*;

/// A lone UTF-16 surrogate in a stored name or label leaves `ls --json`,
/// `label`/`name --json` and rpc as the same `\uXXXX` escape pi writes, never
/// as U+FFFD.
#[test]
fn lone_surrogates_in_names_and_labels_come_back_escaped() {
    let sb = Sandbox::new();
    // Its message m1 is labelled " tag \udbff " and the session named "name \ud800".
    let id = "0198aaaa-0000-7000-8000-00000000cafe";
    let file = sb.write("pi/s.jsonl", &cli_fixture("lone-surrogates.jsonl"));
    sb.import(&[&file]);
    let ls = sb.run(&["--json", "ls"]);
    assert_eq!(ls.status, 0, "{ls:#?}");
    assert!(ls.stdout.contains(r#""name":"name \ud800""#), "{ls:#?}");
    assert!(!ls.stdout.contains('\u{fffd}'), "{ls:#?}");
    let mut rpc = sb.command();
    rpc.args(["rpc", id]).stdin(std::process::Stdio::piped());
    let mut child = rpc
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("rpc");
    {
        use std::io::Write;
        let stdin = child.stdin.as_mut().expect("stdin");
        writeln!(
            stdin,
            r#"{{"id":1,"method":"getLabel","params":{{"id":"m1"}}}}"#
        )
        .unwrap();
        writeln!(stdin, r#"{{"id":2,"method":"getSessionName"}}"#).unwrap();
    }
    let out = child.wait_with_output().expect("rpc output");
    let text = String::from_utf8(out.stdout).expect("utf-8");
    assert!(text.contains(r#""value":"tag \udbff""#), "{text}");
    assert!(text.contains(r#""value":"name \ud800""#), "{text}");
    // Reading the file directly (JSONL and memory backends) answers alike.
    for backend in ["jsonl", "memory"] {
        let mut rpc = sb.command();
        rpc.args(["rpc", "--backend", backend, s(&file)])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let mut child = rpc.spawn().expect("rpc");
        {
            use std::io::Write;
            let stdin = child.stdin.as_mut().expect("stdin");
            writeln!(
                stdin,
                r#"{{"id":1,"method":"getLabel","params":{{"id":"m1"}}}}"#
            )
            .unwrap();
        }
        let out = child.wait_with_output().expect("rpc output");
        let text = String::from_utf8(out.stdout).expect("utf-8");
        assert!(
            text.contains(r#""value":"tag \udbff""#),
            "{backend}: {text}"
        );
    }
    // Blank is JavaScript's idea of blank: U+0085 is not whitespace there.
    let v = sb.json(&["label", id, "m1", "\u{85}"]);
    assert_eq!(v["label"], json!("\u{85}"), "{v}");
}

/// A request of the wrong shape is answered under its own id whenever the
/// line is a JSON object with one (a client can match the error to its call).
#[test]
fn rpc_errors_for_malformed_requests_keep_the_request_id() {
    let sb = Sandbox::new();
    let file = small_session(
        "01950000-abab-7000-8000-000000000001",
        "/w",
        "2025-03-01T10:00:00.000Z",
        "ids",
        None,
    )
    .save(&sb, "pi");
    let mut rpc = sb.command();
    rpc.args(["rpc", s(&file)])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = rpc.spawn().expect("rpc");
    {
        use std::io::Write;
        let stdin = child.stdin.as_mut().expect("stdin");
        stdin
            .write_all(b"{\"id\":42,\"params\":1}\n{\"id\":\"x\"}\n[1]\nnot json\n")
            .unwrap();
    }
    let out = child.wait_with_output().expect("rpc output");
    let answers: Vec<Value> = String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON answer"))
        .collect();
    let ids: Vec<Value> = answers.iter().map(|a| a["id"].clone()).collect();
    assert_eq!(ids, vec![json!(42), json!("x"), json!(null), json!(null)]);
    assert!(answers.iter().all(|a| a["ok"] == json!(false)));
}
