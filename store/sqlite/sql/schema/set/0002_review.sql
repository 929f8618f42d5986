-- The review queue of {{.Table}}: objects that may have become garbage, due for a
-- check at review_after (Unix milliseconds by the database's clock). version changes
-- whenever an entry is queued again, so a collector dequeues only what it reviewed.
-- No foreign key: an entry may outlive its object.
CREATE TABLE IF NOT EXISTS {{.Queue}} (
    object_id    {{.IDType}} NOT NULL PRIMARY KEY,
    review_after INTEGER NOT NULL,
    version      INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS "{{.DueIndex}}" ON {{.Queue}} (review_after);
