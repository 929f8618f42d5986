package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/refsetdb/refset/blockmanager"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/console"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/require"
)

// hostileID is an object ID that would run a script if a page wrote it unescaped.
const hostileID = `<img src=x onerror=alert(1)>"'&amp;`

// note is the object of the notes set.
type note struct {
	Key  string `db:"id"`
	Body string `db:"body"`
}

func (n note) ID() string { return n.Key }

// fixture is a database as the console's tests find it:
//
//	notes:  n1 and hostileID pinned by rows of pins (a root), hostileID held by
//	        mallory too; n2 held by alice
//	        forever; n3 by bob for an hour; n4 by carol, expired; n5 referenced by
//	        nothing, queued for review.
//	blocks: a blockmanager chain c0..c7 (committed, head c7), a fork f5, f6 off c4
//	        (fork head f6), and p9 waiting for its missing predecessor m8.
type fixture struct {
	db      refset.Database
	place   testdb.Place
	main    []string // the committed chain, genesis first
	fork    []string
	pending string
}

func newFixture(t *testing.T, b testdb.Backend) fixture {
	t.Helper()
	ctx := t.Context()
	place := b.New(t)
	db := place.Open(t, testdb.Options{})
	f := fixture{db: db, place: place, pending: "p9", fork: []string{"f5", "f6"}}

	m, err := blockmanager.Open(ctx, db, blockmanager.Config{})
	require.NoError(t, err)
	c := m.Completer()
	receive := func(id, prev string, num int64) {
		t.Helper()
		_, err := c.Receive(ctx, blockmanager.Block{HeaderSignature: id, PreviousBlockID: prev, BlockNum: num})
		require.NoError(t, err)
	}
	prev := blockmanager.NullBlockID
	for i := range 8 {
		id := fmt.Sprintf("c%d", i)
		receive(id, prev, int64(i))
		f.main, prev = append(f.main, id), id
	}
	receive("f5", "c4", 5)
	receive("f6", "f5", 6)
	receive("p9", "m8", 9)

	exec := func(q string) {
		t.Helper()
		require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, q)
			return err
		}), q)
	}
	exec(`CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT NOT NULL)`)
	exec(`CREATE TABLE pins (note_id TEXT PRIMARY KEY REFERENCES notes (id) ON DELETE RESTRICT)`)
	notesStore, err := store.NewStore[note, string](ctx, db, store.Config{Table: "notes"})
	require.NoError(t, err)
	notes := refset.New(notesStore)
	_, err = cleanup.Install(ctx, db, cleanup.Config{Table: "notes"})
	require.NoError(t, err)
	for _, n := range []struct {
		id   string
		cmds []refset.Command[string]
	}{
		{"n1", nil}, {hostileID, nil}, {"n5", nil},
		{"n2", []refset.Command[string]{notes.Hold("alice", 0)}},
		{"n3", []refset.Command[string]{notes.Hold("bob", time.Hour)}},
		{"n4", []refset.Command[string]{notes.Hold("carol", time.Millisecond)}},
	} {
		_, err := notes.Add(ctx, note{Key: n.id, Body: "body of " + n.id}, n.cmds...)
		require.NoError(t, err)
	}
	pin := refset.Exec[string](`INSERT INTO pins (note_id) VALUES (?)`, 1)
	_, err = notes.Upgrade(ctx, "n1", pin)
	require.NoError(t, err)
	_, err = notes.Upgrade(ctx, hostileID, pin, notes.Hold("mallory", 0))
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond) // carol's hold expires
	return f
}

// serve runs the console of db on a test server, closed when t ends.
func serve(t *testing.T, db refset.Database, cfg console.Config) (*console.Console, *httptest.Server) {
	t.Helper()
	h, err := console.New(t.Context(), db, cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		require.NoError(t, h.Close())
	})
	return h, srv
}

// get fetches path from srv and returns its status and body. A "Host" in header is
// the request's Host.
func get(t *testing.T, srv *httptest.Server, path string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+path, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	if host := header.Get("Host"); host != "" {
		req.Host = host // the client sends req.Host, not a Host header
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(body)
}

// objectPath is the object page of id in table.
func objectPath(table, id string) string {
	return "/object?" + url.Values{"table": {table}, "id": {id}}.Encode()
}
