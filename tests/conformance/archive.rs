//! The archive rules (the `SessionArchive` docs), one case per rule, run
//! through `Arc<dyn SessionArchive>` — what the CLI holds — against the
//! SQLite and the PostgreSQL archive; and the repository over that `dyn`
//! archive, for the repository suite (`repo.rs`).

use crate::repo::RepoHarness;
use serde_json::json;
use sessiontree::archive::SessionArchive;
use sessiontree::backend::jsonl::JsonlStorage;
use sessiontree::convert::ExportOutcome;
use sessiontree::listing::{ListQuery, NewSession, SearchFilter};
use sessiontree::repo::archive::ArchiveRepo;
use sessiontree::repo::CreateOptions;
use sessiontree::{Durability, Entry, Error, ErrorCode, SessionStorage};
use std::sync::Arc;

/// An archive under test.
pub trait ArchiveHarness {
    /// The archive, as the CLI holds it.
    fn archive(&mut self) -> Arc<dyn SessionArchive>;
}

impl ArchiveHarness for crate::repo::Sqlite {
    fn archive(&mut self) -> Arc<dyn SessionArchive> {
        Arc::new(self.repo().archive().clone())
    }
}

impl ArchiveHarness for crate::repo::Postgres {
    fn archive(&mut self) -> Arc<dyn SessionArchive> {
        Arc::new(self.repo().archive().clone())
    }
}

/// The repository over the `dyn` archive of an SQLite or PostgreSQL
/// harness (what `sessiontree fork` uses).
pub struct Dyn<H> {
    inner: H,
    repo: ArchiveRepo<Arc<dyn SessionArchive>>,
}

impl<H: ArchiveHarness> Dyn<H> {
    /// The repository over `inner`'s archive.
    pub fn new(mut inner: H) -> Self {
        let repo = ArchiveRepo::new(inner.archive());
        Dyn { inner, repo }
    }
}

impl<H: ArchiveHarness + RepoHarness> RepoHarness for Dyn<H> {
    type Repo = ArchiveRepo<Arc<dyn SessionArchive>>;
    fn repo(&mut self) -> &mut Self::Repo {
        &mut self.repo
    }
    fn reopen(&mut self) {
        self.inner.reopen();
        self.repo = ArchiveRepo::new(self.inner.archive());
    }
}

type R<T = ()> = Result<T, Box<dyn std::error::Error>>;

/// The row of a new session `id` in `cwd`, created now.
fn new_session(id: &str, cwd: &str) -> sessiontree::Result<NewSession> {
    let options = CreateOptions {
        id: Some(id.into()),
        cwd: cwd.into(),
        ..CreateOptions::default()
    };
    Ok(options.fields()?.new_session())
}

/// Creates an empty session (its writer claim released at once).
fn create(a: &dyn SessionArchive, id: &str, cwd: &str) -> R {
    drop(a.create_storage(&new_session(id, cwd)?)?);
    Ok(())
}

fn message(id: &str, parent: Option<&str>, text: &str) -> Entry {
    Entry::from_value(&json!({"type": "message", "id": id, "parentId": parent,
        "timestamp": "2025-01-01T00:00:00.000Z", "message": {"role": "user", "content": text}}))
    .expect("valid test entry")
}

/// The session's log as stored text.
fn texts(s: &dyn SessionStorage) -> R<Vec<String>> {
    Ok(s.entries(0, None)?
        .iter()
        .map(|e| e.json().to_owned())
        .collect())
}

/// The listed ids.
fn ids(a: &dyn SessionArchive, q: &ListQuery) -> R<Vec<String>> {
    Ok(a.list(q)?.into_iter().map(|s| s.metadata.id).collect())
}

/// The error `result` failed with.
fn failure<T>(result: sessiontree::Result<T>) -> Error {
    match result {
        Ok(_) => panic!("succeeded where it should have failed"),
        Err(e) => e,
    }
}

