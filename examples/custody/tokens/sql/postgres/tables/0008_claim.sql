-- Claims that cost what they take, and payments of more than a wallet holds refused
-- without taking it.
--
-- custody_claim, as 0006_holders.sql first made it, kept the tokens it had claimed in
-- an array and tested every row its scans read against the whole array
-- (t.id <> ALL (claimed)): quadratic in the tokens claimed. A payment of more than a
-- wallet of 100,000 tokens holds claimed every one of them before it could say
-- "insufficient", then read them all again in its second scan, each against all:
-- minutes, the wallet's rows locked throughout, so that other payers from that wallet
-- found nothing to claim and were told ErrLocked. custody_select tested its claimed
-- tokens against its locked ones the same way. Now:
--
-- * A scan leaves out only what was claimed before its pass began: a cursor never
--   returns a row twice and a pass's two parts are disjoint, so the tokens a pass
--   claims need no test. Those claimed before are a set built once per pass, a jsonb
--   object of their IDs, whose keys PostgreSQL keeps sorted and looks up by binary
--   search: a probe per row costs the logarithm of the claim, with no table to write.
--   A claim's first pass, the only one of nearly every payment, has no set at all.
-- * A claim that has taken 32 tokens and is still short asks once, without locking
--   anything, whether the owner's unlocked matching tokens reach the amount at all: a
--   running sum over them, in the index's order, that stops at the row reaching it,
--   so that a payment the wallet can cover reads no more rows than it claims. If they
--   do not, the fresh snapshot that tells 'insufficient' from 'locked' at the end of
--   a round is taken at once, and the claim ends with its verdict: it has locked 32
--   rows for the time of one read of the wallet, not the wallet for minutes. If that
--   snapshot finds the funds there after all (payments in flight moved them), the
--   claim goes on as before. Payments of fewer tokens never ask.
--
-- The claim stays the authority on what can be paid: the check only cuts short a
-- claim whose own snapshot says it cannot succeed, by the same rule the claim applied
-- when its scans ran out (committed tokens, locked or not, short of the amount:
-- 'insufficient'; short once locks are left out: 'locked'), so payments in flight
-- still never make a payer hear of insufficient funds.
-- custody_claim claims an owner's tokens that match a filter (a NULL field matches
-- anything) and that no live lock holds, until they cover p_amount, on top of what the
-- caller claimed already (p_have, worth p_have_got): each row is locked FOR UPDATE
-- SKIP LOCKED as a cursor fetches it, one at a time, from a random pivot of the IDs,
-- wrapping around. A token another payment or select is taking right now is skipped,
-- not waited for, and the scan goes on past it, so a claim never loses a race. A round
-- is two such scans, the second with a fresh snapshot (tokens created since the first
-- began, by payments that spent tokens it skipped, are visible to it), keeping what
-- the first claimed; it ends with the amount covered ('claimed') or both scans
-- exhausted. Exhausted, a fresh snapshot says why: 'insufficient' (the owner's
-- matching tokens, locked or not, do not cover the amount), 'locked' (they do, but
-- locks hold too much), or neither, when the funds are being taken by others right
-- now: then another round after a jittered pause of a millisecond or a few, up to ten
-- rounds, and then 'busy'. A round that claimed nothing new while the claim holds some
-- tokens ends it at once with 'busy', and the caller's statement ends, releasing them:
-- claimers short of tokens must not sit on some while others could use them. It waits
-- for no row lock, so it cannot deadlock with a claim waiting for it. got is what the
-- claimed tokens are worth, or with 'insufficient' and 'locked' what the owner has in
-- all and unlocked.
--
-- "No live lock" is a scalar subquery, which the planner runs as an index probe per
-- token, never as a join: planned as a merge anti join, the check read the whole
-- locks' index, every lock taken since the last vacuum, for each claim.
--
-- The scan follows the index on (owner, identifier, id), above the pivot, in the
-- index's order; it asks for none, which without an identifier would cost a sort of
-- the owner's tokens. It runs under the settings of its callers (no SET of its own:
-- custody_select below and custody_pay, 0007_service.sql).
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
                          AND (SELECT true FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > now()) IS NULL
                        FOR UPDATE OF t SKIP LOCKED;
                ELSIF p_identifier IS NOT NULL THEN
                    OPEN cur NO SCROLL FOR SELECT t.id, t.amount FROM tokens t
                        WHERE t.owner = p_owner AND t.identifier = p_identifier AND t.id < p_pivot
                          AND (p_type IS NULL OR t.token_type = p_type) AND (p_issuer IS NULL OR t.issuer = p_issuer)
                          AND (p_notary IS NULL OR t.notary = p_notary) AND (earlier ? t.id) IS NOT TRUE
                          AND (SELECT true FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > now()) IS NULL
                        FOR UPDATE OF t SKIP LOCKED;
                ELSIF part = 0 THEN
                    OPEN cur NO SCROLL FOR SELECT t.id, t.amount FROM tokens t
                        WHERE t.owner = p_owner AND t.id >= p_pivot
                          AND (p_type IS NULL OR t.token_type = p_type) AND (p_issuer IS NULL OR t.issuer = p_issuer)
                          AND (p_notary IS NULL OR t.notary = p_notary) AND (earlier ? t.id) IS NOT TRUE
                          AND (SELECT true FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > now()) IS NULL
                        FOR UPDATE OF t SKIP LOCKED;
                ELSE
                    OPEN cur NO SCROLL FOR SELECT t.id, t.amount FROM tokens t
                        WHERE t.owner = p_owner AND t.id < p_pivot
                          AND (p_type IS NULL OR t.token_type = p_type) AND (p_issuer IS NULL OR t.issuer = p_issuer)
                          AND (p_notary IS NULL OR t.notary = p_notary) AND (earlier ? t.id) IS NOT TRUE
                          AND (SELECT true FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > now()) IS NULL
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
                              AND (SELECT true FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > now()) IS NULL
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
                   WHERE l.token_id = t.id AND l.expires_at > now()) IS NULL), 0)
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

