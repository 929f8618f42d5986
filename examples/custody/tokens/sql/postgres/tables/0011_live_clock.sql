-- Locks judged by the database's clock as a statement runs, not when its transaction
-- began.
--
-- The custody functions tested a lock by now(), the start of the statement's
-- transaction, which 0009_lock_clock.sql took to be harmless (it can only find a lock
-- live a little longer). Two ways that start lies long before the test, and a lock's
-- life was judged wrong by as much:
--
--   - a call inside a unit of work (refset.InTx runs the fast paths in the unit's
--     transaction): now() is when the unit began, however long ago. A Spend in a unit
--     begun while its locks lived spent them after they had expired
--     (TestSpendInUnitAfterLocksExpired); a Select or a Pay in it found locks that had
--     expired since the unit began live, for as long as the unit ran, and was told
--     ErrLocked, after waiting out LockWait, by a clock that never moved
--     (TestSelectInUnitAfterLocksExpired);
--   - a Spend that waits for a token's row, which another transaction holds (a select
--     whose snapshot predates the lock, ../queries/spend.sql): the wait does not move
--     now(), and once it was over the spend spent locks that had expired while it
--     waited (TestSpendWaitingPastExpiryIsRefused).
--
-- Now every test of a lock reads the clock as it runs (clock_timestamp()), as the
-- locks' expiries are written (0009_lock_clock.sql). That is never earlier than the
-- moment the lock is tested, so no lock is found expired while it lives:
--
--   - custody_claim and custody_pay leave out, and custody_pay refuses (CU004),
--     tokens under locks live at the moment they look;
--   - custody_select takes a lock over if it has expired at the moment it looks,
--     read once for the rows it locks and the UPDATE that replaces them (so, as
--     before, it takes over only the rows it has locked first);
--   - custody_spend spends the locks live when it starts (read once, so the
--     refusals' counts of expired locks agree with it), and only those still live
--     when each lock is deleted, once the tokens' rows are the spend's, after any
--     wait. A lock that expired meanwhile refuses the spend: CU001 (nothing locked)
--     when none of its locks is left, CU002 (the live ones do not balance the
--     outputs) when some are, as a Spend begun after the expiry is refused.
--
-- Same arguments and results as before: CREATE OR REPLACE, so replicas of the
-- release before this one call these, and custody_spend's nine-argument form (which
-- calls the ten-argument one) spends as it does. The settings of each function are
-- part of its definition, as they were.

-- custody_claim, as 0008_claim.sql made it, judging locks by the clock as it reads them.
CREATE OR REPLACE FUNCTION custody_claim(
    p_owner text, p_type text, p_identifier text, p_issuer text, p_notary text,
    p_amount bigint, p_pivot text, p_have text[], p_have_got numeric,
    OUT verdict text, OUT claimed text[], OUT got numeric)
LANGUAGE plpgsql AS $$
DECLARE
    cur      refcursor;
    tok      record;
    tries    int := 0;
    before   numeric;
    total    numeric;
    unlocked numeric;
    earlier  jsonb;           -- the tokens claimed before this pass, as a set; NULL: none
    taken    int := 0;        -- tokens this call claimed
    asked    boolean := false; -- whether the unlocked check has run
    reach    numeric;
    short    boolean;
