//! `ls` (relative `--cwd`, `ls DIR`, last-activity order) and archive-wide
//! `stats` (`--since/--until/--cwd/--by`, each entry once across forks) on
//! sessions written here with known usage.

use super::*;

/// A pi version-3 session file: a header, then a user message and an
/// assistant reply (with `usage`) per turn, one minute apart from `start`.
fn session_file(
    dir: &Path,
    id: &str,
    cwd: &str,
    prefix: &str,
    turns: &[(&str, &str, f64, f64)],
) -> PathBuf {
    let path = dir.join(format!("{id}.jsonl"));
    let mut lines = vec![json!({"type": "session", "version": 3, "id": id,
        "timestamp": turns.first().map_or("2026-11-01T00:00:00.000Z", |t| t.0), "cwd": cwd})
    .to_string()];
    lines.extend(turn_lines(prefix, None, turns));
    std::fs::write(&path, lines.join("\n") + "\n").expect("write session");
    path
}

/// The lines of `turns` (time, model, tokens, cost) after `parent`.
fn turn_lines(
    prefix: &str,
    parent: Option<String>,
    turns: &[(&str, &str, f64, f64)],
) -> Vec<String> {
    let mut lines = Vec::new();
    let mut parent = parent;
    for (i, (time, model, tokens, cost)) in turns.iter().enumerate() {
        let user = format!("{prefix}{:03}u", i);
        let asst = format!("{prefix}{:03}a", i);
        lines.push(
            json!({"type": "message", "id": user, "parentId": parent, "timestamp": time,
                "message": {"role": "user", "content": "go on", "timestamp": 1}})
            .to_string(),
        );
        let (provider, model) = model.split_once('/').expect("provider/model");
        lines.push(
            json!({"type": "message", "id": asst, "parentId": user, "timestamp": time,
                "message": {"role": "assistant", "content": [{"type": "text", "text": "done"}],
                    "provider": provider, "model": model, "stopReason": "stop", "timestamp": 2,
                    "usage": {"input": tokens, "output": 0, "cacheRead": 0, "cacheWrite": 0,
                        "totalTokens": tokens,
                        "cost": {"input": cost, "output": 0, "cacheRead": 0, "cacheWrite": 0,
                            "total": cost}}}})
            .to_string(),
        );
        parent = Some(asst);
    }
    lines
}

fn canonical(sb: &Sandbox, rel: &str) -> PathBuf {
    let p = sb.path(rel);
    std::fs::create_dir_all(&p).expect("mkdir");
    std::fs::canonicalize(&p).expect("canonical")
}

fn ids(listing: &Value) -> Vec<String> {
    listing["sessions"]
        .as_array()
        .expect("sessions")
        .iter()
        .map(|s| s["id"].as_str().expect("id").to_owned())
        .collect()
}

const A: &str = "01950000-0000-7000-8000-00000000a001";
const B: &str = "01950000-0000-7000-8000-00000000b001";
const C: &str = "01950000-0000-7000-8000-00000000c001";

/// Three sessions: A and B in `proj` (B below it, in `proj/sub`), C elsewhere.
fn three_sessions(sb: &Sandbox) -> (PathBuf, PathBuf) {
    let proj = canonical(sb, "proj");
    let sub = canonical(sb, "proj/sub");
    let other = canonical(sb, "other");
    let files = canonical(sb, "files");
    let a = session_file(
        &files,
        A,
        s(&proj),
        "a",
        &[
            ("2026-11-30T23:00:00.000Z", "anthropic/opus", 1000.0, 2.0),
            ("2026-12-01T10:00:00.000Z", "anthropic/opus", 500.0, 1.0),
        ],
    );
    session_file(
        &files,
        B,
        s(&sub),
        "b",
        &[
            ("2026-12-02T10:00:00.000Z", "openai/gpt", 200.0, 0.5),
            ("2026-12-08T10:00:00.000Z", "anthropic/opus", 100.0, 0.25),
        ],
    );
    session_file(
        &files,
        C,
        s(&other),
        "c",
        &[("2026-12-03T10:00:00.000Z", "openai/gpt", 400.0, 4.0)],
    );
    sb.json(&["import", s(&files)]);
    (proj, a)
}

#[test]
fn ls_resolves_relative_directories_and_lists_by_last_activity() {
    let sb = Sandbox::new();
    let (proj, a_file) = three_sessions(&sb);
    // Newest activity first: B (Dec 8), C (Dec 3), A (Dec 1).
    let all = sb.json(&["ls"]);
    assert_eq!(ids(&all), [B, C, A]);
    assert_eq!(all["sessions"][0]["lastActive"], "2026-12-08T10:00:00.000Z");
    assert_eq!(all["sessions"][0]["name"], Value::Null);
    // `--cwd .`, `--cwd proj`, `ls .`, `ls sub` from inside the project.
    let in_dir = |dir: &Path, args: &[&str]| {
        let mut c = sb.command();
        c.current_dir(dir);
        let r = sb.run_with(c, &[&["--json"], args].concat());
        assert_eq!(r.status, 0, "{r:#?}");
        ids(&r.json())
    };
    assert_eq!(in_dir(&proj, &["ls", "--cwd", "."]), [B, A]);
    assert_eq!(in_dir(&proj, &["ls", "."]), [B, A]);
    assert_eq!(in_dir(&proj, &["ls", "sub"]), [B]);
    assert_eq!(in_dir(&proj, &["ls", "./sub/"]), [B]);
    assert_eq!(in_dir(sb.dir.path(), &["ls", "--cwd", "proj"]), [B, A]);
    assert_eq!(in_dir(&proj.join("sub"), &["ls", ".."]), [B, A]);
    assert_eq!(
        in_dir(sb.dir.path(), &["ls", "nowhere"]),
        Vec::<String>::new()
    );
    // The text shows the LAST ACTIVE column.
    let text = sb.run(&["ls"]).ok().to_owned();
    assert!(
        text.starts_with("ID                                    LAST ACTIVE  "),
        "{text}"
    );
    assert!(
        text.contains(&format!("{B}  2026-12-08T10:00:00.000Z")),
        "{text}"
    );

    // An append to the oldest session moves it to the top.
    let mut lines: Vec<String> = std::fs::read_to_string(&a_file)
        .expect("read")
        .lines()
        .map(str::to_owned)
        .collect();
    lines.extend(turn_lines(
        "d",
        Some("a001a".into()),
        &[("2026-12-10T09:00:00.000Z", "anthropic/opus", 10.0, 0.125)],
    ));
    std::fs::write(&a_file, lines.join("\n") + "\n").expect("append");
    sb.json(&["import", s(&a_file)]);
    let all = sb.json(&["ls"]);
    assert_eq!(ids(&all), [A, B, C]);
    assert_eq!(all["sessions"][0]["lastActive"], "2026-12-10T09:00:00.000Z");
    // Names show in the listing.
    sb.json(&["name", C, "the other one"]);
    let all = sb.json(&["ls", "--name", "other"]);
    assert_eq!(ids(&all), [C]);
    assert_eq!(all["sessions"][0]["name"], "the other one");
}

