package refset_test

import (
	"context"
	"testing"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/sqlite"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ownStore is a SetStore of the caller's own, on a plain database.
type ownStore struct {
	refset.SetStore[note, string]
	db refset.Database
}

func (s ownStore) Database() refset.Database { return s.db }

type note struct {
	Key  string `db:"k"`
	Text string `db:"text"`
}

func (n note) ID() string { return n.Key }

// The core works on a SetStore of the caller's own (the RFC's pluggable store), whose
// database has none of the stores' capabilities: units of work, Commands with ?
// placeholders, hand-overs and reads run as on a store's database.
func TestSetStoreOfYourOwn(t *testing.T) {
	ctx := t.Context()
	db := testdb.SQLite.Open(t, testdb.Options{}).(*sqlite.DB)
	_, err := db.Writer().ExecContext(ctx, `CREATE TABLE notes (k TEXT PRIMARY KEY, text TEXT NOT NULL);
		CREATE TABLE pins (k TEXT PRIMARY KEY REFERENCES notes (k) ON DELETE RESTRICT)`)
	require.NoError(t, err)
	inner, err := store.NewStore[note, string](ctx, db, store.Config{Table: "notes"})
	require.NoError(t, err)

	plain := testdb.Plain(db)
	set := refset.New[note, string](ownStore{SetStore: inner, db: plain})
	tok, err := set.Add(ctx, note{Key: "a", Text: "hello"}, refset.Exec[string](`INSERT INTO pins (k) VALUES (?)`, 1))
	require.NoError(t, err)
	rel, err := tok.Release(refset.Exec[string](`DELETE FROM pins WHERE k = ?`, 1))
	require.NoError(t, err)
	acq, err := rel.Acquire(refset.Exec[string](`INSERT INTO pins (k) VALUES (?)`, 1))
	require.NoError(t, err)
	head, err := acq.Complete(ctx)
	require.NoError(t, err)
	lease, err := set.Get(ctx, head)
	require.NoError(t, err)
	assert.Equal(t, "hello", lease.Value().Text)
	require.NoError(t, refset.InTx(ctx, plain, func(ctx context.Context, tx refset.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO notes (k, text) VALUES (?, ?)`, "b", "in a unit")
		return err
	}))
	_, err = set.Upgrade(ctx, "b")
	require.NoError(t, err)
}
