//! Tests of the browser's state, without a terminal: an SQLite archive in a
//! temporary directory, keys sent to [`App`], what the screens hold checked.

use super::app::{App, Key, Modal, Top};
use super::list::ListState;
use super::reader::ReaderState;
use super::tree::TreeState;
use sessiontree::archive::SessionArchive;
use sessiontree::backend::sqlite::Archive;
use sessiontree::listing::NewSession;
use sessiontree::{Durability, Entry};
use std::sync::Arc;

fn new_session(id: &str, cwd: &str, created: &str) -> NewSession {
    new_session_as(id, cwd, created, sessiontree::Contract::Sdk)
}

fn new_session_as(
    id: &str,
    cwd: &str,
    created: &str,
    contract: sessiontree::Contract,
) -> NewSession {
    NewSession {
        contract,
        ..NewSession::sdk(id, created, cwd)
    }
}

fn message(id: &str, parent: Option<&str>, role: &str, text: &str) -> Entry {
    let parent = parent.map_or("null".to_owned(), |p| format!("{p:?}"));
    let text = serde_json::to_string(text).unwrap();
    Entry::from_json(&format!(
        r#"{{"type":"message","id":"{id}","parentId":{parent},"timestamp":"2025-01-01T00:00:00.000Z","message":{{"role":"{role}","content":{text}}}}}"#
    ))
    .unwrap()
}

fn name_entry(id: &str, parent: &str, name: &str) -> Entry {
    Entry::from_json(&format!(
        r#"{{"type":"session_info","id":"{id}","parentId":"{parent}","timestamp":"2025-01-01T00:00:00.000Z","name":"{name}"}}"#
    ))
    .unwrap()
}

fn archive(dir: &tempfile::TempDir) -> Archive {
    Archive::open(dir.path().join("a.db"), Durability::Relaxed).unwrap()
}

/// One session: u1 → a1 → {x1 → x2 (a side branch), u2 → a2 (the leaf)},
/// a1's text in Markdown.
fn forked_session(a: &Archive, id: &str) {
    forked_session_as(a, id, sessiontree::Contract::Sdk);
}

fn forked_session_as(a: &Archive, id: &str, contract: sessiontree::Contract) {
    let entries = vec![
        message("u1", None, "user", "How do I parse JSON?"),
        message("a1", Some("u1"), "assistant", "# Parsing\n\nUse **serde**:\n\n- derive\n- `from_str`\n\n```rust\nlet v: Value = serde_json::from_str(s)?;\n```"),
        message("x1", Some("a1"), "user", "what about nom"),
        message("x2", Some("x1"), "assistant", "nom works too"),
        message("u2", Some("a1"), "user", "and for zebra files?"),
        message("a2", Some("u2"), "assistant", "zebra files are JSON lines"),
    ];
    let mut s = a
        .create_storage(&new_session_as(
            id,
            "/home/ada/json",
            "2025-01-02T00:00:00.000Z",
            contract,
        ))
        .unwrap();
    s.append_entries(&entries).unwrap();
}

