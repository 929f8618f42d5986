-- Custody's own tables of who holds a token, instead of the tokens set's holds table
-- (refset's, which custody no longer writes). A row of token_owners is the owner's
-- hold, which keeps the token alive: it references the token ON DELETE RESTRICT, so
-- clean-up follows it as it followed the holds. A row of token_locks is a
-- transaction's lock, until the transaction spends or releases the token or the lock
-- expires by the database's clock (Unix milliseconds); its primary key is the rule of one lock per
-- token that decides every race. A lock keeps nothing alive (the owner's row does),
-- so it has no foreign key: every lock is taken while its token's row is locked (FOR
-- UPDATE on Postgres, the one writer on SQLite) and goes in the statement that spends
-- the token, and without a key neither the deletion of a spent token is checked
-- against the locks nor clean-up's triggers run on them. The locks migration moves the
-- holds custody kept before (../../locks/0002_holders.sql).
CREATE TABLE IF NOT EXISTS token_owners (
    token_id TEXT NOT NULL PRIMARY KEY REFERENCES tokens (id) ON DELETE RESTRICT
);
CREATE TABLE IF NOT EXISTS token_locks (
    token_id   TEXT    NOT NULL PRIMARY KEY,
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);
-- A spend and a release find a transaction's locks by holder.
CREATE INDEX IF NOT EXISTS token_locks_by_holder ON token_locks (holder);
