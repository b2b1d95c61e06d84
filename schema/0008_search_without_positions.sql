-- Schema version 8: the search index records which entries hold each token,
-- not where in them (`detail = none`): 0.30× the size of version 6's index
-- on real pi sessions and on generated ones (src/backend/sqlite/search.rs).
-- Order-sensitive queries (a "phrase", a word FTS5 splits such as foo-bar)
-- find their candidates by their tokens and are confirmed on each
-- candidate's text with the same tokenizer, so every query finds exactly
-- what it found before. Ranking (bm25) no longer counts repeats of a word
-- within one message.
-- The code of this step, in the same transaction
-- (search::reindex_all_entries), indexes every entry's text again.
DROP TABLE message_text;
-- SQLite (3.54, bundled) leaves this shadow table of a
-- contentless_unindexed table behind when the table is dropped.
DROP TABLE IF EXISTS message_text_content;
CREATE VIRTUAL TABLE message_text USING fts5 (
    text,
    role UNINDEXED,
    session_key UNINDEXED,
    content = '',
    contentless_delete = 1,
    contentless_unindexed = 1,
    detail = none,
    tokenize = 'unicode61 remove_diacritics 2'
);
