-- Which history rows Issue created: the amounts put into circulation. Spends only move
-- value, so what remains of each identifier must equal what was issued of it; Audit
-- checks that, which catches a spend that created value as well as one that lost it.
ALTER TABLE token_history ADD COLUMN issued INTEGER NOT NULL DEFAULT 0;
-- Books kept before this column: a spend always spends a token, so a transaction that
-- created tokens but spent none was an issue.
UPDATE token_history SET issued = 1
WHERE NOT EXISTS (SELECT 1 FROM token_history s WHERE s.spent_by = token_history.created_by);
