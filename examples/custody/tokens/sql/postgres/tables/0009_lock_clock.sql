-- Locks that live the whole time-to-live their caller asked for, and say when they
-- expire.
--
-- custody_select, as 0008_claim.sql made it, wrote each lock's expiry as now() + ttl:
-- now() is when the statement's transaction began, so whatever made the statement
-- slow (a claim over a large wallet, a wait for another transaction's row lock while
-- taking an expired lock over, a loaded server) came off the lock's life before the
-- caller saw it, and a select slower than its ttl returned locks that were already no
-- locks. Now each lock expires ttl after the moment it is written (clock_timestamp()),
-- and the function returns, with each locked token, the earliest expiry of the locks
-- it took, so the caller knows how long it holds them by the database's clock.
--
-- The tests that a lock is live (expires_at > now()) and that an expired one may be
-- taken over (expires_at <= now()) keep the transaction's start: it is never later
-- than the moment they run, so they can only find a lock live a little longer, never
-- take over one that still lives.
--
-- The result gains a column, which CREATE OR REPLACE cannot add: the function is
-- dropped and made again, in this migration's transaction, so no caller sees it
-- missing.
DROP FUNCTION IF EXISTS custody_select(text, text, text, text, text, bigint, text, text, bigint);

-- custody_select locks an owner's tokens that match a filter (a NULL field matches
-- anything) until they cover p_amount, for holder p_holder, each lock expiring
-- p_ttl_ms after it is written: it claims them, then inserts their locks. A claimed
-- token whose lock has expired has it taken over (replaced: compare-and-swap on the
-- lock's primary key, judged on the lock as it stands, and only if still expired). One
-- whose lock is live, committed by another select after the claim's snapshot and
-- before the claim locked the row, is given up and the claim goes on for more; nothing
-- else can lock a token while its row is claimed. Locked, it returns a row per locked
-- token, how many expired locks it took over and when the first of its locks expires;
-- otherwise one row, the claim's verdict and the amount behind it.
CREATE FUNCTION custody_select(
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
        PERFORM 1 FROM token_locks l WHERE l.token_id = ANY (fresh) AND l.expires_at <= now()
            ORDER BY l.token_id FOR UPDATE;
        WITH l AS (
            UPDATE token_locks l SET holder = p_holder, expires_at = clock_timestamp() + ttl
            WHERE l.token_id = ANY (fresh) AND l.expires_at <= now()
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