#[test]
fn the_list_reads_one_page_of_ten_thousand_sessions_and_filters_by_name_cwd_and_text() {
    let dir = tempfile::tempdir().unwrap();
    let a = archive(&dir);
    const N: usize = 10_000;
    a.write_session(|w| {
        for i in 0..N {
            let id = format!("01900000-0000-7000-8000-{i:012}");
            let created = format!(
                "2025-01-01T00:{:02}:{:02}.{:03}Z",
                i / 6000,
                (i / 100) % 60,
                i % 100
            );
            w.begin(&new_session(&id, &format!("/work/project-{i}"), &created))?;
            let text = if i == 4321 {
                "the zebra crossing"
            } else {
                "hello"
            };
            w.push(&message(&format!("m{i}"), None, "user", text))?;
            if i % 1000 == 7 {
                w.push(&name_entry(
                    &format!("n{i}"),
                    &format!("m{i}"),
                    &format!("named {i}"),
                ))?;
            }
            w.end_session()?;
        }
        Ok(())
    })
    .unwrap();
    let mut l = ListState::new(&a).unwrap();
    assert_eq!(l.total, N as u64);
    l.height = 40;
    l.fill(&a).unwrap();
    assert_eq!(l.pages_read, 1, "one page covers the screen");
    assert_eq!(l.rows.len(), super::list::PAGE);
    // Moving within the page reads nothing; past it, one more page.
    l.step(&a, 30).unwrap();
    assert_eq!(l.pages_read, 1);
    l.step(&a, 200).unwrap();
    assert_eq!(l.pages_read, 2);
    assert_eq!(l.selected, 230);
    // The end reads the rest, a page at a time.
    l.end(&a).unwrap();
    assert_eq!(l.rows.len(), N);
    assert_eq!(l.selected, N - 1);
    // A name filter: the words in any case.
    l.filter = "NAMED 9007".into();
    l.refilter(&a).unwrap();
    l.end(&a).unwrap();
    let names: Vec<String> = l
        .rows
        .iter()
        .map(|s| s.name.as_ref().unwrap().to_string_lossy())
        .collect();
    assert_eq!(names, ["named 9007"]);
    // A cwd filter.
    l.filter = "project-9999".into();
    l.refilter(&a).unwrap();
    assert_eq!(l.rows.len(), 1);
    assert_eq!(
        l.rows[0].metadata.cwd.as_deref(),
        Some("/work/project-9999")
    );
    // Message text, through the search index, with the hit in the preview.
    l.filter = "zebr".into();
    l.refilter(&a).unwrap();
    assert_eq!(
        l.rows.len(),
        1,
        "{:?}",
        l.rows.iter().map(|s| &s.metadata.id).collect::<Vec<_>>()
    );
    let id = l.rows[0].metadata.id.clone();
    assert!(id.ends_with("000000004321"));
    l.load_preview(&a).unwrap();
    let p = l.preview.as_ref().unwrap();
    assert_eq!(l.snippets(&id), ["m4321 the [zebra] crossing"]);
    assert_eq!(p.messages, ["user: the zebra crossing"]);
    // Nothing matches: no rows, the whole listing read once.
    l.filter = "nothing-like-this".into();
    l.refilter(&a).unwrap();
    assert!(l.rows.is_empty() && l.exhausted);
}

#[test]
fn a_session_opens_at_its_leaf_with_side_branches_folded_and_unfolds() {
    let dir = tempfile::tempdir().unwrap();
    let a = archive(&dir);
    forked_session(&a, "s1");
    let mut t = TreeState::open(&a, "s1", 10).unwrap();
    let ids = |t: &TreeState| -> Vec<String> {
        t.rows.iter().map(|r| t.idx.id(r.node).to_owned()).collect()
    };
    // The side branch comes right after its fork, folded to its first entry.
    assert_eq!(ids(&t), ["u1", "a1", "x1", "u2", "a2"]);
    assert_eq!(t.rows[2].hidden, 1);
    assert_eq!(t.rows[2].depth, 1);
    assert_eq!(t.rows[3].depth, 0, "the active path stays in one column");
    assert_eq!(t.current_id().as_deref(), Some("a2"));
    assert!(t.leaf_in_view());
    // Unfold the side branch, fold it again.
    t.step(-2);
    assert_eq!(t.current_id().as_deref(), Some("x1"));
    t.unfold();
    assert_eq!(ids(&t), ["u1", "a1", "x1", "x2", "u2", "a2"]);
    t.toggle();
    assert_eq!(ids(&t), ["u1", "a1", "x1", "u2", "a2"]);
    // Fold the spine under a1: everything below it is one row.
    t.step(-1);
    t.toggle();
    assert_eq!(ids(&t), ["u1", "a1"]);
    assert_eq!(t.rows[1].hidden, 4);
    // Back to the leaf unfolds nothing by itself; a search reveals its hit.
    assert!(t.search(&a, "nom").unwrap());
    let hit = t.current_id().unwrap();
    assert!(hit == "x1" || hit == "x2", "{hit}");
    assert!(
        ids(&t).ends_with(&["u2".to_owned(), "a2".to_owned()]),
        "{:?}",
        ids(&t)
    );
    t.go_to_leaf();
    assert_eq!(t.current_id().as_deref(), Some("a2"));
    // Going to the leaf opens a fold above it.
    t.step(isize::MIN / 2);
    t.toggle();
    assert_eq!(t.rows.len(), 1);
    t.go_to_leaf();
    assert_eq!(t.current_id().as_deref(), Some("a2"));
    assert!(t.leaf_in_view());
    // Only the rows on screen were read, once.
    t.prepare().unwrap();
    assert_eq!(t.entries_read, t.rows.len());
    t.prepare().unwrap();
    assert_eq!(t.entries_read, t.rows.len());
    assert_eq!(
        t.shown(t.idx.find("a2").unwrap()).unwrap().preview,
        "assistant: zebra files are JSON lines"
    );
}

