-- Custody's own holder tables, instead of the tokens set's holds table (refset's, which
-- custody no longer writes): an owner's hold, which keeps a token alive, and a lock,
-- which a transaction takes on a token until it spends it, releases it or the lock
-- expires by the database's clock (Unix milliseconds). Both reference the token ON
-- DELETE RESTRICT, so clean-up follows them as it followed the holds; the lock's
-- primary key is the rule of one lock per token that decides every race. The locks
-- migration moves the holds custody kept before (../locks/0002_holders.sql).
CREATE TABLE IF NOT EXISTS token_owners (
    token_id TEXT NOT NULL PRIMARY KEY REFERENCES tokens (id) ON DELETE RESTRICT
);
CREATE TABLE IF NOT EXISTS token_locks (
    token_id   TEXT    NOT NULL PRIMARY KEY REFERENCES tokens (id) ON DELETE RESTRICT,
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);
-- A spend and a release find a transaction's locks by holder.
CREATE INDEX IF NOT EXISTS token_locks_by_holder ON token_locks (holder);
