//! Schema migrations: the files in `schema/`, applied in order, with SQLite's
//! `user_version` as the cursor. Released files are never edited or reordered;
//! each step runs in its own IMMEDIATE transaction (a new database gets
//! them all in one), except a step whose rewrite is [`Rewrite::Batched`]:
//! its SQL and first batch, then batches of at most
//! [`BATCHED_WRITE`](super::writer::BATCHED_WRITE) each with a durable cursor
//! ([`batched`]), `user_version` bumped by its last batch. A step that
//! rewrites rows the SQL cannot has its code in a module of its own here,
//! named after its schema file.

mod batched;
mod v10_role_in_entries;
mod v14_usage_facts;
mod v4_exact_facts;
mod v5_branch_cache_v2;
mod v6_compact_archive;
mod v8_search_without_positions;
mod version;

use crate::error::{Error, Result};
use rusqlite::{Connection, Transaction, TransactionBehavior};
use std::path::Path;

pub use batched::Batched;
pub use version::current_version;

/// Code that rewrites rows in a step's one transaction, reporting progress
/// as (done, total) in units of its choosing.
pub type WholeRewrite = fn(&Transaction, &mut dyn FnMut(u64, u64)) -> Result<()>;

/// Code that rewrites rows after a step's SQL.
#[derive(Clone, Copy)]
pub enum Rewrite {
    /// In the step's one transaction: for a step whose rewrite changes what
    /// older builds read (they may read between batches; see [`batched`]).
    Whole(WholeRewrite),
    /// In batches after the step's SQL, each its own transaction.
    Batched(Batched),
}

/// One migration step: its SQL file, then the code that rewrites rows the SQL
/// cannot.
pub struct Migration {
    /// The schema file's text.
    pub sql: &'static str,
    /// Row rewrites done after the SQL.
    pub rewrite: Option<Rewrite>,
}

/// How far a migration has come, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigrationProgress {
    /// The schema version being applied.
    pub version: i64,
    /// Units of its rewrite done.
    pub done: u64,
    /// Units of its rewrite in all.
    pub total: u64,
}

/// The migration steps, oldest first; step `i` brings the schema to version `i + 1`.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        sql: include_str!("../../../../schema/0001_init.sql"),
        rewrite: None,
    },
    Migration {
        sql: include_str!("../../../../schema/0002_search.sql"),
        rewrite: None,
    },
    Migration {
        sql: include_str!("../../../../schema/0003_imports.sql"),
        rewrite: None,
    },
    Migration {
        sql: include_str!("../../../../schema/0004_exact_facts.sql"),
        rewrite: Some(Rewrite::Whole(v4_exact_facts::refresh_all_session_facts)),
    },
    Migration {
        sql: include_str!("../../../../schema/0005_branch_cache_v2.sql"),
        rewrite: Some(Rewrite::Whole(|tx, progress| {
            v5_branch_cache_v2::migrate_to_v2(tx, progress)
        })),
    },
    Migration {
        sql: include_str!("../../../../schema/0006_compact_archive.sql"),
        rewrite: Some(Rewrite::Whole(v6_compact_archive::migrate_to_v6)),
    },
    Migration {
        sql: include_str!("../../../../schema/0007_staged_imports.sql"),
        rewrite: None,
    },
    Migration {
        sql: include_str!("../../../../schema/0008_search_without_positions.sql"),
        rewrite: Some(Rewrite::Whole(
            v8_search_without_positions::reindex_all_entries,
        )),
    },
    Migration {
        sql: include_str!("../../../../schema/0009_trailing_message.sql"),
        rewrite: None,
    },
    Migration {
        sql: include_str!("../../../../schema/0010_role_in_entries.sql"),
        rewrite: Some(Rewrite::Whole(v10_role_in_entries::reindex_text_only)),
    },
    Migration {
        sql: include_str!("../../../../schema/0011_entry_blocks.sql"),
        rewrite: None,
    },
    Migration {
        sql: include_str!("../../../../schema/0012_wide_prefix_hash.sql"),
        rewrite: None,
    },
    Migration {
        sql: include_str!("../../../../schema/0013_contract.sql"),
        rewrite: None,
    },
    Migration {
        sql: include_str!("../../../../schema/0014_usage_facts.sql"),
        rewrite: Some(Rewrite::Batched(v14_usage_facts::USAGE_FACTS)),
    },
    Migration {
        sql: include_str!("../../../../schema/0015_usage_daily_by_writer.sql"),
        rewrite: None,
    },
    Migration {
        sql: include_str!("../../../../schema/0016_check_marks.sql"),
        rewrite: None,
    },
    Migration {
        sql: include_str!("../../../../schema/0017_search_keeps_deletes_unmerged.sql"),
        rewrite: None,
    },
    Migration {
        sql: include_str!("../../../../schema/0018_usage_dedup_in_time_order.sql"),
        rewrite: None,
    },
    Migration {
        sql: include_str!("../../../../schema/0019_search_merged_by_writers.sql"),
        rewrite: None,
    },
    Migration {
        sql: include_str!("../../../../schema/0020_search_leaves_deleted_rows.sql"),
        rewrite: None,
    },
];

