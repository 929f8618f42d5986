-- The sets that live in this database, so tools (clean-up, check) can find them
-- without being told.
CREATE TABLE IF NOT EXISTS refset_sets (
    table_name  text        NOT NULL PRIMARY KEY,
    id_column   text        NOT NULL,
    holds_table text        NOT NULL,
    queue_table text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
