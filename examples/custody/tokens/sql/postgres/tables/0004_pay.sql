-- custody_pay makes one payment in one call: it claims the payer's tokens of one kind
-- until they cover the outputs, spends them, and creates the outputs and the change, in
-- the calling statement's transaction (the client's one statement, committed on its
-- own). Vault.Pay calls it; postgres.go describes the contract.
--
-- Claiming: the payer's tokens of the kind that no live lock holds, from a random
-- pivot in ID order (wrapping around), each row locked FOR UPDATE SKIP LOCKED as the
-- cursor fetches it, one at a time, until they cover the amount. A token another
-- payment is spending right now is skipped, not waited for, and the scan goes on past
-- it, so a claim never loses a race: it ends with the amount covered or the scan
-- exhausted. Exhausted, a fresh snapshot says why: 'insufficient' (the payer's tokens
-- of the kind, locked or not, do not cover the amount), 'locked' (they do, but locks
-- of two-step transactions hold too much), or neither, when the funds are being spent
-- by payments in flight or were created after the scan's snapshot: the scan runs
-- again with a fresh snapshot, keeping what it claimed, up to eight times in all, and
-- then answers 'busy'.
--
-- Spending is one statement (so the clean-up triggers, which look at its end, queue
-- nothing, as for the two-step spend): the claimed tokens, their owners' holds and
-- any expired locks on them are deleted, their history rows marked spent, the outputs
-- and the change created with their holds and history rows. A live lock on a claimed
-- token (committed by a two-step select after the scan's snapshot, before the scan
-- locked the row) refuses the payment with CU004, a race lost; counts that disagree
-- with CU003. Either undoes everything.
CREATE OR REPLACE FUNCTION custody_pay(
    p_from text, p_type text, p_identifier text, p_issuer text, p_notary text,
    p_pivot text, p_tx text, p_ids text[], p_owners text[], p_amounts bigint[], p_change text, p_need bigint)
RETURNS TABLE (verdict text, covered numeric, rounds int,
    tok_id text, tok_owner text, tok_type text, tok_identifier text, tok_issuer text, tok_notary text, tok_amount bigint)
LANGUAGE plpgsql
-- The plans of its statements are made once per session and kept: left to choose, the
-- plan cache judged the spend's generic plan dearer than a custom one and planned the
-- spend again on every call, which cost more than running it. A plan made while a
-- table was small (a new vault, a small pool) would scan it whole, and go on scanning
-- it as it grows (the history grows with every payment); and with statistics that
-- think the owners' holds few, the release of the holds read all of them through a
-- bitmap of the holder index. With sequential and bitmap scans off, every step looks
-- its rows up by key, at a cost that follows the payment, not the tables.
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
DECLARE
    need      bigint := p_need; -- the sum of p_amounts
    got       numeric := 0; -- numeric: the claimed tokens may add up past bigint
    claimed   text[] := '{}';
    cur       refcursor;
    tok       record;
    tries     int := 0;
    total     numeric;
    unlocked  numeric;
