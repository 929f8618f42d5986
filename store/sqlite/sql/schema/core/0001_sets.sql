-- The sets that live in this database, so tools (clean-up, check) can find them
-- without being told.
CREATE TABLE IF NOT EXISTS refset_sets (
    table_name  TEXT    NOT NULL PRIMARY KEY,
    id_column   TEXT    NOT NULL,
    holds_table TEXT    NOT NULL,
    queue_table TEXT    NOT NULL,
    created_at  INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
);