BEGIN
    claimed := p_have;
    got := p_have_got; -- numeric: the claimed tokens may add up past bigint
    LOOP
        tries := tries + 1;
        before := got;
        -- A round: two scans, the second with a fresh snapshot.
        FOR pass IN 1..2 LOOP
            EXIT WHEN got >= p_amount;
            earlier := CASE WHEN cardinality(claimed) > 0
                THEN (SELECT jsonb_object_agg(c.id, true) FROM unnest(claimed) c(id)) END;
            short := false;
            -- Above the pivot, then below it.
            FOR part IN 0..1 LOOP
                EXIT WHEN got >= p_amount OR short;
                IF p_identifier IS NOT NULL AND part = 0 THEN
                    OPEN cur NO SCROLL FOR SELECT t.id, t.amount FROM tokens t
                        WHERE t.owner = p_owner AND t.identifier = p_identifier AND t.id >= p_pivot
                          AND (p_type IS NULL OR t.token_type = p_type) AND (p_issuer IS NULL OR t.issuer = p_issuer)
                          AND (p_notary IS NULL OR t.notary = p_notary) AND (earlier ? t.id) IS NOT TRUE
                          AND (SELECT true FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > clock_timestamp()) IS NULL
                        FOR UPDATE OF t SKIP LOCKED;
                ELSIF p_identifier IS NOT NULL THEN
                    OPEN cur NO SCROLL FOR SELECT t.id, t.amount FROM tokens t
                        WHERE t.owner = p_owner AND t.identifier = p_identifier AND t.id < p_pivot
                          AND (p_type IS NULL OR t.token_type = p_type) AND (p_issuer IS NULL OR t.issuer = p_issuer)
                          AND (p_notary IS NULL OR t.notary = p_notary) AND (earlier ? t.id) IS NOT TRUE
                          AND (SELECT true FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > clock_timestamp()) IS NULL
                        FOR UPDATE OF t SKIP LOCKED;
                ELSIF part = 0 THEN
                    OPEN cur NO SCROLL FOR SELECT t.id, t.amount FROM tokens t
                        WHERE t.owner = p_owner AND t.id >= p_pivot
                          AND (p_type IS NULL OR t.token_type = p_type) AND (p_issuer IS NULL OR t.issuer = p_issuer)
                          AND (p_notary IS NULL OR t.notary = p_notary) AND (earlier ? t.id) IS NOT TRUE
                          AND (SELECT true FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > clock_timestamp()) IS NULL
                        FOR UPDATE OF t SKIP LOCKED;
                ELSE
                    OPEN cur NO SCROLL FOR SELECT t.id, t.amount FROM tokens t
                        WHERE t.owner = p_owner AND t.id < p_pivot
                          AND (p_type IS NULL OR t.token_type = p_type) AND (p_issuer IS NULL OR t.issuer = p_issuer)
                          AND (p_notary IS NULL OR t.notary = p_notary) AND (earlier ? t.id) IS NOT TRUE
                          AND (SELECT true FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > clock_timestamp()) IS NULL
                        FOR UPDATE OF t SKIP LOCKED;
                END IF;
                LOOP
                    FETCH cur INTO tok;
                    EXIT WHEN NOT FOUND;
                    claimed := array_append(claimed, tok.id); -- in place: amortized constant
                    got := got + tok.amount;
                    taken := taken + 1;
                    EXIT WHEN got >= p_amount;
                    IF taken = 32 AND NOT asked THEN
                        asked := true;
                        SELECT r.s INTO reach FROM (
                            SELECT sum(t.amount) OVER (ROWS UNBOUNDED PRECEDING) AS s FROM tokens t
                            WHERE t.owner = p_owner AND (p_identifier IS NULL OR t.identifier = p_identifier)
                              AND (p_type IS NULL OR t.token_type = p_type) AND (p_issuer IS NULL OR t.issuer = p_issuer)
                              AND (p_notary IS NULL OR t.notary = p_notary)
                              AND (SELECT true FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > clock_timestamp()) IS NULL
                        ) r WHERE r.s >= p_amount LIMIT 1;
                        short := reach IS NULL;
                        EXIT WHEN short;
                    END IF;
                END LOOP;
                CLOSE cur;
            END LOOP;
            EXIT WHEN short;
        END LOOP;
        IF got >= p_amount THEN
            verdict := 'claimed';
            RETURN;
        END IF;

        -- Short: why, by a fresh snapshot.
        SELECT COALESCE(sum(t.amount), 0),
               COALESCE(sum(t.amount) FILTER (WHERE (SELECT true FROM token_locks l
                   WHERE l.token_id = t.id AND l.expires_at > clock_timestamp()) IS NULL), 0)
        INTO total, unlocked
        FROM tokens t
        WHERE t.owner = p_owner AND (p_identifier IS NULL OR t.identifier = p_identifier)
          AND (p_type IS NULL OR t.token_type = p_type) AND (p_issuer IS NULL OR t.issuer = p_issuer)
          AND (p_notary IS NULL OR t.notary = p_notary);
        IF total < p_amount THEN
            verdict := 'insufficient';
            got := total;
            RETURN;
        END IF;
        IF unlocked < p_amount THEN
            verdict := 'locked';
            got := unlocked;
            RETURN;
        END IF;
        -- The funds are being taken by others right now: another round after a
        -- jittered pause, unless this one claimed nothing new while the claim holds
        -- some tokens, which it must not sit on while others could use them. A round
        -- the check cut short scans again at once: its snapshot found the funds.
        CONTINUE WHEN short;
        IF tries = 10 OR (got = before AND got > p_have_got) THEN
            verdict := 'busy';
            RETURN;
        END IF;
        PERFORM pg_sleep((0.5 + random()) * least(tries, 5) / 1000.0);
    END LOOP;
