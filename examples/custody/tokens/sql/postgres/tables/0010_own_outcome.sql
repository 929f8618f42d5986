-- A payment's own outcome, and no spending on expired locks.
--
-- Settling a lost statement (postgres.go, statements) asked the history for the
-- tokens spent by the statement's transaction ID (spent_by). A transaction ID may name
-- several payments (a Pay beside its own Select and Spend, or a caller that uses one
-- ID twice), so a payment whose answer was lost was told the tokens of every payment
-- of its ID, and one that failed (an output's ID taken by an earlier payment of that
-- ID) was told it had paid. Now each spend and payment records, beside the
-- transaction, the call that spent each token (spent_in): a fresh random ID per call,
-- which no other statement has, so that the settled query (../queries/paid.sql) reads
-- back what this very statement did, and nothing if it did not commit. custody_pay
-- records its pivot, already a fresh ID per call; custody_spend takes one (p_call).
-- The history's rows written before this migration have none; they were never
-- settled on. No index: spent_in is read only after a lost connection, and an index
-- would cost every spend its HOT update (0007_service.sql).
--
-- A lock past its time-to-live is no lock (doc.go): custody_spend spent the tokens
-- under the transaction's expired locks as long as no Select had taken them over yet,
-- so whether a late spend went through depended on who had asked for the tokens
-- since. It now spends only the transaction's live locks (expires_at > now(), the
-- test every other reader of the locks makes): with every lock expired it is refused
-- with CU001 (nothing locked); with some expired, the live ones no longer balance the
-- outputs, and it is refused with CU002. The expired locks stay until a Select takes
-- their tokens over, Release drops them or clean-up removes them.
--
-- custody_spend gains a parameter, which CREATE OR REPLACE cannot add: it is dropped
-- and made again, in this migration's transaction, so no caller sees it missing (as
-- 0009_lock_clock.sql did for custody_select). Its jit setting (0007_service.sql) is
-- now part of its definition. The nine-argument form stays, spending as the new one
-- does with no call ID: replicas of the release before this one call it until they
-- are upgraded, and settle a lost spend by its transaction as they always did.
ALTER TABLE token_history ADD COLUMN IF NOT EXISTS spent_in text;

DROP FUNCTION IF EXISTS custody_spend(text, text[], text[], text[], text[], text[], text[], bigint[], text);

-- custody_spend is the spend of the two-step path (Select, then Spend). p_holder is
-- the transaction's lock holder, p_tx the transaction, p_call the call's own ID; the
-- outputs come one array per column. It spends the tokens under the holder's live
-- locks and returns them, or raises with custody_refuse (0002_spend_refusal.sql),
-- which undoes the whole statement.
CREATE FUNCTION custody_spend(
    p_holder text, p_ids text[], p_owners text[], p_types text[], p_identifiers text[],
    p_issuers text[], p_notaries text[], p_amounts bigint[], p_tx text, p_call text)
