-- sessiontree team archive on PostgreSQL, schema version 1.
-- Released migration files are never edited; later changes go in new files.
-- The branch cache (segments, segment_ancestry, compactions) is the SQLite
-- archive's design, stated in src/backend/sqlite/branch_cache.rs; every
-- cache table can be rebuilt from the append-only `entries` table.
--
-- Every table but `sessions` is keyed by session first (`session_key`), and
-- every per-session query names it, so the schema distributes by session
-- (Citus: `SELECT create_distributed_table(t, 'session_key')` for each such
-- table, colocated with `entries`; `sessions` and `sync_sources` stay a
-- reference or coordinator table because listing and search span sessions).
-- Segment ids are numbered per session, so no global sequence is needed
-- outside `sessions`.

-- One row per session, with the facts read in O(1): the replayed leaf, the
-- name, statistics and the entry count, all maintained on append.
CREATE TABLE sessions (
    session_key       BIGSERIAL PRIMARY KEY,
    id                TEXT NOT NULL UNIQUE,
    created_at        TEXT NOT NULL,
    created_ms        BIGINT,                  -- created_at as Unix ms, for ordering
    cwd               TEXT NOT NULL,
    parent_session    TEXT,
    metadata          TEXT,                    -- exact JSON object text
    header            TEXT NOT NULL,           -- exact session header line, for export
    leaf_id           TEXT,                    -- replayed leaf; may name a missing entry
    name              TEXT,                    -- JSON literal of the last session_info name; NULL if blank
    entry_count       BIGINT NOT NULL DEFAULT 0,
    message_count     BIGINT NOT NULL DEFAULT 0,
    cached_tokens     DOUBLE PRECISION NOT NULL DEFAULT 0,
    uncached_tokens   DOUBLE PRECISION NOT NULL DEFAULT 0,
    total_tokens      DOUBLE PRECISION NOT NULL DEFAULT 0,
    cost_total        DOUBLE PRECISION NOT NULL DEFAULT 0,
    broken_message_id TEXT,                    -- first message entry without a message
    segment_count     BIGINT NOT NULL DEFAULT 0 -- segments numbered so far (per-session ids)
);
CREATE INDEX sessions_newest_first ON sessions (created_ms DESC NULLS LAST, session_key DESC);
CREATE INDEX sessions_by_cwd ON sessions (cwd, created_ms DESC NULLS LAST, session_key DESC);

-- A segment is a run of entries each the only child of the one before it
-- (invariant 1); ids count from 1 in each session.
CREATE TABLE segments (
    session_key          BIGINT NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    segment_id           BIGINT NOT NULL,
    parent_segment       BIGINT,   -- NULL for a root
    first_depth          BIGINT NOT NULL,
    tail_depth           BIGINT NOT NULL,
    position             BIGINT NOT NULL,
    jump_segment         BIGINT,
    inherited_compaction BIGINT,   -- entry_key of the nearest compaction above first_depth
    missing_root_parent  TEXT,     -- parentId of the path's root entry when it does not exist
    PRIMARY KEY (session_key, segment_id)
);
CREATE INDEX segments_by_missing_parent ON segments (session_key, missing_root_parent)
    WHERE missing_root_parent IS NOT NULL AND parent_segment IS NULL;

-- Invariant 4: each segment's nearest ANCESTRY_BLOCK segments.
CREATE TABLE segment_ancestry (
    session_key      BIGINT NOT NULL,
    segment_id       BIGINT NOT NULL,
    from_depth       BIGINT NOT NULL,
    ancestor_segment BIGINT NOT NULL,
    to_depth         BIGINT NOT NULL,
    PRIMARY KEY (session_key, segment_id, from_depth),
    FOREIGN KEY (session_key, segment_id) REFERENCES segments (session_key, segment_id) ON DELETE CASCADE
);

-- The append-only log. entry_key = segment_id << 32 | depth, so the entries
-- of a path are a few index range scans. seq is the position in the log.
-- `json` is the exact entry text (TOAST compresses long rows).
CREATE TABLE entries (
    session_key BIGINT NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    entry_key   BIGINT NOT NULL,
    seq         BIGINT NOT NULL,
    id          TEXT NOT NULL,
    type        TEXT NOT NULL,
    json        TEXT NOT NULL,
    PRIMARY KEY (session_key, entry_key)
);
CREATE UNIQUE INDEX entries_by_seq ON entries (session_key, seq);
CREATE UNIQUE INDEX entries_by_id ON entries (session_key, id);
CREATE INDEX entries_by_type ON entries (session_key, type, seq) WHERE type <> 'message';

-- Invariant 6: where a walk reaching each compaction stops.
CREATE TABLE compactions (
    session_key BIGINT NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    entry_key   BIGINT NOT NULL,
    stop_key    BIGINT,
    PRIMARY KEY (session_key, entry_key)
);

-- Every leaf move, in log order.
CREATE TABLE leaf_events (
    session_key BIGINT NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    seq         BIGINT NOT NULL,
    entry_key   BIGINT NOT NULL,
    target_id   TEXT,
    PRIMARY KEY (session_key, seq)
);

-- Current labels (JSON literals, so lone surrogates survive).
CREATE TABLE labels (
    session_key BIGINT NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    target_id   TEXT NOT NULL,
    label       TEXT NOT NULL,
    PRIMARY KEY (session_key, target_id)
);

-- The one writer of a session: a claim row with a lease (see README,
-- "Team archive on PostgreSQL", for why a row and not an advisory lock).
CREATE TABLE writer_claims (
    session_key BIGINT PRIMARY KEY REFERENCES sessions (session_key) ON DELETE CASCADE,
    token       TEXT NOT NULL,
    host        TEXT NOT NULL,
    pid         BIGINT NOT NULL,
    expires_ms  BIGINT NOT NULL
);

-- Message words for full-text search: PostgreSQL's own tsvector with a GIN
-- index. `words` holds the message's words as the SQLite archive's FTS5
-- unicode61 tokenizer reads them (runs of letters and digits, lower case,
-- common accents removed: `sessiontree::search::index_words`, so both
-- archives find the same entries; PostgreSQL's parser alone would keep
-- `src/compaction.ts` whole), the first 400,000 bytes of them (a tsvector
-- holds at most 1 MB). The 'simple' configuration does no stemming. The
-- text of a hit's snippet is read from its entry.
CREATE TABLE message_text (
    session_key BIGINT NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    entry_key   BIGINT NOT NULL,
    role        TEXT NOT NULL,
    words       TEXT NOT NULL,
    tsv         TSVECTOR GENERATED ALWAYS AS (to_tsvector('simple', words)) STORED,
    PRIMARY KEY (session_key, entry_key)
);
CREATE INDEX message_text_search ON message_text USING GIN (tsv);

-- What `sync --to` has pushed: per source session, the entries copied so
-- far, so a sync killed part-way resumes where it stopped and a repeated
-- sync copies nothing.
CREATE TABLE sync_sources (
    session_key BIGINT PRIMARY KEY REFERENCES sessions (session_key) ON DELETE CASCADE,
    source      TEXT NOT NULL,
    entries     BIGINT NOT NULL
);
