-- Select's fast path: custody_select (../tables/0011_live_clock.sql) claims the owner's
-- unlocked tokens that match the filter, row by row FOR UPDATE SKIP LOCKED, until they
-- cover the amount, and locks them, taking expired locks over. Its placeholders: $1 the
-- owner, $2..$5 the filter's type, identifier, issuer and notary (NULL for any), $6 the
-- amount, $7 the pivot, $8 the holder, $9 the ttl in milliseconds.
--
-- One row comes back unless it locked: its verdict ('insufficient', 'locked' or
-- 'busy') and the amount behind it. Locked, a row per locked token, how many expired
-- locks it took over, and when the first of its locks expires.
SELECT verdict, covered::text, took_over, expires, tok_id, tok_owner, tok_type, tok_identifier, tok_issuer, tok_notary, tok_amount
FROM custody_select($1, $2, $3, $4, $5, $6, $7, $8, $9)
