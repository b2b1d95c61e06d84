-- The sessiontree archive schema as the migrations up to
-- `FRESH_SCHEMA_VERSION` (src/backend/sqlite/migrate.rs) leave an empty
-- database, for a new archive to run as one script instead of replaying
-- every step: each statement is the text SQLite keeps in `sqlite_schema`
-- after the migrations, so both ways give the same schema. A test holds them
-- to that; `SESSIONTREE_WRITE_FRESH_SCHEMA=1 cargo test fresh_schema` writes
-- this file again after a new migration (until then, the steps after its
-- version are applied on top of it).

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
, staged_from TEXT, contract TEXT NOT NULL DEFAULT 'app', open_end INTEGER, last_active_ms INTEGER);

CREATE TABLE segments (
    segment_id           INTEGER PRIMARY KEY,
    session_key          INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    parent_segment       INTEGER,  -- the segment this one forks from; NULL for a root
    first_depth          INTEGER NOT NULL,
    tail_depth           INTEGER NOT NULL,
    inherited_compaction INTEGER,  -- entry_key of the nearest compaction above first_depth on the path
    missing_root_parent  TEXT      -- parentId of the path's root entry when that entry does not exist
, position INTEGER NOT NULL DEFAULT 1, jump_segment INTEGER);

CREATE TABLE segment_ancestry (
    segment_id       INTEGER NOT NULL REFERENCES segments (segment_id) ON DELETE CASCADE,
    from_depth       INTEGER NOT NULL,
    ancestor_segment INTEGER NOT NULL,
    to_depth         INTEGER NOT NULL,
    PRIMARY KEY (segment_id, from_depth)
) WITHOUT ROWID;

CREATE TABLE entries (
    entry_key   INTEGER PRIMARY KEY,
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    id          TEXT NOT NULL,
    type        TEXT NOT NULL,
    json        TEXT NOT NULL                -- exact entry text
, role_id INTEGER);

CREATE TABLE leaf_events (
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    entry_key   INTEGER NOT NULL,
    target_id   TEXT,
    PRIMARY KEY (session_key, seq)
) WITHOUT ROWID;

CREATE TABLE compactions (
    entry_key   INTEGER PRIMARY KEY,
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    stop_key    INTEGER
);

CREATE TABLE labels (
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    target_id   TEXT NOT NULL,
    label       TEXT NOT NULL,
    PRIMARY KEY (session_key, target_id)
) WITHOUT ROWID;

CREATE TABLE writer_claims (
    session_key INTEGER PRIMARY KEY REFERENCES sessions (session_key) ON DELETE CASCADE,
    token       TEXT NOT NULL,
    host        TEXT NOT NULL,
    pid         INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL
);

CREATE TABLE imports (
    source_path  TEXT PRIMARY KEY,           -- canonical path of the pi file
    session_key  INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    bytes        INTEGER NOT NULL,           -- bytes imported: through the last complete line
    prefix_hash  TEXT NOT NULL,              -- FNV-1a 64 of those bytes, hex
    lines        INTEGER NOT NULL,           -- non-blank lines in them, the header included
    file_size    INTEGER NOT NULL,           -- size and mtime when last seen, to skip
    file_mtime   INTEGER NOT NULL            -- re-reading unchanged files
);

CREATE TABLE dictionaries (
    dict_id      INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at   TEXT NOT NULL,
    samples      INTEGER NOT NULL,   -- entries it was trained on
    sample_bytes INTEGER NOT NULL,   -- bytes of text it was trained on
    bytes        BLOB NOT NULL
);

CREATE TABLE blobs (
    blob_id  INTEGER PRIMARY KEY,
    hash     INTEGER NOT NULL,       -- FNV-1a 64 of the payload text
    encoding INTEGER NOT NULL,       -- 0: the text itself; 1: canonical base64, stored decoded
    text_len INTEGER NOT NULL,       -- length of the payload text
    bytes    BLOB NOT NULL
);

CREATE TABLE entry_blobs (
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    entry_key   INTEGER NOT NULL,
    blob_id     INTEGER NOT NULL,
    PRIMARY KEY (session_key, entry_key, blob_id)
) WITHOUT ROWID;

CREATE TABLE roles (
    role_id INTEGER PRIMARY KEY,
    name    TEXT NOT NULL UNIQUE
);

CREATE TABLE entry_blocks (
    block_id    INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    head_key    INTEGER NOT NULL         -- entry_key of the block's first member
);

CREATE TABLE kept_lines (
    kept_key    INTEGER PRIMARY KEY,
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    position    INTEGER NOT NULL,          -- entries before it; -1: before the header
    text        BLOB NOT NULL              -- the line's bytes, without its `\n`
);

CREATE TABLE usage_facts (
    fact_key    INTEGER PRIMARY KEY,
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    dedup       INTEGER NOT NULL,          -- FNV-1a 64 of id, NUL, timestamp
    counted     INTEGER NOT NULL,          -- 1 for the first row of its dedup
    at_ms       INTEGER,                   -- the entry's timestamp (or the session's creation)
    model       TEXT NOT NULL,             -- provider/model, or Tools/summaries
    input       REAL NOT NULL,
    output      REAL NOT NULL,
    cache_read  REAL NOT NULL,
    cache_write REAL NOT NULL,
    cost        REAL NOT NULL
