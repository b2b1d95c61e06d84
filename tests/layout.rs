//! The crate's layout as its readers rely on it: modules are layered, so no
//! module imports one that imports it back (directly or through others).
//! A circle means neither side can be read, tested or changed alone.
//!
//! The graph is read from the source: every `crate::…`, `super::…`,
//! `self::…` and child-module path outside comments and `#[cfg(test)]`
//! modules is an edge from the file's module to the module it names (the
//! longest prefix that is a module). Declaring a child (`mod x;`) is not an
//! edge: a parent that only declares and re-exports is what a layer is.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file under `src/` (`backend::sqlite::codec` for
/// `src/backend/sqlite/codec/mod.rs`); `lib.rs` is the crate root (empty).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src/");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("a file name");
    match last.as_str() {
        "lib.rs" | "mod.rs" => {}
        name => parts.push(name.trim_end_matches(".rs").to_owned()),
    }
    parts
}

/// The code of a file without comments, string literals and test modules.
fn code_of(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut skip_depth: Option<usize> = None;
    let mut depth = 0usize;
    let mut pending_cfg_test = false;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("//") {
            continue;
        }
        let line = match line.find("//") {
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        if trimmed.starts_with("#[cfg(test)]") {
            pending_cfg_test = true;
            continue;
        }
        let opens = line.matches('{').count();
        let closes = line.matches('}').count();
        if pending_cfg_test && skip_depth.is_none() {
            pending_cfg_test = false;
            if trimmed.starts_with("mod ") && opens > 0 {
                skip_depth = Some(depth);
            } else if !trimmed.starts_with("mod ") {
                // A test-only item (a function, an import): skip its line.
                depth = depth + opens - closes.min(depth + opens);
                continue;
            }
        }
        depth = depth + opens - closes.min(depth + opens);
        if let Some(d) = skip_depth {
            if depth <= d && closes > 0 {
                skip_depth = None;
            }
            continue;
        }
        // A visibility (`pub(in crate::a)`) names no dependency.
        let owned;
        let line = match line.find("pub(in ") {
            Some(at) => {
                let end = line[at..].find(')').map_or(line.len(), |e| at + e + 1);
                owned = format!("{}pub{}", &line[..at], &line[end..]);
                owned.as_str()
            }
            None => line,
        };
        // String literals (SQL, messages) name no modules.
        let mut in_string = false;
        let mut prev = ' ';
        for c in line.chars() {
            if c == '"' && prev != '\\' {
                in_string = !in_string;
            } else if !in_string {
                out.push(c);
            }
            prev = if prev == '\\' && c == '\\' { ' ' } else { c };
        }
        out.push('\n');
    }
    out
}

/// Paths named in `code`: runs of `ident::ident::…` (with `{a, b::c}`
/// groups of `use` items expanded one level), as segment lists.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !ident(bytes[i]) || (i > 0 && (ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let mut segs = Vec::new();
        let mut j = i;
        loop {
            let s = j;
            while j < bytes.len() && ident(bytes[j]) {
                j += 1;
            }
            segs.push(code[s..j].to_owned());
            if code[j..].starts_with("::") {
                j += 2;
                if code[j..].starts_with('{') {
                    // A use group: each member's first segment.
                    let end = code[j..].find('}').map_or(code.len(), |e| j + e);
                    for member in code[j + 1..end].split(',') {
                        let head: String = member
                            .trim()
                            .chars()
                            .take_while(|&c| c.is_ascii_alphanumeric() || c == '_')
                            .collect();
                        if !head.is_empty() {
                            let mut p = segs.clone();
                            p.push(head);
                            found.push(p);
                        }
                    }
                    j = end;
                    segs.clear();
                    break;
                }
                if j < bytes.len() && ident(bytes[j]) {
                    continue;
                }
            }
            break;
        }
        if segs.len() > 1 {
            found.push(segs);
        }
        i = j.max(i + 1);
    }
    found
}