/// The schema version this build writes.
pub fn latest_version() -> i64 {
    MIGRATIONS.len() as i64
}

/// Brings the database to the latest schema; refuses a database newer than
/// this build. `progress` hears from steps that rewrite rows.
pub fn migrate(
    conn: &mut Connection,
    path: &Path,
    progress: &mut dyn FnMut(MigrationProgress),
) -> Result<()> {
    let found = current_version(conn)?;
    if found > latest_version() {
        return Err(Error::SchemaTooNew {
            path: path.to_owned(),
            found,
            supported: latest_version(),
        });
    }
    if found == 0 {
        return create_schema(conn, path);
    }
    let mut migrated = false;
    for (i, step) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(found).unwrap_or(0))
    {
        let version = i as i64 + 1;
        let ctx = || format!("applying schema migration {version} to {}", path.display());
        if let Some(Rewrite::Batched(rewrite)) = step.rewrite {
            batched::run(
                conn,
                path,
                step.sql,
                &rewrite,
                version,
                &mut |done, total| {
                    progress(MigrationProgress {
                        version,
                        done,
                        total,
                    })
                },
            )?;
            migrated = true;
            continue;
        }
        super::connection::refuse_if_damaged(path)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| Error::sqlite(ctx(), e))?;
        // Another process may have migrated while we waited for the lock.
        if current_version(&tx)? >= version {
            continue;
        }
        apply(&tx, step, version, ctx, progress)?;
        tx.commit().map_err(|e| Error::sqlite(ctx(), e))?;
        migrated = true;
    }
    if migrated {
        return_freed_space(conn);
    }
    Ok(())
}

/// Runs one step's SQL and rewrite in `tx` and records its version.
fn apply(
    tx: &Transaction,
    step: &Migration,
    version: i64,
    ctx: impl Fn() -> String,
    progress: &mut dyn FnMut(MigrationProgress),
) -> Result<()> {
    tx.execute_batch(step.sql)
        .map_err(|e| Error::sqlite(ctx(), e))?;
    match step.rewrite {
        None => {}
        Some(Rewrite::Whole(rewrite)) => rewrite(tx, &mut |done, total| {
            progress(MigrationProgress {
                version,
                done,
                total,
            })
        })?,
        // The same chunks a batched run does, all in this transaction.
        Some(Rewrite::Batched(rewrite)) => {
            batched::run_whole(tx, &rewrite, version, &mut |done, total| {
                progress(MigrationProgress {
                    version,
                    done,
                    total,
                })
            })?
        }
    }
    tx.pragma_update(None, "user_version", version)
        .map_err(|e| Error::sqlite(ctx(), e))
}

