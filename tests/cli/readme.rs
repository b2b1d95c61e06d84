//! The documents against the binary and the library: README.md and every
//! page of `docs/`. Their transcripts run as written from the project root
//! and print what they show; their command tables (the README's short one,
//! `docs/cli.md`'s full one) list every subcommand with exactly the options
//! `--help` gives it; every `sessiontree` line of a `sh` block names a
//! subcommand and options that exist; every Rust block is the crate's
//! doctest (`src/lib.rs`), so it compiles and runs; every relative link
//! leads to a file and heading that exist; and the README's test command is
//! the one CI runs.

use super::*;
use std::collections::{BTreeMap, BTreeSet};

/// The project root, where the documents' commands run.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The checked documents, by path from the project root, with their text:
/// README.md first, then `docs/*.md` in name order.
fn documents() -> Vec<(String, String)> {
    let mut pages: Vec<String> = std::fs::read_dir(root().join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").file_name())
        .filter_map(|n| n.into_string().ok())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    pages.sort();
    std::iter::once("README.md".to_owned())
        .chain(pages)
        .map(|name| {
            let text = read(&root().join(&name));
            (name, text)
        })
        .collect()
}

/// The text of one document.
fn document(name: &str) -> String {
    read(&root().join(name))
}

/// A fenced block: its info string (`sh`, `rust`, empty) and its lines.
struct Block<'a> {
    lang: &'a str,
    lines: Vec<&'a str>,
}

/// The fenced blocks of `text`, in order (fences start a line).
fn blocks(text: &str) -> Vec<Block<'_>> {
    let mut all = Vec::new();
    let mut open: Option<Block> = None;
    for line in text.lines() {
        match (line.strip_prefix("```"), open.take()) {
            (Some(_), Some(block)) => all.push(block),
            (Some(lang), None) => {
                open = Some(Block {
                    lang: lang.trim(),
                    lines: Vec::new(),
                })
            }
            (None, Some(mut block)) => {
                block.lines.push(line);
                open = Some(block);
            }
            (None, None) => {}
        }
    }
    assert!(open.is_none(), "a fenced block is left open");
    all
}

/// One `$ sessiontree …` line of a transcript block and the output shown under it.
#[derive(Debug)]
struct Step {
    command: String,
    output: Vec<String>,
}

/// The steps of every fenced block of `text` that holds `$ sessiontree`
/// lines, in order. Every block is read, but only `$ ` lines start a step:
/// the other blocks (sh, rust, sql) add none.
fn transcript(name: &str, text: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    for block in blocks(text) {
        let mut current: Option<Step> = None;
        for line in block.lines {
            if let Some(command) = line.strip_prefix("$ ") {
                assert!(
                    command.starts_with("sessiontree "),
                    "{name}: a transcript runs only sessiontree: {line:?}"
                );
                steps.extend(current.replace(Step {
                    command: command.to_owned(),
                    output: Vec::new(),
                }));
            } else if let Some(step) = current.as_mut() {
                step.output.push(line.to_owned());
            }
        }
        steps.extend(current);
    }
    steps
}

/// A line with what differs between runs taken out: the time and speed of
/// an import summary (`2020 entries, 3.3 MB in 0.07 s (47.6 MB/s)`).
fn normalised(line: &str) -> String {
    match line.rfind(" in ") {
        Some(i) if line.ends_with(" MB/s)") => format!("{} in … s (… MB/s)", &line[..i]),
        _ => line.to_owned(),
    }
}

/// Runs one document's transcript in a fresh sandbox (its own default
/// archive); false when it names pi's real files and they are not there.
fn run_transcript(name: &str, steps: &[Step]) -> bool {
    let sb = Sandbox::new();
    let lines: Vec<ShellLine> = steps
        .iter()
        .map(|step| ShellLine::parse(&step.command, &sb.home()))
        .collect();
    // Every path the transcript names must be there; pi's real files live
    // outside the crate, and without them there is nothing to run.
    for arg in lines.iter().flat_map(|l| &l.args) {
        if arg.contains('/') && !arg.starts_with('-') && !root().join(arg).exists() {
            assert!(
                arg.starts_with("../shared/"),
                "{name} names {arg}, which does not exist from the project root"
            );
            eprintln!(
                "skipped {name}: {arg} is not there (pi's real session files, beside the checkout)"
            );
            return false;
        }
    }
    // The sandbox's XDG_DATA_HOME holds the default archive, so the lines
    // run exactly as written, without `--db`.
    for (step, line) in steps.iter().zip(&lines) {
        let run = sb.run_line(line, root());
        assert_eq!(run.status, 0, "{name}: $ {}\n{run:#?}", step.command);
        let shown: Vec<String> = step.output.iter().map(|l| normalised(l)).collect();
        let printed: Vec<String> = run.stdout.lines().map(normalised).collect();
        assert_eq!(
            printed.join("\n"),
            shown.join("\n"),
            "{name}: $ {}: the document shows other output than the binary prints",
            step.command
        );
    }
    true
}

