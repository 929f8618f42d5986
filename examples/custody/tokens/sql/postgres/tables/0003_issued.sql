-- Which history rows Issue created: the amounts put into circulation. Spends only move
-- value, so what remains of each identifier must equal what was issued of it; Audit
-- checks that, which catches a spend that created value as well as one that lost it.
ALTER TABLE token_history ADD COLUMN IF NOT EXISTS issued boolean NOT NULL DEFAULT false;
-- Books kept before this column: a spend always spends a token, so a transaction that
-- created tokens but spent none was an issue.
UPDATE token_history h SET issued = true
WHERE NOT EXISTS (SELECT 1 FROM token_history s WHERE s.spent_by = h.created_by);
