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
use crate::usage::{day_sums_differ, DaySums};
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
        if session.is_none() {
            found.problems.extend(self.orphan_rows()?);
        }
        found.problems.extend(self.usage_day_sums(session)?);
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

/// Rows of a session's table whose session is gone (a session row deleted
/// by hand with the foreign keys off, a bug): what to call them, their
/// table, and the condition a row `t` of it is an orphan on; rows of an entry or a segment are also
/// orphans when that is gone. Sessions marked for a delete or fork are
/// left out ([`NOT_PENDING`]).
const ORPHANS: &[(&str, &str, &str)] = &[
    ("entries", "entries", SESSION_GONE),
    ("message_text (search)", "message_text", ENTRY_GONE),
    ("compactions", "compactions", ENTRY_GONE),
    ("leaf_events", "leaf_events", ENTRY_GONE),
    ("segments", "segments", SESSION_GONE),
    (
        "segments (parent or jump pointer)",
        "segments",
        "(t.parent_segment IS NOT NULL AND NOT EXISTS (SELECT 1 FROM segments p
            WHERE p.session_key = t.session_key AND p.segment_id = t.parent_segment))
         OR (t.jump_segment IS NOT NULL AND NOT EXISTS (SELECT 1 FROM segments j
            WHERE j.session_key = t.session_key AND j.segment_id = t.jump_segment))",
    ),
    (
        "segment_ancestry",
        "segment_ancestry",
        "NOT EXISTS (SELECT 1 FROM segments g JOIN sessions s USING (session_key)
                      WHERE g.session_key = t.session_key AND g.segment_id = t.segment_id)",
    ),
    ("labels", "labels", SESSION_GONE),
    ("usage_facts", "usage_facts", SESSION_GONE),
    ("usage_daily", "usage_daily", SESSION_GONE),
    ("kept_lines", "kept_lines", SESSION_GONE),
    ("sync_sources", "sync_sources", SESSION_GONE),
    ("writer_claims", "writer_claims", SESSION_GONE),
];

/// Rows of a session marked for a delete or fork are left out of every
/// orphan scan: a half-done delete in another process removes entries
/// before the rows derived from them, and segments in no set order, so its
/// rows are briefly orphans by design (finished at the next open).
const NOT_PENDING: &str = "NOT EXISTS (SELECT 1 FROM sessions s
                           WHERE s.session_key = t.session_key AND s.pending IS NOT NULL)";

/// [`ORPHANS`]' condition for a row of a session.
const SESSION_GONE: &str =
    "NOT EXISTS (SELECT 1 FROM sessions s WHERE s.session_key = t.session_key)";

/// [`ORPHANS`]' condition for a row of an entry.
const ENTRY_GONE: &str = "NOT EXISTS (SELECT 1 FROM entries e JOIN sessions s USING (session_key)
                          WHERE e.session_key = t.session_key AND e.entry_key = t.entry_key)";

impl PgArchive {
    /// One problem per table of [`ORPHANS`] that holds any, each counted by
    /// one statement (an anti-join), as SQLite's check counts them.
    fn orphan_rows(&self) -> Result<Vec<String>> {
        let mut conn = self.conn()?;
        let mut problems = Vec::new();
        for (name, table, orphan) in ORPHANS {
            let n: i64 = conn
                .query_one(
                    &format!("SELECT count(*) FROM {table} t WHERE ({orphan}) AND {NOT_PENDING}"),
                    &[],
                )
                .map_err(pg("checking for orphan rows"))?
                .get(0);
            if n > 0 {
                problems.push(format!(
                    "{name}: {n} rows belong to no stored session, segment or entry"
                ));
            }
        }
        Ok(problems)
    }

    /// The per-day usage sums (`usage_daily`, which `stats` and `usage`
    /// read) against the counted usage facts they sum, for every session not
    /// marked for a delete or fork (or one): a sync's batch adds them up
    /// itself, so a sum lost or counted twice would otherwise go unnoticed.
    /// One statement, which sends back only the rows that differ (to
    /// [`crate::usage::DAY_SUMS_TOLERANCE`]), the first 20 of them.
    fn usage_day_sums(&self, session: Option<&str>) -> Result<Vec<String>> {
        const MOST: usize = 20;
        let ctx = "checking usage sums";
        let close = |c: &str| {
            format!(
                "abs(d.{c} - f.{c}) <= {} * greatest(abs(d.{c}), abs(f.{c}), 1.0)",
                crate::usage::DAY_SUMS_TOLERANCE
            )
        };
        let agree = ["input", "output", "cache_read", "cache_write", "cost"]
            .map(close)
            .join(" AND ");
        let rows = self
            .conn()?
            .query(
                &format!(
                    "WITH checked AS (
                         SELECT session_key, id FROM sessions
                          WHERE pending IS NULL AND ($1::TEXT IS NULL OR id = $1)),
                     facts AS (
                         -- The writer's day: the floor of at_ms / 86400000.
                         SELECT session_key,
                                coalesce(at_ms / 86400000 - (at_ms % 86400000 < 0)::INT, 0) AS day,
                                model, count(*) AS entries, sum(input) AS input,
                                sum(output) AS output, sum(cache_read) AS cache_read,
                                sum(cache_write) AS cache_write, sum(cost) AS cost
                           FROM usage_facts JOIN checked USING (session_key)
                          WHERE counted GROUP BY 1, 2, 3),
                     daily AS (SELECT d.* FROM usage_daily d JOIN checked USING (session_key))
                     SELECT c.id, day, model,
                            d.entries, d.input, d.output, d.cache_read, d.cache_write, d.cost,
                            f.entries, f.input, f.output, f.cache_read, f.cache_write, f.cost
                       FROM daily d FULL JOIN facts f USING (session_key, day, model)
                       JOIN checked c USING (session_key)
                      WHERE NOT coalesce(d.entries = f.entries AND {agree}, FALSE)
                      ORDER BY c.id, day, model LIMIT {}",
                    MOST + 1
                ),
                &[&session],
            )
            .map_err(pg(ctx))?;
        let sums = |r: &::postgres::Row, from: usize| -> Result<Option<DaySums>> {
            let Some(entries) = col::<Option<i64>>(r, from)? else {
                return Ok(None);
            };
            Ok(Some(DaySums {
                entries,
                input: col(r, from + 1)?,
                output: col(r, from + 2)?,
                cache_read: col(r, from + 3)?,
                cache_write: col(r, from + 4)?,
                cost: col(r, from + 5)?,
            }))
        };
        let mut problems = Vec::new();
        for r in &rows {
            if problems.len() == MOST {
                problems.push("usage: more day sums differ (first 20 named)".to_owned());
                break;
            }
            let (id, day, model): (String, i64, String) = (col(r, 0)?, col(r, 1)?, col(r, 2)?);
            problems.push(day_sums_differ(&id, day, &model, sums(r, 3)?, sums(r, 9)?));
        }
        Ok(problems)
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
