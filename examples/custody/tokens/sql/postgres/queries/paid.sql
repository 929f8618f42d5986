-- What a payment or a spend whose connection was lost once it was sent left in the
-- books, once it can no longer commit (postgres.go, statements): $1 the
-- transaction, $2 the ID of one of its outputs, $3 the call's own ID (the pivot of
-- custody_pay, the p_call of custody_spend), which no other statement has. It
-- committed if that output's history row names the transaction as its creator (looked
-- up by key) and the history has tokens this very call spent (spent_in, which
-- ../tables/0010_own_outcome.sql added); then those are its spent tokens (a scan of
-- the history, since spent_in has no index, which would cost every spend its HOT
-- update: this runs only after a lost connection). Another payment of the same
-- transaction ID, or one that created that output before, is not this one: a
-- transaction ID may name several payments. No row: it did not commit.
SELECT h.token_id, h.owner, h.identifier, h.amount
FROM token_history h
WHERE EXISTS (SELECT 1 FROM token_history o WHERE o.token_id = $2 AND o.created_by = $1)
  AND h.spent_by = $1 AND h.spent_in = $3
ORDER BY h.token_id
