-- Schema version 16: what `check` verified of each session (issue 42.2), so
-- that a plain `check` reads only the entries appended since; `check --full`
-- reads everything again.
-- * `check_marks`: per session, the last entry verified (`seq`), the facts
--   and labels a replay of the log up to it gives (what the next check
--   replays the new entries on top of), a digest of the rows of that part
--   that appends never change (src/backend/sqlite/check_marks.rs), and the
--   run of `check` that claimed the row (`run`): a check writes its mark
--   only while its claim is still there, so a rewrite that commits while it
--   reads (the triggers below delete the row) leaves no mark behind.
-- * The triggers are the one place a rewrite forgets a mark: anything that
--   rewrites or removes a session's stored rows rather than appending to
--   them (compact's re-encode, delete, an import that replaces a session, a
--   migration's rewrite) goes through them, whichever command does it.
--   Appends only insert entries, raise a segment's `tail_depth`, and add
--   leaf events, compactions and labels; none of that fires one.
CREATE TABLE check_marks (
    session_key       INTEGER PRIMARY KEY REFERENCES sessions (session_key) ON DELETE CASCADE,
    run               INTEGER NOT NULL,  -- the check that claimed the row
    seq               INTEGER,           -- entries with seq <= this were verified; NULL: none yet
    schema_version    INTEGER,           -- the archive's version when verified (another: unused)
    digest            INTEGER,           -- FNV-1a 64 of the verified part's rows appends keep
    checked_ms        INTEGER,           -- when (Unix ms)
    labels            TEXT,              -- the labels the replay gives, as JSON [[target, label], ...]
    -- the facts the replay gives, as `sessions` names them
    leaf_id           TEXT,
    name              TEXT,
    entry_count       INTEGER,
    message_count     INTEGER,
    cached_tokens     REAL,
    uncached_tokens   REAL,
    total_tokens      REAL,
    cost_total        REAL,
    broken_message_id TEXT
);

CREATE TRIGGER check_marks_entry_rewritten AFTER UPDATE ON entries
BEGIN
    DELETE FROM check_marks WHERE session_key IN (old.session_key, new.session_key);
END;

CREATE TRIGGER check_marks_entry_removed AFTER DELETE ON entries
BEGIN
    DELETE FROM check_marks WHERE session_key = old.session_key;
END;

CREATE TRIGGER check_marks_segment_rewritten
    AFTER UPDATE OF session_key, parent_segment, first_depth, inherited_compaction,
                    missing_root_parent, position, jump_segment ON segments
BEGIN
    DELETE FROM check_marks WHERE session_key IN (old.session_key, new.session_key);
END;

CREATE TRIGGER check_marks_segment_removed AFTER DELETE ON segments
BEGIN
    DELETE FROM check_marks WHERE session_key = old.session_key;
END;

CREATE TRIGGER check_marks_leaf_event_rewritten AFTER UPDATE ON leaf_events
BEGIN
    DELETE FROM check_marks WHERE session_key IN (old.session_key, new.session_key);
END;

CREATE TRIGGER check_marks_leaf_event_removed AFTER DELETE ON leaf_events
BEGIN
    DELETE FROM check_marks WHERE session_key = old.session_key;
END;

CREATE TRIGGER check_marks_compaction_rewritten AFTER UPDATE ON compactions
BEGIN
    DELETE FROM check_marks WHERE session_key IN (old.session_key, new.session_key);
END;

CREATE TRIGGER check_marks_compaction_removed AFTER DELETE ON compactions
BEGIN
    DELETE FROM check_marks WHERE session_key = old.session_key;
END;
