-- custody_spend is the spend of the two-step path (Select, then Spend): the statement
-- postgres.go's fastSpendSQL describes, moved into a function so that its plan is made
-- once per session, as custody_pay's is (0004_claim.sql), under the same settings.
--
-- Sent from the client as a prepared statement it was planned again on every call:
-- the plan cache's generic plan looked the transaction's locks up by holder = $1,
-- which the statistics (where 'owner' is nearly every row) estimate at half the holds
-- table, so it read the table whole (26 ms a spend on 100,000 tokens), and the cache
-- kept choosing custom plans instead, which cost half a millisecond of planning a
-- spend (pg_stat_statements with track_planning: 510 µs of planning, 588 µs of
-- execution). With sequential and bitmap scans off, every step looks its rows up by
-- key, at a cost that follows the spend, not the tables.
--
-- p_holder is the transaction's lock holder, p_tx the transaction; the outputs come
-- one array per column. It returns the spent tokens, or raises with custody_refuse
-- (0002_spend_refusal.sql), which undoes the whole statement.
CREATE OR REPLACE FUNCTION custody_spend(
    p_holder text, p_ids text[], p_owners text[], p_types text[], p_identifiers text[],
    p_issuers text[], p_notaries text[], p_amounts bigint[], p_tx text)
RETURNS TABLE (tok_id text, tok_owner text, tok_type text, tok_identifier text, tok_issuer text,
    tok_notary text, tok_amount bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH spent AS (
        DELETE FROM tokens t WHERE t.id = ANY (ARRAY (SELECT h.object_id FROM tokens_holds h WHERE h.holder = p_holder))
        RETURNING t.id, t.owner, t.token_type, t.identifier, t.issuer, t.notary, t.amount
    ),
    released AS (
        DELETE FROM tokens_holds h
        WHERE h.object_id = ANY (ARRAY (SELECT s.id FROM spent s)) AND h.holder IN (p_holder, 'owner')
        RETURNING h.holder
    ),
    recorded AS (
        UPDATE token_history r SET spent_by = p_tx
        WHERE r.spent_by IS NULL AND r.token_id = ANY (ARRAY (SELECT s.id FROM spent s))
        RETURNING r.token_id
    ),
    outputs AS (
        SELECT * FROM unnest(p_ids, p_owners, p_types, p_identifiers, p_issuers, p_notaries, p_amounts)
            AS o(id, owner, token_type, identifier, issuer, notary, amount)
    ),
    created AS (
        INSERT INTO tokens (id, owner, token_type, identifier, issuer, notary, amount)
        SELECT o.id, o.owner, o.token_type, o.identifier, o.issuer, o.notary, o.amount FROM outputs o
        RETURNING id
    ),
    held AS (
        INSERT INTO tokens_holds (holder, object_id) SELECT 'owner', c.id FROM created c
        RETURNING object_id
    ),
    born AS (
        INSERT INTO token_history (token_id, owner, identifier, amount, created_by)
        SELECT o.id, o.owner, o.identifier, o.amount, p_tx FROM outputs o
        RETURNING token_id
    ),
    imbalance AS (
        SELECT string_agg(format('%s %s differs by %s', k.identifier, k.token_type, k.difference), ', ') AS reason
        FROM (
            SELECT f.token_type, f.identifier, f.issuer, f.notary, sum(f.amount) AS difference
            FROM (SELECT s.token_type, s.identifier, s.issuer, s.notary, s.amount FROM spent s
                  UNION ALL
                  SELECT o.token_type, o.identifier, o.issuer, o.notary, -o.amount FROM outputs o) f
            GROUP BY f.token_type, f.identifier, f.issuer, f.notary
            HAVING sum(f.amount) <> 0
        ) k
    ),
    counts AS (
        SELECT (SELECT count(*) FROM released r WHERE r.holder = p_holder) AS unlocked,
               (SELECT count(*) FROM released r WHERE r.holder = 'owner') AS released,
               (SELECT count(*) FROM spent) AS spent, (SELECT count(*) FROM recorded) AS recorded,
               (SELECT count(*) FROM outputs) AS outputs, (SELECT count(*) FROM held) AS held,
               (SELECT count(*) FROM born) AS born
    ),
    verdict AS (
        SELECT CASE
            WHEN c.spent = 0 THEN custody_refuse('CU001', 'no token locked by transaction ' || p_tx)
            WHEN c.unlocked <> c.spent THEN custody_refuse('CU002', format('%s of the %s locks of transaction %s expired and were taken over while it spent', c.spent - c.unlocked, c.spent, p_tx))
            WHEN i.reason IS NOT NULL THEN custody_refuse('CU002', i.reason)
            WHEN c.recorded <> c.spent THEN custody_refuse('CU003', format('%s of %s tokens were spent already', c.spent - c.recorded, c.spent))
            WHEN c.released <> c.spent OR c.held <> c.outputs OR c.born <> c.outputs
                THEN custody_refuse('CU003', format('%s locks, %s tokens, %s owners'' holds removed', c.unlocked, c.spent, c.released))
            ELSE true
        END AS ok
        FROM counts c, imbalance i
    )
    -- The declared types, whatever a migration made of the columns', as in custody_pay.
    SELECT s.id::text, s.owner::text, s.token_type::text, s.identifier::text, s.issuer::text, s.notary::text, s.amount::bigint
    FROM verdict v LEFT JOIN spent s ON v.ok; -- verdict leads, so it is always evaluated
END
$$;