#[test]
fn a_long_session_reads_only_the_rows_on_screen_and_shows_the_leaf() {
    let dir = tempfile::tempdir().unwrap();
    let a = archive(&dir);
    let n = 20_000;
    let entries: Vec<Entry> = (0..n)
        .map(|i| {
            let parent = (i > 0).then(|| format!("e{}", i - 1));
            message(
                &format!("e{i}"),
                parent.as_deref(),
                if i % 2 == 0 { "user" } else { "assistant" },
                "text",
            )
        })
        .collect();
    let mut s = a
        .create_storage(&new_session("long", "/w", "2025-01-02T00:00:00.000Z"))
        .unwrap();
    s.append_entries(&entries).unwrap();
    drop(s);
    let mut t = TreeState::open(&a, "long", 30).unwrap();
    assert_eq!(t.rows.len(), n);
    assert_eq!(t.current_id().as_deref(), Some("e19999"));
    assert!(t.leaf_in_view());
    assert_eq!(t.top, n - 30, "the last screenful, not an empty half");
    t.prepare().unwrap();
    assert_eq!(t.entries_read, 30);
    t.step(isize::MIN / 2);
    t.prepare().unwrap();
    assert_eq!(t.entries_read, 60);
    assert_eq!(t.current_id().as_deref(), Some("e0"));
}

#[test]
fn an_entry_reads_in_full_with_its_markdown_rendered() {
    let dir = tempfile::tempdir().unwrap();
    let a = archive(&dir);
    forked_session(&a, "s1");
    let e = a.open_storage("s1").unwrap().entry("a1").unwrap().unwrap();
    let mut r = ReaderState::new(&e);
    r.fit(60, 5);
    let text = r.text();
    assert_eq!(text[0], "assistant:");
    assert!(text.contains(&"# Parsing".to_owned()), "{text:?}");
    assert!(text.contains(&"• derive".to_owned()), "{text:?}");
    assert!(
        text.iter().any(|l| l.contains("serde_json::from_str(s)?;")),
        "{text:?}"
    );
    r.jump(true);
    assert_eq!(r.scroll, text.len() - 5);
    // A tool call's arguments are shown each on its own, a result whole.
    let call = Entry::from_json(r#"{"type":"message","id":"c","parentId":null,"timestamp":"t","message":{"role":"assistant","content":[{"type":"toolCall","id":"1","name":"edit","arguments":{"path":"src/a.rs","newText":"line one\nline two"}}]}}"#).unwrap();
    let mut r = ReaderState::new(&call);
    r.fit(80, 10);
    assert_eq!(
        r.text()[1..6],
        [
            "→ edit",
            "  newText:",
            "    line one",
            "    line two",
            "  path: src/a.rs"
        ]
    );
}

fn app(dir: &tempfile::TempDir) -> App {
    let a = archive(dir);
    forked_session(&a, "s1");
    forked_session(&a, "s2");
    let archive: Arc<dyn SessionArchive> = Arc::new(a);
    let mut app = App::new(archive, dir.path().join("pi")).unwrap();
    app.prepare(100, 30).unwrap();
    app
}

fn keys(app: &mut App, keys: &[Key]) {
    for &k in keys {
        app.key(k).unwrap();
        app.poll_open(true).unwrap();
        app.prepare(100, 30).unwrap();
    }
}

fn typed(app: &mut App, text: &str) {
    for c in text.chars() {
        keys(app, &[Key::Char(c)]);
    }
}

#[test]
fn delete_asks_first_and_only_yes_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = app(&dir);
    assert_eq!(app.list().rows.len(), 2);
    let first = app.list().rows[0].metadata.id.clone();
    keys(&mut app, &[Key::Char('d')]);
    assert!(matches!(app.modal, Some(Modal::Confirm { .. })));
    // Any other key leaves the question open; n (or Esc) answers no.
    keys(&mut app, &[Key::Char('x')]);
    assert!(app.modal.is_some());
    keys(&mut app, &[Key::Char('n')]);
    assert!(app.modal.is_none());
    assert!(app.archive().has_session(&first).unwrap());
    keys(&mut app, &[Key::Char('d'), Key::Char('y')]);
    assert!(!app.archive().has_session(&first).unwrap());
    assert_eq!(app.list().rows.len(), 1);
    assert_eq!(app.status, format!("deleted {first}"));
    // From a session's tree: back to the list once deleted.
    keys(&mut app, &[Key::Enter, Key::Char('d'), Key::Char('y')]);
    assert!(matches!(app.screen(), Top::List(_)));
    assert!(app.list().rows.is_empty());
}

