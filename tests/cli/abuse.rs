//! Input that breaks naive code paths, through the command line: JSON nested
//! past a parser's recursion limit, parent cycles and self-parents.

use super::*;

const HEADER: &str = r#"{"type":"session","version":3,"id":"01950000-dddd-7000-8000-000000000001","timestamp":"2025-03-01T10:00:00.000Z","cwd":"/home/ada/deep"}"#;

/// A message whose content nests `depth` arrays deep.
fn deep_message(depth: usize) -> String {
    format!(
        r#"{{"role":"user","content":{}"deep"{},"timestamp":1}}"#,
        "[".repeat(depth),
        "]".repeat(depth)
    )
}

/// `context` passes stored message text through: a message nested 300 levels
/// deep (past serde_json's limit of 128) comes out exactly as stored in
/// `--json`, and the text form still shows its role, exit 0.
#[test]
fn context_passes_deeply_nested_messages_through_exactly() {
    let sb = Sandbox::new();
    let message = deep_message(300);
    let entry = format!(
        r#"{{"type":"message","id":"u0000001","parentId":null,"timestamp":"2025-03-01T10:00:01.000Z","message":{message}}}"#
    );
    let file = sb.write("pi/deep.jsonl", &format!("{HEADER}\n{entry}\n"));
    for source in [s(&file).to_owned(), {
        sb.import(&[&file]);
        "01950000-dddd".to_owned()
    }] {
        let r = sb.run(&["--json", "context", &source]);
        assert_eq!(r.status, 0, "{r:#?}");
        assert!(
            r.stdout.contains(&format!(r#""messages":[{message}]"#)),
            "{source}: the message is not passed through: {}",
            &r.stdout[..r.stdout.len().min(300)]
        );
        let text = sb.run(&["context", &source]);
        assert_eq!(text.status, 0, "{text:#?}");
        assert!(text.ok().contains("user: "), "{}", text.ok());
    }
}
