-- Undoes 0001_sets.sql: the record of the sets. MigrateDown runs it only when no set
-- is recorded any more.
DROP TABLE IF EXISTS refset_sets;
