-- Schema version 10: the search index keeps only its token lists.
-- * `entries.role_id` names what the index kept beside each message's text:
--   the role its search text is filed under (src/search.rs,
--   searchable_text: the message's `role`, or custom, compactionSummary,
--   branchSummary), NULL for an entry with no text to search. A search
--   filtered by role, and `tree` finding user messages, read it there.
-- * `roles` spells each role once; a row never changes and is never deleted.
-- * The index loses its UNINDEXED `role` and `session_key` columns (the
--   entry row says both): 5 % of a generated 100,000-entry archive.
-- The column goes after `json`: adding it rewrites no row, and only an entry
-- whose stored text overflows its page is read further to reach it.
-- The code of this step, in the same transaction
-- (fts::reindex_text_only), indexes every entry's text again.
CREATE TABLE roles (
    role_id INTEGER PRIMARY KEY,
    name    TEXT NOT NULL UNIQUE
);
INSERT INTO roles (name) SELECT DISTINCT role FROM message_text WHERE role IS NOT NULL ORDER BY role;
ALTER TABLE entries ADD COLUMN role_id INTEGER;
DROP TRIGGER entries_are_append_only;
UPDATE entries SET role_id = r.role_id
FROM message_text m JOIN roles r ON r.name = m.role
WHERE m.rowid = entries.entry_key;
CREATE TRIGGER entries_are_append_only BEFORE UPDATE ON entries
WHEN sessiontree_may_reencode() IS NOT 1
  OR NEW.entry_key IS NOT OLD.entry_key OR NEW.session_key IS NOT OLD.session_key
  OR NEW.seq IS NOT OLD.seq OR NEW.id IS NOT OLD.id OR NEW.type IS NOT OLD.type
  OR NEW.role_id IS NOT OLD.role_id
BEGIN SELECT RAISE(ABORT, 'entries are append-only'); END;
DROP TABLE message_text;
-- SQLite (3.54, bundled) leaves this shadow table of a
-- contentless_unindexed table behind when the table is dropped.
DROP TABLE IF EXISTS message_text_content;
CREATE VIRTUAL TABLE message_text USING fts5 (
    text,
    content = '',
    contentless_delete = 1,
    detail = none,
    tokenize = 'unicode61 remove_diacritics 2'
);
