-- Schema version 5: branch cache v2 (src/backend/sqlite/branch_cache.rs).
-- Version 1 materialized each segment's whole ancestry in `segment_ancestry`:
-- one row per fork above every segment, O(F²) rows when every fork lies on
-- the active path (a user regenerating the last reply again and again).
-- Version 2 keeps only the nearest 8 segments of each path in that table
-- (a bounded block: a path read steps from block to block), plus each
-- segment's position on its path and a skew-binary jump pointer (a depth
-- search in O(log F) steps). `position` and `jump_segment` are filled in by
-- code in the same transaction (branch_cache::fill_jump_pointers); segments
-- and entry keys do not change.
ALTER TABLE segments ADD COLUMN position INTEGER NOT NULL DEFAULT 1;  -- segments on the path from the root, itself included
ALTER TABLE segments ADD COLUMN jump_segment INTEGER;                -- skew-binary jump pointer; NULL for a root
DELETE FROM segment_ancestry WHERE (segment_id, from_depth) IN (
    SELECT segment_id, from_depth FROM (
        SELECT segment_id, from_depth,
               row_number() OVER (PARTITION BY segment_id ORDER BY from_depth DESC) AS nearness
        FROM segment_ancestry)
    WHERE nearness > 8);
