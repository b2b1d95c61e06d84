-- Schema version 5: branch cache v2 (src/backend/sqlite/branch_cache.rs).
-- Version 1 materialized each segment's whole ancestry (`segment_ancestry`,
-- one row per fork above every segment: O(F²) rows when every fork lies on
-- the active path, as when a user regenerates the last reply again and
-- again). Version 2 keeps one row per segment: its parent, its position on
-- its path and a skew-binary jump pointer; a path is read by a recursive walk
-- over the segments it spans, so rows read stay proportional to the answer.
-- `position` and `jump_segment` are filled in by code in the same transaction
-- (branch_cache::fill_jump_pointers); segments and entry keys do not change.
ALTER TABLE segments ADD COLUMN position INTEGER NOT NULL DEFAULT 1;  -- segments on the path from the root, itself included
ALTER TABLE segments ADD COLUMN jump_segment INTEGER;                -- skew-binary jump pointer; NULL for a root
DROP TABLE segment_ancestry;
