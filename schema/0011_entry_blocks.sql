-- Schema version 11: `compact` may store a run of a session's entries as one
-- compressed block (src/backend/sqlite/block.rs). Entries compressed one by
-- one cannot share what a parent and its child repeat (the tool call and its
-- result, the same code quoted again): in blocks of up to 64 entries, each
-- the child of the one before, the stored text of a generated 100,000-entry
-- forked session is 15 % smaller (23.8 → 20.1 MB), the archive after
-- `compact` 40.8 → 37.1 MB.
-- * The compressed block is cut in as many pieces as it has members, and
--   each member's `entries.json` holds its piece (tag bit 4), with its
--   block's id and its place in it; the first member also holds the
--   block's header, and `entry_blocks.head_key` says where it is. Rows stay as dense as entries
--   stored alone (a block in a row of its own wastes a quarter of its pages).
-- * An `entry_blocks` row never changes and its id
--   (AUTOINCREMENT) is never reused, so a reader may keep a decoded block by
--   id. It belongs to the members' session and goes with it.
-- * Appends and imports still store each entry alone; only `compact` packs.
-- No existing row changes: the version is raised so that a build which does
-- not know blocks refuses the archive at open instead of failing on a member.
CREATE TABLE entry_blocks (
    block_id    INTEGER PRIMARY KEY AUTOINCREMENT,
    session_key INTEGER NOT NULL REFERENCES sessions (session_key) ON DELETE CASCADE,
    head_key    INTEGER NOT NULL         -- entry_key of the block's first member
);
CREATE INDEX entry_blocks_by_session ON entry_blocks (session_key);
CREATE TRIGGER entry_blocks_are_immutable BEFORE UPDATE ON entry_blocks
BEGIN SELECT RAISE(ABORT, 'entry blocks are immutable'); END;
