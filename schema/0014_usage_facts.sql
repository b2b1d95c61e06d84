-- Schema version 14: the facts `ls` and `stats` answer from without
-- reading entries.
-- * `sessions.last_active_ms`: the newest entry's timestamp (Unix ms),
--   maintained at append; `ls` sorts by it (a session without entries by
--   its creation).
-- * `usage_facts`: one row per entry carrying usage by the app contract's
--   rules (src/usage.rs), with its model key, tokens and cost, written at
--   append and import. `dedup` is a hash of the entry's id and timestamp: a
--   fork's copy of an entry shares it, so only the first row of each `dedup`
--   is `counted`; when that row goes (its session deleted), the trigger
--   counts the next one.
-- Both are filled for the sessions already stored by the step's code
-- (src/backend/sqlite/migrations/v14_usage_facts.rs).
ALTER TABLE sessions ADD COLUMN last_active_ms INTEGER;
CREATE TABLE usage_facts (
    fact_key    INTEGER PRIMARY KEY,
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    dedup       INTEGER NOT NULL,          -- FNV-1a 64 of id, NUL, timestamp
    counted     INTEGER NOT NULL,          -- 1 for the first row of its dedup
    at_ms       INTEGER,                   -- the entry's timestamp (or the session's creation)
    model       TEXT NOT NULL,             -- provider/model, or Tools/summaries
    input       REAL NOT NULL,
    output      REAL NOT NULL,
    cache_read  REAL NOT NULL,
    cache_write REAL NOT NULL,
    cost        REAL NOT NULL
);
CREATE INDEX usage_facts_by_dedup ON usage_facts (dedup);
CREATE INDEX usage_facts_by_session ON usage_facts (session_key);
CREATE TRIGGER usage_facts_recount AFTER DELETE ON usage_facts WHEN old.counted = 1
BEGIN
    UPDATE usage_facts SET counted = 1
     WHERE fact_key = (SELECT min(fact_key) FROM usage_facts WHERE dedup = old.dedup);
END;
