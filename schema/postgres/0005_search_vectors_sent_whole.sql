-- sessiontree team archive on PostgreSQL, schema version 5: a message's
-- search vector is written by the client, whole, in PostgreSQL's binary
-- `tsvector` form (src/backend/postgres/tsvector.rs), instead of as the
-- text of its words that the server parsed into the generated `tsv`
-- column. Parsing that text (an item per token) was most of the server's
-- work in a bulk sync, and the text was stored a second time beside the
-- vector; the vectors already stored are kept as they are (the client
-- builds the same value the cast did).
ALTER TABLE message_text ALTER COLUMN tsv DROP EXPRESSION IF EXISTS;
ALTER TABLE message_text DROP COLUMN IF EXISTS words;
