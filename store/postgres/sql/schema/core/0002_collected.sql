-- How many objects clean-up has deleted from each set: each collection batch adds
-- what it deleted, in its own transaction, so the count is exact, survives restarts,
-- and is every collector's. Reports read it; a console plots its rate. A table of its
-- own, not a column of refset_sets, so that this script can run twice.
CREATE TABLE IF NOT EXISTS refset_collected (
    table_name text   NOT NULL PRIMARY KEY REFERENCES refset_sets (table_name) ON DELETE CASCADE,
    collected  bigint NOT NULL
);