RETURNS TABLE (tok_id text, tok_owner text, tok_type text, tok_identifier text, tok_issuer text,
    tok_notary text, tok_amount bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH spent AS (
        DELETE FROM tokens t WHERE t.id = ANY (ARRAY (SELECT l.token_id FROM token_locks l
            WHERE l.holder = p_holder AND l.expires_at > now()))
        RETURNING t.id, t.owner, t.token_type, t.identifier, t.issuer, t.notary, t.amount
    ),
    unlocked AS (
        DELETE FROM token_locks l WHERE l.token_id = ANY (ARRAY (SELECT s.id FROM spent s)) AND l.holder = p_holder
        RETURNING l.token_id
    ),
    disowned AS (
        DELETE FROM token_owners o WHERE o.token_id = ANY (ARRAY (SELECT s.id FROM spent s))
        RETURNING o.token_id
    ),
    recorded AS (
        UPDATE token_history r SET spent_by = p_tx, spent_in = p_call
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
        INSERT INTO token_owners (token_id) SELECT c.id FROM created c
        RETURNING token_id
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
        SELECT (SELECT count(*) FROM unlocked) AS unlocked, (SELECT count(*) FROM disowned) AS released,
               (SELECT count(*) FROM spent) AS spent, (SELECT count(*) FROM recorded) AS recorded,
               (SELECT count(*) FROM outputs) AS outputs, (SELECT count(*) FROM held) AS held,
               (SELECT count(*) FROM born) AS born
    ),
    verdict AS (
        SELECT CASE
            WHEN c.spent = 0 THEN custody_refuse('CU001', 'no token locked by transaction ' || p_tx || coalesce(
                (SELECT format(' (%s of its locks had expired and were not spent)', count(*)) FROM token_locks l
                 WHERE l.holder = p_holder AND l.expires_at <= now() HAVING count(*) > 0), ''))
            WHEN c.unlocked <> c.spent THEN custody_refuse('CU002', format('%s of the %s locks of transaction %s expired and were taken over while it spent', c.spent - c.unlocked, c.spent, p_tx))
            WHEN i.reason IS NOT NULL THEN custody_refuse('CU002', i.reason || coalesce(
                (SELECT format(' (%s of its locks had expired and were not spent)', count(*)) FROM token_locks l
                 WHERE l.holder = p_holder AND l.expires_at <= now() HAVING count(*) > 0), ''))
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

-- custody_spend as the release before this one calls it (see above).
CREATE FUNCTION custody_spend(
    p_holder text, p_ids text[], p_owners text[], p_types text[], p_identifiers text[],
    p_issuers text[], p_notaries text[], p_amounts bigint[], p_tx text)
RETURNS TABLE (tok_id text, tok_owner text, tok_type text, tok_identifier text, tok_issuer text,
    tok_notary text, tok_amount bigint)
LANGUAGE sql
AS $$
    SELECT * FROM custody_spend(p_holder, p_ids, p_owners, p_types, p_identifiers,
        p_issuers, p_notaries, p_amounts, p_tx, NULL::text)
$$;

-- custody_pay, as 0007_service.sql made it, and recording its pivot, a fresh ID per
-- call, as the call that spent each token (spent_in).
CREATE OR REPLACE FUNCTION custody_pay(
    p_from text, p_type text, p_identifier text, p_issuer text, p_notary text,
    p_pivot text, p_tx text, p_ids text[], p_owners text[], p_amounts bigint[], p_change text, p_need bigint)
RETURNS TABLE (verdict text, covered numeric, tok_id text, tok_amount bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    need    bigint := p_need; -- the sum of p_amounts
    claim   text;
    claimed text[];
    got     numeric;
BEGIN
    SELECT c.verdict, c.claimed, c.got INTO claim, claimed, got
    FROM custody_claim(p_from, p_type, p_identifier, p_issuer, p_notary, need, p_pivot, '{}', 0) c;
    IF claim <> 'claimed' THEN
        RETURN QUERY SELECT claim, got, NULL::text, NULL::bigint;
        RETURN;
    END IF;

    RETURN QUERY
    WITH spent AS (
        DELETE FROM tokens t WHERE t.id = ANY (claimed)
        RETURNING t.id, t.amount
    ),
    disowned AS (
        DELETE FROM token_owners o WHERE o.token_id = ANY (claimed)
        RETURNING o.token_id
    ),
    recorded AS (
        UPDATE token_history r SET spent_by = p_tx, spent_in = p_pivot
        WHERE r.spent_by IS NULL AND r.token_id = ANY (claimed)
        RETURNING r.token_id
    ),
    outputs AS (
        SELECT o.id, o.owner, o.amount FROM unnest(p_ids, p_owners, p_amounts) AS o(id, owner, amount)
        UNION ALL
        SELECT p_change, p_from, (got - need)::bigint WHERE got > need
    ),
    created AS (
        INSERT INTO tokens (id, owner, token_type, identifier, issuer, notary, amount)
        SELECT o.id, o.owner, p_type, p_identifier, p_issuer, p_notary, o.amount FROM outputs o
        RETURNING id
    ),
    held AS (
        INSERT INTO token_owners (token_id) SELECT c.id FROM created c
    ),
    born AS (
        INSERT INTO token_history (token_id, owner, identifier, amount, created_by)
        SELECT o.id, o.owner, p_identifier, o.amount, p_tx FROM outputs o
    ),
    checked AS (
        SELECT CASE
            WHEN EXISTS (SELECT 1 FROM token_locks l WHERE l.token_id = ANY (claimed) AND l.expires_at > now())
                THEN custody_refuse('CU004', 'a claimed token was locked by another transaction first')
            WHEN (SELECT count(*) FROM spent) <> cardinality(claimed)
                THEN custody_refuse('CU003', 'a claimed token was gone')
            WHEN (SELECT count(*) FROM recorded) <> cardinality(claimed)
                THEN custody_refuse('CU003', 'a claimed token was recorded spent already')
            WHEN (SELECT count(*) FROM disowned) <> cardinality(claimed)
                THEN custody_refuse('CU003', 'a claimed token was not held by its owner')
            ELSE true
        END AS ok
    )
    SELECT 'paid'::text, got, s.id::text, s.amount::bigint -- the declared types, whatever a migration made of the columns'
    FROM checked k LEFT JOIN spent s ON k.ok; -- checked leads, so it is always evaluated
END
$$;
