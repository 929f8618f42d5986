-- What a selection whose connection was lost once it was sent left in the books,
-- once it can no longer commit (postgres.go, statements): the live locks of the
-- holder $1 on tokens of the owner $2 that match the filter's type, identifier,
-- issuer and notary ($3..$6, NULL for any). If they cover the amount, the
-- selection committed (or an earlier one of the same transaction did, and the
-- transaction holds what it asked for either way). Each with its lock's expiry.
SELECT t.id, t.owner, t.token_type, t.identifier, t.issuer, t.notary, t.amount, l.expires_at
FROM token_locks l JOIN tokens t ON t.id = l.token_id
WHERE l.holder = $1 AND l.expires_at > now() AND t.owner = $2
  AND ($3::text IS NULL OR t.token_type = $3) AND ($4::text IS NULL OR t.identifier = $4)
  AND ($5::text IS NULL OR t.issuer = $5) AND ($6::text IS NULL OR t.notary = $6)
ORDER BY t.id
