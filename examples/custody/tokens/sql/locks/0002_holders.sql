-- Moves the holds custody kept in the tokens set's holds table (refset's own, which
-- custody no longer reads or writes) to custody's holder tables, so that an upgraded
-- database keeps its owners and its locks; then drops the index of one lock per token
-- that the first locks migration put on the holds, which the locks' primary key now
-- is. A new database has nothing to move, and never needed that index: the first
-- migration is gone. The only statements custody runs on the holds table are these.
INSERT INTO token_owners (token_id) SELECT object_id FROM tokens_holds WHERE holder = 'owner';
INSERT INTO token_locks (token_id, holder, expires_at)
SELECT object_id, holder, expires_at FROM tokens_holds WHERE holder LIKE 'tx:%' AND expires_at IS NOT NULL;
DELETE FROM tokens_holds WHERE holder = 'owner' OR (holder LIKE 'tx:%' AND expires_at IS NOT NULL);
DROP INDEX IF EXISTS tokens_one_lock;
