-- Schema version 13: each session knows whose rules it follows, and keeps
-- the lines of its file that pi skips.
-- * `sessions.contract`: `app` (pi-coding-agent's SessionManager, the pi
--   program: the default) or `sdk` (pi-agent-core's SessionStorage). Set
--   here from the entries already stored: `sdk` for a session holding a
--   `leaf` or `active_tools_change` entry (read from the `type` column, no
--   entry text decoded), `app` for the others.
-- * `sessions.open_end`: the entry count at which the imported file ended
--   without its final `\n`; an export of the untouched session leaves it out.
-- * `kept_lines`: lines of an imported file that pi skips (not JSON, blank,
--   not a usable entry, an id the archive already holds), byte for byte,
--   each with the number of entries before it (`-1`: before the header), so
--   that an export of the untouched session is the file imported.
ALTER TABLE sessions ADD COLUMN contract TEXT NOT NULL DEFAULT 'app';
ALTER TABLE sessions ADD COLUMN open_end INTEGER;
UPDATE sessions SET contract = 'sdk'
 WHERE EXISTS (SELECT 1 FROM entries e
                WHERE e.session_key = sessions.session_key
                  AND e.type IN ('leaf', 'active_tools_change') AND e.type <> 'message');
CREATE TABLE kept_lines (
    kept_key    INTEGER PRIMARY KEY,
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    position    INTEGER NOT NULL,          -- entries before it; -1: before the header
    text        BLOB NOT NULL              -- the line's bytes, without its `\n`
);
CREATE INDEX kept_lines_by_session ON kept_lines (session_key, position);
