-- sessiontree team archive on PostgreSQL, schema version 4: the facts `ls`
-- and `stats` answer from without reading entries (the same as SQLite's
-- schema version 14, schema/0014_usage_facts.sql).
--
-- `sessions.last_active_ms`: the newest entry's timestamp (Unix ms).
-- `usage_facts`: one row per entry carrying usage by the app contract's
-- rules (src/usage.rs); `dedup` hashes the entry's id and timestamp, which a
-- fork's copy shares: only the first row of each `dedup` is `counted`, and
-- when it goes the trigger counts the next. `usage_daily`: the counted
-- facts summed per session, UTC day and model, kept by triggers. Filled for stored entries by the
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
CREATE INDEX usage_facts_by_time ON usage_facts (at_ms) WHERE counted;
CREATE TABLE usage_daily (
    session_key BIGINT NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    day         BIGINT NOT NULL,
    model       TEXT NOT NULL,
    entries     BIGINT NOT NULL,
    input       DOUBLE PRECISION NOT NULL,
    output      DOUBLE PRECISION NOT NULL,
    cache_read  DOUBLE PRECISION NOT NULL,
    cache_write DOUBLE PRECISION NOT NULL,
    cost        DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (session_key, day, model)
);
CREATE INDEX usage_daily_by_day ON usage_daily (day);
CREATE FUNCTION usage_daily_add() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_daily AS d (session_key, day, model, entries, input, output, cache_read,
                                  cache_write, cost)
    VALUES (NEW.session_key, coalesce(floor(NEW.at_ms / 86400000.0)::BIGINT, 0), NEW.model, 1,
            NEW.input, NEW.output, NEW.cache_read, NEW.cache_write, NEW.cost)
    ON CONFLICT (session_key, day, model) DO UPDATE SET
        entries = d.entries + 1, input = d.input + excluded.input,
        output = d.output + excluded.output, cache_read = d.cache_read + excluded.cache_read,
        cache_write = d.cache_write + excluded.cache_write, cost = d.cost + excluded.cost;
    RETURN NULL;
END $$;
CREATE TRIGGER usage_daily_add AFTER INSERT ON usage_facts
    FOR EACH ROW WHEN (NEW.counted) EXECUTE FUNCTION usage_daily_add();
CREATE TRIGGER usage_daily_counted AFTER UPDATE OF counted ON usage_facts
    FOR EACH ROW WHEN (NEW.counted AND NOT OLD.counted) EXECUTE FUNCTION usage_daily_add();
CREATE FUNCTION usage_daily_remove() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE usage_daily SET entries = entries - 1, input = input - OLD.input,
           output = output - OLD.output, cache_read = cache_read - OLD.cache_read,
           cache_write = cache_write - OLD.cache_write, cost = cost - OLD.cost
     WHERE session_key = OLD.session_key AND day = coalesce(floor(OLD.at_ms / 86400000.0)::BIGINT, 0) AND model = OLD.model;
    RETURN NULL;
END $$;
CREATE TRIGGER usage_daily_remove AFTER DELETE ON usage_facts
    FOR EACH ROW WHEN (OLD.counted) EXECUTE FUNCTION usage_daily_remove();
