-- sessiontree team archive on PostgreSQL, schema version 6: a fork or a
-- delete runs in short transactions (src/backend/pending.rs), so that it
-- neither holds its row locks nor holds back VACUUM (its snapshot's xmin)
-- for its whole length. Meanwhile its session carries a mark, as SQLite's
-- `sessions.staged_from` does: 'sessiontree:fork' while a fork's copy is
-- written, 'sessiontree:delete' while a session's rows are removed. No
-- reader sees a marked session; the next open finishes (or undoes) one whose
-- writer died. The partial index makes that look at open free.
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS pending TEXT;
CREATE INDEX IF NOT EXISTS sessions_pending ON sessions (session_key) WHERE pending IS NOT NULL;
