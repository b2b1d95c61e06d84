//! The repository rules (spec §9 and the `SessionRepo` docs), one case per
//! rule, generic over the repository; `main.rs` instantiates every case for
//! the memory, JSONL, SQLite and PostgreSQL repositories.

use serde_json::json;
use sessiontree::backend::sqlite::Archive;
use sessiontree::entry::timestamp_millis;
use sessiontree::repo::jsonl::JsonlRepo;
use sessiontree::repo::memory::MemoryRepo;
use sessiontree::repo::postgres::PgRepo;
use sessiontree::repo::sqlite::SqliteRepo;
use sessiontree::repo::{CreateOptions, ForkOptions, SessionRepo};
use sessiontree::rules::ForkPosition;
use sessiontree::{Durability, Entry, ErrorCode, JsonText, SessionMetadata, SessionStorage};
use std::path::PathBuf;
use tempfile::TempDir;

/// A repository under test.
pub trait RepoHarness {
    /// The repository.
    type Repo: SessionRepo;
    /// The repository, empty at first.
    fn repo(&mut self) -> &mut Self::Repo;
    /// Drops the repository and opens the same place again (nothing to do in memory).
    fn reopen(&mut self);
}

/// The in-memory repository.
pub struct Memory(MemoryRepo);

impl Memory {
    /// An empty repository.
    pub fn new() -> Self {
        Memory(MemoryRepo::new())
    }
}

impl RepoHarness for Memory {
    type Repo = MemoryRepo;
    fn repo(&mut self) -> &mut MemoryRepo {
        &mut self.0
    }
    fn reopen(&mut self) {}
}

/// A JSONL sessions root in a temp directory.
pub struct Jsonl {
    dir: TempDir,
    repo: JsonlRepo,
}

impl Jsonl {
    /// An empty sessions root.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let repo = JsonlRepo::new(dir.path().join("sessions"), Durability::Relaxed);
        Jsonl { dir, repo }
    }
}

impl RepoHarness for Jsonl {
    type Repo = JsonlRepo;
    fn repo(&mut self) -> &mut JsonlRepo {
        &mut self.repo
    }
    fn reopen(&mut self) {
        self.repo = JsonlRepo::new(self.dir.path().join("sessions"), Durability::Relaxed);
    }
}

/// An SQLite archive in a temp directory.
pub struct Sqlite {
    _dir: TempDir,
    path: PathBuf,
    repo: SqliteRepo,
}

impl Sqlite {
    /// An empty archive.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("archive.db");
        let archive = Archive::open(&path, Durability::Relaxed).expect("open archive");
        Sqlite {
            _dir: dir,
            path,
            repo: SqliteRepo::new(archive),
        }
    }
}

impl RepoHarness for Sqlite {
    type Repo = SqliteRepo;
    fn repo(&mut self) -> &mut SqliteRepo {
        &mut self.repo
    }
    fn reopen(&mut self) {
        let archive = Archive::open(&self.path, Durability::Relaxed).expect("reopen archive");
        self.repo = SqliteRepo::new(archive);
    }
}

/// A team archive in a fresh schema of the PostgreSQL test server.
pub struct Postgres {
    temp: crate::harness::pg::TempArchive,
    repo: PgRepo,
}

impl Postgres {
    /// An empty archive, or `None` (the tests skip) without a server.
    pub fn new() -> Option<Self> {
        let temp = crate::harness::pg::TempArchive::new()?;
        let repo = PgRepo::new(temp.archive.clone());
        Some(Postgres { temp, repo })
    }
}

impl RepoHarness for Postgres {
    type Repo = PgRepo;
    fn repo(&mut self) -> &mut PgRepo {
        &mut self.repo
    }
    fn reopen(&mut self) {
        self.repo = PgRepo::new(self.temp.reopen());
    }
}

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

fn message(id: &str, parent: Option<&str>, role: &str) -> Entry {
    Entry::from_value(&json!({"type": "message", "id": id, "parentId": parent,
        "timestamp": "2025-01-01T00:00:00.000Z", "message": {"role": role, "content": id}}))
    .expect("valid test entry")
}