END
$$;

-- custody_select, as 0009_lock_clock.sql made it, taking over the locks expired when it
-- looks.
CREATE OR REPLACE FUNCTION custody_select(
    p_owner text, p_type text, p_identifier text, p_issuer text, p_notary text,
    p_amount bigint, p_pivot text, p_holder text, p_ttl_ms bigint)
RETURNS TABLE (verdict text, covered numeric, took_over bigint, expires timestamptz,
    tok_id text, tok_owner text, tok_type text, tok_identifier text, tok_issuer text, tok_notary text, tok_amount bigint)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
SET jit = off
AS $$
#variable_conflict use_column
DECLARE
    claim     text;
    claimed   text[] := '{}';
    got       numeric := 0;
    locked    text[] := '{}';
    fresh     text[];
    taken     text[];
    refused   text[];
    takeovers bigint := 0;
    earliest  timestamptz; -- the earliest expiry of the locks taken
    taken_expiry timestamptz; -- the earliest of the locks the last statement took
    ttl       interval := p_ttl_ms * interval '1 millisecond';
    seen      timestamptz; -- the clock the takeover judges the locks by
    done      boolean := false;
BEGIN
    FOR pass IN 1..10 LOOP
        SELECT c.verdict, c.claimed, c.got INTO claim, claimed, got
        FROM custody_claim(p_owner, p_type, p_identifier, p_issuer, p_notary, p_amount, p_pivot, claimed, got) c;
        IF claim <> 'claimed' THEN
            -- All or nothing: the locks of an earlier pass go too.
            DELETE FROM token_locks l WHERE l.holder = p_holder AND l.token_id = ANY (locked);
            RETURN QUERY SELECT claim, got, 0::bigint, NULL::timestamptz, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::bigint;
            RETURN;
        END IF;
        -- The locks of the newly claimed; a token under a lock, expired or not, is
        -- not locked here but by the takeover below.
        fresh := ARRAY (SELECT unnest(claimed) EXCEPT ALL SELECT unnest(locked));
        WITH l AS (
            INSERT INTO token_locks (token_id, holder, expires_at)
            SELECT f.id, p_holder, clock_timestamp() + ttl FROM unnest(fresh) f(id)
            ON CONFLICT DO NOTHING
            RETURNING token_id, expires_at
        )
        SELECT COALESCE(array_agg(token_id), '{}'), min(expires_at) INTO taken, taken_expiry FROM l;
        earliest := least(earliest, taken_expiry);
        locked := locked || taken;
        done := cardinality(taken) = cardinality(fresh);
        EXIT WHEN done;
        -- Under a lock: take it over if it has expired. Its row may be held by
        -- another transaction: an UPDATE computes the new row before it waits for
        -- that, so the clock it read would be as old as the wait is long. The rows
        -- are locked first, waiting here; the UPDATE then reads the clock after.
        fresh := ARRAY (SELECT unnest(fresh) EXCEPT ALL SELECT unnest(taken));
        seen := clock_timestamp(); -- read once: the rows locked are those the UPDATE takes over
        PERFORM 1 FROM token_locks l WHERE l.token_id = ANY (fresh) AND l.expires_at <= seen
            ORDER BY l.token_id FOR UPDATE;
        WITH l AS (
            UPDATE token_locks l SET holder = p_holder, expires_at = clock_timestamp() + ttl
            WHERE l.token_id = ANY (fresh) AND l.expires_at <= seen
            RETURNING l.token_id, l.expires_at
        )
        SELECT COALESCE(array_agg(token_id), '{}'), min(expires_at) INTO taken, taken_expiry FROM l;
        earliest := least(earliest, taken_expiry);
        locked := locked || taken;
        takeovers := takeovers + cardinality(taken);
        -- Under a live lock: give it up and claim more.
        refused := ARRAY (SELECT unnest(claimed) EXCEPT ALL SELECT unnest(locked));
        done := cardinality(refused) = 0;
        EXIT WHEN done;
        claimed := locked;
        got := got - (SELECT sum(t.amount) FROM tokens t WHERE t.id = ANY (refused));
    END LOOP;
    IF NOT done THEN -- ten passes met live locks committed behind the claim's back
        DELETE FROM token_locks l WHERE l.holder = p_holder AND l.token_id = ANY (locked);
        RETURN QUERY SELECT 'busy'::text, got, 0::bigint, NULL::timestamptz, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::bigint;
        RETURN;
    END IF;
    RETURN QUERY SELECT 'selected'::text, got, takeovers, earliest, t.id::text, t.owner::text, t.token_type::text,
        t.identifier::text, t.issuer::text, t.notary::text, t.amount::bigint -- the declared types, as in custody_pay
    FROM tokens t WHERE t.id = ANY (locked);