BEGIN
    LOOP
        tries := tries + 1;
        -- Above the pivot, then below it.
        FOR part IN 0..1 LOOP
            IF part = 0 THEN
                OPEN cur NO SCROLL FOR SELECT t.id, t.amount FROM tokens t
                    WHERE t.owner = p_from AND t.identifier = p_identifier AND t.id >= p_pivot
                      AND t.token_type = p_type AND t.issuer = p_issuer AND t.notary = p_notary
                      AND t.id <> ALL (claimed)
                      AND NOT EXISTS (SELECT 1 FROM tokens_holds h WHERE h.object_id = t.id AND h.holder <> 'owner'
                          AND (h.expires_at IS NULL OR h.expires_at > now()))
                    ORDER BY t.id FOR UPDATE OF t SKIP LOCKED;
            ELSE
                OPEN cur NO SCROLL FOR SELECT t.id, t.amount FROM tokens t
                    WHERE t.owner = p_from AND t.identifier = p_identifier AND t.id < p_pivot
                      AND t.token_type = p_type AND t.issuer = p_issuer AND t.notary = p_notary
                      AND t.id <> ALL (claimed)
                      AND NOT EXISTS (SELECT 1 FROM tokens_holds h WHERE h.object_id = t.id AND h.holder <> 'owner'
                          AND (h.expires_at IS NULL OR h.expires_at > now()))
                    ORDER BY t.id FOR UPDATE OF t SKIP LOCKED;
            END IF;
            LOOP
                FETCH cur INTO tok;
                EXIT WHEN NOT FOUND;
                claimed := claimed || tok.id;
                got := got + tok.amount;
                EXIT WHEN got >= need;
            END LOOP;
            CLOSE cur;
            EXIT WHEN got >= need;
        END LOOP;
        EXIT WHEN got >= need;

        -- Short: why, by a fresh snapshot.
        SELECT COALESCE(sum(t.amount), 0),
               COALESCE(sum(t.amount) FILTER (WHERE NOT EXISTS (SELECT 1 FROM tokens_holds h
                   WHERE h.object_id = t.id AND h.holder <> 'owner' AND (h.expires_at IS NULL OR h.expires_at > now()))), 0)
        INTO total, unlocked
        FROM tokens t
        WHERE t.owner = p_from AND t.identifier = p_identifier
          AND t.token_type = p_type AND t.issuer = p_issuer AND t.notary = p_notary;
        IF total < need THEN
            RETURN QUERY SELECT 'insufficient'::text, total, tries, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::bigint;
            RETURN;
        END IF;
        IF unlocked < need THEN
            RETURN QUERY SELECT 'locked'::text, unlocked, tries, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::bigint;
            RETURN;
        END IF;
        IF tries = 8 THEN
            RETURN QUERY SELECT 'busy'::text, got, tries, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::bigint;
            RETURN;
        END IF;
        -- The funds are being spent by payments in flight, whose change this scan's
        -- snapshot did not see yet: look again, at once the first time, then a millisecond
        -- apart. What this payment claimed stays claimed; it waits for no lock, so
        -- it cannot deadlock with a payment waiting for it.
        IF tries >= 2 THEN
            PERFORM pg_sleep(0.001);
        END IF;
    END LOOP;

    RETURN QUERY
    WITH spent AS (
        DELETE FROM tokens t WHERE t.id = ANY (claimed)
        RETURNING t.id, t.owner, t.token_type, t.identifier, t.issuer, t.notary, t.amount
    ),
    released AS (
        DELETE FROM tokens_holds h
        WHERE h.object_id = ANY (claimed) AND (h.holder = 'owner' OR h.expires_at <= now())
        RETURNING h.holder
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
        INSERT INTO tokens_holds (holder, object_id) SELECT 'owner', c.id FROM created c
    ),
    born AS (
        INSERT INTO token_history (token_id, owner, identifier, amount, created_by)
        SELECT o.id, o.owner, p_identifier, o.amount, p_tx FROM outputs o
    ),
    checked AS (
        SELECT CASE
            WHEN EXISTS (SELECT 1 FROM tokens_holds h WHERE h.object_id = ANY (claimed) AND h.holder <> 'owner'
                    AND (h.expires_at IS NULL OR h.expires_at > now()))
                THEN custody_refuse('CU004', 'a claimed token was locked by another transaction first')
            WHEN (SELECT count(*) FROM spent) <> cardinality(claimed)
                THEN custody_refuse('CU003', 'a claimed token was gone')
            WHEN (SELECT count(*) FROM recorded) <> cardinality(claimed)
                THEN custody_refuse('CU003', 'a claimed token was recorded spent already')
            WHEN (SELECT count(*) FROM released WHERE holder = 'owner') <> cardinality(claimed)
                THEN custody_refuse('CU003', 'a claimed token was not held by its owner')
            ELSE true
        END AS ok
    )
    SELECT 'paid'::text, got, tries, s.id, s.owner, s.token_type, s.identifier, s.issuer, s.notary, s.amount
    FROM checked k LEFT JOIN spent s ON k.ok; -- checked leads, so it is always evaluated
END
$$;