#[test]
fn rename_label_move_and_fork_write_to_the_archive() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = app(&dir);
    keys(&mut app, &[Key::Char('r')]);
    typed(&mut app, "JSON help");
    keys(&mut app, &[Key::Enter]);
    assert_eq!(app.status, "named \"JSON help\"");
    let row = &app.list().rows[0];
    assert_eq!(row.name.as_ref().unwrap().to_string_lossy(), "JSON help");
    let id = row.metadata.id.clone();
    // Open it (the name is the new leaf): label u2, move the leaf to x2, fork at a1.
    keys(&mut app, &[Key::Enter, Key::Up, Key::Up, Key::Char('L')]);
    typed(&mut app, "the question");
    keys(&mut app, &[Key::Enter]);
    assert!(
        app.status.starts_with("labelled u2 \"the question\""),
        "{}",
        app.status
    );
    let storage = app.archive().open_storage(&id).unwrap();
    assert_eq!(
        storage.label("u2").unwrap().unwrap().to_string_lossy(),
        "the question"
    );
    keys(&mut app, &[Key::Char('/')]);
    typed(&mut app, "too");
    keys(&mut app, &[Key::Enter, Key::Char('m')]);
    assert_eq!(app.status, "leaf is now x2");
    assert_eq!(
        app.archive()
            .open_storage(&id)
            .unwrap()
            .leaf_id()
            .unwrap()
            .as_deref(),
        Some("x2")
    );
    assert_eq!(app.tree().unwrap().current_id().as_deref(), Some("x2"));
    keys(&mut app, &[Key::Char('g'), Key::Down, Key::Char('f')]);
    assert!(
        app.status.starts_with("forked at a1 into "),
        "{}",
        app.status
    );
    assert_eq!(app.list().total, 3);
    // Read an entry in full, and back.
    keys(&mut app, &[Key::Enter]);
    assert!(matches!(app.screen(), Top::Reader(_)));
    keys(&mut app, &[Key::Char('q'), Key::Char('q')]);
    assert!(matches!(app.screen(), Top::List(_)));
    keys(&mut app, &[Key::Char('q')]);
    assert!(app.quit);
}

#[test]
fn the_filter_takes_typed_keys_and_esc_clears_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = app(&dir);
    keys(&mut app, &[Key::Char('/')]);
    typed(&mut app, "zebra q");
    assert!(!app.quit, "q is text while typing a filter");
    assert_eq!(app.list().filter, "zebra q");
    assert!(app.list().rows.is_empty());
    keys(&mut app, &[Key::Backspace, Key::Backspace]);
    assert_eq!(app.list().rows.len(), 2);
    // Opening a session the text matched arms the search: n goes to the hit.
    keys(&mut app, &[Key::Enter, Key::Enter]);
    let t = app.tree().unwrap();
    assert_eq!(t.current_id().as_deref(), Some("a2"), "opens at the leaf");
    keys(&mut app, &[Key::Char('k'), Key::Char('k'), Key::Char('n')]);
    let hit = app.tree().unwrap().current_id().unwrap();
    assert!(hit == "u2" || hit == "a2", "{hit}");
    keys(&mut app, &[Key::Esc, Key::Esc]);
    assert_eq!(app.list().filter, "");
    assert!(!app.quit);
    keys(&mut app, &[Key::Esc]);
    assert!(app.quit);
}

