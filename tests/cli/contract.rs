//! Each session's contract (issue 37): detected at import, `--rules`
//! overriding it, shown by `ls` and `stats`; import opening what pi 1.6
//! opens (lines it skips kept verbatim and reported with file and line,
//! export byte-identical); pi 1.6's rewrites described, never done; writes
//! on an app session in pi's shapes, the exported file opened by pi 1.6
//! itself with the archive's leaf, branch and labels.

use super::{pi_fixtures, s, Sandbox, COMPACTION_ID};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

const HEADER: &str = r#"{"type":"session","version":3,"id":"01950000-0000-7000-8000-0000000c0001","timestamp":"2025-01-01T00:00:00.000Z","cwd":"/p"}"#;

fn msg(id: &str, parent: Option<&str>, text: &str) -> String {
    json!({"type": "message", "id": id, "parentId": parent, "timestamp": "2025-01-01T00:00:01.000Z",
           "message": {"role": "user", "content": text}})
    .to_string()
}

/// The one `.jsonl` file below `dir`.
fn exported(dir: &Path) -> PathBuf {
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

#[test]
fn a_file_pi_opens_imports_with_its_skipped_lines_reported_and_exports_byte_identical() {
    let sb = Sandbox::new();
    // Garbage before the header, a line that is not JSON, a blank line, a
    // missing parent, a duplicate id, a non-object, a falsy line, an object
    // without an id, and no final newline: pi 1.6 opens all of it.
    let lines = [
        "garbage before the header".to_owned(),
        HEADER.to_owned(),
        msg("a", None, "hi"),
        "{not json".to_owned(),
        String::new(),
        msg("b", Some("gone"), "orphan"),
        msg("a", None, "a second a"),
        "[1,2]".to_owned(),
        "null".to_owned(),
        r#"{"type":"message","parentId":null,"timestamp":"t"}"#.to_owned(),
        msg("c", Some("b"), "last"),
    ];
    let file = sb.write("in/odd.jsonl", &lines.join("\n"));
    let r = sb.run(&["import", s(&file)]);
    let text = r.ok();
    for (line, why) in [
        (
            1,
            "pi skips it: a line before the session header that is not JSON",
        ),
        (4, "pi skips it: not valid JSON"),
        (
            7,
            "not stored as an entry: its id \"a\" is an earlier entry's",
        ),
        (8, "not stored as an entry: JSON but not an object"),
        (9, "pi skips it: JSON null, false, 0 or \"\""),
        (10, "not stored as an entry: it is missing entry id"),
    ] {
        let want = format!("{}:{line}: kept verbatim, {why}", file.display());
        assert!(text.contains(&want), "{want}\nin:\n{text}");
    }
    assert!(text.contains("1 blank line(s) kept verbatim"), "{text}");
    assert!(
        text.contains(&format!(
            "{}: pi 1.6 will append a final newline to this file on open (not done to it here)",
            file.display()
        )),
        "{text}"
    );
    let id = "01950000-0000-7000-8000-0000000c0001";
    // The archive holds the usable entries, the first `a` among them.
    let stats = sb.json(&["stats", id]);
    assert_eq!(stats["entries"], 3, "{stats}");
    assert_eq!(stats["contract"], "app");
    let branch = sb.json(&["branch", id]);
    let ids: Vec<&str> = branch["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["b", "c"], "the path stops at the missing parent");
    // The file is untouched, and export gives it back byte for byte.
    assert_eq!(
        std::fs::read_to_string(&file).expect("file"),
        lines.join("\n")
    );
    let out = sb.path("out");
    sb.run(&["export", id, "--out", s(&out)]).ok();
    assert_eq!(
        std::fs::read(exported(&out)).expect("exported"),
        lines.join("\n").into_bytes(),
        "byte-identical"
    );

    // In JSON, every kept line with file and line (blank ones flagged).
    let sb2 = Sandbox::new();
    let v = sb2.import(&[&file]);
    let kept = v["keptLines"].as_array().expect("keptLines");
    let numbered: Vec<(u64, bool)> = kept
        .iter()
        .map(|k| (k["line"].as_u64().expect("line"), k["blank"] == true))
        .collect();
    assert_eq!(
        numbered,
        [
            (1, false),
            (4, false),
            (5, true),
            (7, false),
            (8, false),
            (9, false),
            (10, false)
        ]
    );
    assert_eq!(v["piWill"][0]["file"], s(&file));

    // After an append in the archive, the export ends its lines again.
    sb.run(&["name", id, "renamed"]).ok();
    let out2 = sb.path("out2");
    sb.run(&["export", id, "--out", s(&out2)]).ok();
    let again = std::fs::read_to_string(exported(&out2)).expect("exported");
    assert!(again.starts_with(&lines.join("\n")), "{again}");
    assert!(again.ends_with("\"name\":\"renamed\"}\n"), "{again}");
}

#[test]
fn a_first_json_line_that_is_not_a_header_is_refused_as_pi_refuses_it() {
    let sb = Sandbox::new();
    let file = sb.write("x.jsonl", &format!("{}\n{HEADER}\n", msg("a", None, "hi")));
    let r = sb.run(&["import", s(&file)]);
    assert_eq!(r.status, 2, "{r:#?}");
    assert!(
        r.stdout
            .contains("first line is not a valid session header"),
        "{r:#?}"
    );
    // An empty file: described, not written to.
    let empty = sb.write("empty.jsonl", "");
    let r = sb.run(&["import", s(&empty)]);
    assert!(
        r.stdout
            .contains("pi 1.6 will write a session header into this empty file on open"),
        "{r:#?}"
    );
    assert_eq!(std::fs::read(&empty).expect("empty").len(), 0);
}

#[test]
fn the_contract_is_detected_and_rules_override_it_and_ls_shows_it() {
    let sb = Sandbox::new();
    let sdk_header = HEADER.replace("0c0001", "0c0002");
    let sdk = sb.write(
        "in/sdk.jsonl",
        &format!(
            "{sdk_header}\n{}\n{}\n",
            msg("a", None, "hi"),
            r#"{"type":"leaf","id":"l1","parentId":"a","timestamp":"2025-01-01T00:00:02.000Z","targetId":null}"#
        ),
    );
    let app = sb.write(
        "in/app.jsonl",
        &format!("{HEADER}\n{}\n", msg("a", None, "hi")),
    );
    sb.import(&[&sdk, &app]);
    let ls = sb.json(&["ls"]);
    let contracts: Vec<(String, String)> = ls["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|r| {
            (
                r["id"].as_str().expect("id").to_owned(),
                r["contract"].as_str().expect("contract").to_owned(),
            )
        })
        .collect();
    assert!(contracts.contains(&("01950000-0000-7000-8000-0000000c0001".into(), "app".into())));
    assert!(contracts.contains(&("01950000-0000-7000-8000-0000000c0002".into(), "sdk".into())));
    let text = sb.run(&["ls"]).ok().to_owned();
    assert!(
        text.lines().next().expect("header").contains("RULES"),
        "{text}"
    );

    // `--rules` overrides detection, both ways.
    let sb2 = Sandbox::new();
    let r = sb2.json(&["import", "--rules", "sdk", s(&app)]);
    assert_eq!(r["imported"], 1);
    assert_eq!(
        sb2.json(&["stats", "01950000-0000-7000-8000-0000000c0001"])["contract"],
        "sdk"
    );
    sb2.json(&["import", "--rules", "app", s(&sdk)]);
    assert_eq!(
        sb2.json(&["stats", "01950000-0000-7000-8000-0000000c0002"])["contract"],
        "app"
    );
    let bad = sb2.run(&["import", "--rules", "pi", s(&app)]);
    assert_eq!(bad.status, 2, "{bad:#?}");
}

#[test]
fn a_version_1_file_is_described_not_rewritten() {
    let sb = Sandbox::new();
    let file = pi_fixtures().join("before-compaction.jsonl");
    let before = std::fs::read(&file).expect("fixture");
    let r = sb.run(&["import", s(&file)]);
    assert!(
        r.ok().contains(&format!(
            "{}: pi 1.6 will upgrade this file on open: version 1 to 3",
            file.display()
        )),
        "{r:#?}"
    );
    assert_eq!(std::fs::read(&file).expect("fixture"), before, "untouched");
    assert_eq!(sb.json(&["stats", COMPACTION_ID])["contract"], "app");
}

/// What pi 1.6's `SessionManager.open` makes of a copy of `file`: its leaf,
/// branch ids, labels and name.
fn pi16_opens(file: &Path, scratch: &Path) -> Value {
    let copy = scratch.join("pi16-copy.jsonl");
    std::fs::copy(file, &copy).expect("copy");
    let script = r#"
import { SessionManager } from "@earendil-works/pi-coding-agent";
const sm = SessionManager.open(process.argv[1]);
const labels = {};
for (const e of sm.getEntries()) { const l = sm.getLabel(e.id); if (l !== undefined) labels[e.id] = l; }
console.log(JSON.stringify({ leaf: sm.getLeafId(), branch: sm.getBranch().map((e) => e.id), labels, name: sm.getSessionName() ?? null }));
"#;
    let out = std::process::Command::new(crate::support::node::pi16_node())
        .args(["--input-type=module", "-e", script, s(&copy)])
        .current_dir(crate::support::node::pi16_dir())
        .output()
        .expect("run node");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("pi's answer")
}

#[test]
fn app_move_label_and_name_export_without_leaf_lines_and_pi_16_opens_them_alike() {
    let sb = Sandbox::new();
    let file = sb.write(
        "in/app.jsonl",
        &[
            HEADER.to_owned(),
            msg("a", None, "first"),
            msg("b", Some("a"), "second"),
            msg("c", Some("b"), "third"),
        ]
        .map(|l| l + "\n")
        .concat(),
    );
    sb.import(&[&file]);
    let id = "01950000-0000-7000-8000-0000000c0001";
    let moved = sb.json(&["move", id, "a", "--summary", "back to the start"]);
    let summary = moved["summary"].as_str().expect("summary id").to_owned();
    sb.run(&["label", id, "b", "  spaced label "]).ok();
    sb.run(&["name", id, "a name"]).ok();
    let out = sb.path("out");
    let r = sb.run(&["export", id, "--out", s(&out)]);
    assert_eq!(
        r.stderr, "",
        "pi resumes where the archive's leaf is: no note"
    );
    let path = exported(&out);
    let text = std::fs::read_to_string(&path).expect("exported");
    assert!(!text.contains(r#""type":"leaf""#), "{text}");
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let bs = &lines[4];
    assert_eq!(
        (
            bs["type"].clone(),
            bs["parentId"].clone(),
            bs["fromId"].clone(),
            bs["summary"].clone()
        ),
        (
            json!("branch_summary"),
            json!("a"),
            json!("c"),
            json!("back to the start")
        )
    );
    assert_eq!(bs["id"], summary.as_str());
    assert_eq!(
        lines[5]["label"], "  spaced label ",
        "as written, not trimmed"
    );
    assert_eq!(lines[6]["type"], "session_info");

    // pi 1.6 opens the export with the archive's leaf, branch and labels.
    let pi = pi16_opens(&path, &sb.path("."));
    let ours: Vec<String> = sb.json(&["branch", id])["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(pi["branch"], json!(ours));
    assert_eq!(pi["leaf"], json!(ours.last()));
    assert_eq!(pi["labels"], json!({"b": "  spaced label "}));
    assert_eq!(pi["name"], "a name");
    assert_eq!(ours[..2], ["a".to_owned(), summary]);
}

#[test]
fn an_app_session_whose_leaf_pi_will_not_resume_at_is_noted_on_export() {
    let sb = Sandbox::new();
    // Told to follow the app's rules, a file with a `leaf` entry: export
    // leaves the line out, and says where pi will resume instead.
    let file = sb.write(
        "in/moved.jsonl",
        &[
            HEADER.to_owned(),
            msg("a", None, "first"),
            msg("b", Some("a"), "second"),
            r#"{"type":"leaf","id":"l1","parentId":"b","timestamp":"2025-01-01T00:00:02.000Z","targetId":"a"}"#.to_owned(),
        ]
        .map(|l| l + "\n")
        .concat(),
    );
    sb.json(&["import", "--rules", "app", s(&file)]);
    let out = sb.path("out");
    let r = sb.run(&[
        "export",
        "01950000-0000-7000-8000-0000000c0001",
        "--out",
        s(&out),
    ]);
    r.ok();
    assert_eq!(r.stderr.lines().count(), 1, "{r:#?}");
    assert!(
        r.stderr.contains("01950000-0000-7000-8000-0000000c0001")
            && r.stderr.contains("last entry b")
            && r.stderr.contains("leaf a"),
        "{r:#?}"
    );
    let text = std::fs::read_to_string(exported(&out)).expect("exported");
    assert!(!text.contains(r#""type":"leaf""#), "{text}");
}

#[test]
fn a_fork_follows_its_sources_rules() {
    let sb = Sandbox::new();
    let sdk_header = HEADER.replace("0c0001", "0c0002");
    let sdk = sb.write(
        "in/sdk.jsonl",
        &format!(
            "{sdk_header}\n{}\n{}\n",
            msg("a", None, "hi"),
            r#"{"type":"leaf","id":"l1","parentId":"a","timestamp":"2025-01-01T00:00:02.000Z","targetId":"a"}"#
        ),
    );
    let app = sb.write(
        "in/app.jsonl",
        &format!("{HEADER}\n{}\n", msg("a", None, "hi")),
    );
    sb.import(&[&sdk, &app]);
    for (source, rules) in [
        ("01950000-0000-7000-8000-0000000c0001", "app"),
        ("01950000-0000-7000-8000-0000000c0002", "sdk"),
    ] {
        let forked = sb.json(&["fork", source]);
        let id = forked["session"].as_str().expect("new session id");
        assert_eq!(
            sb.json(&["stats", id])["contract"],
            rules,
            "fork of {source}"
        );
    }
}
