-- Payments as a service runs them: on analyzed tables, with the server's JIT.
--
-- JIT. PostgreSQL compiles a statement to machine code when its plan's estimated cost
-- passes jit_above_cost (100,000 by default), and it compiles on every execution: a
-- plan cached for the session does not keep its code. Custody's functions read by key
-- and stop as soon as the amount is covered, but the planner's estimate follows the
-- wallet, not the rows read: once ANALYZE has seen an owner of 100,000 tokens, the
-- claim's cursor (every token of the owner above the pivot) is estimated at about
-- 140,000 and was compiled on each call, 20 – 25 ms for a statement that runs in a
-- fraction of one. A LIMIT cannot bound that scan (how many rows cover the amount is
-- known only as they come), so the functions the fast paths call run with jit off, as
-- they already run with the planner settings that keep every step an index lookup;
-- custody_claim runs under its callers' settings (custody_select has jit off in its own
-- definition, 0008_claim.sql). TestPaymentPlansOnLargeWallet
-- guards it, before ANALYZE, after it and once the wallet has outgrown it.
--
-- Fewer writes. custody_pay no longer deletes the claimed tokens' expired locks
-- itself: the locks' key cascades, and the deletion of the tokens removes them at the
-- end of the statement anyway, so that step only cost a statement part and an index
-- scan per payment. The history's pages keep a fifth free, so that a spend's update of
-- spent_by stays on its page (a HOT update), without a new entry in the history's
-- index; pages written before this migration fill as they were.
ALTER FUNCTION custody_spend(text, text[], text[], text[], text[], text[], text[], bigint[], text) SET jit = off;
ALTER TABLE token_history SET (fillfactor = 80);

-- custody_pay makes one payment: it claims the payer's tokens of the outputs' kind
-- (compared exactly) until they cover the outputs' sum (p_need), spends them, and
-- creates the outputs and the change. Paid, it returns a row per spent token, its ID
-- and amount (the rest is the payer and the kind); otherwise one row, the claim's
-- verdict and the amount behind it.
--
-- Spending is one statement (so the clean-up triggers, which look at its end, queue
-- nothing, as for the two-step spend): the claimed tokens and their owners' holds are
-- deleted (any expired lock on them goes with them, by the locks' cascading key),
-- their history rows marked spent, the outputs and the change created with their
-- holds and history rows. A live lock on a claimed token (committed by a select after
-- the scan's snapshot, before the scan locked the row) refuses the payment with CU004,
-- a race lost; counts that disagree with CU003. Either undoes everything.
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
        UPDATE token_history r SET spent_by = p_tx
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
