//! `check` of a team archive: each session's branch cache and maintained
//! facts against a rebuild from its log. The rebuild is the shared in-memory
//! index (`LogIndex`, the state pi keeps) with the contract's path rule, so
//! what a Postgres read answers is compared with what the rules answer.

use super::handle::{col, pg, PgArchive};
use crate::backend::log_index::LogIndex;
use crate::error::Error;
use crate::error::Result;
use crate::rules::walk_to_root_or_compaction;
use crate::storage::{missing_parent_warning, reader_problems, CheckFindings, SessionStorage};
use std::collections::HashSet;

impl PgArchive {
    /// The problems found in every session (or one), empty when every branch
    /// read from the cache equals the rule's walk of the log and the session
    /// row's leaf, name, statistics, count and labels equal a replay; tells
    /// `progress` (sessions checked, sessions to check) after each session.
    pub fn check_with_progress(
        &self,
        session: Option<&str>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<Vec<String>> {
        Ok(self.check_findings(session, progress)?.problems)
    }

    /// [`PgArchive::check_with_progress`] with its warnings: entries whose
    /// parent is missing where the walk from them stops there (no compaction
    /// cuts it first), which pi opens and reads tolerate, as the SQLite
    /// archive's check reports them.
    pub fn check_findings(
        &self,
        session: Option<&str>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<CheckFindings> {
        let ids: Vec<String> = match session {
            Some(id) => vec![id.to_owned()],
            None => self
                .conn()?
                .query(
                    "SELECT id FROM sessions WHERE pending IS NULL ORDER BY session_key",
                    &[],
                )
                .map_err(pg("checking sessions"))?
                .iter()
                .map(|r| col(r, 0))
                .collect::<Result<_>>()?,
        };
        let total = ids.len() as u64;
        progress(0, total);
        let mut found = CheckFindings::default();
        for (done, id) in ids.iter().enumerate() {
            let storage = self.open_session(id)?;
            let mut warnings = Vec::new();
            found.problems.extend(
                session_problems(&storage, &mut warnings)?
                    .into_iter()
                    .map(|p| format!("session {id}: {p}")),
            );
            found
                .warnings
                .extend(warnings.into_iter().map(|w| format!("session {id}: {w}")));
            progress(done as u64 + 1, total);
        }
        Ok(found)
    }
}

/// One session's differences from its rebuild; its missing parents that
/// walks stop at go to `warnings`.
fn session_problems(
    storage: &dyn SessionStorage,
    warnings: &mut Vec<String>,
) -> Result<Vec<String>> {
    let log = LogIndex::from_entries(storage.entries(0, None)?);
    // Roots whose parent is missing, in log order, where the walk from them
    // fails at that parent (a compaction's stop before it is fine).
    for e in log.all() {
        let Some(parent) = e.facts().parent() else {
            continue;
        };
        if log.get(parent).is_some() {
            continue;
        }
        match walk_to_root_or_compaction(Some(e.id()), |id| Ok(log.get(id).cloned())) {
            Err(Error::DanglingReference(missing)) if missing == parent => {
                warnings.push(missing_parent_warning(e.id(), parent));
            }
            _ => {}
        }
    }
    let mut problems = Vec::new();
    let mut differ = |what: &str, stored: String, rebuilt: String| {
        if stored != rebuilt {
            problems.push(format!(
                "{what} is {stored}, a replay of the log gives {rebuilt}"
            ));
        }
    };
    differ(
        "the entry count",
        storage.entry_count()?.to_string(),
        log.all().len().to_string(),
    );
    differ(
        "the leaf",
        format!("{:?}", storage.stored_leaf_id()?),
        format!("{:?}", log.leaf()),
    );
    differ(
        "the name",
        format!("{:?}", storage.session_name()?),
        format!("{:?}", log.name()),
    );
    differ(
        "the statistics",
        format!("{:?}", storage.session_stats().ok()),
        format!("{:?}", log.stats().ok()),
    );
    let mut labelled = HashSet::new();
    for e in log.all() {
        if let Some(target) = e.facts().target_id.as_deref() {
            if labelled.insert(target.to_owned()) {
                differ(
                    &format!("the label of {target}"),
                    format!("{:?}", storage.label(target)?),
                    format!("{:?}", log.label(target)),
                );
            }
        }
    }
    // Every entry is on the path from some tip (an entry no other entry
    // names as parent), so walking from every tip reads every cache row
    // a path read uses.
    let parents: HashSet<&str> = log
        .all()
        .iter()
        .filter_map(|e| e.facts().parent())
        .collect();
    for tip in log.all().iter().filter(|e| !parents.contains(e.id())) {
        let ids = |path: Result<Vec<crate::entry::Entry>>| {
            path.map(|p| p.iter().map(|e| e.id().to_owned()).collect::<Vec<_>>())
                .map_err(|e| e.to_string())
        };
        let cached = ids(storage.path_to_root_or_compaction(Some(tip.id())));
        let rebuilt = ids(walk_to_root_or_compaction(Some(tip.id()), |id| {
            Ok(log.get(id).cloned())
        }));
        if cached != rebuilt {
            problems.push(format!(
                "the path from {} read from the branch cache differs from the walk of the log",
                tip.id()
            ));
        }
    }
    problems.extend(reader_problems(storage));
    Ok(problems)
}
