-- Schema version 6: a compact archive (src/backend/sqlite/codec.rs).
-- * `entries.json` holds either the exact entry text (TEXT, as before) or an
--   encoded body (BLOB): zstd-compressed with a dictionary trained on the
--   archive's own entries, with large base64 payloads cut out into `blobs`.
--   Read it with `sessiontree sql`, which registers entry_text(entry_key).
-- * The search index keeps no copy of the text: a contentless FTS5 table
--   (snippets are cut from the entry text), rows deleted with their entries.
-- The code of this step, in the same transaction
-- (codec_migration::compress_all), trains the first dictionary and encodes
-- every entry, with progress.

-- Trained zstd dictionaries. A row never changes; ids are never reused.
CREATE TABLE dictionaries (
    dict_id      INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at   TEXT NOT NULL,
    samples      INTEGER NOT NULL,   -- entries it was trained on
    sample_bytes INTEGER NOT NULL,   -- bytes of text it was trained on
    bytes        BLOB NOT NULL
);

-- Large payloads cut out of entries, stored once however many entries hold them.
CREATE TABLE blobs (
    blob_id  INTEGER PRIMARY KEY,
    hash     INTEGER NOT NULL,       -- FNV-1a 64 of the payload text
    encoding INTEGER NOT NULL,       -- 0: the text itself; 1: canonical base64, stored decoded
    text_len INTEGER NOT NULL,       -- length of the payload text
    bytes    BLOB NOT NULL
);
CREATE INDEX blobs_by_hash ON blobs (hash);

-- Which entries hold which blobs: a blob without rows here is deleted.
CREATE TABLE entry_blobs (
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    entry_key   INTEGER NOT NULL,
    blob_id     INTEGER NOT NULL,
    PRIMARY KEY (session_key, entry_key, blob_id)
) WITHOUT ROWID;
CREATE INDEX entry_blobs_by_blob ON entry_blobs (blob_id);

-- The entries table loses the columns only its text needs (the text says
-- them): `parent_id` and `timestamp` (leaf moves read them from the text).
-- Entries stay append-only in what they say; only the stored encoding of
-- their text may change, and only on a connection of sessiontree's own that
-- is re-encoding (`compact`, which checks that each new value decodes to the
-- same bytes before it writes): sessiontree_may_reencode() is registered on
-- those connections; anywhere else the function does not exist and every
-- UPDATE fails.
DROP TRIGGER entries_are_append_only;
ALTER TABLE entries DROP COLUMN parent_id;
ALTER TABLE entries DROP COLUMN timestamp;
CREATE TRIGGER entries_are_append_only BEFORE UPDATE ON entries
WHEN sessiontree_may_reencode() IS NOT 1
  OR NEW.entry_key IS NOT OLD.entry_key OR NEW.session_key IS NOT OLD.session_key
  OR NEW.seq IS NOT OLD.seq OR NEW.id IS NOT OLD.id OR NEW.type IS NOT OLD.type
BEGIN SELECT RAISE(ABORT, 'entries are append-only'); END;

-- Most entries are messages: the type index keeps only the others (a
-- search for messages reads the session's log in order anyway).
DROP INDEX entries_by_type;
CREATE INDEX entries_by_type ON entries (session_key, type, seq) WHERE type <> 'message';

-- The search index without its copy of the text.
ALTER TABLE message_text RENAME TO message_text_v2;
CREATE VIRTUAL TABLE message_text USING fts5 (
    text,
    role UNINDEXED,
    session_key UNINDEXED,
    content = '',
    contentless_delete = 1,
    contentless_unindexed = 1,
    tokenize = 'unicode61 remove_diacritics 2'
);
INSERT INTO message_text (rowid, text, role, session_key)
    SELECT rowid, text, role, session_key FROM message_text_v2;
DROP TABLE message_text_v2;
