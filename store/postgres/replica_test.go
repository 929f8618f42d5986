package postgres_test

import (
	"context"
	"database/sql"
	"net/url"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests run against a real hot standby (pgtest.NewWithStandby), and pause its
// replay (pgtest.PauseReplay) to make a lag they can count on.

type item struct {
	Key  string `db:"id"`
	Body string `db:"body"`
}

func (i item) ID() string { return i.Key }

// replicaEnv is a test schema on a primary with a standby: a database opened with
// both, an items set in it, and the observer of its fallbacks.
type replicaEnv struct {
	place testdb.Place // the primary, and the standby as its replica
	db    *postgres.DB
	set   *refset.RefSet[item, string]
	obs   *testdb.Fallbacks
}

// addFirst adds the object "a", body "first", held by "keeper".
func (e *replicaEnv) addFirst(t *testing.T) *refset.RefToken[string] {
	t.Helper()
	tok, err := e.set.Add(t.Context(), item{Key: "a", Body: "first"}, e.set.Hold("keeper", 0))
	require.NoError(t, err)
	return tok
}

// longWait is the ReplicaWait of tests that expect the standby to catch up: long
// enough to outlast a pause another test (of any package) holds meanwhile.
const longWait = 2 * time.Minute

func newReplicaEnv(t *testing.T) *replicaEnv {
	t.Helper()
	e := &replicaEnv{}
	e.place = testdb.Standby.New(t)
	e.db, e.obs = e.open(t, longWait)
	_, err := e.db.Pool().ExecContext(t.Context(), `CREATE TABLE items (id text PRIMARY KEY, body text NOT NULL)`)
	require.NoError(t, err)
	setStore, err := store.NewStore[item, string](t.Context(), e.db, store.Config{Table: "items"})
	require.NoError(t, err)
	e.set = refset.New(setStore)
	e.caughtUp(t)
	e.obs.Take()
	return e
}

// open opens another handle on the env's primary and standby, with its own
// observer.
func (e *replicaEnv) open(t *testing.T, wait time.Duration) (*postgres.DB, *testdb.Fallbacks) {
	t.Helper()
	obs := &testdb.Fallbacks{}
	return e.place.Open(t, testdb.Options{ReplicaWait: wait, Observer: obs}).(*postgres.DB), obs
}

// caughtUp waits until the standby shows everything committed so far.
func (e *replicaEnv) caughtUp(t *testing.T) {
	t.Helper()
	ok, err := e.db.ReplicaCaughtUp(t.Context())
	require.NoError(t, err)
	require.True(t, ok, "the standby did not catch up within %v", longWait)
}

// primaryExec runs SQL on the primary behind refset's back.
func (e *replicaEnv) primaryExec(t *testing.T, q string, args ...any) {
	t.Helper()
	_, err := e.db.Pool().ExecContext(t.Context(), q, args...)
	require.NoError(t, err, q)
}

// A read right after a write sees it: the standby, paused, has not replayed the Add,
// so Get and Upgrade find nothing there and ask the primary.
func TestReplicaReadAfterWrite(t *testing.T) {
	t.Parallel()
	e := newReplicaEnv(t)
	ctx := t.Context()
	pgtest.PauseReplay(t)

	tok := e.addFirst(t)
	lease, err := e.set.Get(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, "first", lease.Value().Body)
	assert.Equal(t, map[string]int{"get/missing": 1}, e.obs.Take())

	_, err = e.set.Upgrade(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, map[string]int{"has/missing": 1}, e.obs.Take())

	_, err = e.set.Upgrade(ctx, "never stored")
	require.ErrorIs(t, err, refset.ErrNotFound)
	assert.Equal(t, map[string]int{"has/missing": 1}, e.obs.Take(), "an absent object is asked of both")
}

// A row the standby has is served from the standby, however far behind it is. The
// test changes an object on the primary behind refset's back (objects never change,
// so refset would never do it) while replay is paused: only the standby still has
// the old value, and that is what Get returns.
func TestReplicaServesRowsItHas(t *testing.T) {
	t.Parallel()
	e := newReplicaEnv(t)
	ctx := t.Context()
	tok := e.addFirst(t)
	e.caughtUp(t)
	pgtest.PauseReplay(t)

	e.primaryExec(t, `UPDATE items SET body = 'changed' WHERE id = 'a'`)
	lease, err := e.set.Get(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, "first", lease.Value().Body, "the standby's row")
	assert.Empty(t, e.obs.Take(), "no fallback")

	// Deleted on the primary, the object is still found on the standby outside a
	// transaction (as it would have been on the primary a moment earlier), and not
	// inside one, which reads the primary.
	e.primaryExec(t, `DELETE FROM items_holds WHERE object_id = 'a'; DELETE FROM items WHERE id = 'a'`)
	_, err = e.set.Upgrade(ctx, "a")
	require.NoError(t, err, "Upgrade reads the standby")
	err = refset.InTx(ctx, e.db, func(ctx context.Context, tx refset.Tx) error {
		_, err := e.set.UpgradeTx(ctx, tx, "a")
		return err
	})
	require.ErrorIs(t, err, refset.ErrNotFound, "UpgradeTx reads the primary")
	assert.Empty(t, e.obs.Take(), "no fallback")
}

// Reports read the standby once it has replayed what the primary committed before
// they began, so they see the caller's writes; a standby that does not catch up in
// time leaves them to the primary.
func TestReplicaReports(t *testing.T) {
	t.Parallel()
	e := newReplicaEnv(t)
	ctx := t.Context()
	c, err := store.NewCollector(ctx, e.db, cleanup.Config{Table: "items"})
	require.NoError(t, err)
	e.addFirst(t)
	e.obs.Take()

	// Right after the Add, served by the standby: no fallback.
	hs, err := c.Why(ctx, "a")
	require.NoError(t, err)
	require.Len(t, hs, 1)
	assert.Equal(t, "object_id='a', holder='keeper'", hs[0].Key)
	r, err := c.Check(ctx)
	require.NoError(t, err)
	assert.True(t, r.OK(), "%+v", r)
	st, err := cleanup.Status(ctx, e.db)
	require.NoError(t, err)
	require.Len(t, st.Sets, 1)
	assert.Equal(t, cleanup.Count{N: 1}, st.Sets[0].Objects)
	assert.Equal(t, cleanup.Count{N: 1}, st.Sets[0].HoldsLive)
	_, err = c.Why(ctx, "never stored")
	require.ErrorIs(t, err, refset.ErrNotFound)
	assert.Empty(t, e.obs.Take(), "every report served by the standby")

	// Paused, the standby cannot catch up: a handle that waits briefly reads the
	// primary, and sees the new hold.
	short, obs := e.open(t, 50*time.Millisecond)
	cs, err := store.NewCollector(ctx, short, cleanup.Config{Table: "items"})
	require.NoError(t, err)
	pgtest.PauseReplay(t)
	e.primaryExec(t, `INSERT INTO items_holds (holder, object_id) VALUES ('other', 'a')`)
	hs, err = cs.Why(ctx, "a")
	require.NoError(t, err)
	assert.Len(t, hs, 2, "the hold made while the standby was paused")
	st, err = cleanup.Status(ctx, short)
	require.NoError(t, err)
	assert.Equal(t, cleanup.Count{N: 2}, st.Sets[0].HoldsLive)
	assert.Equal(t, map[string]int{"report/behind": 2}, obs.Take())
}

// ReplicaCaughtUp waits for the standby, and gives up after ReplicaWait.
func TestReplicaCaughtUp(t *testing.T) {
	t.Parallel()
	e := newReplicaEnv(t)
	ctx := t.Context()
	short, _ := e.open(t, 50*time.Millisecond)
	resume := pgtest.PauseReplay(t)
	e.primaryExec(t, `INSERT INTO items VALUES ('a', 'first')`)
	ok, err := short.ReplicaCaughtUp(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "paused")
	resume()
	e.caughtUp(t)

	noReplica, err := postgres.Open(ctx, e.place.At, postgres.Options{})
	require.NoError(t, err)
	defer noReplica.Close()
	ok, err = noReplica.ReplicaCaughtUp(ctx)
	require.NoError(t, err)
	assert.False(t, ok, "no replica")
}

// A replica that goes away leaves every read to the primary.
func TestReplicaGone(t *testing.T) {
	t.Parallel()
	e := newReplicaEnv(t)
	ctx := t.Context()
	e.addFirst(t)

	replica, err := sql.Open("postgres", e.place.StandbyAt)
	require.NoError(t, err)
	obs := &testdb.Fallbacks{}
	db, err := postgres.Open(ctx, e.place.At, postgres.Options{Replica: replica, Options: store.Options{Observer: obs}})
	require.NoError(t, err)
	defer db.Close()
	setStore, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
	require.NoError(t, err)
	set := refset.New(setStore)
	c, err := store.NewCollector(ctx, db, cleanup.Config{Table: "items"})
	require.NoError(t, err)

	require.NoError(t, replica.Close()) // gone
	tok, err := set.Upgrade(ctx, "a")
	require.NoError(t, err)
	lease, err := set.Get(ctx, tok)
	require.NoError(t, err)
	assert.Equal(t, "first", lease.Value().Body)
	hs, err := c.Why(ctx, "a")
	require.NoError(t, err)
	assert.Len(t, hs, 1)
	assert.Equal(t, map[string]int{"has/failed": 1, "get/failed": 1, "report/failed": 1}, obs.Take())

	_, err = db.ReplicaCaughtUp(ctx)
	require.Error(t, err)
}

// The standby refuses writes: were any of refset's writes sent there, it would fail,
// and the conformance suite, which runs with a standby too, would not pass.
func TestReplicaIsReadOnly(t *testing.T) {
	t.Parallel()
	e := newReplicaEnv(t)
	_, err := e.db.Replica().ExecContext(t.Context(), `INSERT INTO items VALUES ('a', 'first')`)
	require.ErrorContains(t, err, "read-only transaction")
}

// Open and New refuse a replica that is not a standby of the primary serving the same
// tables, and Close closes only the replica Open dialled.
func TestReplicaOptions(t *testing.T) {
	t.Parallel()
	primary, standby, _ := pgtest.NewWithStandby(t)
	ctx := t.Context()
	tests := []struct {
		name string
		opts func(t *testing.T) postgres.Options
		want error
	}{
		{"a primary", func(t *testing.T) postgres.Options {
			return postgres.Options{Replica: openPool(t, primary)}
		}, refset.ErrInvalidConfig},
		{"another database", func(t *testing.T) postgres.Options {
			return postgres.Options{ReplicaDSN: withDatabase(t, standby, "postgres")}
		}, refset.ErrInvalidConfig},
		{"another search_path", func(t *testing.T) postgres.Options {
			return postgres.Options{ReplicaDSN: pgtest.WithParam(t, standby, "search_path", "public")}
		}, refset.ErrInvalidConfig},
		{"both Replica and ReplicaDSN", func(t *testing.T) postgres.Options {
			return postgres.Options{Replica: openPool(t, standby), ReplicaDSN: standby}
		}, refset.ErrInvalidConfig},
		{"unreachable", func(t *testing.T) postgres.Options {
			return postgres.Options{ReplicaDSN: "postgres://postgres@127.0.0.1:1/x?sslmode=disable"}
		}, refset.ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			db, err := postgres.Open(ctx, primary, tc.opts(t))
			require.ErrorIs(t, err, tc.want)
			require.Nil(t, db)
		})
	}

	t.Run("pgx", func(t *testing.T) {
		db, err := postgres.Open(ctx, primary, postgres.Options{Driver: postgres.DriverPgx, ReplicaDSN: standby, ReplicaWait: longWait})
		require.NoError(t, err)
		defer db.Close()
		require.Equal(t, postgres.DriverPgx, db.Replica().DriverName())
		ok, err := db.ReplicaCaughtUp(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	})

	t.Run("close", func(t *testing.T) {
		db, err := postgres.Open(ctx, primary, postgres.Options{ReplicaDSN: standby})
		require.NoError(t, err)
		owned := db.Replica()
		require.NoError(t, db.Close())
		require.Error(t, owned.PingContext(ctx), "Open's replica is closed")

		mine := openPool(t, standby)
		db, err = postgres.Open(ctx, primary, postgres.Options{Replica: mine})
		require.NoError(t, err)
		require.NoError(t, db.Close())
		require.NoError(t, mine.PingContext(ctx), "the caller's replica stays open")
	})
}

func openPool(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// withDatabase is the URL dsn naming another database.
func withDatabase(t *testing.T, dsn, database string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	u.Path = "/" + database
	return u.String()
}
