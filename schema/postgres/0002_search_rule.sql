-- sessiontree team archive on PostgreSQL, schema version 2: one search rule.
-- Released migration files are never edited; later changes go in new files.
--
-- `words` now holds `tsvector` input text: each word of the message folded
-- by the rule every store follows (`sessiontree::search`, exactly SQLite
-- FTS5's `unicode61 remove_diacritics 2`), quoted, with its position
-- ('das':1 'ist':2 'dogru':3), and `tsv` reads it as is. Version 1 folded
-- ten Latin letters where FTS5 folds every diacritic, and had PostgreSQL's
-- parser and 'simple' dictionary read the words again, splitting and
-- lower-casing by the server's locale: `dogru` found "doğru" on SQLite only.
-- Queries are `tsquery` input of lexemes folded by the same rule.
--
-- The table is emptied here; the migration writes every row again from
-- `entries` right after this file, in the same transaction (the rule is
-- Rust's: `backend::postgres::archive::reindex_words`).
DROP INDEX message_text_search;
ALTER TABLE message_text DROP COLUMN tsv;
TRUNCATE message_text;
ALTER TABLE message_text ADD COLUMN tsv TSVECTOR GENERATED ALWAYS AS (words::tsvector) STORED;
CREATE INDEX message_text_search ON message_text USING GIN (tsv);