/// A tree in the source session: a ← b ← c ← d along the leaf's path, and
/// a branch b ← e. Users: a, c, e; assistants: b, d.
fn tree<S: SessionStorage>(s: &mut S) -> R {
    for e in [
        message("a", None, "user"),
        message("b", Some("a"), "assistant"),
        message("c", Some("b"), "user"),
        message("d", Some("c"), "assistant"),
        message("e", Some("b"), "user"),
    ] {
        s.append_entry(e)?;
    }
    s.set_leaf_id(Some("d"))?;
    Ok(())
}

fn ids(entries: &[Entry]) -> Vec<String> {
    entries.iter().map(|e| e.id().to_owned()).collect()
}

/// The log as stored text.
fn texts<S: SessionStorage>(s: &S) -> R<Vec<String>> {
    Ok(s.entries(0, None)?
        .iter()
        .map(|e| e.json().to_owned())
        .collect())
}

fn listed<P: SessionRepo>(repo: &P, cwd: Option<&str>) -> R<Vec<String>> {
    Ok(repo.list(cwd)?.into_iter().map(|m| m.id).collect())
}

/// Metadata as JSON text, key order as written.
fn metadata_text(text: &str) -> JsonText {
    JsonText::parse(text).expect("valid test metadata")
}

/// Creates an empty session in `cwd` and returns its metadata.
fn create_in<P: SessionRepo>(repo: &mut P, cwd: &str) -> R<SessionMetadata> {
    let s = repo.create(&CreateOptions {
        cwd: cwd.into(),
        ..CreateOptions::default()
    })?;
    Ok(s.storage().metadata()?)
}

