-- Undoes 0002_review.sql: the review queue of {{.Table}} (its index goes with it).
-- Clean-up's triggers on the tables that reference {{.Table}} write to it: drop them
-- first, or deleting a referencing row fails.
DROP TABLE IF EXISTS {{.Queue}};