/// The module graph of `src/`: module → the modules it uses.
fn module_graph() -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut graph = BTreeMap::new();
    for file in &files {
        let here = module_of(&src, file);
        // main.rs and cli/ are the binary, with a crate root of their own.
        if here.first().is_some_and(|m| m == "main" || m == "cli") {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(file).expect("a source file"));
        let mut uses = BTreeSet::new();
        for path in paths_in(&code) {
            let mut base: Vec<String> = match path[0].as_str() {
                "crate" => Vec::new(),
                "self" => here.clone(),
                "super" => here[..here.len().saturating_sub(1)].to_vec(),
                _ => here.clone(),
            };
            let rest = match path[0].as_str() {
                "crate" | "self" | "super" => &path[1..],
                _ => &path[..],
            };
            let mut rest = rest.iter().peekable();
            while rest.peek().is_some_and(|s| *s == "super") {
                base.pop();
                rest.next();
            }
            // The longest prefix that is a module.
            let mut target = None;
            let mut candidate = base.clone();
            if modules.contains(&candidate) && path[0] != "self" && path[0] != "crate" {
                target = Some(candidate.clone());
            }
            for seg in rest {
                candidate.push(seg.clone());
                if modules.contains(&candidate) {
                    target = Some(candidate.clone());
                } else {
                    break;
                }
            }
            // A bare `a::b` names a child only when `a` is one.
            let relative = !matches!(path[0].as_str(), "crate" | "self" | "super");
            if let Some(t) = target {
                if t != here && !(relative && t.len() <= here.len()) {
                    uses.insert(t);
                }
            }
        }
        graph.insert(here, uses);
    }
    graph
}

/// Strongly connected components of more than one module (Tarjan).
fn circles(graph: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'g Vec<String>, usize>,
        low: BTreeMap<&'g Vec<String>, usize>,
        stack: Vec<&'g Vec<String>>,
        on_stack: BTreeSet<&'g Vec<String>>,
        found: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g Vec<String>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flatten() {
            let Some((w, _)) = s.graph.get_key_value(w) else {
                continue;
            };
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.join("::"));
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.found
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let graph = module_graph();
    assert!(
        graph.len() > 40,
        "the crate's modules were found: {}",
        graph.len()
    );
    let found = circles(&graph);
    let shown: Vec<String> = found
        .iter()
        .map(|c| {
            let members: BTreeSet<&String> = c.iter().collect();
            let edges: Vec<String> = graph
                .iter()
                .filter(|(m, _)| members.contains(&m.join("::")))
                .flat_map(|(m, uses)| {
                    uses.iter()
                        .filter(|u| members.contains(&u.join("::")))
                        .map(move |u| format!("{} -> {}", m.join("::"), u.join("::")))
                })
                .collect();
            format!("{c:?}\n    {}", edges.join("\n    "))
        })
        .collect();
    assert!(found.is_empty(), "import circles:\n{}", shown.join("\n"));
}

#[test]
fn the_circle_finder_finds_a_circle_and_reads_paths_as_rust_does() {
    let m = |s: &str| s.split("::").map(str::to_owned).collect::<Vec<_>>();
    let mut graph = BTreeMap::new();
    graph.insert(m("a"), BTreeSet::from([m("b")]));
    graph.insert(m("b"), BTreeSet::from([m("c")]));
    graph.insert(m("c"), BTreeSet::from([m("a")]));
    graph.insert(m("d"), BTreeSet::from([m("a")]));
    assert_eq!(circles(&graph), vec![vec!["a", "b", "c"]]);
    let code = code_of(
        "use crate::entry::{Entry, facts::Facts};\n// crate::ignored::x\npub(in crate::visibility) fn f() {}\nlet s = \"crate::in_string\";\n#[cfg(test)]\nmod tests {\n    use crate::tested::x;\n}\nuse super::sql;\n",
    );
    let paths = paths_in(&code);
    assert!(paths.contains(&m("crate::entry::Entry")), "{paths:?}");
    assert!(paths.contains(&m("crate::entry::facts")), "{paths:?}");
    assert!(paths.contains(&m("super::sql")), "{paths:?}");
    assert!(
        !paths.iter().any(|p| p.contains(&"ignored".to_owned())),
        "{paths:?}"
    );
    assert!(
        !paths.iter().any(|p| p.contains(&"visibility".to_owned())),
        "{paths:?}"
    );
    assert!(
        !paths.iter().any(|p| p.contains(&"in_string".to_owned())),
        "{paths:?}"
    );
    assert!(
        !paths.iter().any(|p| p.contains(&"tested".to_owned())),
        "{paths:?}"
    );
}
