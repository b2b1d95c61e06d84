-- sessiontree team archive on PostgreSQL, schema version 8 (issue 42.3): the
-- three tables a sync fills row by row no longer check each row's session
-- with a foreign key. A key check is a query per row (`SELECT … FROM
-- sessions … FOR KEY SHARE`), three per entry in a sync: 296,425 of them for
-- 100,000 entries, about a sixth of the server's work (docs/postgres.md).
-- What the keys promised still holds by how every writer works: each write
-- to a session first locks its `sessions` row (FOR UPDATE) in the same
-- transaction and fails if it is gone, so no row can arrive for a missing
-- session; a delete removes every table's rows by name before the session
-- row (`archive::REMOVE_TABLES`), so nothing relied on the cascade. The
-- other tables keep their keys (a few rows per batch).
ALTER TABLE entries DROP CONSTRAINT IF EXISTS entries_session_key_fkey;
ALTER TABLE message_text DROP CONSTRAINT IF EXISTS message_text_session_key_fkey;
ALTER TABLE usage_facts DROP CONSTRAINT IF EXISTS usage_facts_session_key_fkey;
-- A sync's batch adds its counted usage to `usage_daily` itself, in one
-- statement, in the order the trigger would (src/backend/postgres/writer.rs,
-- `insert_usage_facts_summed_here`), with `sessiontree.daily_by_writer` set
-- for its insert; every other insert still sums through the trigger.
DROP TRIGGER IF EXISTS usage_daily_add ON usage_facts;
CREATE TRIGGER usage_daily_add AFTER INSERT ON usage_facts
    FOR EACH ROW WHEN (NEW.counted
                       AND current_setting('sessiontree.daily_by_writer', true) IS DISTINCT FROM 'on')
    EXECUTE FUNCTION usage_daily_add();
-- Entry text and search vectors long enough to be compressed (TOAST) are
-- compressed with lz4 rather than pglz: the same values, read back byte for
-- byte, for a fraction of the CPU (pglz was the first line of a sync's
-- server profile, 5 %). Rows stored before keep pglz; a server built
-- without lz4 (or older than PostgreSQL 14) keeps pglz for all.
DO $$
BEGIN
    ALTER TABLE entries ALTER COLUMN json SET COMPRESSION lz4;
    ALTER TABLE message_text ALTER COLUMN tsv SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR syntax_error THEN
    NULL;
END $$;
