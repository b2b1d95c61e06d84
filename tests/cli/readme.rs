//! The README against the binary: its transcript runs as written from the
//! project root and prints what it shows, and its command table lists every
//! subcommand with exactly the options `--help` gives it.

use super::*;
use std::collections::{BTreeMap, BTreeSet};

/// The project root, where the README's commands run.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn readme() -> String {
    read(&root().join("README.md"))
}

/// One `$ sessiontree …` line of a transcript block and the output shown under it.
#[derive(Debug)]
struct Step {
    command: String,
    output: Vec<String>,
}

/// The steps of every fenced block that holds `$ sessiontree` lines, in order.
fn transcript(readme: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut block: Option<Vec<Step>> = None;
    for line in readme.lines() {
        if line.starts_with("```") {
            // Every block is read, but only `$ ` lines start a step: the
            // other blocks (sh, rust, sql, the architecture listing) add none.
            match block.take() {
                Some(b) => steps.extend(b),
                None => block = Some(Vec::new()),
            }
            continue;
        }
        let Some(b) = block.as_mut() else { continue };
        if let Some(command) = line.strip_prefix("$ ") {
            assert!(
                command.starts_with("sessiontree "),
                "a README transcript runs only sessiontree: {line:?}"
            );
            b.push(Step {
                command: command.to_owned(),
                output: Vec::new(),
            });
        } else if let Some(step) = b.last_mut() {
            step.output.push(line.to_owned());
        }
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

#[test]
fn readme_transcript_runs_as_written_from_the_project_root() {
    let steps = transcript(&readme());
    assert!(
        steps.len() >= 5,
        "the README shows a session transcript: {steps:#?}"
    );
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
                "the README names {arg}, which does not exist from the project root"
            );
            eprintln!("skipped: {arg} is not there (pi's real session files, beside the checkout)");
            return;
        }
    }
    // The sandbox's XDG_DATA_HOME holds the default archive, so the lines
    // run exactly as written, without `--db`.
    for (step, line) in steps.iter().zip(&lines) {
        let run = sb.run_line(line, root());
        assert_eq!(run.status, 0, "$ {}\n{run:#?}", step.command);
        let shown: Vec<String> = step.output.iter().map(|l| normalised(l)).collect();
        let printed: Vec<String> = run.stdout.lines().map(normalised).collect();
        assert_eq!(
            printed.join("\n"),
            shown.join("\n"),
            "$ {}: the README shows other output than the binary prints",
            step.command
        );
    }
}

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
        .filter(|o| !["--db", "--durability", "--json", "--help"].contains(&o.as_str()))
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

/// The command table under "## Command line": each command of a row's first
/// cell with the options shown for it. A cell may name several commands
/// (`label …`, `name …`, `move …`) and spread one command's options over
/// several code spans (`export SESSION… --out DIR` / `--all` [`--force`]);
/// a span that is neither a command nor an option (an alias) names nothing.
fn readme_table(readme: &str, commands: &[String]) -> BTreeMap<String, BTreeSet<String>> {
    let section = readme
        .split_once("\n## Command line\n")
        .expect("the README has a Command line section")
        .1;
    let mut table = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
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
                    "one README row per command: {word}"
                );
                current = Some(word.to_owned());
            } else if n == 1 {
                panic!(
                    "the README's table has a row for {word:?}, which --help does not list: {row}"
                );
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

#[test]
fn readme_command_table_matches_help() {
    let sb = Sandbox::new();
    let commands = sb.subcommands();
    assert!(commands.len() >= 19, "{commands:?}");
    let table = readme_table(&readme(), &commands);
    let mut wrong = Vec::new();
    for command in &commands {
        let Some(readme_flags) = table.get(command) else {
            wrong.push(format!("{command}: no row in the README's command table"));
            continue;
        };
        let help_flags = long_options(&sb, command);
        for flag in readme_flags.difference(&help_flags) {
            wrong.push(format!(
                "{command}: the README shows {flag}, which --help does not"
            ));
        }
        for flag in help_flags.difference(readme_flags) {
            wrong.push(format!(
                "{command}: --help has {flag}, which the README's row lacks"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "README command table vs --help:\n{}",
        wrong.join("\n")
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