#[test]
fn transcripts_run_as_written_from_the_project_root() {
    for (name, text) in documents() {
        let steps = transcript(&name, &text);
        if name == "README.md" {
            assert!(
                steps.len() >= 5,
                "the README shows a session transcript: {steps:#?}"
            );
        }
        if !steps.is_empty() {
            run_transcript(&name, &steps);
        }
    }
}

/// The options every command takes (`sessiontree [--db ARCHIVE] [--json]
/// [--durability …] COMMAND`), and `--help`.
const GLOBAL_OPTIONS: [&str; 4] = ["--db", "--durability", "--json", "--help"];

/// The long options of `sessiontree COMMAND --help`, without the global ones.
fn long_options(sb: &Sandbox, command: &str) -> BTreeSet<String> {
    let help = sb.run(&[command, "--help"]).ok().to_owned();
    let options = help
        .split_once("\nOptions:\n")
        .unwrap_or_else(|| panic!("{command} --help has options:\n{help}"))
        .1;
    options
        .lines()
        // The section ends at the first unindented line (an `after_help`);
        // an option's own line is indented at most 6 columns, its
        // description (which may name other options) 10.
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .filter(|l| l.len() - l.trim_start().len() <= 6)
        .filter_map(|l| {
            // `  -h, --help` or `      --db <DB>`.
            let l = l.trim_start();
            let l = match l.split_once(", ") {
                Some((short, long)) if !short.starts_with("--") => long,
                _ => l,
            };
            l.strip_prefix("--")
        })
        .map(|l| {
            let name: String = l
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            format!("--{name}")
        })
        .filter(|o| !GLOBAL_OPTIONS.contains(&o.as_str()))
        .collect()
}

/// The long options named in `text`.
fn flags_in(text: &str) -> impl Iterator<Item = String> + '_ {
    text.match_indices("--").filter_map(move |(i, _)| {
        let name: String = text[i + 2..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        let starts_word =
            i == 0 || !text[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '-');
        (starts_word && !name.is_empty()).then(|| format!("--{name}"))
    })
}

/// The part of `text` under the heading line `heading`, to the next heading
/// of the same level.
fn section<'a>(name: &str, text: &'a str, heading: &str) -> &'a str {
    let level = heading.split(' ').next().expect("a heading");
    let body = text
        .split_once(&format!("\n{heading}\n"))
        .unwrap_or_else(|| panic!("{name} has a section {heading:?}"))
        .1;
    let end = format!("\n{level} ");
    body.find(&end).map_or(body, |i| &body[..i])
}

/// The command table under `heading`: each command of a row's first cell
/// with the options shown for it. A cell may name several commands
/// (`label …`, `name …`, `move …`) and spread one command's options over
/// several code spans (`export SESSION… --out DIR` / `--all` [`--force`]);
/// a span that is neither a command nor an option (an alias) names nothing.
fn command_table(
    name: &str,
    text: &str,
    heading: &str,
    commands: &[String],
) -> BTreeMap<String, BTreeSet<String>> {
    let mut table = BTreeMap::new();
    for row in section(name, text, heading)
        .lines()
        .filter(|l| l.starts_with("| `"))
    {
        let first_cell = row[1..]
            .split_once(" | ")
            .expect("a row has two cells")
            .0
            .replace("\\|", "|");
        let mut current: Option<String> = None;
        for (n, span) in first_cell
            .split('`')
            .enumerate()
            .filter(|(n, _)| n % 2 == 1)
        {
            let word = span.split_whitespace().next().unwrap_or("");
            if commands.iter().any(|c| c == word) {
                assert!(
                    table.insert(word.to_owned(), BTreeSet::new()).is_none(),
                    "{name}: one row per command: {word}"
                );
                current = Some(word.to_owned());
            } else if n == 1 {
                panic!("{name}'s table has a row for {word:?}, which --help does not list: {row}");
            } else if !word.starts_with("--") {
                continue;
            }
            let current = current.as_ref().expect("a row starts with its command");
            table
                .get_mut(current)
                .expect("inserted")
                .extend(flags_in(span));
        }
    }
    table
}

