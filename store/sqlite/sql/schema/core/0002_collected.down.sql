-- Undoes 0002_collected.sql: the counts of objects collected are lost.
DROP TABLE IF EXISTS refset_collected;
