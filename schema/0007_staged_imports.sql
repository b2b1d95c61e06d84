-- Imports that do not hold the archive (schema version 7). A new session
-- imported from a file is written in short transactions; until its last one
-- commits, `staged_from` holds the file's canonical path and every reader
-- (listing, opening by id, search, totals) passes the session over. The
-- import holds the session's writer claim meanwhile; a staged session whose
-- claim is dead is discarded by the next import of that file.
ALTER TABLE sessions ADD COLUMN staged_from TEXT;
CREATE INDEX sessions_staged ON sessions (staged_from) WHERE staged_from IS NOT NULL;