END
$$;

-- custody_pay, as 0010_own_outcome.sql made it, refusing a lock live when it looks.
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
            WHEN EXISTS (SELECT 1 FROM token_locks l WHERE l.token_id = ANY (claimed) AND l.expires_at > clock_timestamp())
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

-- custody_spend is the spend of the two-step path (Select, then Spend). p_holder is
-- the transaction's lock holder, p_tx the transaction, p_call the call's own ID; the
-- outputs come one array per column. It spends the tokens under the holder's live
-- locks and returns them, or raises with custody_refuse (0002_spend_refusal.sql),
-- which undoes the whole statement.
CREATE OR REPLACE FUNCTION custody_spend(
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
DECLARE
    spending timestamptz := clock_timestamp(); -- the spend's moment, not its transaction's start
BEGIN
    RETURN QUERY
    WITH spent AS (
        DELETE FROM tokens t WHERE t.id = ANY (ARRAY (SELECT l.token_id FROM token_locks l
            WHERE l.holder = p_holder AND l.expires_at > spending))
        RETURNING t.id, t.owner, t.token_type, t.identifier, t.issuer, t.notary, t.amount
    ),
    unlocked AS (
        DELETE FROM token_locks l WHERE l.token_id = ANY (ARRAY (SELECT s.id FROM spent s)) AND l.holder = p_holder
            AND l.expires_at > clock_timestamp() -- still live once the tokens' rows are the spend's
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
                 WHERE l.holder = p_holder AND l.expires_at <= spending HAVING count(*) > 0), ''))
            WHEN c.unlocked = 0 THEN custody_refuse('CU001', format('no token locked by transaction %s: the %s locks live when it began expired while it spent', p_tx, c.spent))
            WHEN c.unlocked <> c.spent THEN custody_refuse('CU002', format('%s of the %s locks of transaction %s expired while it spent', c.spent - c.unlocked, c.spent, p_tx))
            WHEN i.reason IS NOT NULL THEN custody_refuse('CU002', i.reason || coalesce(
                (SELECT format(' (%s of its locks had expired and were not spent)', count(*)) FROM token_locks l
                 WHERE l.holder = p_holder AND l.expires_at <= spending HAVING count(*) > 0), ''))
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
