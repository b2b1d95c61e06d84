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
-- * `usage_daily`: the counted facts summed per session, UTC day and model,
--   kept by triggers on `usage_facts` (a row counted adds, a row that stops
--   being counted subtracts), so that `stats` reads a few thousand rows, not
--   one per entry; days cut by `--since`/`--until` times are summed from
--   `usage_facts`.
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
CREATE INDEX usage_facts_by_time ON usage_facts (at_ms) WHERE counted = 1;
CREATE TABLE usage_daily (
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    day         INTEGER NOT NULL,          -- days since 1970-01-01 (UTC)
    model       TEXT NOT NULL,
    entries     INTEGER NOT NULL,
    input       REAL NOT NULL,
    output      REAL NOT NULL,
    cache_read  REAL NOT NULL,
    cache_write REAL NOT NULL,
    cost        REAL NOT NULL,
    PRIMARY KEY (session_key, day, model)
) WITHOUT ROWID;
CREATE INDEX usage_daily_by_day ON usage_daily (day);
CREATE TRIGGER usage_daily_add AFTER INSERT ON usage_facts WHEN new.counted = 1
BEGIN
    INSERT INTO usage_daily (session_key, day, model, entries, input, output, cache_read,
                             cache_write, cost)
    VALUES (new.session_key, coalesce(new.at_ms / 86400000 - (new.at_ms % 86400000 < 0), 0), new.model, 1,
            new.input, new.output, new.cache_read, new.cache_write, new.cost)
    ON CONFLICT (session_key, day, model) DO UPDATE SET
        entries = entries + 1, input = input + excluded.input, output = output + excluded.output,
        cache_read = cache_read + excluded.cache_read,
        cache_write = cache_write + excluded.cache_write, cost = cost + excluded.cost;
END;
CREATE TRIGGER usage_daily_counted AFTER UPDATE OF counted ON usage_facts
    WHEN new.counted = 1 AND old.counted = 0
BEGIN
    INSERT INTO usage_daily (session_key, day, model, entries, input, output, cache_read,
                             cache_write, cost)
    VALUES (new.session_key, coalesce(new.at_ms / 86400000 - (new.at_ms % 86400000 < 0), 0), new.model, 1,
            new.input, new.output, new.cache_read, new.cache_write, new.cost)
    ON CONFLICT (session_key, day, model) DO UPDATE SET
        entries = entries + 1, input = input + excluded.input, output = output + excluded.output,
        cache_read = cache_read + excluded.cache_read,
        cache_write = cache_write + excluded.cache_write, cost = cost + excluded.cost;
END;
CREATE TRIGGER usage_daily_remove AFTER DELETE ON usage_facts WHEN old.counted = 1
BEGIN
    UPDATE usage_daily SET entries = entries - 1, input = input - old.input,
           output = output - old.output, cache_read = cache_read - old.cache_read,
           cache_write = cache_write - old.cache_write, cost = cost - old.cost
     WHERE session_key = old.session_key AND day = coalesce(old.at_ms / 86400000 - (old.at_ms % 86400000 < 0), 0) AND model = old.model;
END;