-- custody_select locks an owner's tokens that match a filter (a NULL field matches
-- anything) until they cover p_amount, for holder p_holder, each lock expiring
-- p_ttl_ms from now: it claims them, then inserts their locks. A claimed token whose
-- lock has expired has it taken over (replaced: compare-and-swap on the lock's
-- primary key, judged on the lock as it stands, and only if still expired). One whose lock
-- is live, committed by another select after the claim's snapshot and before the claim
-- locked the row, is given up and the claim goes on for more; nothing else can lock a
-- token while its row is claimed. Locked, it returns a row per locked token and how
-- many expired locks it took over; otherwise one row, the claim's verdict and the
-- amount behind it.
CREATE OR REPLACE FUNCTION custody_select(
    p_owner text, p_type text, p_identifier text, p_issuer text, p_notary text,
    p_amount bigint, p_pivot text, p_holder text, p_ttl_ms bigint)
RETURNS TABLE (verdict text, covered numeric, took_over bigint,
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
    done      boolean := false;
BEGIN
    FOR pass IN 1..10 LOOP
        SELECT c.verdict, c.claimed, c.got INTO claim, claimed, got
        FROM custody_claim(p_owner, p_type, p_identifier, p_issuer, p_notary, p_amount, p_pivot, claimed, got) c;
        IF claim <> 'claimed' THEN
            -- All or nothing: the locks of an earlier pass go too.
            DELETE FROM token_locks l WHERE l.holder = p_holder AND l.token_id = ANY (locked);
            RETURN QUERY SELECT claim, got, 0::bigint, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::bigint;
            RETURN;
        END IF;
        -- The locks of the newly claimed; a token under a lock, expired or not, is
        -- not locked here but by the takeover below.
        fresh := ARRAY (SELECT unnest(claimed) EXCEPT ALL SELECT unnest(locked));
        WITH l AS (
            INSERT INTO token_locks (token_id, holder, expires_at)
            SELECT f.id, p_holder, now() + p_ttl_ms * interval '1 millisecond' FROM unnest(fresh) f(id)
            ON CONFLICT DO NOTHING
            RETURNING token_id
        )
        SELECT COALESCE(array_agg(token_id), '{}') INTO taken FROM l;
        locked := locked || taken;
        done := cardinality(taken) = cardinality(fresh);
        EXIT WHEN done;
        -- Under a lock: take it over if it has expired.
        WITH l AS (
            UPDATE token_locks l SET holder = p_holder, expires_at = now() + p_ttl_ms * interval '1 millisecond'
            WHERE l.token_id = ANY (ARRAY (SELECT unnest(fresh) EXCEPT ALL SELECT unnest(taken)))
              AND l.expires_at <= now()
            RETURNING l.token_id
        )
        SELECT COALESCE(array_agg(token_id), '{}') INTO taken FROM l;
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
        RETURN QUERY SELECT 'busy'::text, got, 0::bigint, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::bigint;
        RETURN;
    END IF;
    RETURN QUERY SELECT 'selected'::text, got, takeovers, t.id::text, t.owner::text, t.token_type::text,
        t.identifier::text, t.issuer::text, t.notary::text, t.amount::bigint -- the declared types, as in custody_pay
    FROM tokens t WHERE t.id = ANY (locked);
END
$$;
