-- Tokens in custody. A token is an immutable object: spending deletes it and creates
-- new ones (the outputs, change included).
CREATE TABLE IF NOT EXISTS tokens (
    id         text    NOT NULL PRIMARY KEY,
    owner      text    NOT NULL,
    token_type text    NOT NULL,
    identifier text    NOT NULL,
    issuer     text    NOT NULL,
    notary     text    NOT NULL,
    amount     bigint  NOT NULL CHECK (amount > 0)
);
-- Selection reads a page of an owner's tokens from a random point of the ID order.
CREATE INDEX IF NOT EXISTS tokens_by_owner ON tokens (owner, identifier, id);

-- Every token ever issued or created, and the transaction that spent it: the
-- conservation check and the proof that no token was spent twice.
CREATE TABLE IF NOT EXISTS token_history (
    token_id   text    NOT NULL PRIMARY KEY,
    owner      text    NOT NULL,
    identifier text    NOT NULL,
    amount     bigint  NOT NULL,
    created_by text    NOT NULL,
    spent_by   TEXT
);