/// Creates the session a fork copies from: the `tree`, cwd `/src`, metadata.
fn source<P: SessionRepo>(repo: &mut P) -> R<SessionMetadata> {
    let mut s = repo.create(&CreateOptions {
        cwd: "/src".into(),
        metadata: Some(metadata_text(r#"{"from":"source","n":[1,2]}"#)),
        ..CreateOptions::default()
    })?;
    tree(s.storage_mut())?;
    Ok(s.storage().metadata()?)
}

/// How a fork refers to its source by default: pi writes the source file's
/// path as `parentSession`; a session without a file is named by its id.
fn reference(source: &SessionMetadata) -> String {
    source.path.clone().unwrap_or_else(|| source.id.clone())
}

/// Forks `source` and returns the new session's metadata and entry ids.
fn fork<P: SessionRepo>(
    repo: &mut P,
    source: &SessionMetadata,
    options: &ForkOptions,
) -> R<(SessionMetadata, Vec<String>)> {
    let s = repo.fork(source, options)?;
    let meta = s.storage().metadata()?;
    Ok((meta, ids(&s.storage().entries(0, None)?)))
}

fn fork_at(entry: &str, position: ForkPosition) -> ForkOptions {
    ForkOptions {
        entry_id: Some(entry.into()),
        position,
        ..ForkOptions::default()
    }
}

/// The listed metadata of `id`.
fn find<P: SessionRepo>(repo: &P, id: &str) -> R<SessionMetadata> {
    repo.list(None)?
        .into_iter()
        .find(|m| m.id == id)
        .ok_or_else(|| format!("{id} is not listed").into())
}

cases! {
    suite = repo_conformance, module = repo, harness = RepoHarness;

    fn create_keeps_id_cwd_parent_and_metadata(h) {
        let repo = h.repo();
        let s = repo.create(&CreateOptions {
            id: Some("s-1".into()),
            cwd: "/work/project".into(),
            parent_session: Some("/elsewhere/parent.jsonl".into()),
            metadata: Some(metadata_text(r#"{"b": 1, "a": {"x": [true, null]}}"#)),
        })?;
        let check = |m: &SessionMetadata| {
            assert_eq!(m.id, "s-1");
            assert_eq!(m.cwd.as_deref(), Some("/work/project"));
            assert_eq!(m.parent_session.as_deref(), Some("/elsewhere/parent.jsonl"));
            assert_eq!(
                m.metadata.as_deref(),
                Some(r#"{"b":1,"a":{"x":[true,null]}}"#)
            );
            assert!(
                timestamp_millis(&m.created_at).is_some(),
                "{}",
                m.created_at
            );
        };
        let made = s.storage().metadata()?;
        check(&made);
        assert!(s.storage().entries(0, None)?.is_empty());
        let found = find(repo, "s-1")?;
        check(&found);
        assert_eq!(found.created_at, made.created_at);
        check(&repo.open(&found)?.storage().metadata()?);
        Ok(())
    }

    fn create_without_options_gives_a_fresh_id_and_no_parent_or_metadata(h) {
        let repo = h.repo();
        let one = create_in(repo, "/p")?;
        let two = create_in(repo, "/p")?;
        assert!(!one.id.is_empty());
        assert_ne!(one.id, two.id);
        assert_eq!(one.parent_session, None);
        assert_eq!(one.metadata, None);
        let found = find(repo, &one.id)?;
        assert_eq!((found.parent_session, found.metadata), (None, None));
        Ok(())
    }

    fn open_sees_what_was_appended(h) {
        let repo = h.repo();
        let mut s = repo.create(&CreateOptions {
            cwd: "/p".into(),
            ..CreateOptions::default()
        })?;
        tree(s.storage_mut())?;
        let before = texts(s.storage())?;
        drop(s);
        let only = repo.list(None)?.pop().ok_or("not listed")?;
        let opened = repo.open(&only)?;
        assert_eq!(texts(opened.storage())?, before);
        assert_eq!(opened.storage().leaf_id()?.as_deref(), Some("d"));
        Ok(())
    }

    fn list_is_newest_first(h) {
        let repo = h.repo();
        // Back to back (often the same millisecond), then one clearly later.
        let mut made = Vec::new();
        for _ in 0..4 {
            made.push(create_in(repo, "/p")?.id);
        }
        std::thread::sleep(std::time::Duration::from_millis(3));
        made.push(create_in(repo, "/q")?.id);
        made.reverse();
        assert_eq!(listed(repo, None)?, made);
        let times: Vec<i64> = repo
            .list(None)?
            .iter()
            .map(|m| timestamp_millis(&m.created_at).unwrap_or(i64::MIN))
            .collect();
        assert!(times.windows(2).all(|w| w[0] >= w[1]), "{times:?}");
        Ok(())
    }

    fn list_with_cwd_lists_only_that_cwd(h) {
        let repo = h.repo();
        let a1 = create_in(repo, "/a/b")?.id;
        let other = create_in(repo, "/other")?.id;
        let a2 = create_in(repo, "/a/b")?.id;
        // Encoded as pi names directories, both of these are `--a-b--`.
        let dashed = create_in(repo, "/a-b")?.id;
        let relative = create_in(repo, "a/b")?.id;
        assert_eq!(listed(repo, Some("/a/b"))?, [a2.as_str(), a1.as_str()]);
        assert_eq!(listed(repo, Some("/other"))?, [other.as_str()]);
        assert_eq!(listed(repo, Some("/a-b"))?, [dashed.as_str()]);
        assert_eq!(listed(repo, Some("a/b"))?, [relative.as_str()]);
        assert!(listed(repo, Some("/nowhere"))?.is_empty());
        assert!(listed(repo, Some("/a"))?.is_empty());
        assert_eq!(listed(repo, None)?, [relative, dashed, a2, other, a1]);
        for m in repo.list(Some("/a/b"))? {
            assert_eq!(m.cwd.as_deref(), Some("/a/b"));
        }
        Ok(())
    }

    fn delete_makes_open_not_found_and_list_omit_it(h) {
        let repo = h.repo();
        let keep = create_in(repo, "/p")?;
        let mut gone = repo.create(&CreateOptions {
            cwd: "/p".into(),
            ..CreateOptions::default()
        })?;
        tree(gone.storage_mut())?;
        drop(gone);
        let gone = repo
            .list(None)?
            .into_iter()
            .find(|m| m.id != keep.id)
            .ok_or("listed")?;
        repo.delete(&gone)?;
        let err = repo.open(&gone).err().ok_or("a deleted session opened")?;
        assert_eq!(err.code(), ErrorCode::NotFound, "{err}");
        assert_eq!(listed(repo, None)?, [keep.id.as_str()]);
        assert_eq!(listed(repo, Some("/p"))?, [keep.id.as_str()]);
        assert!(repo
            .open(&find(repo, &keep.id)?)?
            .storage()
            .entries(0, None)?
            .is_empty());
        let err = repo
            .fork(&gone, &ForkOptions::default())
            .err()
            .ok_or("a deleted session forked")?;
        assert_eq!(err.code(), ErrorCode::NotFound, "{err}");
        assert_eq!(listed(repo, None)?, [keep.id]);
        Ok(())
    }

    fn fork_before_a_user_message_copies_the_path_to_its_parent(h) {
        let repo = h.repo();
        let src = source(repo)?;
        let log = ids(&repo.open(&src)?.storage().entries(0, None)?);
        let (meta, copied) = fork(repo, &src, &fork_at("e", ForkPosition::Before))?;
        assert_eq!(copied, ["a", "b"]);
        assert_ne!(meta.id, src.id);
        assert_eq!(
            repo.open(&find(repo, &meta.id)?)?
                .storage()
                .leaf_id()?
                .as_deref(),
            Some("b")
        );
        let (_, copied) = fork(repo, &src, &fork_at("c", ForkPosition::default()))?;
        assert_eq!(copied, ["a", "b"]);
        let (_, copied) = fork(repo, &src, &fork_at("a", ForkPosition::Before))?;
        assert!(copied.is_empty());
        // The source is untouched.
        assert_eq!(ids(&repo.open(&src)?.storage().entries(0, None)?), log);
        Ok(())
    }

    fn fork_at_an_entry_copies_the_path_through_it(h) {
        let repo = h.repo();
        let src = source(repo)?;
        let (_, copied) = fork(repo, &src, &fork_at("e", ForkPosition::At))?;
        assert_eq!(copied, ["a", "b", "e"]);
        let (meta, copied) = fork(repo, &src, &fork_at("d", ForkPosition::At))?;
        assert_eq!(copied, ["a", "b", "c", "d"]);
        let forked = repo.open(&find(repo, &meta.id)?)?;
        assert_eq!(forked.storage().leaf_id()?.as_deref(), Some("d"));
        let source_d = repo
            .open(&find(repo, &src.id)?)?
            .storage()
            .entry("d")?
            .ok_or("d")?;
        assert_eq!(
            forked.storage().entry("d")?.ok_or("d")?.json(),
            source_d.json()
        );
        Ok(())
    }

    fn fork_of_a_log_larger_than_one_read_copies_every_entry(h) {
        // 24 entries of 512 KB: 12 MB, more than a fork holds at once
        // (8 MB), so the copy is read in more than one piece.
        let repo = h.repo();
        let mut s = repo.create(&CreateOptions {
            cwd: "/big".into(),
            ..CreateOptions::default()
        })?;
        let mut parent: Option<String> = None;
        for n in 0..24 {
            let id = format!("big{n}");
            let fill = char::from(b'a' + n as u8).to_string().repeat(512 * 1024);
            s.storage_mut().append_entry(Entry::from_value(&json!({
                "type": "custom", "customType": "blob", "id": id, "parentId": parent,
                "timestamp": "2025-01-01T00:00:00.000Z", "data": {"fill": fill}}))?)?;
            parent = Some(id);
        }
        let log = texts(s.storage())?;
        let src = s.storage().metadata()?;
        drop(s);
        let copy = repo.fork(&src, &ForkOptions::default())?;
        assert!(texts(copy.storage())? == log, "the copy differs from its source");
        Ok(())
    }

    fn fork_without_an_entry_copies_the_whole_log(h) {
        let repo = h.repo();
        let src = source(repo)?;
        let log = ids(&repo
            .open(&find(repo, &src.id)?)?
            .storage()
            .entries(0, None)?);
        assert_eq!(log.len(), 6, "five messages and the leaf move");
        let (_, copied) = fork(repo, &src, &ForkOptions::default())?;
        assert_eq!(copied, log);
        let empty = ForkOptions {
            entry_id: Some(String::new()),
            position: ForkPosition::At,
            ..ForkOptions::default()
        };
        let (meta, copied) = fork(repo, &src, &empty)?;
        assert_eq!(copied, log);
        assert_eq!(
            repo.open(&find(repo, &meta.id)?)?
                .storage()
                .leaf_id()?
                .as_deref(),
            Some("d")
        );
        Ok(())
    }

    fn fork_to_a_bad_target_is_refused_and_creates_nothing(h) {
        let repo = h.repo();
        let src = source(repo)?;
        for options in [
            fork_at("ghost", ForkPosition::Before),
            fork_at("ghost", ForkPosition::At),
            fork_at("b", ForkPosition::Before),
            ForkOptions {
                id: Some("never".into()),
                ..fork_at("d", ForkPosition::Before)
            },
        ] {
            let err = repo
                .fork(&src, &options)
                .err()
                .ok_or("a bad fork target was accepted")?;
            assert_eq!(
                err.code(),
                ErrorCode::InvalidForkTarget,
                "{options:?}: {err}"
            );
        }
        assert_eq!(listed(repo, None)?, [src.id]);
        Ok(())
    }

    fn fork_inherits_cwd_parent_and_metadata_from_the_source(h) {
        let repo = h.repo();
        let src = source(repo)?;
        let (meta, _) = fork(repo, &src, &fork_at("d", ForkPosition::At))?;
        let check = |m: &SessionMetadata| {
            assert_eq!(m.cwd.as_deref(), Some("/src"));
            assert_eq!(m.parent_session.as_deref(), Some(reference(&src).as_str()));
            assert_eq!(
                m.metadata.as_deref(),
                Some(r#"{"from":"source","n":[1,2]}"#)
            );
        };
        check(&meta);
        check(&find(repo, &meta.id)?);
        assert_eq!(listed(repo, Some("/src"))?, [meta.id, src.id]);
        Ok(())
    }

    fn fork_options_override_id_cwd_parent_and_metadata(h) {
        let repo = h.repo();
        let src = source(repo)?;
        let options = ForkOptions {
            id: Some("forked".into()),
            cwd: Some("/dst".into()),
            parent_session: Some("my-parent".into()),
            metadata: Some(metadata_text(r#"{"to":"fork"}"#)),
            ..fork_at("c", ForkPosition::At)
        };
        let (meta, copied) = fork(repo, &src, &options)?;
        assert_eq!(copied, ["a", "b", "c"]);
        let check = |m: &SessionMetadata| {
            assert_eq!(m.id, "forked");
            assert_eq!(m.cwd.as_deref(), Some("/dst"));
            assert_eq!(m.parent_session.as_deref(), Some("my-parent"));
            assert_eq!(m.metadata.as_deref(), Some(r#"{"to":"fork"}"#));
        };
        check(&meta);
        check(&find(repo, "forked")?);
        assert_eq!(listed(repo, Some("/dst"))?, ["forked"]);
        assert_eq!(listed(repo, Some("/src"))?, [src.id]);
        Ok(())
    }

    fn an_empty_id_or_cwd_is_refused_and_creates_nothing(h) {
        // pi's header needs a non-empty id and cwd: a session without one
        // could not be read back from its file, nor exported to one.
        let repo = h.repo();
        let src = source(repo)?;
        let mut refused = vec![
            repo.create(&CreateOptions::default()).err(),
            repo.create(&CreateOptions {
                id: Some(String::new()),
                cwd: "/p".into(),
                ..CreateOptions::default()
            })
            .err(),
        ];
        let empty = Some(String::new());
        for options in [
            ForkOptions {
                cwd: empty.clone(),
                ..ForkOptions::default()
            },
            ForkOptions {
                id: empty,
                ..ForkOptions::default()
            },
        ] {
            refused.push(repo.fork(&src, &options).err());
        }
        for (i, err) in refused.into_iter().enumerate() {
            let err = err.ok_or(format!("case {i} was accepted"))?;
            assert_eq!(err.code(), ErrorCode::InvalidSession, "case {i}: {err}");
        }
        assert_eq!(listed(repo, None)?, [src.id]);
        Ok(())
    }

    fn sessions_and_forks_survive_reopening_the_repository(h) {
        let src = source(h.repo())?;
        let (fork_meta, copied) = fork(h.repo(), &src, &fork_at("e", ForkPosition::At))?;
        let before = h.repo().list(None)?;
        h.reopen();
        let repo = h.repo();
        let after = repo.list(None)?;
        assert_eq!(after, before);
        let forked = repo.open(&find(repo, &fork_meta.id)?)?;
        assert_eq!(ids(&forked.storage().entries(0, None)?), copied);
        assert_eq!(
            forked.storage().metadata()?.parent_session.as_deref(),
            Some(reference(&src).as_str())
        );
        Ok(())
    }
}
