-- Schema step 0018 (issue 42.2): the usage facts' dedup lookup keyed in time
-- order. `usage_facts_by_dedup` was keyed by the dedup hash alone (FNV-1a 64,
-- random across the archive), so every import batch inserted its facts into
-- as many random pages of that index as it had facts, and every commit wrote
-- each of those pages to the log again: measured on a 482 MB home (import
-- into a fresh archive, WAL frames counted per b-tree), that index was 40 %
-- of every page written to the log, each of its pages written 114 times,
-- and its share grows with the archive.
--
-- `timed_ms` is the entry's own timestamp (Unix ms), NULL when it has none
-- (its `at_ms` is then the session's creation, which a fork's copy does not
-- share) and in every row written before this step. Two rows with the same
-- `dedup` hash the same id and timestamp text, so they have the same
-- `timed_ms`; a lookup asks for `(timed_ms = T OR timed_ms IS NULL) AND
-- dedup = D`, two probes of `usage_facts_by_stamp`, and finds what the hash
-- alone found. Entries of one session arrive in time order, so an import's
-- facts land on the index's last few pages.
ALTER TABLE usage_facts ADD COLUMN timed_ms INTEGER;
CREATE INDEX usage_facts_by_stamp ON usage_facts (timed_ms, dedup);
DROP INDEX usage_facts_by_dedup;
DROP TRIGGER usage_facts_recount;
-- A counted row's copies (same dedup) are timed as it is; a row written
-- before this step has no `timed_ms`, and its copies' is its `at_ms`.
CREATE TRIGGER usage_facts_recount AFTER DELETE ON usage_facts WHEN old.counted = 1
BEGIN
    UPDATE usage_facts SET counted = 1
     WHERE fact_key = (SELECT min(fact_key) FROM usage_facts
                        WHERE (timed_ms IS NULL OR timed_ms = old.at_ms)
                          AND dedup = old.dedup);
END;
