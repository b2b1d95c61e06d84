//! Dynamic completion of session arguments: the hidden `sessiontree
//! complete-sessions PREFIX`, which prints the archive's sessions whose id
//! starts with PREFIX or whose name starts with it (any case), and the shell
//! code `completions` appends to clap's static scripts (bash, zsh, fish) to
//! call it where a SESSION goes: the first argument of the commands that take
//! one, every argument of `export` and `delete`, and the value of
//! `--session`. Anything else (options, a `.jsonl` path) completes as before.

use super::db::{self, Access};
use super::Cli;
use clap::Args;
use sessiontree::listing::ListQuery;

/// Arguments of the hidden `complete-sessions`.
#[derive(Debug, Args)]
pub struct CompleteSessionsArgs {
    /// How to print each candidate: `bash` (the id), `zsh` (`id:name`),
    /// `fish` (`id<TAB>name`).
    #[arg(long, default_value = "bash", value_parser = ["bash", "zsh", "fish"])]
    pub shell: String,
    /// What has been typed so far.
    #[arg(allow_hyphen_values = true, default_value = "")]
    pub prefix: String,
}

/// Sessions offered at most.
const MAX: usize = 50;

/// The candidates, one a line. Never an error: completion without an
/// archive (or with a broken one) offers nothing.
pub fn candidates(cli: &Cli, args: &CompleteSessionsArgs) -> String {
    let Ok(archive) = db::open(cli, Access::Read) else {
        return String::new();
    };
    let mut found: Vec<(String, Option<String>)> = Vec::new();
    // Newest first; the listing reads session rows only.
    let query = ListQuery {
        limit: Some(if args.prefix.is_empty() { MAX } else { 10_000 }),
        by_activity: true,
        ..ListQuery::default()
    };
    let lower = args.prefix.to_lowercase();
    if let Ok(sessions) = archive.list(&query) {
        for s in sessions {
            let name = s.name.as_ref().map(|n| n.to_string_lossy());
            let by_name = name
                .as_deref()
                .is_some_and(|n| n.to_lowercase().starts_with(&lower));
            if s.metadata.id.starts_with(&args.prefix) || by_name {
                found.push((s.metadata.id, name));
                if found.len() == MAX {
                    break;
                }
            }
        }
    }
    let mut out = String::new();
    for (id, name) in found {
        // One line each: a name's line breaks and tabs become spaces.
        let name = name
            .map(|n| n.replace(['\n', '\r', '\t'], " "))
            .unwrap_or_default();
        match args.shell.as_str() {
            "zsh" => out.push_str(&format!("{}:{}\n", id.replace(':', "\\:"), name)),
            "fish" => out.push_str(&format!("{id}\t{name}\n")),
            _ => out.push_str(&format!("{id}\n")),
        }
    }
    out
}

/// Where sessions complete, read from the command definitions: the
/// commands whose first argument is a session, those whose every argument
/// is, and the options that take a value (their value is not an argument).
struct Places {
    first: Vec<String>,
    every: Vec<String>,
    valued: Vec<String>,
}

fn places(cmd: &clap::Command) -> Places {
    let mut first = Vec::new();
    let mut every = Vec::new();
    let mut valued = std::collections::BTreeSet::new();
    let mut note_options = |c: &clap::Command| {
        for a in c.get_arguments() {
            if let Some(long) = a.get_long() {
                if a.get_action().takes_values() {
                    valued.insert(format!("--{long}"));
                }
            }
        }
    };
    note_options(cmd);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        note_options(sub);
        let Some(positional) = sub.get_positionals().next() else {
            continue;
        };
        let name = sub.get_name().to_owned();
        match positional.get_id().as_str() {
            "session" | "target" | "source" => first.push(name),
            "sessions" => every.push(name),
            _ => {}
        }
    }
    Places {
        first,
        every,
        valued: valued.into_iter().collect(),
    }
}