#[test]
fn a_session_opens_at_once_on_its_active_path_and_its_side_branches_follow() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = app(&dir);
    app.key(Key::Enter).unwrap();
    app.prepare(100, 30).unwrap();
    // At once: the active path, the cursor on the leaf; the shape is read on another thread.
    let t = app.tree().unwrap();
    assert!(t.partial && app.opening.is_some());
    let ids = |t: &TreeState| -> Vec<String> {
        t.rows.iter().map(|r| t.idx.id(r.node).to_owned()).collect()
    };
    assert_eq!(ids(t), ["u1", "a1", "u2", "a2"]);
    assert_eq!(t.current_id().as_deref(), Some("a2"));
    assert_eq!(
        t.shown(t.idx.find("a2").unwrap()).unwrap().preview,
        "assistant: zebra files are JSON lines"
    );
    assert!(
        app.status.starts_with("reading the whole tree"),
        "{}",
        app.status
    );
    // Esc closes it (and forgets the shape being read), without quitting.
    app.key(Key::Esc).unwrap();
    app.poll_open(true).unwrap();
    assert!(matches!(app.screen(), Top::List(_)));
    assert!(app.opening.is_none());
    assert!(!app.quit);
    // Again, up one row, and the whole shape: the side branch, the cursor kept.
    app.key(Key::Enter).unwrap();
    app.key(Key::Up).unwrap();
    app.poll_open(true).unwrap();
    let t = app.tree().unwrap();
    assert!(!t.partial);
    assert_eq!(ids(t), ["u1", "a1", "x1", "u2", "a2"]);
    assert_eq!(t.current_id().as_deref(), Some("u2"));
}

/// A chain of `n` entries `e0 … e{n-1}`, a side branch `x` off `e1`.
fn long_session(a: &Archive, id: &str, n: usize) {
    let mut entries: Vec<Entry> = (0..n)
        .map(|i| {
            let parent = (i > 0).then(|| format!("e{}", i - 1));
            message(
                &format!("e{i}"),
                parent.as_deref(),
                if i % 2 == 0 { "user" } else { "assistant" },
                "text",
            )
        })
        .collect();
    entries.push(message("x", Some("e1"), "user", "aside"));
    entries.push(message(
        "e-last",
        Some(&format!("e{}", n - 1)),
        "user",
        "last",
    ));
    let mut s = a
        .create_storage(&new_session(id, "/w", "2025-01-02T00:00:00.000Z"))
        .unwrap();
    s.append_entries(&entries).unwrap();
}

#[test]
fn the_first_screen_reads_a_bounded_window_of_the_path_whatever_the_session_s_size() {
    use super::tree::WINDOW;
    let dir = tempfile::tempdir().unwrap();
    let a = archive(&dir);
    for n in [1_000, 30_000] {
        let id = format!("long{n}");
        long_session(&a, &id, n);
        let mut t = TreeState::open_window(&a, &id, 30).unwrap();
        t.prepare().unwrap();
        // The same reads at 1,000 entries as at 30,000: one window.
        assert_eq!(t.entries_read, WINDOW, "{n} entries");
        assert_eq!(t.rows.len(), WINDOW);
        assert_eq!(t.current_id().as_deref(), Some("e-last"));
        assert!(t.leaf_in_view());
        assert_eq!(t.total, n + 2);
        // Up to within a screen of the top of what is read: the next window.
        t.step(-100);
        t.prepare().unwrap();
        assert_eq!(t.entries_read, 2 * WINDOW);
        let at = format!("e{}", n - 100);
        assert_eq!(t.current_id().as_deref(), Some(at.as_str()));
        assert_eq!(t.cursor - t.top, 0, "the screen stays where it was");
        // The whole shape: the side branch is there, the cursor stays on its
        // entry at the same line of the screen.
        let line = t.cursor - t.top;
        t.fill_in(TreeState::read(&a, &id).unwrap());
        assert!(!t.partial);
        assert_eq!(t.rows.len(), n + 2, "the path and the side branch's row");
        assert_eq!(t.current_id().as_deref(), Some(at.as_str()));
        assert_eq!(t.cursor - t.top, line);
        t.prepare().unwrap();
        assert_eq!(t.entries_read, 2 * WINDOW, "the rows on screen were read");
    }
}

