-- The ledger's own tables. Owners hold notes with ON DELETE RESTRICT: a row there
-- keeps its note alive, and the database refuses to delete a held note.
CREATE TABLE notes (serial TEXT PRIMARY KEY, amount BIGINT NOT NULL);
CREATE TABLE owners (note_serial TEXT NOT NULL PRIMARY KEY REFERENCES notes (serial) ON DELETE RESTRICT, owner TEXT NOT NULL);
CREATE INDEX owners_owner ON owners (owner);
