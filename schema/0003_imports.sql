-- Where imported sessions came from, so re-importing is idempotent and a file
-- that pi has appended to since imports only its new lines (schema version 3).
CREATE TABLE imports (
    source_path  TEXT PRIMARY KEY,           -- canonical path of the pi file
    session_key  INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    bytes        INTEGER NOT NULL,           -- bytes imported: through the last complete line
    prefix_hash  TEXT NOT NULL,              -- FNV-1a 64 of those bytes, hex
    lines        INTEGER NOT NULL,           -- non-blank lines in them, the header included
    file_size    INTEGER NOT NULL,           -- size and mtime when last seen, to skip
    file_mtime   INTEGER NOT NULL            -- re-reading unchanged files
);
CREATE INDEX imports_by_session ON imports (session_key);
