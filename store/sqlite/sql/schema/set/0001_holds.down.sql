-- Undoes 0001_holds.sql: the holds of {{.Table}}, with every hold in it (its indexes
-- go with it).
DROP TABLE IF EXISTS {{.Holds}};