, timed_ms INTEGER);

CREATE TABLE usage_daily (
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    day         INTEGER NOT NULL,          -- days since 1970-01-01 (UTC)
    model       TEXT NOT NULL,
    entries     INTEGER NOT NULL,
    input       REAL NOT NULL,
    output      REAL NOT NULL,
    cache_read  REAL NOT NULL,
    cache_write REAL NOT NULL,
    cost        REAL NOT NULL,
    PRIMARY KEY (session_key, day, model)
) WITHOUT ROWID;

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

CREATE TABLE dead_message_text (
    first_segment INTEGER PRIMARY KEY,
    last_segment  INTEGER NOT NULL,
    rows          INTEGER NOT NULL,  -- search rows left behind in the run
    tokens        INTEGER NOT NULL   -- their indexed tokens (message_text_docsize.sz)
);

CREATE VIRTUAL TABLE message_text USING fts5 (
    text,
    content = '',
    contentless_delete = 1,
    detail = none,
    tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO message_text (message_text, rank) VALUES ('automerge', 0);
INSERT INTO message_text (message_text, rank) VALUES ('deletemerge', 0);

CREATE INDEX sessions_newest_first ON sessions (created_ms DESC, session_key DESC);

CREATE INDEX sessions_by_cwd ON sessions (cwd, created_ms DESC, session_key DESC);

CREATE INDEX segments_by_session ON segments (session_key);

CREATE INDEX segments_by_missing_parent ON segments (session_key, missing_root_parent)
    WHERE missing_root_parent IS NOT NULL AND parent_segment IS NULL;

CREATE UNIQUE INDEX entries_by_seq ON entries (session_key, seq);

CREATE UNIQUE INDEX entries_by_id ON entries (session_key, id);

CREATE INDEX compactions_by_session ON compactions (session_key);

CREATE INDEX imports_by_session ON imports (session_key);

CREATE INDEX blobs_by_hash ON blobs (hash);

CREATE INDEX entry_blobs_by_blob ON entry_blobs (blob_id);

CREATE INDEX entries_by_type ON entries (session_key, type, seq) WHERE type <> 'message';

CREATE INDEX sessions_staged ON sessions (staged_from) WHERE staged_from IS NOT NULL;

CREATE INDEX entry_blocks_by_session ON entry_blocks (session_key);

CREATE INDEX kept_lines_by_session ON kept_lines (session_key, position);

CREATE INDEX usage_facts_by_session ON usage_facts (session_key);

CREATE INDEX usage_facts_by_time ON usage_facts (at_ms) WHERE counted = 1;

CREATE INDEX usage_daily_by_day ON usage_daily (day);

CREATE INDEX usage_facts_by_stamp ON usage_facts (timed_ms, dedup);

CREATE TRIGGER leaf_events_are_append_only BEFORE UPDATE ON leaf_events
BEGIN SELECT RAISE(ABORT, 'leaf_events are append-only'); END;

CREATE TRIGGER entries_are_append_only BEFORE UPDATE ON entries
WHEN sessiontree_may_reencode() IS NOT 1
  OR NEW.entry_key IS NOT OLD.entry_key OR NEW.session_key IS NOT OLD.session_key
  OR NEW.seq IS NOT OLD.seq OR NEW.id IS NOT OLD.id OR NEW.type IS NOT OLD.type
  OR NEW.role_id IS NOT OLD.role_id
BEGIN SELECT RAISE(ABORT, 'entries are append-only'); END;

CREATE TRIGGER entry_blocks_are_immutable BEFORE UPDATE ON entry_blocks
BEGIN SELECT RAISE(ABORT, 'entry blocks are immutable'); END;

CREATE TRIGGER usage_daily_counted AFTER UPDATE OF counted ON usage_facts
    WHEN new.counted = 1 AND old.counted = 0
BEGIN
    INSERT INTO usage_daily (session_key, day, model, entries, input, output, cache_read,
                             cache_write, cost)
    VALUES (new.session_key, coalesce(new.at_ms / 86400000 - (new.at_ms % 86400000 < 0), 0), new.model, 1,
            new.input, new.output, new.cache_read, new.cache_write, new.cost)
    ON CONFLICT (session_key, day, model) DO UPDATE SET
        entries = entries + 1, input = input + excluded.input, output = output + excluded.output,
        cache_read = cache_read + excluded.cache_read,
        cache_write = cache_write + excluded.cache_write, cost = cost + excluded.cost;
END;

CREATE TRIGGER usage_daily_remove AFTER DELETE ON usage_facts WHEN old.counted = 1
BEGIN
    UPDATE usage_daily SET entries = entries - 1, input = input - old.input,
           output = output - old.output, cache_read = cache_read - old.cache_read,
           cache_write = cache_write - old.cache_write, cost = cost - old.cost
     WHERE session_key = old.session_key AND day = coalesce(old.at_ms / 86400000 - (old.at_ms % 86400000 < 0), 0) AND model = old.model;
END;

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

CREATE TRIGGER usage_facts_recount AFTER DELETE ON usage_facts WHEN old.counted = 1
BEGIN
    UPDATE usage_facts SET counted = 1
     WHERE fact_key = (SELECT min(fact_key) FROM usage_facts
                        WHERE (timed_ms IS NULL OR timed_ms = old.at_ms)
                          AND dedup = old.dedup);
END;