fn row<'a>(report: &'a Value, key: &str, value: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r[key] == value)
        .unwrap_or_else(|| panic!("no {key} {value} in {report}"))
}

#[test]
fn stats_filters_groups_and_charts_usage() {
    let sb = Sandbox::new();
    let (proj, _) = three_sessions(&sb);
    let all = sb.json(&["stats"]);
    assert_eq!(all["by"], json!(["project"]));
    assert_eq!(all["total"]["cost"], 7.75);
    assert_eq!(all["total"]["tokens"], 2200.0);
    assert_eq!(all["total"]["entries"], 5);
    // Sub-directories are projects of their own.
    assert_eq!(row(&all, "project", s(&proj))["cost"], 3.0);
    // This month, per model, per project: one command.
    let month = sb.json(&["stats", "--since", "2026-12-01", "--by", "model,project"]);
    assert_eq!(month["total"]["cost"], 5.75);
    assert_eq!(
        month["rows"][0],
        json!({"model": "openai/gpt", "project": s(&sb.path("other").canonicalize().unwrap()),
        "entries": 1, "input": 400, "output": 0, "cacheRead": 0, "cacheWrite": 0, "tokens": 400, "cost": 4})
    );
    assert_eq!(
        sb.json(&[
            "stats",
            "--since",
            "2026-12-01",
            "--by",
            "model",
            "--by",
            "project"
        ])["rows"],
        month["rows"]
    );
    // --until takes in the whole day; an ISO time is exclusive.
    let early = sb.json(&["stats", "--until", "2026-12-01", "--by", "day"]);
    assert_eq!(early["total"]["cost"], 3.0);
    assert_eq!(row(&early, "day", "2026-11-30")["cost"], 2.0);
    let t = sb.json(&["stats", "--until", "2026-12-01T10:00:00Z"]);
    assert_eq!(t["total"]["cost"], 2.0);
    // --cwd resolves a relative path and takes the directories below.
    let mut c = sb.command();
    c.current_dir(&proj);
    let r = sb.run_with(c, &["--json", "stats", "--cwd", ".", "--by", "model"]);
    let mine = r.json();
    assert_eq!(mine["total"]["cost"], 3.75);
    assert_eq!(row(&mine, "model", "anthropic/opus")["cost"], 3.25);
    // Weeks start on Monday: 2026-11-30 is one.
    let weeks = sb.json(&["stats", "--by", "week"]);
    assert_eq!(row(&weeks, "week", "2026-11-30")["cost"], 7.5);
    assert_eq!(row(&weeks, "week", "2026-12-07")["cost"], 0.25);
    let sessions = sb.json(&["stats", "--by", "session"]);
    assert_eq!(row(&sessions, "session", C)["cost"], 4.0);
    // The text: a table with a total, and a bar per day.
    let text = sb.run(&["stats", "--by", "day"]).ok().to_owned();
    assert!(text.starts_with("DAY  "), "{text}");
    assert!(text.contains("\nTOTAL  "), "{text}");
    let bars: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("2026-12-03 █"))
        .collect();
    assert_eq!(bars.len(), 1, "{text}");
    assert!(bars[0].ends_with("$4.00"), "{text}");
    assert!(
        text.contains("\n2026-12-05 "),
        "days without usage have their line: {text}"
    );
    // Filters are the archive's; a session's stats are its own.
    sb.run(&["stats", A, "--by", "day"]).fails(2, "usage");
    sb.run(&["stats", "--since", "yesterday"]).fails(2, "usage");
}

#[test]
fn a_forked_session_is_not_counted_twice() {
    let sb = Sandbox::new();
    three_sessions(&sb);
    let before = sb.json(&["stats", "--by", "model"]);
    let fork = sb.json(&["fork", A]);
    let fork_id = fork["session"].as_str().expect("fork id").to_owned();
    assert_eq!(sb.json(&["stats", "--by", "model"]), before);
    assert_eq!(sb.json(&["stats"])["total"], before["total"]);
    // Its spending stays with the original, and moves to the fork when the original goes.
    let by_session = sb.json(&["stats", "--by", "session"]);
    assert!(by_session["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .all(|r| r["session"] != fork_id.as_str()));
    sb.json(&["delete", A]);
    let after = sb.json(&["stats", "--by", "session"]);
    assert_eq!(after["total"], before["total"]);
    assert_eq!(row(&after, "session", &fork_id)["cost"], 3.0);
}
