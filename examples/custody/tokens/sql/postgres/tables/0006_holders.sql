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
-- custody_claim. custody_pay is defined again, as it is now, by 0007_service.sql,
-- custody_claim and custody_select by 0008_claim.sql. They replace what 0004_claim.sql and 0005_spend.sql created, on the
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

-- custody_claim and custody_select, which Select and Pay call, are defined, as they are
-- now, by 0008_claim.sql.

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
