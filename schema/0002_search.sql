-- Full-text search over message text (schema version 2).
-- One row per message-like entry that has text; rowid = entries.entry_key.
-- Maintained in the same transaction as each append.
CREATE VIRTUAL TABLE message_text USING fts5 (
    text,
    role UNINDEXED,
    session_key UNINDEXED,
    tokenize = 'unicode61 remove_diacritics 2'
);