/// The command tables: the README's (every command, every option, a line
/// each) and the reference's in `docs/cli.md`.
const COMMAND_TABLES: [(&str, &str); 2] = [
    ("README.md", "## Command line"),
    ("docs/cli.md", "## Commands"),
];

#[test]
fn command_tables_match_help() {
    let sb = Sandbox::new();
    let commands = sb.subcommands();
    assert!(commands.len() >= 19, "{commands:?}");
    let help: BTreeMap<&String, BTreeSet<String>> =
        commands.iter().map(|c| (c, long_options(&sb, c))).collect();
    let mut wrong = Vec::new();
    for (name, heading) in COMMAND_TABLES {
        let table = command_table(name, &document(name), heading, &commands);
        for (command, help_flags) in &help {
            let Some(shown) = table.get(*command) else {
                wrong.push(format!("{name}: {command}: no row in the command table"));
                continue;
            };
            for flag in shown.difference(help_flags) {
                wrong.push(format!(
                    "{name}: {command}: the table shows {flag}, which --help does not"
                ));
            }
            for flag in help_flags.difference(shown) {
                wrong.push(format!(
                    "{name}: {command}: --help has {flag}, which the table's row lacks"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "command tables vs --help:\n{}",
        wrong.join("\n")
    );
}

/// Every `sessiontree …` line of a `sh` block (a command a reader copies,
/// not run by the tests: it may need pi's sessions or a server) names a
/// subcommand, and only options that command's `--help` lists.
#[test]
fn shell_examples_name_commands_and_options_that_exist() {
    let sb = Sandbox::new();
    let commands = sb.subcommands();
    let mut options: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut wrong = Vec::new();
    let mut checked = 0;
    for (name, text) in documents() {
        for block in blocks(&text).iter().filter(|b| b.lang == "sh") {
            for line in &block.lines {
                let Some(rest) = line.trim_start().strip_prefix("sessiontree ") else {
                    continue;
                };
                // The command, without a trailing comment or what follows a
                // pipe or redirection.
                let command = rest
                    .split(" #")
                    .next()
                    .and_then(|c| c.split(['|', '>']).next())
                    .unwrap_or("");
                let mut words = command.split_whitespace();
                let mut subcommand = None;
                while let Some(word) = words.next() {
                    match word {
                        "--db" | "--durability" => {
                            words.next();
                        }
                        w if w.starts_with("--") => {}
                        w => {
                            subcommand = Some(w);
                            break;
                        }
                    }
                }
                let Some(subcommand) = subcommand else {
                    continue; // `sessiontree --version`
                };
                checked += 1;
                if !commands.iter().any(|c| c == subcommand) {
                    wrong.push(format!("{name}: {line}: no command {subcommand:?}"));
                    continue;
                }
                let known = options
                    .entry(subcommand.to_owned())
                    .or_insert_with(|| long_options(&sb, subcommand));
                for flag in flags_in(command) {
                    let flag = flag.split('=').next().unwrap_or("").to_owned();
                    if !known.contains(&flag) && !GLOBAL_OPTIONS.contains(&flag.as_str()) {
                        wrong.push(format!("{name}: {line}: {subcommand} has no {flag}"));
                    }
                }
            }
        }
    }
    assert!(checked >= 5, "the documents show commands to copy");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// The lines of `src/lib.rs`'s doctest a reader sees (rustdoc's hidden `# `
/// lines left out).
fn crate_example() -> Vec<String> {
    let lib = read(&root().join("src/lib.rs"));
    let mut lines = Vec::new();
    let mut inside = false;
    for line in lib.lines().map_while(|l| l.strip_prefix("//!")) {
        let line = line.strip_prefix(' ').unwrap_or(line);
        if line.starts_with("```") {
            if inside {
                return lines;
            }
            inside = true;
        } else if inside && line != "#" && !line.starts_with("# ") {
            lines.push(line.to_owned());
        }
    }
    panic!("src/lib.rs's documentation starts with an example");
}

#[test]
fn rust_examples_are_the_crates_doctest() {
    let example = crate_example();
    let mut shown = 0;
    for (name, text) in documents() {
        for block in blocks(&text).iter().filter(|b| b.lang == "rust") {
            assert_eq!(
                block.lines,
                example,
                "{name}: a Rust example is src/lib.rs's doctest (which cargo test runs), word for word"
            );
            shown += 1;
        }
    }
    assert!(shown >= 1, "the README shows the library example");
}

/// The path query of `docs/engine.md`, run through `sessiontree sql` on the
/// README's archive, returns the active path `sessiontree branch` prints.
#[test]
fn the_documented_path_query_returns_the_active_path() {
    let Some(fixtures) = support::fixtures_dir() else {
        eprintln!(
            "skipped: pi's real session files (../shared/fixtures/pi-sessions) are not there"
        );
        return;
    };
    let page = document("docs/engine.md");
    let queries: Vec<String> = blocks(&page)
        .iter()
        .filter(|b| b.lang == "sql")
        .map(|b| b.lines.join("\n"))
        .collect();
    let [query] = &queries[..] else {
        panic!("docs/engine.md shows one SQL query: {queries:#?}");
    };
    let session = query
        .split("s.id = '")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .expect("the query names its session");
    let sb = Sandbox::new();
    sb.import(&[&fixtures]);
    let rows = sb.json(&["sql", query]);
    let branch = sb.json(&["branch", session]);
    let ids = |rows: &Value| -> Vec<String> {
        rows.as_array()
            .expect("rows")
            .iter()
            .map(|r| r["id"].as_str().expect("an id").to_owned())
            .collect()
    };
    let path = ids(&branch["entries"]);
    assert!(path.len() > 1000, "the whole path of {session}");
    assert_eq!(ids(&rows["rows"]), path);
}

/// The anchor GitHub gives a heading: lower case, spaces as `-`, other
/// punctuation dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn relative_links_lead_to_files_and_headings_that_exist() {
    let mut wrong = Vec::new();
    for (name, text) in documents() {
        let dir = Path::new(&name).parent().expect("a parent").to_owned();
        for (i, _) in text.match_indices("](") {
            let target = &text[i + 2..];
            let target = &target[..target.find(')').expect("a link ends")];
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
            let path = if file.is_empty() {
                PathBuf::from(&name)
            } else {
                dir.join(file)
            };
            if !root().join(&path).exists() {
                wrong.push(format!("{name}: {target}: no file {}", path.display()));
                continue;
            }
            if fragment.is_empty() {
                continue;
            }
            let headings: Vec<String> = read(&root().join(&path))
                .lines()
                .filter_map(|l| l.strip_prefix('#'))
                .map(|l| anchor(l.trim_start_matches('#')))
                .collect();
            if !headings.iter().any(|h| h == fragment) {
                wrong.push(format!("{name}: {target}: no heading #{fragment}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `.ci/run` runs "the README's test command": the `cargo test` line of
/// the README's first `sh` block that has one.
#[test]
fn ci_runs_the_readmes_test_command() {
    let readme = document("README.md");
    let first = blocks(&readme)
        .into_iter()
        .find(|b| b.lang == "sh" && b.lines.iter().any(|l| l.starts_with("cargo test")))
        .expect("the README shows its test command");
    let test: Vec<&str> = first
        .lines
        .iter()
        .filter(|l| l.starts_with("cargo test"))
        .map(|l| l.split(" #").next().unwrap_or("").trim_end())
        .collect();
    assert_eq!(test.len(), 1, "one test command: {:?}", first.lines);
    let ci = read(&root().join(".ci/run"));
    assert!(
        ci.lines().any(|l| l == test[0]),
        ".ci/run runs the README's test command, {:?}",
        test[0]
    );
}

#[test]
fn example_lines_are_taken_apart_as_a_shell_would() {
    let home = Path::new("/h");
    let line = ShellLine::parse(
        r#"sessiontree search '"abort controller"' "it's" a\ b --limit 2 | head -12   # comment"#,
        home,
    );
    assert_eq!(
        line.args,
        [
            "search",
            "\"abort controller\"",
            "it's",
            "a b",
            "--limit",
            "2"
        ]
    );
    assert_eq!(
        (line.head, line.stdin, line.redirect),
        (Some(12), None, None)
    );
    let line = ShellLine::parse(
        r#"echo '{"id":1}' | sessiontree rpc ~/s.jsonl > ~/out/x"#,
        home,
    );
    assert_eq!(line.args, ["rpc", "/h/s.jsonl"]);
    assert_eq!(line.stdin.as_deref(), Some("{\"id\":1}\n"));
    assert_eq!(line.redirect.as_deref(), Some("/h/out/x"));
    // What would need a real shell is refused.
    for bad in [
        "sessiontree search refactor*",
        "sessiontree ls; rm x",
        "sessiontree ls | grep x",
        "sessiontree ls $HOME",
        "ls",
    ] {
        let result = std::panic::catch_unwind(|| ShellLine::parse(bad, home));
        assert!(result.is_err(), "{bad}");
    }
}
