-- What a payment or a spend whose connection was lost once it was sent left in the
-- books, once it can no longer commit (postgres.go, statements): $1 the
-- transaction, $2 the ID of one of its outputs. It committed if that output's
-- history row names the transaction as its creator (looked up by key); then its
-- spent tokens are the history rows it marked spent (a scan of the history, since
-- spent_by has no index, which would cost every spend its HOT update: this runs only
-- after a lost connection). No row: it did not commit, or spent nothing.
SELECT h.token_id, h.owner, h.identifier, h.amount
FROM token_history h
WHERE EXISTS (SELECT 1 FROM token_history o WHERE o.token_id = $2 AND o.created_by = $1)
  AND h.spent_by = $1
ORDER BY h.token_id
