-- sessiontree archive schema, version 1.
-- Released migration files are never edited; later changes go in new files.
-- The branch cache (segments, segment_ancestry, compactions) is described in
-- src/backend/sqlite/branch_cache.rs; every cache table can be rebuilt from
-- the append-only `entries` table.

-- One row per session, with the facts that are read in O(1): the replayed
-- leaf, the name, statistics and the entry count, all maintained on append.
CREATE TABLE sessions (
    session_key       INTEGER PRIMARY KEY,
    id                TEXT NOT NULL UNIQUE,
    created_at        TEXT NOT NULL,
    created_ms        INTEGER,                 -- created_at as Unix ms, for ordering
    cwd               TEXT NOT NULL,
    parent_session    TEXT,
    metadata          TEXT,                    -- exact JSON object text
    header            TEXT NOT NULL,           -- exact session header line, for export
    leaf_id           TEXT,                    -- replayed leaf; may name a missing entry
    name              TEXT,                    -- last session_info name, trimmed; NULL if blank
    entry_count       INTEGER NOT NULL DEFAULT 0,
    message_count     INTEGER NOT NULL DEFAULT 0,
    cached_tokens     REAL NOT NULL DEFAULT 0,
    uncached_tokens   REAL NOT NULL DEFAULT 0,
    total_tokens      REAL NOT NULL DEFAULT 0,
    cost_total        REAL NOT NULL DEFAULT 0,
    broken_message_id TEXT                     -- first message entry without a message
);
CREATE INDEX sessions_newest_first ON sessions (created_ms DESC, session_key DESC);
CREATE INDEX sessions_by_cwd ON sessions (cwd, created_ms DESC, session_key DESC);

-- A segment is a run of entries each the only child of the one before it.
-- Entries of a segment have consecutive depths first_depth..=tail_depth.
CREATE TABLE segments (
    segment_id           INTEGER PRIMARY KEY,
    session_key          INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    parent_segment       INTEGER,  -- the segment this one forks from; NULL for a root
    first_depth          INTEGER NOT NULL,
    tail_depth           INTEGER NOT NULL,
    inherited_compaction INTEGER,  -- entry_key of the nearest compaction above first_depth on the path
    missing_root_parent  TEXT      -- parentId of the path's root entry when that entry does not exist
);
CREATE INDEX segments_by_session ON segments (session_key);
CREATE INDEX segments_by_missing_parent ON segments (session_key, missing_root_parent)
    WHERE missing_root_parent IS NOT NULL AND parent_segment IS NULL;

-- The materialized ancestry of each segment: one row per segment on its path
-- (itself included), giving the depth range of that segment on the path.
CREATE TABLE segment_ancestry (
    segment_id       INTEGER NOT NULL REFERENCES segments (segment_id) ON DELETE CASCADE,
    from_depth       INTEGER NOT NULL,
    ancestor_segment INTEGER NOT NULL,
    to_depth         INTEGER NOT NULL,
    PRIMARY KEY (segment_id, from_depth)
) WITHOUT ROWID;

-- The append-only log. entry_key = segment_id << 32 | depth, so the entries of
-- a path are a few rowid range scans. seq is the position in the session's log.
CREATE TABLE entries (
    entry_key   INTEGER PRIMARY KEY,
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    id          TEXT NOT NULL,
    parent_id   TEXT,
    type        TEXT NOT NULL,
    timestamp   TEXT NOT NULL,
    json        TEXT NOT NULL                -- exact entry text
);
CREATE UNIQUE INDEX entries_by_seq ON entries (session_key, seq);
CREATE UNIQUE INDEX entries_by_id ON entries (session_key, id);
CREATE INDEX entries_by_type ON entries (session_key, type, seq);

-- Every leaf move, in log order (the leaf entries themselves are in `entries`).
CREATE TABLE leaf_events (
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    entry_key   INTEGER NOT NULL,
    target_id   TEXT,
    PRIMARY KEY (session_key, seq)
) WITHOUT ROWID;

CREATE TRIGGER entries_are_append_only BEFORE UPDATE ON entries
BEGIN SELECT RAISE(ABORT, 'entries are append-only'); END;
CREATE TRIGGER leaf_events_are_append_only BEFORE UPDATE ON leaf_events
BEGIN SELECT RAISE(ABORT, 'leaf_events are append-only'); END;

-- Each compaction with where a walk that reaches it stops: stop_key is the
-- entry_key of the last entry returned, NULL when the walk runs to the root.
CREATE TABLE compactions (
    entry_key   INTEGER PRIMARY KEY,
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    stop_key    INTEGER
);
CREATE INDEX compactions_by_session ON compactions (session_key);

-- Current labels (label entries replayed).
CREATE TABLE labels (
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    target_id   TEXT NOT NULL,
    label       TEXT NOT NULL,
    PRIMARY KEY (session_key, target_id)
) WITHOUT ROWID;

-- The one writer of each session: who, and until when the claim holds
-- unless renewed.
CREATE TABLE writer_claims (
    session_key INTEGER PRIMARY KEY REFERENCES sessions (session_key) ON DELETE CASCADE,
    token       TEXT NOT NULL,
    host        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL
);