cases! {
    suite = archive_conformance, module = archive, harness = ArchiveHarness;

    fn a_prefix_names_the_one_session_it_starts(h) {
        let a = h.archive();
        for id in ["abc-1", "abc-2", "abd-1"] {
            create(&*a, id, "/w")?;
        }
        assert_eq!(a.resolve_session("abd")?, "abd-1");
        assert_eq!(a.resolve_session("abc-2")?, "abc-2");
        let ambiguous = failure(a.resolve_session("ab"));
        assert_eq!(ambiguous.code(), ErrorCode::Usage);
        assert!(ambiguous.to_string().ends_with("Candidates:\n  abc-1\n  abc-2\n  abd-1"), "{ambiguous}");
        assert_eq!(failure(a.resolve_session("abe")).code(), ErrorCode::NotFound);
        assert_eq!(failure(a.resolve_session("")).code(), ErrorCode::NotFound);
        // An id that starts others names itself.
        create(&*a, "abc", "/w")?;
        assert_eq!(a.resolve_session("abc")?, "abc");
        // Characters LIKE would read as patterns are only characters.
        assert_eq!(failure(a.resolve_session("a%")).code(), ErrorCode::NotFound);
        assert_eq!(failure(a.resolve_session("a_c")).code(), ErrorCode::NotFound);
        // Past ten candidates: the first ten in id order, then an ellipsis.
        for n in 0..12 {
            create(&*a, &format!("many-{n:02}"), "/w")?;
        }
        let many = failure(a.resolve_session("many")).to_string();
        assert!(many.contains("many-09\n  …") && !many.contains("many-10"), "{many}");
        Ok(())
    }

    fn a_session_write_commits_whole_or_not_at_all(h) {
        let a = h.archive();
        let log = [message("m1", None, "first"), message("m2", Some("m1"), "second")];
        let torn = new_session("torn", "/w")?;
        let failed = a.write_session(&mut |w| {
            w.begin(&torn)?;
            w.push(&log[0])?;
            Err(Error::Usage("the source broke off".into()))
        });
        assert_eq!(failure(failed).code(), ErrorCode::Usage, "fill's own error");
        assert!(!a.has_session("torn")?, "nothing of a failed write is left");
        let whole = new_session("whole", "/w")?;
        a.write_session(&mut |w| {
            w.begin(&whole)?;
            log.iter().try_for_each(|e| w.push(e))
        })?;
        let written = a.open_storage("whole")?;
        let want: Vec<String> = log.iter().map(|e| e.json().to_owned()).collect();
        assert_eq!(texts(&*written)?, want, "entries and their ids as pushed");
        assert_eq!(written.leaf_id()?.as_deref(), Some("m2"));
        // A taken id is refused, and the session under it is untouched.
        let again = a.write_session(&mut |w| {
            w.begin(&new_session("whole", "/elsewhere")?)?;
            w.push(&message("x", None, "intruder"))
        });
        assert_eq!(failure(again).code(), ErrorCode::InvalidSession);
        assert_eq!(texts(&*a.open_storage("whole")?)?, want);
        Ok(())
    }

    fn a_created_session_is_held_until_its_storage_goes(h) {
        let a = h.archive();
        let held = a.create_storage(&new_session("held", "/w")?)?;
        assert_eq!(held.metadata()?.id, "held");
        assert_eq!(failure(a.delete_session("held")).code(), ErrorCode::Storage, "a live writer holds it");
        assert!(a.has_session("held")?);
        drop(held);
        a.delete_session("held")?;
        assert!(!a.has_session("held")?);
        assert_eq!(failure(a.open_storage("held")).code(), ErrorCode::NotFound);
        assert_eq!(failure(a.delete_session("held")).code(), ErrorCode::NotFound);
        create(&*a, "twice", "/w")?;
        assert_eq!(failure(a.create_storage(&new_session("twice", "/w")?)).code(), ErrorCode::InvalidSession);
        Ok(())
    }

    fn list_and_count_agree_on_every_filter_and_page(h) {
        let a = h.archive();
        for (id, cwd) in [("s1", "/a"), ("s2", "/a/b"), ("s3", "/ab"), ("s4", "/a"), ("s5", "/c")] {
            create(&*a, id, cwd)?;
        }
        // Newest first: created in the same millisecond, the later first.
        assert_eq!(ids(&*a, &ListQuery::default())?, ["s5", "s4", "s3", "s2", "s1"]);
        let queries = [
            ListQuery::default(),
            ListQuery { cwd: Some("/a".into()), ..ListQuery::default() },
            ListQuery { cwd_under: Some("/a".into()), ..ListQuery::default() },
            ListQuery { since_ms: Some(i64::MAX), ..ListQuery::default() },
        ];
        for q in queries {
            let all = ids(&*a, &q)?;
            assert_eq!(a.count(&q)? as usize, all.len(), "{q:?}");
            let mut paged = Vec::new();
            for offset in (0..all.len() + 2).step_by(2) {
                let page = ListQuery { limit: Some(2), offset, ..q.clone() };
                paged.extend(ids(&*a, &page)?);
                assert_eq!(a.count(&page)?, all.len() as u64, "a count has no page");
            }
            assert_eq!(paged, all, "{q:?}");
        }
        let under = ListQuery { cwd_under: Some("/a".into()), ..ListQuery::default() };
        assert_eq!(ids(&*a, &under)?, ["s4", "s2", "s1"], "/a and below it, not /ab");
        Ok(())
    }

    fn totals_sum_what_the_listing_shows(h) {
        let a = h.archive();
        a.write_session(&mut |w| {
            w.begin(&new_session("t1", "/x")?)?;
            w.push(&message("m1", None, "one"))?;
            w.push(&message("m2", Some("m1"), "two"))
        })?;
        create(&*a, "t2", "/y")?;
        create(&*a, "t3", "/x")?;
        let t = a.totals()?;
        let listed = a.list(&ListQuery::default())?;
        assert_eq!(t.sessions as usize, listed.len());
        assert_eq!(t.entries, listed.iter().map(|s| s.entry_count).sum::<i64>());
        assert_eq!(t.entries, 2);
        assert_eq!(t.stats.message_count, 2);
        let per_cwd: Vec<(&str, i64, i64)> =
            t.per_cwd.iter().map(|(cwd, n, m, _)| (cwd.as_str(), *n, *m)).collect();
        assert_eq!(per_cwd, [("/x", 2, 2), ("/y", 1, 0)]);
        Ok(())
    }

    fn search_pages_through_the_same_hits(h) {
        let a = h.archive();
        for (id, cwd) in [("z1", "/z"), ("z2", "/z"), ("z3", "/q")] {
            a.write_session(&mut |w| {
                w.begin(&new_session(id, cwd)?)?;
                w.push(&message(&format!("{id}-a"), None, "a zebra crossing"))?;
                w.push(&message(&format!("{id}-b"), Some(&format!("{id}-a")), "no stripes here"))
            })?;
        }
        let all = SearchFilter { session: None, cwd: None, role: None };
        let hits = |filter: &SearchFilter<'_>, limit, offset| -> R<Vec<String>> {
            Ok(a.search_page("zebra", filter, limit, offset)?
                .into_iter()
                .map(|h| h.entry_id)
                .collect())
        };
        let mut every = hits(&all, 10, 0)?;
        let paged = [hits(&all, 2, 0)?, hits(&all, 2, 2)?].concat();
        assert_eq!(every, paged, "pages follow the whole list's order");
        every.sort();
        assert_eq!(every, ["z1-a", "z2-a", "z3-a"]);
        assert_eq!(hits(&SearchFilter { session: Some("z2"), ..all }, 10, 0)?, ["z2-a"]);
        assert_eq!(hits(&SearchFilter { cwd: Some("/q"), ..all }, 10, 0)?, ["z3-a"]);
        assert_eq!(hits(&SearchFilter { role: Some("assistant"), ..all }, 10, 0)?, Vec::<String>::new());
        assert!(a.search_page("  ", &all, 10, 0)?.is_empty(), "no words, no hits");
        Ok(())
    }

    fn export_writes_the_session_as_pi_reads_it(h) {
        let a = h.archive();
        let log = [message("e1", None, "hello"), message("e2", Some("e1"), "again")];
        a.write_session(&mut |w| {
            w.begin(&new_session("exported", "/w")?)?;
            log.iter().try_for_each(|e| w.push(e))
        })?;
        let dir = tempfile::tempdir()?;
        let place = |m: &sessiontree::SessionMetadata| Ok(dir.path().join(format!("{}.jsonl", m.id)));
        let mut reached = 0;
        let (path, outcome) = a.export_session("exported", &place, false, &mut |n| reached = n)?;
        assert_eq!((path.clone(), outcome), (dir.path().join("exported.jsonl"), ExportOutcome::Created));
        assert_eq!(reached, 2);
        let file = JsonlStorage::open(&path, Durability::Relaxed)?;
        assert_eq!(file.metadata()?.id, "exported");
        assert_eq!(texts(&file)?, texts(&*a.open_storage("exported")?)?);
        let (_, again) = a.export_session("exported", &place, false, &mut |_| {})?;
        assert_eq!(again, ExportOutcome::Unchanged);
        assert_eq!(failure(a.export_session("gone", &place, false, &mut |_| {})).code(), ErrorCode::NotFound);
        Ok(())
    }
}
