-- The review queue of {{.Table}}: objects that may have become garbage, due for a
-- check at review_after. version changes whenever an entry is queued again, so a
-- collector dequeues only what it reviewed. No foreign key: an entry may outlive its
-- object.
CREATE TABLE IF NOT EXISTS {{.Queue}} (
    object_id    {{.IDType}} NOT NULL PRIMARY KEY,
    review_after timestamptz NOT NULL,
    version      bigint NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS "{{.DueIndex}}" ON {{.Queue}} (review_after);
