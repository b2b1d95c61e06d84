-- Schema version 5: branch cache v2 (src/backend/sqlite/branch_cache.rs).
-- Version 1 materialized each segment's whole ancestry in `segment_ancestry`:
-- one row per fork above every segment, O(F²) rows when every fork lies on
-- the active path (a user regenerating the last reply again and again).
-- Version 2 keeps only the nearest 8 segments of each path in that table
-- (a bounded block: a path read steps from block to block), plus each
-- segment's position on its path and a skew-binary jump pointer (a depth
-- search in O(log F) steps). The code of this step, in the same transaction
-- (branch_cache::migrate_to_v2), trims each segment's ancestry to its block
-- and fills in `position` and `jump_segment`, with progress; segments and
-- entry keys do not change.
ALTER TABLE segments ADD COLUMN position INTEGER NOT NULL DEFAULT 1;  -- segments on the path from the root, itself included
ALTER TABLE segments ADD COLUMN jump_segment INTEGER;                -- skew-binary jump pointer; NULL for a root
