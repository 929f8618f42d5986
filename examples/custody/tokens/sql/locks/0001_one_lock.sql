-- At most one lock per token: the database, not the selectors, decides who wins a
-- race for a token. The owner's hold is not a lock.
CREATE UNIQUE INDEX IF NOT EXISTS tokens_one_lock ON tokens_holds (object_id) WHERE holder <> 'owner';
