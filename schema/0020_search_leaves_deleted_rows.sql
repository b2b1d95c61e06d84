-- Schema step 0020 (issue 40.1): a delete leaves its entries' search rows
-- in the index, and this table says which: runs of consecutive segments
-- (the branch cache's, `entry_key >> 32`) whose entries were deleted with
-- their search rows left behind, with how many rows and indexed tokens each
-- run left. Search passes over those rows and takes them out of its
-- ranking's totals; `compact` removes them (src/backend/sqlite/fts_dead.rs).
--
-- Why: FTS5 deletes a row of a contentless index by adding a tombstone to
-- every segment that may hold it, and rebuilds a segment's tombstone hash
-- whole, in the one delete that finds a page of it half full. Deleting a
-- 1,000,000-entry session ended with such a rebuild of up to half a million
-- rowids: one statement no batch can split, 71-153 ms under the write lock
-- at 1,000,000 entries (docs/durability.md). Leaving the rows costs a
-- delete nothing in the index.
--
-- No new segment takes an id in a run recorded here
-- (src/backend/sqlite/branch_cache.rs), so no new entry's key meets a row
-- left behind.
CREATE TABLE dead_message_text (
    first_segment INTEGER PRIMARY KEY,
    last_segment  INTEGER NOT NULL,
    rows          INTEGER NOT NULL,  -- search rows left behind in the run
    tokens        INTEGER NOT NULL   -- their indexed tokens (message_text_docsize.sz)
);