/// The shell code that completes sessions, appended to (zsh: woven into)
/// clap's script for `shell`; `None` for shells without it.
pub fn dynamic_part(cmd: &clap::Command, shell: clap_complete::Shell) -> Option<String> {
    let p = places(cmd);
    let first = p.first.join("|");
    let every = p.every.join("|");
    let valued = p.valued.join("|");
    Some(match shell {
        clap_complete::Shell::Bash => format!(
            r#"
# Sessions of the archive where a SESSION goes (sessiontree complete-sessions).
_sessiontree_sessions() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    local sub="" positionals=0 skip=0 want=0 i w
    for (( i=1; i<COMP_CWORD; i++ )); do
        w="${{COMP_WORDS[i]}}"
        if (( skip )); then skip=0; continue; fi
        case "$w" in
            {valued}) skip=1; continue ;;
            -*) continue ;;
        esac
        if [[ -z "$sub" ]]; then sub="$w"; else positionals=$((positionals+1)); fi
    done
    if [[ "$prev" == "--session" ]]; then
        want=1
    elif (( ! skip )) && [[ "$cur" != -* ]]; then
        case "$sub" in
            {first}) (( positionals == 0 )) && want=1 ;;
            {every}) want=1 ;;
        esac
    fi
    if (( want )); then
        local IFS=$'\n'
        COMPREPLY=( $(command sessiontree complete-sessions --shell bash -- "$cur" 2>/dev/null) )
        (( ${{#COMPREPLY[@]}} )) && return 0
    fi
    _sessiontree "$@"
}}
complete -F _sessiontree_sessions -o bashdefault -o default sessiontree
"#
        ),
        clap_complete::Shell::Fish => {
            let subs: Vec<&str> = p.first.iter().chain(&p.every).map(String::as_str).collect();
            format!(
                r#"
# Sessions of the archive where a SESSION goes (sessiontree complete-sessions).
function __sessiontree_sessions
    sessiontree complete-sessions --shell fish -- (commandline -ct) 2>/dev/null
end
complete -c sessiontree -n "__fish_seen_subcommand_from {subs}" -k -a "(__sessiontree_sessions)"
complete -c sessiontree -l session -r -k -a "(__sessiontree_sessions)"
"#,
                subs = subs.join(" ")
            )
        }
        clap_complete::Shell::Zsh => format!(
            r#"
# Sessions of the archive where a SESSION goes (sessiontree complete-sessions).
(( $+functions[_sessiontree_static] )) || functions[_sessiontree_static]=$functions[_sessiontree]
_sessiontree_sessions() {{
    local cur="${{words[CURRENT]}}" prev="${{words[CURRENT-1]}}"
    local sub="" positionals=0 skip=0 want=0 i w
    for (( i=2; i<CURRENT; i++ )); do
        w="${{words[i]}}"
        if (( skip )); then skip=0; continue; fi
        case "$w" in
            {valued}) skip=1; continue ;;
            -*) continue ;;
        esac
        if [[ -z "$sub" ]]; then sub="$w"; else positionals=$((positionals+1)); fi
    done
    if [[ "$prev" == "--session" ]]; then
        want=1
    elif (( ! skip )) && [[ "$cur" != -* ]]; then
        case "$sub" in
            {first}) (( positionals == 0 )) && want=1 ;;
            {every}) want=1 ;;
        esac
    fi
    if (( want )); then
        local -a sessions
        sessions=("${{(@f)$(sessiontree complete-sessions --shell zsh -- "$cur" 2>/dev/null)}}")
        sessions=(${{sessions:#}})
        if (( ${{#sessions}} )); then
            _describe -t sessions 'session' sessions && return 0
        fi
    fi
    _sessiontree_static "$@"
}}
_sessiontree() {{ _sessiontree_sessions "$@" }}
"#
        ),
        _ => return None,
    })
}

/// clap's script for `shell` with the session completion added: bash and
/// fish get it appended; zsh gets it before the script's last block (which
/// runs or registers `_sessiontree`, now the dynamic one).
pub fn script(cmd: &mut clap::Command, shell: clap_complete::Shell) -> String {
    let mut script = Vec::new();
    clap_complete::generate(shell, cmd, "sessiontree", &mut script);
    let mut script = String::from_utf8_lossy(&script).into_owned();
    let Some(dynamic) = dynamic_part(cmd, shell) else {
        return script;
    };
    const ZSH_TAIL: &str = "\nif [ \"$funcstack[1]\" = \"_sessiontree\" ]; then";
    match (shell, script.rfind(ZSH_TAIL)) {
        (clap_complete::Shell::Zsh, Some(at)) => script.insert_str(at, &dynamic),
        _ => script.push_str(&dynamic),
    }
    script
}
