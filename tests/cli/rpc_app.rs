//! `rpc --contract app`: pi-coding-agent 1.6.0's `SessionManager` over the
//! line protocol, on the memory, JSONL and SQLite backends, answering what
//! pi answered (`tests/fixtures/cli/app/*.pi.jsonl` were recorded by running
//! pi 1.6's `SessionManager` under Node 22 on the same file and requests).

use super::*;
use sessiontree::app::JsValue;

/// Runs `rpc` with `args` in the sandbox, `requests` on stdin; the answer lines.
fn rpc_lines(sb: &Sandbox, args: &[&str], requests: &str) -> Vec<String> {
    let mut rpc = sb.command();
    rpc.arg("rpc")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = rpc.spawn().expect("rpc");
    {
        use std::io::Write;
        let stdin = child.stdin.as_mut().expect("stdin");
        stdin.write_all(requests.as_bytes()).expect("requests");
    }
    let out = child.wait_with_output().expect("rpc output");
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// An answer as JavaScript values (numbers as doubles, lone surrogates
/// kept), without the error code pi does not have and without `sessionFile`
/// (the file's path differs by backend; pi's recording was in memory).
fn answer(line: &str) -> (JsValue, Result<JsValue, String>) {
    let a = JsValue::parse(line).expect("a JSON answer");
    let id = a.get("id").cloned().unwrap_or(JsValue::Null);
    if a.get("ok") == Some(&JsValue::Bool(true)) {
        let mut v = a.get("value").cloned().unwrap_or(JsValue::Null);
        if let JsValue::Object(members) = &mut v {
            members.retain(|(k, _)| k.json() != "\"sessionFile\"");
        }
        (id, Ok(v))
    } else {
        let e = a.get("error").expect("an error");
        (
            id,
            Err(e
                .get("message")
                .and_then(JsValue::as_js_str)
                .map(|m| m.to_string_lossy())
                .unwrap_or_default()),
        )
    }
}

/// Every read of a session with context edits, compactions (one with a
/// `systemMessage`), model changes before them, a branch summary, labels
/// with spaces and cleared labels, missing parents, a self-parent, invalid
/// dates, `content: null`, a 17-digit cost, a numeric string in usage and a
/// lone surrogate, plus `branch`/`resetLeaf` moves: pi 1.6's answers on
/// every backend.
#[test]
fn app_rpc_reads_answer_as_pi_on_every_backend() {
    let sb = Sandbox::new();
    let file = sb.write("pi/h2.jsonl", &cli_fixture("app/h2.jsonl"));
    let requests = cli_fixture("app/reads.jsonl");
    let pi: Vec<_> = cli_fixture("app/h2.reads.pi.jsonl")
        .lines()
        .map(answer)
        .collect();
    let report = sb.import(&[&file]);
    assert_eq!(report["imported"], json!(1), "{report}");
    let runs = [
        (
            "memory",
            vec!["--contract", "app", "--backend", "memory", s(&file)],
        ),
        (
            "jsonl",
            vec!["--contract", "app", "--backend", "jsonl", s(&file)],
        ),
        ("sqlite", vec!["--contract", "app", "h1"]),
    ];
    for (backend, args) in runs {
        let ours: Vec<_> = rpc_lines(&sb, &args, &requests)
            .iter()
            .map(|l| answer(l))
            .collect();
        assert_eq!(ours.len(), pi.len(), "{backend}");
        for (o, p) in ours.iter().zip(&pi) {
            assert_eq!(o.0, p.0, "{backend}");
            assert!(
                o.1 == p.1,
                "{backend}, request {}:\n ours {:?}\n pi   {:?}",
                o.0.to_json(),
                o.1,
                p.1
            );
        }
    }
}

/// The SDK contract stays the default; the app contract is asked for.
#[test]
fn rpc_serves_the_sdk_contract_unless_told() {
    let sb = Sandbox::new();
    let file = sb.write("pi/h2.jsonl", &cli_fixture("app/h2.jsonl"));
    let req = "{\"id\":1,\"method\":\"getPathToRootOrCompaction\",\"params\":{\"leafId\":\"u1\"}}\n{\"id\":2,\"method\":\"getBranch\",\"params\":{\"fromId\":\"u1\"}}\n";
    let sdk = rpc_lines(&sb, &["--backend", "memory", s(&file)], req);
    assert!(sdk[0].contains(r#""ok":true"#), "{sdk:?}");
    let app = rpc_lines(
        &sb,
        &["--contract", "app", "--backend", "memory", s(&file)],
        req,
    );
    assert!(
        app[0].contains(r#""ok":false"#) && app[0].contains("unknown method"),
        "{app:?}"
    );
    assert!(
        app[1]
            .starts_with(r#"{"id":2,"ok":true,"value":[{"type":"thinking_level_change","id":"t1""#),
        "{app:?}"
    );
}

/// Writes go through pi's rules on every backend that keeps them: `branch`
/// moves the leaf in memory only, the next append attaches there, the new
/// entry is pi-shaped; reopened, the leaf is the last entry.
#[test]
fn app_rpc_writes_attach_at_the_moved_leaf_and_persist() {
    let sb = Sandbox::new();
    let file = sb.write("pi/h2.jsonl", &cli_fixture("app/h2.jsonl"));
    sb.import(&[&file]);
    let requests = concat!(
        "{\"id\":1,\"method\":\"branch\",\"params\":{\"branchFromId\":\"u2\"}}\n",
        "{\"id\":2,\"method\":\"appendMessage\",\"params\":{\"message\":{\"role\":\"user\",\"content\":\"next\",\"timestamp\":1}}}\n",
        "{\"id\":3,\"method\":\"getLeafEntry\"}\n",
        "{\"id\":4,\"method\":\"appendUsage\",\"params\":{\"kind\":\"k\",\"provider\":\"p\",\"model\":\"m\",\"usage\":{\"input\":1,\"output\":2,\"cacheRead\":0,\"cacheWrite\":0,\"totalTokens\":3,\"cost\":{\"input\":0,\"output\":0,\"cacheRead\":0,\"cacheWrite\":0,\"total\":0.1}}}}\n",
        "{\"id\":5,\"method\":\"resetLeaf\"}\n",
        "{\"id\":6,\"method\":\"getLeafId\"}\n",
    );
    for (backend, args, reopen) in [
        (
            "jsonl",
            vec!["--contract", "app", s(&file)],
            vec!["--contract", "app", s(&file)],
        ),
        (
            "sqlite",
            vec!["--contract", "app", "h1"],
            vec!["--contract", "app", "h1"],
        ),
    ] {
        let lines = rpc_lines(&sb, &args, requests);
        let values: Vec<Value> = lines
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).expect("json")["value"].clone())
            .collect();
        assert_eq!(
            values[0],
            Value::Null,
            "{backend}: branch answers undefined"
        );
        let id = values[1].as_str().expect("the new id");
        assert!(
            id.len() == 8 && id.bytes().all(|c| c.is_ascii_hexdigit()),
            "{backend}: {id}"
        );
        let entry = &values[2];
        assert_eq!(
            entry["parentId"],
            json!("u2"),
            "{backend}: attached at the moved leaf"
        );
        let keys: Vec<&str> = entry
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut sorted = vec!["type", "id", "parentId", "timestamp", "message"];
        sorted.sort_unstable();
        assert_eq!(keys, sorted, "{backend}");
        assert!(
            lines[2].contains(r#"{"type":"message","id":""#),
            "pi's key order: {}",
            lines[2]
        );
        let usage = &values[3];
        assert_eq!(
            usage["type"],
            json!("usage"),
            "{backend}: appendUsage answers the entry"
        );
        assert_eq!(usage["parentId"], json!(id), "{backend}");
        assert!(
            !lines[3].contains("\"note\""),
            "an absent note is left out: {}",
            lines[3]
        );
        assert_eq!(values[5], Value::Null, "{backend}: resetLeaf");
        // Reopened, the leaf is the last entry (the usage entry), not the
        // in-memory reset.
        let again = rpc_lines(&sb, &reopen, "{\"id\":1,\"method\":\"getLeafId\"}\n");
        assert_eq!(
            serde_json::from_str::<Value>(&again[0]).unwrap()["value"],
            usage["id"],
            "{backend}"
        );
    }
}
