-- sessiontree team archive on PostgreSQL, schema version 3: each session
-- knows whose rules it follows, and keeps the lines of its file pi skips
-- (the same as SQLite's schema version 13, schema/0013_contract.sql).
--
-- `sessions.contract`: `app` (pi-coding-agent's SessionManager, the
-- default) or `sdk` (pi-agent-core's SessionStorage), set here from the
-- entries already stored: `sdk` for a session holding a `leaf` or
-- `active_tools_change` entry (the `type` column; no entry text read).
-- `sessions.open_end`: the entry count at which the file ended without its
-- final `\n`. `kept_lines`: a file's lines pi skips, byte for byte, each
-- with the number of entries before it (-1: before the header).
ALTER TABLE sessions ADD COLUMN contract TEXT NOT NULL DEFAULT 'app';
ALTER TABLE sessions ADD COLUMN open_end BIGINT;
UPDATE sessions SET contract = 'sdk'
 WHERE EXISTS (SELECT 1 FROM entries e
                WHERE e.session_key = sessions.session_key
                  AND e.type IN ('leaf', 'active_tools_change'));
CREATE TABLE kept_lines (
    kept_key    BIGSERIAL PRIMARY KEY,
    session_key BIGINT NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    position    BIGINT NOT NULL,
    text        BYTEA NOT NULL
);
CREATE INDEX kept_lines_by_session ON kept_lines (session_key, position);
