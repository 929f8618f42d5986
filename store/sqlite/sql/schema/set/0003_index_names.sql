-- Index names: on PostgreSQL a set's index names past 63 bytes were cut short, and
-- some indexes never made (store/postgres's 0003_index_names.sql). SQLite keeps
-- names whole: its indexes have been made under their names all along, and this
-- changes nothing; it keeps the two stores' set versions alike.
CREATE INDEX IF NOT EXISTS "{{.HolderIndex}}" ON {{.Holds}} (holder);
CREATE INDEX IF NOT EXISTS "{{.ExpiresIndex}}" ON {{.Holds}} (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS "{{.DueIndex}}" ON {{.Queue}} (review_after);
