-- Custody's own tables of who holds a token, instead of the tokens set's holds table
-- (refset's, which custody no longer writes). A row of token_owners is the owner's
-- hold, which keeps the token alive: it references the token ON DELETE RESTRICT, so
-- clean-up follows it as it followed the holds. A row of token_locks is a
-- transaction's lock, until the transaction spends or releases the token or the lock
-- expires by the database's clock (Unix milliseconds); its primary key is the rule of one lock per
-- token that decides every race. A lock keeps nothing alive (the owner's row does):
-- its key cascades, so the database still refuses a lock on no token and drops a
-- spent token's lock with it, while clean-up, which counts a cascading key's rows as
-- parts of the object rather than holders, puts no triggers on the locks (a RESTRICT
-- key there cost the hot owner's payments about a tenth of their speed). The locks migration moves the
-- holds custody kept before (../../locks/0002_holders.sql).
CREATE TABLE IF NOT EXISTS token_owners (
    token_id TEXT NOT NULL PRIMARY KEY REFERENCES tokens (id) ON DELETE RESTRICT
);
CREATE TABLE IF NOT EXISTS token_locks (
    token_id   TEXT    NOT NULL PRIMARY KEY REFERENCES tokens (id) ON DELETE CASCADE,
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);
-- A spend and a release find a transaction's locks by holder.
CREATE INDEX IF NOT EXISTS token_locks_by_holder ON token_locks (holder);
