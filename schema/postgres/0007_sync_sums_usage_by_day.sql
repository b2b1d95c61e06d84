-- sessiontree team archive on PostgreSQL, schema version 7 (issue 42.3): a
-- sync's batches sum their usage by day themselves, and entry text and
-- search vectors are compressed with lz4. The foreign keys stay: a key check
-- per row is about a sixth of a sync's server work (docs/postgres.md), but
-- it is what keeps a session deleted by hand (psql) from leaving rows behind.
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
