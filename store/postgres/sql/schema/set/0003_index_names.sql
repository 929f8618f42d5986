-- Index names that PostgreSQL keeps whole. 0001_holds.sql and 0002_review.sql named
-- their indexes after their tables (the holds table's name and _holder or _expires,
-- the review queue's and _due), and PostgreSQL cuts a name past 63 bytes short, silently: for a table of 56 or 57
-- characters, the cut names of the holds table's two indexes were one (the second was
-- never made, CREATE INDEX IF NOT EXISTS finding the first), and the due index's was
-- the review queue's own name (never made either): expired holds and due entries were
-- found by scanning. Such a name is now the head of the table's name, a hash and the
-- index's label. An index made under a cut name gets the name that fits, and those
-- never made are made.
{{if .LegacyHolderIndex}}ALTER INDEX IF EXISTS {{.LegacyHolderIndex}} RENAME TO "{{.HolderIndex}}";
{{end}}{{if .LegacyExpiresIndex}}ALTER INDEX IF EXISTS {{.LegacyExpiresIndex}} RENAME TO "{{.ExpiresIndex}}";
{{end}}{{if .LegacyDueIndex}}ALTER INDEX IF EXISTS {{.LegacyDueIndex}} RENAME TO "{{.DueIndex}}";
{{end}}CREATE INDEX IF NOT EXISTS "{{.HolderIndex}}" ON {{.Holds}} (holder);
CREATE INDEX IF NOT EXISTS "{{.ExpiresIndex}}" ON {{.Holds}} (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS "{{.DueIndex}}" ON {{.Queue}} (review_after);