#[test]
fn resume_in_pi_writes_pi_s_file_and_quits() {
    let dir = tempfile::tempdir().unwrap();
    let mut app = app(&dir);
    keys(&mut app, &[Key::Char('p')]);
    assert!(app.quit);
    let path = app.resume.clone().unwrap();
    assert!(path.starts_with(dir.path().join("pi")), "{path:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.lines().count(), 7, "the header and six entries");
}

#[test]
fn the_list_is_by_last_activity_and_the_preview_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let a = archive(&dir);
    let at = |id: &str, time: &str| {
        Entry::from_json(&format!(
            r#"{{"type":"message","id":"{id}","parentId":null,"timestamp":"{time}","message":{{"role":"user","content":"hi"}}}}"#
        ))
        .unwrap()
    };
    // Created first, active last.
    let mut old = a
        .create_storage(&new_session("old", "/w", "2025-01-01T00:00:00.000Z"))
        .unwrap();
    old.append_entries(&[at("o1", "2025-03-01T00:00:00.000Z")])
        .unwrap();
    let mut new = a
        .create_storage(&new_session("new", "/w", "2025-02-01T00:00:00.000Z"))
        .unwrap();
    new.append_entries(&[at("n1", "2025-02-01T00:00:00.000Z")])
        .unwrap();
    let mut l = ListState::new(&a).unwrap();
    l.fill(&a).unwrap();
    let ids: Vec<&str> = l.rows.iter().map(|s| s.metadata.id.as_str()).collect();
    assert_eq!(ids, ["old", "new"]);
    let archive: Arc<dyn SessionArchive> = Arc::new(a);
    let mut app = App::new(archive, dir.path().join("pi")).unwrap();
    app.prepare(100, 30).unwrap();
    let backend = ratatui::backend::TestBackend::new(100, 30);
    let mut terminal = ratatui::Terminal::new(backend).unwrap();
    terminal.draw(|f| super::draw::draw(f, &app)).unwrap();
    let screen: String = terminal
        .backend()
        .buffer()
        .content()
        .iter()
        .map(|c| c.symbol())
        .collect();
    assert!(screen.contains("2025-03-01T00:00"), "the list's date");
    assert!(
        screen.contains("active   2025-03-01T00:00:00.000Z"),
        "the preview's last activity"
    );
}

#[test]
fn writes_on_an_app_session_follow_pi_16s_rules() {
    let dir = tempfile::tempdir().unwrap();
    let a = archive(&dir);
    forked_session_as(&a, "s1", sessiontree::Contract::App);
    let archive: Arc<dyn SessionArchive> = Arc::new(a);
    let mut app = App::new(archive, dir.path().join("pi")).unwrap();
    app.prepare(100, 30).unwrap();
    // Open at the leaf (a2), up to u2: a label kept as written (not trimmed).
    keys(&mut app, &[Key::Enter, Key::Up, Key::Char('L')]);
    typed(&mut app, " spaced ");
    keys(&mut app, &[Key::Enter]);
    let storage = app.archive().open_storage("s1").unwrap();
    let session = sessiontree::app::AppSession::open(storage).unwrap();
    let label = session.label("u2").unwrap().expect("a label on u2");
    assert_eq!(label.label.to_json(), "\" spaced \"");
    // A move is persisted as pi persists one: a branch_summary under the
    // target, never a `leaf` entry.
    keys(&mut app, &[Key::Char('/')]);
    typed(&mut app, "too");
    keys(&mut app, &[Key::Enter, Key::Char('m')]);
    let storage = app.archive().open_storage("s1").unwrap();
    let types: Vec<String> = storage
        .entries(0, None)
        .unwrap()
        .iter()
        .map(|e| e.entry_type().as_str().to_owned())
        .collect();
    assert!(!types.iter().any(|t| t == "leaf"), "{types:?}");
    let last = storage.entries(types.len() - 1, Some(1)).unwrap().remove(0);
    assert_eq!(last.entry_type().as_str(), "branch_summary");
    assert_eq!(last.facts().parent(), Some("x2"));
    assert!(app.status.contains("branch_summary"), "{}", app.status);
}
