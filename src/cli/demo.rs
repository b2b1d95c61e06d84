//! The demo archive `import` falls back on: a few small pi sessions written
//! through the library's own JSONL repository and session layer, so that a
//! newcomer without pi sessions still sees forks, labels, names, a compaction
//! and a branch summary in `ls`, `tree`, `search` and `context`. (The workload
//! generator for tests and benchmarks lives in the `sessiontree-bench` crate,
//! outside the product.)

use serde_json::{json, Value};
use sessiontree::json::JsString;
use sessiontree::repo::jsonl::JsonlRepo;
use sessiontree::repo::{CreateOptions, SessionRepo};
use sessiontree::session::{BranchSummary, Compaction};
use sessiontree::storage::Durability;
use sessiontree::{JsonText, Result, Session, SessionStorage};
use std::path::Path;

/// One step of a scripted conversation.
enum Step {
    /// A user message.
    User(&'static str),
    /// An assistant message; with a tool call, followed by its result.
    Reply(&'static str),
    /// An assistant message calling `bash` with this command, then the tool's output.
    Bash(&'static str, &'static str),
}

/// A demo session: where it runs, its name, and its conversation.
struct Script {
    cwd: &'static str,
    name: &'static str,
    steps: &'static [Step],
}

const MIGRATION: Script = Script {
    cwd: "/home/demo/projects/api",
    name: "Fix the flaky migration test",
    steps: &[
        Step::User("The migration test fails about one run in ten. Can you find out why?"),
        Step::Bash(
            "cargo test migration -- --nocapture",
            "test migration::applies_in_order ... FAILED\nthread 'main' panicked: table users already exists",
        ),
        Step::Reply("The test reuses one database file between runs: a killed run leaves the table behind. I will give every run a fresh temporary directory."),
        Step::User("Good, do it, and keep the checkpoint logic as it is."),
        Step::Bash("cargo test migration", "test result: ok. 12 passed; 0 failed"),
        Step::Reply("Fixed: each run now migrates a fresh database; the checkpoint code is unchanged and 12 tests pass."),
    ],
};

const TOKENIZER: Script = Script {
    cwd: "/home/demo/projects/tokenizer",
    name: "Tokenizer refactor",
    steps: &[
        Step::User("Split the tokenizer into a lexer and a parser; the file is 2,000 lines."),
        Step::Bash("wc -l src/tokenizer.rs", "2043 src/tokenizer.rs"),
        Step::Reply("Plan: move character classes and the scanner loop to lexer.rs, keep token assembly in parser.rs, and re-export both from tokenizer.rs so callers do not change."),
        Step::User("Start with the lexer."),
        Step::Bash("cargo build", "Compiling tokenizer v0.3.0\nFinished dev profile in 4.21s"),
        Step::Reply("lexer.rs holds the scanner now and the crate builds. Next: the parser."),
        Step::User("Go on with the parser, then run the benchmarks."),
        Step::Bash("cargo bench --bench tokenize", "tokenize/10k  time: [1.92 ms 1.94 ms 1.97 ms]  change: -3.1%"),
        Step::Reply("Done: the split is complete and tokenizing 10k lines is 3% faster, within noise of before."),
    ],
};

const CHECKPOINTS: Script = Script {
    cwd: "/home/demo/projects/api",
    name: "Checkpoint design notes",
    steps: &[
        Step::User("How should checkpoints of long migrations be stored?"),
        Step::Reply("Keep one row per finished batch with the last key written; a restart resumes after it. That makes every batch idempotent and the checkpoint table tiny."),
    ],
};

/// Writes the demo sessions into `dir` (pi's layout below it).
pub fn write_demo(dir: &Path) -> Result<()> {
    let mut repo = JsonlRepo::new(dir, Durability::Relaxed);
    let mut clock = Clock::default();

    // A regenerated answer: the user asked for the reply to be redone, so
    // the first one is a side branch and the leaf is on the second.
    let mut migration = create(&mut repo, &MIGRATION)?;
    let question = run_steps(&mut migration, &MIGRATION.steps[..1], &mut clock)?;
    run_steps(&mut migration, &MIGRATION.steps[1..3], &mut clock)?;
    migration.move_to(Some(&question), None)?;
    run_steps(&mut migration, &MIGRATION.steps[1..], &mut clock)?;
    migration.append_label(&question, Some("flaky test"))?;

    // A long session compacted half-way, and an abandoned idea summarised
    // when the user moved back.
    let mut tokenizer = create(&mut repo, &TOKENIZER)?;
    run_steps(&mut tokenizer, &TOKENIZER.steps[..2], &mut clock)?;
    let kept = run_steps(&mut tokenizer, &TOKENIZER.steps[2..3], &mut clock)?;
    tokenizer.append_model_change(
        &JsString::new("anthropic"),
        &JsString::new("claude-sonnet-4-5"),
    )?;
    tokenizer.append_thinking_level_change(&JsString::new("high"))?;
    let lexer = run_steps(&mut tokenizer, &TOKENIZER.steps[3..6], &mut clock)?;
    tokenizer.append_compaction(&Compaction {
        summary: JsonText::string(
            "The user wants tokenizer.rs split into lexer.rs and parser.rs; the lexer is done and builds.",
        ),
        first_kept_entry_id: Some(JsonText::string(&kept)),
        tokens_before: json_text(&json!(48_210))?,
        details: None,
        from_hook: None,
        usage: None,
        retained_tail: None,
    })?;
    run_steps(
        &mut tokenizer,
        &[Step::User("Try a hand-written state machine instead.")],
        &mut clock,
    )?;
    tokenizer.move_to(
        Some(&lexer),
        Some(&BranchSummary {
            summary: Some(JsonText::string(
                "Tried a hand-written state machine; dropped it as harder to read for no speed gain.",
            )),
            ..BranchSummary::default()
        }),
    )?;
    run_steps(&mut tokenizer, &TOKENIZER.steps[6..], &mut clock)?;
    tokenizer.append_label(&lexer, Some("lexer done"))?;

    let mut checkpoints = create(&mut repo, &CHECKPOINTS)?;
    run_steps(&mut checkpoints, CHECKPOINTS.steps, &mut clock)?;
    Ok(())
}

/// Creates a named session for `script`.
fn create(
    repo: &mut JsonlRepo,
    script: &Script,
) -> Result<Session<sessiontree::backend::jsonl::JsonlStorage>> {
    let mut session = repo.create(&CreateOptions {
        cwd: script.cwd.to_owned(),
        ..CreateOptions::default()
    })?;
    session.append_session_name(script.name)?;
    Ok(session)
}

/// Message timestamps, a few seconds apart as in a real conversation.
#[derive(Default)]
struct Clock(i64);

impl Clock {
    fn tick(&mut self) -> i64 {
        if self.0 == 0 {
            self.0 = chrono::Utc::now().timestamp_millis();
        }
        self.0 += 4_000;
        self.0
    }
}

/// Appends `steps`; returns the id of the first entry written.
fn run_steps<S: SessionStorage>(
    session: &mut Session<S>,
    steps: &[Step],
    clock: &mut Clock,
) -> Result<String> {
    let mut first = None;
    for step in steps {
        let ids = match step {
            Step::User(text) => vec![append(session, user(text, clock.tick()))?],
            Step::Reply(text) => vec![append(session, assistant(text, None, clock.tick()))?],
            Step::Bash(command, output) => {
                let call = format!("toolu_{:08x}", clock.tick() & 0xffff_ffff);
                let text = format!("Running `{command}`.");
                let asked = assistant(&text, Some((&call, command)), clock.tick());
                vec![
                    append(session, asked)?,
                    append(session, tool_result(&call, output, clock.tick()))?,
                ]
            }
        };
        first.get_or_insert_with(|| ids[0].clone());
    }
    Ok(first.unwrap_or_default())
}

fn append<S: SessionStorage>(session: &mut Session<S>, message: Value) -> Result<String> {
    session.append_message(&json_text(&message)?)
}

fn json_text(value: &Value) -> Result<JsonText> {
    JsonText::parse(&value.to_string()).map_err(|e| sessiontree::Error::InvalidEntry(e.to_string()))
}

fn user(text: &str, at: i64) -> Value {
    json!({"role": "user", "content": [{"type": "text", "text": text}], "timestamp": at})
}

fn assistant(text: &str, bash: Option<(&str, &str)>, at: i64) -> Value {
    let mut content = vec![json!({"type": "text", "text": text})];
    if let Some((id, command)) = bash {
        content.push(json!({"type": "toolCall", "id": id, "name": "bash", "arguments": {"command": command}}));
    }
    let (input, output) = (1_200 + text.len() as u64 * 3, text.len() as u64 / 3 + 40);
    let cost = |tokens: u64, per_million: f64| tokens as f64 * per_million / 1e6;
    json!({
        "role": "assistant",
        "content": content,
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "usage": {
            "input": input, "output": output, "cacheRead": 0, "cacheWrite": 0,
            "totalTokens": input + output,
            "cost": {"input": cost(input, 3.0), "output": cost(output, 15.0), "cacheRead": 0, "cacheWrite": 0,
                     "total": cost(input, 3.0) + cost(output, 15.0)}
        },
        "stopReason": if bash.is_some() { "toolUse" } else { "stop" },
        "timestamp": at
    })
}

fn tool_result(call: &str, output: &str, at: i64) -> Value {
    json!({
        "role": "toolResult", "toolCallId": call, "toolName": "bash",
        "content": [{"type": "text", "text": output}], "isError": false, "timestamp": at
    })
}