/// The schema as the migrations up to [`FRESH_SCHEMA_VERSION`] leave an
/// empty database, written out as one script: a new archive runs it instead
/// of replaying them (a test holds the two ways to the same schema and rows).
pub const FRESH_SCHEMA: &str = include_str!("../../../../schema/fresh.sql");
/// The version [`FRESH_SCHEMA`] is at; later steps are applied on top of it.
pub const FRESH_SCHEMA_VERSION: i64 = 20;

/// A new database gets its schema in one transaction: there are no rows to
/// keep progress on, and one commit costs one fsync where a commit per step
/// cost ten. It runs [`FRESH_SCHEMA`], then any later steps: replaying every
/// step cost 41 M instructions of SQL (15 M of them FTS5 renaming its tables
/// for step 6), most of a fresh archive's 10 ms open.
fn create_schema(conn: &mut Connection, path: &Path) -> Result<()> {
    let ctx = || format!("creating the schema of {}", path.display());
    super::connection::refuse_if_damaged(path)?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| Error::sqlite(ctx(), e))?;
    // Another process may have created it while we waited for the lock.
    let mut found = current_version(&tx)?;
    if found == 0 {
        tx.execute_batch(FRESH_SCHEMA)
            .and_then(|()| tx.pragma_update(None, "user_version", FRESH_SCHEMA_VERSION))
            .map_err(|e| Error::sqlite(ctx(), e))?;
        found = FRESH_SCHEMA_VERSION;
    }
    for (i, step) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(found).unwrap_or(0))
    {
        apply(&tx, step, i as i64 + 1, ctx, &mut |_| {})?;
    }
    tx.commit().map_err(|e| Error::sqlite(ctx(), e))
}

