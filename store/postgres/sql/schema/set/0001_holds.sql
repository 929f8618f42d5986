-- Generic holds of {{.Table}}: a holder (a component, a transaction) keeps an object
-- alive until it unholds it or, when expires_at is set, until clean-up removes the
-- expired hold. Times are by the database's clock.
CREATE TABLE IF NOT EXISTS {{.Holds}} (
    holder     text NOT NULL,
    object_id  {{.IDType}} NOT NULL REFERENCES {{.Table}} ({{.IDColumn}}) ON DELETE RESTRICT,
    expires_at timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (object_id, holder)
);
-- Releasing everything a holder has (a transaction's locks) and finding expired holds
-- must not scan the table.
CREATE INDEX IF NOT EXISTS "{{.HolderIndex}}" ON {{.Holds}} (holder);
CREATE INDEX IF NOT EXISTS "{{.ExpiresIndex}}" ON {{.Holds}} (expires_at) WHERE expires_at IS NOT NULL;
