-- sessiontree team archive on PostgreSQL, schema version 4: the facts `ls`
-- and `stats` answer from without reading entries (the same as SQLite's
-- schema version 14, schema/0014_usage_facts.sql).
--
-- `sessions.last_active_ms`: the newest entry's timestamp (Unix ms).
-- `usage_facts`: one row per entry carrying usage by the app contract's
-- rules (src/usage.rs); `dedup` hashes the entry's id and timestamp, which a
-- fork's copy shares: only the first row of each `dedup` is `counted`, and
-- when it goes the trigger counts the next. Filled for stored entries by the
-- step's Rust (src/backend/postgres/migrate.rs).
ALTER TABLE sessions ADD COLUMN last_active_ms BIGINT;
CREATE TABLE usage_facts (
    fact_key    BIGSERIAL PRIMARY KEY,
    session_key BIGINT NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    dedup       BIGINT NOT NULL,
    counted     BOOLEAN NOT NULL,
    at_ms       BIGINT,
    model       TEXT NOT NULL,
    input       DOUBLE PRECISION NOT NULL,
    output      DOUBLE PRECISION NOT NULL,
    cache_read  DOUBLE PRECISION NOT NULL,
    cache_write DOUBLE PRECISION NOT NULL,
    cost        DOUBLE PRECISION NOT NULL
);
CREATE INDEX usage_facts_by_dedup ON usage_facts (dedup);
CREATE INDEX usage_facts_by_session ON usage_facts (session_key);
CREATE FUNCTION usage_facts_recount() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE usage_facts SET counted = TRUE
     WHERE fact_key = (SELECT min(fact_key) FROM usage_facts WHERE dedup = OLD.dedup);
    RETURN NULL;
END $$;
CREATE TRIGGER usage_facts_recount AFTER DELETE ON usage_facts
    FOR EACH ROW WHEN (OLD.counted) EXECUTE FUNCTION usage_facts_recount();
