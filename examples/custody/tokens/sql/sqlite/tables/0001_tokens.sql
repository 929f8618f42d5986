-- Tokens in custody. A token is an immutable object: spending deletes it and creates
-- new ones (the outputs, change included).
CREATE TABLE IF NOT EXISTS tokens (
    id         TEXT    NOT NULL PRIMARY KEY,
    owner      TEXT    NOT NULL,
    token_type TEXT    NOT NULL,
    identifier TEXT    NOT NULL,
    issuer     TEXT    NOT NULL,
    notary     TEXT    NOT NULL,
    amount     INTEGER NOT NULL CHECK (amount > 0)
);
-- Selection reads a page of an owner's tokens from a random point of the ID order.
CREATE INDEX IF NOT EXISTS tokens_by_owner ON tokens (owner, identifier, id);

-- Every token ever issued or created, and the transaction that spent it: the
-- conservation check and the proof that no token was spent twice.
CREATE TABLE IF NOT EXISTS token_history (
    token_id   TEXT    NOT NULL PRIMARY KEY,
    owner      TEXT    NOT NULL,
    identifier TEXT    NOT NULL,
    amount     INTEGER NOT NULL,
    created_by TEXT    NOT NULL,
    spent_by   TEXT
);
