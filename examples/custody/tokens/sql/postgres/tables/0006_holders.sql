-- Custody's own tables of who holds a token, instead of the tokens set's holds table
-- (refset's, which custody no longer writes). A row of token_owners is the owner's
-- hold, which keeps the token alive: it references the token ON DELETE RESTRICT, so
-- clean-up follows it as it followed the holds. A row of token_locks is a
-- transaction's lock, until the transaction spends or releases the token or the lock
-- expires by the database's clock; its primary key is the rule of one lock per
-- token that decides every race. A lock keeps nothing alive (the owner's row does):
-- its key cascades, so the database still refuses a lock on no token and drops a
-- spent token's lock with it, while clean-up, which counts a cascading key's rows as
-- parts of the object rather than holders, puts no triggers on the locks (a RESTRICT
-- key there cost the hot owner's payments about a tenth of their speed). The locks migration moves the
-- holds custody kept before (../../locks/0002_holders.sql).
CREATE TABLE IF NOT EXISTS token_owners (
    token_id text NOT NULL PRIMARY KEY REFERENCES tokens (id) ON DELETE RESTRICT
);
CREATE TABLE IF NOT EXISTS token_locks (
    token_id   text        NOT NULL PRIMARY KEY REFERENCES tokens (id) ON DELETE CASCADE,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL
);
-- A spend and a release find a transaction's locks by holder.
CREATE INDEX IF NOT EXISTS token_locks_by_holder ON token_locks (holder);

-- The Postgres fast paths of Select (custody_select), Pay (custody_pay) and Spend
-- (custody_spend): one call, one statement from the client, committed on its own.
-- postgres.go describes their contracts; Select and Pay claim tokens with
-- custody_claim. custody_pay is defined again, as it is now, by 0007_service.sql. They replace what 0004_claim.sql and 0005_spend.sql created, on the
-- holds table; those migrations are gone, since this one does all they did.
--
-- Their statements' plans are made once per session and kept: left to choose, the
-- plan cache judged the spend's generic plan dearer than a custom one and planned the
-- spend again on every call, which cost more than running it. A plan made while a
-- table was small (a new vault, a small pool) would scan it whole, and go on scanning
-- it as it grows (the history grows with every payment); and with statistics that
-- think the owners' holds few, the release of the holds read all of them through a
-- bitmap of the holder index. With sequential and bitmap scans off, every step looks
-- its rows up by key, at a cost that follows the payment, not the tables.
--
-- The spend was a statement sent from the client, prepared, before it was a function
-- (0005): planned again on every call, since the plan cache's generic plan looked the
-- transaction's locks up by holder = $1, which the statistics (where 'owner' was nearly
-- every hold) estimated at half the holds table, so it read the table whole (26 ms a
-- spend on 100,000 tokens), and the cache kept choosing custom plans instead, which
-- cost half a millisecond of planning a spend (pg_stat_statements with
-- track_planning: 510 µs of planning, 588 µs of execution).

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
-- they are the functions below).
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
BEGIN
    claimed := p_have;
    got := p_have_got; -- numeric: the claimed tokens may add up past bigint
    LOOP
        tries := tries + 1;
        before := got;
        -- A round: two scans, the second with a fresh snapshot.
        FOR pass IN 1..2 LOOP
            -- Above the pivot, then below it.
            FOR part IN 0..1 LOOP
                EXIT WHEN got >= p_amount;
                IF p_identifier IS NOT NULL AND part = 0 THEN
                    OPEN cur NO SCROLL FOR SELECT t.id, t.amount FROM tokens t
                        WHERE t.owner = p_owner AND t.identifier = p_identifier AND t.id >= p_pivot
                          AND (p_type IS NULL OR t.token_type = p_type) AND (p_issuer IS NULL OR t.issuer = p_issuer)
                          AND (p_notary IS NULL OR t.notary = p_notary) AND t.id <> ALL (claimed)
                          AND (SELECT true FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > now()) IS NULL
                        FOR UPDATE OF t SKIP LOCKED;
                ELSIF p_identifier IS NOT NULL THEN
                    OPEN cur NO SCROLL FOR SELECT t.id, t.amount FROM tokens t
                        WHERE t.owner = p_owner AND t.identifier = p_identifier AND t.id < p_pivot
                          AND (p_type IS NULL OR t.token_type = p_type) AND (p_issuer IS NULL OR t.issuer = p_issuer)
                          AND (p_notary IS NULL OR t.notary = p_notary) AND t.id <> ALL (claimed)
                          AND (SELECT true FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > now()) IS NULL
                        FOR UPDATE OF t SKIP LOCKED;
                ELSIF part = 0 THEN
                    OPEN cur NO SCROLL FOR SELECT t.id, t.amount FROM tokens t
                        WHERE t.owner = p_owner AND t.id >= p_pivot
                          AND (p_type IS NULL OR t.token_type = p_type) AND (p_issuer IS NULL OR t.issuer = p_issuer)
                          AND (p_notary IS NULL OR t.notary = p_notary) AND t.id <> ALL (claimed)
                          AND (SELECT true FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > now()) IS NULL
                        FOR UPDATE OF t SKIP LOCKED;
                ELSE
                    OPEN cur NO SCROLL FOR SELECT t.id, t.amount FROM tokens t
                        WHERE t.owner = p_owner AND t.id < p_pivot
                          AND (p_type IS NULL OR t.token_type = p_type) AND (p_issuer IS NULL OR t.issuer = p_issuer)
                          AND (p_notary IS NULL OR t.notary = p_notary) AND t.id <> ALL (claimed)
                          AND (SELECT true FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > now()) IS NULL
                        FOR UPDATE OF t SKIP LOCKED;
                END IF;
                LOOP
                    FETCH cur INTO tok;
                    EXIT WHEN NOT FOUND;
                    claimed := claimed || tok.id;
                    got := got + tok.amount;
                    EXIT WHEN got >= p_amount;
                END LOOP;
                CLOSE cur;
            END LOOP;
            EXIT WHEN got >= p_amount;
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
        -- some tokens, which it must not sit on while others could use them.
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
        fresh := ARRAY (SELECT c.id FROM unnest(claimed) c(id) WHERE c.id <> ALL (locked));
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
            WHERE l.token_id = ANY (ARRAY (SELECT f.id FROM unnest(fresh) f(id) WHERE f.id <> ALL (taken)))
              AND l.expires_at <= now()
            RETURNING l.token_id
        )
        SELECT COALESCE(array_agg(token_id), '{}') INTO taken FROM l;
        locked := locked || taken;
        takeovers := takeovers + cardinality(taken);
        -- Under a live lock: give it up and claim more.
        refused := ARRAY (SELECT c.id FROM unnest(claimed) c(id) WHERE c.id <> ALL (locked));
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

-- custody_spend is the spend of the two-step path (Select, then Spend). p_holder is
-- the transaction's lock holder, p_tx the transaction; the outputs come one array per
-- column. It returns the spent tokens, or raises with custody_refuse
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
        DELETE FROM tokens t WHERE t.id = ANY (ARRAY (SELECT l.token_id FROM token_locks l WHERE l.holder = p_holder))
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