/// After a migration that freed a quarter of the file or more (version 6
/// rewrites every entry compressed: a 36 MB archive keeps 13.5 MB of data,
/// 35 % of its pages left free; version 5 drops the
/// quadratic ancestry of version 1: a 229 MB archive keeps 36 MB of data),
/// gives the space back to the file system. Best effort: VACUUM is one
/// transaction, so if another process holds the database or the disk is too
/// full for its copy, the archive stays as it is, its free pages reusable.
fn return_freed_space(conn: &Connection) {
    let pages = |pragma: &str| -> i64 {
        conn.pragma_query_value(None, pragma, |r| r.get(0))
            .unwrap_or(0)
    };
    if pages("freelist_count") * 4 > pages("page_count") {
        let _ = conn.execute_batch("VACUUM; PRAGMA wal_checkpoint(TRUNCATE);");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty database brought to the latest schema by replaying every step.
    fn replayed() -> Connection {
        let mut conn = Connection::open_in_memory().expect("open");
        let tx = conn.transaction().expect("begin");
        for (i, step) in MIGRATIONS.iter().enumerate() {
            apply(&tx, step, i as i64 + 1, String::new, &mut |_| {}).expect("step");
        }
        tx.commit().expect("commit");
        conn
    }

    /// The script [`FRESH_SCHEMA`] should hold for `conn`'s schema: every
    /// statement SQLite keeps, tables first, then indexes, then triggers,
    /// leaving out what SQLite makes itself (FTS5's shadow tables,
    /// `sqlite_sequence`, automatic indexes). Each FTS5 table is followed by
    /// the settings a step gave it (its `_config` rows but FTS5's own
    /// `version`): persistent, they are part of the schema.
    fn script_of(conn: &Connection) -> String {
        let mut st = conn
            .prepare(
                "SELECT type, name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY rowid",
            )
            .expect("prepare");
        let rows: Vec<(String, String, String)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(Iterator::collect)
            .expect("schema");
        let virtual_tables: Vec<&str> = rows
            .iter()
            .filter(|(_, _, sql)| sql.starts_with("CREATE VIRTUAL TABLE"))
            .map(|(_, name, _)| name.as_str())
            .collect();
        let shadow = |name: &str| {
            virtual_tables.iter().any(|v| {
                name.strip_prefix(v)
                    .is_some_and(|rest| rest.starts_with('_'))
            })
        };
        let rank = |kind: &str, sql: &str| match kind {
            "table" if sql.starts_with("CREATE VIRTUAL TABLE") => 1,
            "table" => 0,
            "index" => 2,
            _ => 3,
        };
        let mut kept: Vec<&(String, String, String)> = rows
            .iter()
            .filter(|(_, name, _)| name != "sqlite_sequence" && !shadow(name))
            .collect();
        kept.sort_by_key(|(kind, _, sql)| rank(kind, sql));
        let settings = |name: &str| -> String {
            let Ok(mut st) = conn.prepare(&format!(
                "SELECT k, quote(v) FROM \"{name}_config\" WHERE k <> 'version' ORDER BY k"
            )) else {
                return String::new();
            };
            st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
                .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
                .expect("settings")
                .into_iter()
                .map(|(k, v)| format!("INSERT INTO {name} ({name}, rank) VALUES ('{k}', {v});\n"))
                .collect()
        };
        let statements: Vec<String> = kept
            .iter()
            .map(|(kind, name, sql)| match rank(kind, sql) {
                1 => format!("{sql};\n{}", settings(name)),
                _ => format!("{sql};\n"),
            })
            .collect();
        statements.join("\n")
    }

    /// Everything a database holds that a schema makes: its `sqlite_schema`
    /// rows (root pages aside), the rows of every table (FTS5's own among
    /// them) and the header fields a script could set.
    fn contents(conn: &Connection) -> Vec<String> {
        let mut out = Vec::new();
        let mut st = conn
            .prepare("SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY name")
            .expect("prepare");
        let objects: Vec<(String, String, String, Option<String>)> = st
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .and_then(Iterator::collect)
            .expect("schema");
        for (kind, name, table, sql) in &objects {
            out.push(format!("{kind} {name} on {table}: {sql:?}"));
            let is_virtual = sql
                .as_deref()
                .is_some_and(|s| s.starts_with("CREATE VIRTUAL TABLE"));
            if kind == "table" && !is_virtual {
                let mut rows = conn
                    .prepare(&format!("SELECT * FROM \"{name}\""))
                    .expect("select");
                let width = rows.column_count();
                let mut cursor = rows.query([]).expect("rows");
                while let Some(row) = cursor.next().expect("row") {
                    let values: Vec<String> = (0..width)
                        .map(|i| format!("{:?}", row.get_ref(i).expect("value")))
                        .collect();
                    out.push(format!("  {name}: {}", values.join(", ")));
                }
            }
        }
        for pragma in ["user_version", "application_id", "auto_vacuum", "encoding"] {
            let value: rusqlite::types::Value = conn
                .pragma_query_value(None, pragma, |r| r.get(0))
                .expect("pragma");
            out.push(format!("{pragma} = {value:?}"));
        }
        out
    }

    #[test]
    fn the_fresh_schema_is_what_replaying_every_step_makes() {
        let mut fresh = Connection::open_in_memory().expect("open");
        create_schema(&mut fresh, Path::new(":memory:")).expect("create");
        assert_eq!(
            contents(&fresh),
            contents(&replayed()),
            "a new archive's schema differs from the migrated one's"
        );
    }

    #[test]
    fn the_fresh_schema_script_is_taken_at_the_latest_version() {
        let expected = script_of(&replayed());
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/fresh.sql");
        let (comment, script) =
            FRESH_SCHEMA.split_at(FRESH_SCHEMA.find("CREATE ").expect("a statement"));
        if std::env::var_os("SESSIONTREE_WRITE_FRESH_SCHEMA").is_some() {
            std::fs::write(&file, format!("{comment}{expected}")).expect("write");
        }
        assert!(
            FRESH_SCHEMA_VERSION == latest_version() && script == expected,
            "schema/fresh.sql (FRESH_SCHEMA_VERSION {FRESH_SCHEMA_VERSION}) is not what the \
             migrations up to version {} make: set FRESH_SCHEMA_VERSION to that version and \
             run this test with SESSIONTREE_WRITE_FRESH_SCHEMA=1",
            latest_version()
        );
    }
}
