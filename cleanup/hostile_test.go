package cleanup_test

import (
	"context"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests use clean-up as a hostile caller or a careless operator would.

// hostileSet opens a database of b with a set on notes (id TEXT), and a table plain
// that is no set.
func hostileSet(tb testing.TB, b testdb.Backend) refset.Database {
	tb.Helper()
	return hostileSetWith(tb, b, testdb.Options{})
}

// hostileSetWith is hostileSet on a database opened with opts.
func hostileSetWith(tb testing.TB, b testdb.Backend, opts testdb.Options) refset.Database {
	tb.Helper()
	db := b.Open(tb, opts)
	hexec(tb, db, `CREATE TABLE notes (id TEXT PRIMARY KEY)`, `CREATE TABLE plain (id TEXT PRIMARY KEY)`)
	_, err := store.NewStore[item, string](tb.Context(), db, store.Config{Table: "notes"})
	require.NoError(tb, err)
	return db
}

// hexec runs stmts in one transaction.
func hexec(tb testing.TB, db refset.Database, stmts ...string) {
	tb.Helper()
	require.NoError(tb, refset.InTx(tb.Context(), db, func(ctx context.Context, tx refset.Tx) error {
		for _, q := range stmts {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return fmt.Errorf("%s: %w", q, err)
			}
		}
		return nil
	}))
}

// hpast is a time in the past, as the review queue keeps time.
func hpast(b testdb.Backend) string {
	if b.Postgres {
		return "now() - interval '1 second'"
	}
	return "0" // SQLite keeps Unix milliseconds
}

// hcount counts the rows of table that where selects.
func hcount(tb testing.TB, db refset.Database, table, where string) int64 {
	tb.Helper()
	var n int64
	require.NoError(tb, db.Reader().QueryRowContext(tb.Context(), "SELECT count(*) FROM "+table+" WHERE "+where).Scan(&n))
	return n
}

// collectedCount is what refset_collected says was collected.
func collectedCount(tb testing.TB, db refset.Database) int64 {
	tb.Helper()
	var n int64
	require.NoError(tb, db.Reader().QueryRowContext(tb.Context(), `SELECT coalesce(sum(collected), 0) FROM refset_collected`).Scan(&n))
	return n
}

// loose stores n objects prefix0000.. that nothing references, and makes every
// queued review due.
func loose(tb testing.TB, b testdb.Backend, db refset.Database, prefix string, n int) {
	tb.Helper()
	var stmts []string
	for i := range n {
		stmts = append(stmts, fmt.Sprintf(`INSERT INTO notes (id) VALUES ('%s%04d')`, prefix, i))
	}
	hexec(tb, db, append(stmts, "UPDATE notes_review SET review_after = "+hpast(b))...)
}

// slowDeletes makes every delete of a note take a few milliseconds (Postgres).
func slowDeletes(tb testing.TB, db refset.Database) {
	tb.Helper()
	hexec(tb, db, `CREATE FUNCTION slow_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN PERFORM pg_sleep(0.005); RETURN OLD; END $$`,
		`CREATE TRIGGER slow_delete BEFORE DELETE ON notes FOR EACH ROW EXECUTE FUNCTION slow_delete()`)
}

// Workers bounds how many batches run at once; it does not make a Collect run that
// many: with little due, a Collect costs a batch or two whatever Workers says, and
// with much due, every due object still goes in one call.
func TestHostileManyWorkers(t *testing.T) {
	cases := []struct {
		name       string
		cfg        cleanup.Config
		due        int
		maxBatches int
	}{
		{"nothing due", cleanup.Config{Workers: 4096}, 0, 2},
		{"a few due", cleanup.Config{Workers: 4096}, 3, 2},
		{"many batches due", cleanup.Config{Workers: 4096, BatchSize: 10}, 95, 30},
		{"one worker", cleanup.Config{Workers: 1, BatchSize: 10}, 95, 11},
	}
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ}, func(t *testing.T, b testdb.Backend) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				db := hostileSet(t, b)
				tc.cfg.Table = "notes"
				c, err := cleanup.Install(t.Context(), db, tc.cfg)
				require.NoError(t, err)
				loose(t, b, db, "n", tc.due)
				s, err := c.Collect(t.Context())
				require.NoError(t, err)
				assert.Equal(t, int64(tc.due), s.Deleted, "%v", s)
				assert.LessOrEqual(t, s.Batches, tc.maxBatches, "%v", s)
				assert.Zero(t, hcount(t, db, "notes", "true"), "every due object went in one Collect")
			})
		}
	})
}

// A pass that Run's context cut short, after some of its batches committed, is
// reported to the callback: the callback's totals are what was collected.
func TestHostileRunReportsInterruptedPass(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.LibPQ, testdb.Pgx}, func(t *testing.T, b testdb.Backend) {
		db := hostileSet(t, b)
		c, err := cleanup.Install(t.Context(), db, cleanup.Config{Table: "notes", BatchSize: 10, Workers: 1})
		require.NoError(t, err)
		loose(t, b, db, "n", 200)
		slowDeletes(t, db) // 200 deletes take a second, the context 300ms

		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		var told cleanup.Stats
		var errs []error
		require.NoError(t, c.Run(ctx, time.Hour, func(s cleanup.Stats, err error) {
			told.Add(s)
			errs = append(errs, err)
		}))
		gone := 200 - hcount(t, db, "notes", "true")
		require.Positive(t, gone, "the pass committed batches before the context ended")
		assert.Less(t, gone, int64(200), "the context ended mid-pass")
		assert.Equal(t, gone, told.Deleted, "the callback was told of every deletion")
		assert.Equal(t, gone, collectedCount(t, db))
		for _, err := range errs {
			assert.ErrorIs(t, err, context.DeadlineExceeded)
		}
	})
}

// A Collect whose context ends mid-batch leaves nothing half done: what it says it
// deleted is gone and counted, every object left is still queued (Check finds nothing
// leaked), and the next Collect finishes the work.
func TestHostileCollectCancelledMidBatch(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.LibPQ, testdb.Pgx}, func(t *testing.T, b testdb.Backend) {
		ctx := t.Context()
		db := hostileSet(t, b)
		c, err := cleanup.Install(ctx, db, cleanup.Config{Table: "notes", BatchSize: 20, Workers: 2})
		require.NoError(t, err)
		loose(t, b, db, "n", 200)
		slowDeletes(t, db)

		short, cancel := context.WithTimeout(ctx, 250*time.Millisecond)
		defer cancel()
		s, err := c.Collect(short)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		left := hcount(t, db, "notes", "true")
		assert.Equal(t, 200-s.Deleted, left, "the stats are those of the batches that committed: %v", s)
		assert.Equal(t, s.Deleted, collectedCount(t, db))
		assert.Equal(t, left, hcount(t, db, "notes_review", "true"), "every object left is still queued")
		r, err := c.Check(ctx)
		require.NoError(t, err)
		assert.True(t, r.OK(), "%+v", r)

		s2, err := c.Collect(ctx)
		require.NoError(t, err)
		assert.Equal(t, left, s2.Deleted)
		assert.Zero(t, hcount(t, db, "notes", "true"))
		assert.Equal(t, int64(200), collectedCount(t, db))
	})
}

// collectedObserver adds up what the database's Observer is told clean-up collected.
type collectedObserver struct {
	refset.NoObserver
	mu                    sync.Mutex
	deleted, holdsExpired int64
	batches, calls        int
	ctxErr                error
}

func (o *collectedObserver) Collected(ctx context.Context, deleted, holdsExpired int64, batches int, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.deleted += deleted
	o.holdsExpired += holdsExpired
	o.batches += batches
	o.calls++
	o.ctxErr = ctx.Err()
}

// An Observer's totals are what clean-up deleted, also when a Collect's context
// ended after some of its batches committed (otelrefset's refset.collected must not
// fall short of refset_collected), and a Collect that committed nothing tells it
// nothing.
func TestHostileObserverHearsCutShortCollect(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.LibPQ, testdb.Pgx}, func(t *testing.T, b testdb.Backend) {
		obs := &collectedObserver{}
		db := hostileSetWith(t, b, testdb.Options{Observer: obs})
		c, err := cleanup.Install(t.Context(), db, cleanup.Config{Table: "notes", BatchSize: 10, Workers: 1})
		require.NoError(t, err)
		loose(t, b, db, "n", 200)
		slowDeletes(t, db) // 200 deletes take a second, the context 300ms

		ended, cancel := context.WithCancel(t.Context())
		cancel()
		_, err = c.Collect(ended)
		require.ErrorIs(t, err, context.Canceled)
		assert.Zero(t, obs.calls, "a Collect that committed nothing told the Observer")

		short, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		s, err := c.Collect(short)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Positive(t, s.Deleted, "the Collect committed batches before its context ended")
		assert.Equal(t, collectedCount(t, db), obs.deleted, "the Observer was told of every deletion")
		assert.Equal(t, s.Batches, obs.batches)
		assert.NoError(t, obs.ctxErr, "the Observer is not handed the ended context")

		_, err = c.Collect(t.Context())
		require.NoError(t, err)
		assert.Equal(t, int64(200), obs.deleted)
		assert.Equal(t, 2, obs.calls)
	})
}

// Two collectors, each on its own pool, collect one set at once: nothing held is
// deleted, nothing twice, and their totals are what went.
func TestHostileRacingCollectors(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.LibPQ, testdb.Pgx}, func(t *testing.T, b testdb.Backend) {
		ctx := t.Context()
		db := hostileSet(t, b)
		other := testdb.PlaceOf(t, db).Open(t, testdb.Options{})
		var cs []*cleanup.Collector
		for i, on := range []refset.Database{db, other} {
			c, err := cleanup.Install(ctx, on, cleanup.Config{Table: "notes", BatchSize: 5 + i, Workers: 3})
			require.NoError(t, err)
			cs = append(cs, c)
		}
		loose(t, b, db, "n", 400)
		var holds []string
		for i := 0; i < 400; i += 4 {
			holds = append(holds, fmt.Sprintf(`INSERT INTO notes_holds (holder, object_id) VALUES ('h%d', 'n%04d')`, i, i))
		}
		hexec(t, db, holds...)

		var wg sync.WaitGroup
		totals := make([]cleanup.Stats, len(cs))
		errs := make([]error, len(cs))
		for i, c := range cs {
			wg.Go(func() {
				for range 3 {
					s, err := c.Collect(ctx)
					totals[i].Add(s)
					if err != nil {
						errs[i] = err
						return
					}
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		assert.Equal(t, int64(100), hcount(t, db, "notes", "true"), "the held objects, and only they, are left")
		assert.Equal(t, int64(100), hcount(t, db, "notes", "id IN (SELECT object_id FROM notes_holds)"))
		assert.Equal(t, int64(300), totals[0].Deleted+totals[1].Deleted, "nothing was counted twice")
		assert.Equal(t, int64(300), collectedCount(t, db))
	})
}

// Why, WhyAll and Object given an ID the driver cannot send (a type it does not
// take), or one of a type the text column does not take (a number, which SQLite and
// lib/pq would compare loosely and find nothing), fail with refset.ErrInvalidID on
// every driver, naming the type; an ID of a type it takes that names nothing is
// ErrNotFound. (TestHostileWhyIDType judges the types one by one.)
func TestHostileWhyBadID(t *testing.T) {
	cases := []struct {
		name string
		id   any
		want error
	}{
		{"struct", struct{}{}, refset.ErrInvalidID},
		{"map", map[string]int{}, refset.ErrInvalidID},
		{"number", 42, refset.ErrInvalidID},
		{"no such text", "nosuch", refset.ErrNotFound},
		// An ID is shown quoted and cut in the message (sentinel.ID).
		{"no such text with a newline", "no\nsuch", refset.ErrNotFound},
		{"no such text of a megabyte", strings.Repeat("x", 1<<20), refset.ErrNotFound},
		{"text of no number", cleanup.TextID("no\n" + strings.Repeat("x", 1<<20)), refset.ErrNotFound},
	}
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ, testdb.Pgx}, func(t *testing.T, b testdb.Backend) {
		db := hostileSet(t, b)
		c, err := cleanup.Install(t.Context(), db, cleanup.Config{Table: "notes"})
		require.NoError(t, err)
		for _, tc := range cases {
			want := tc.want
			for name, call := range map[string]func() error{
				"Why":    func() error { _, err := c.Why(t.Context(), tc.id); return err },
				"WhyAll": func() error { _, err := c.WhyAll(t.Context(), tc.id); return err },
				"Object": func() error { _, err := c.Object(t.Context(), tc.id); return err },
			} {
				t.Run(tc.name+"/"+name, func(t *testing.T) {
					err := call()
					require.ErrorIs(t, err, want)
					if want == refset.ErrInvalidID {
						assert.Contains(t, err.Error(), fmt.Sprintf("%T", tc.id))
					}
					assert.NotContains(t, err.Error(), "\n")
					assert.Less(t, len(err.Error()), 1000, "%.200s...", err)
				})
			}
		}
	})
}

// counted is an object of a set whose IDs are integers.
type counted struct {
	N int64 `db:"id"`
}

func (c counted) ID() int64 { return c.N }

// Named ID types, judged by their underlying type; and types that send themselves
// (driver.Valuer), taken whatever their kind: what they send is their own affair.
type (
	noteID    string
	counterID int64
	// valuedNote is an int that sends itself as the note "obj-<n>".
	valuedNote int
)

func (v valuedNote) Value() (driver.Value, error) { return fmt.Sprintf("obj-%d", v), nil }

// hashedObj is an object of a set of byte-array IDs.
type hashedObj struct {
	Hash [32]byte `db:"id"`
}

func (o hashedObj) ID() [32]byte { return o.Hash }

// Why and Object take an ID of a Go type the set's ID column takes, as
// store.NewStore judges a set's ID type, whatever its width, name or pointer, and
// refuse any other with refset.ErrInvalidID naming the type given and what the
// column takes, on each store, for a text key (notes: "obj-42") and an integer one
// (counters: 42), where the object exists. SQLite (and lib/pq, on text) compared such
// an ID loosely and answered ErrNotFound, of an object that exists, so that
// refsettest.AssertGone passed having checked nothing. A plain string is a string
// like any other, refused on an integer key ("obj-42", and "42" too). A
// cleanup.TextID is an ID as text (the refset command's, the console's), read as the
// key's type on every key: on an integer key the text of an integer names that
// integer, and text that is none is refused with refset.ErrInvalidID, not answered
// ErrNotFound (SQLite would compare it loosely and find nothing); on a bytea key
// PostgreSQL reads its hex form, on each driver.
func TestHostileWhyIDType(t *testing.T) {
	note, at := "obj-42", time.Date(2024, 1, 2, 0, 0, 0, 0, time.UTC)
	hash := [32]byte{1, 2, 0xfe}
	cases := []struct {
		name   string
		table  string
		id     any
		want   error    // nil: found
		says   []string // for refset.ErrInvalidID, besides the type given
		sqlite error    // not nil: what SQLite answers where PostgreSQL finds the object or answers want
	}{
		{"text/string", "notes", "obj-42", nil, nil, nil},
		{"text/named string", "notes", noteID("obj-42"), nil, nil, nil},
		{"text/pointer to a string", "notes", &note, nil, nil, nil},
		{"text/valuer of an int kind", "notes", valuedNote(42), nil, nil, nil},
		{"text/no such string", "notes", "obj-43", refset.ErrNotFound, nil, nil},
		{"text/int", "notes", 42, refset.ErrInvalidID, []string{`ID column "id"`, "takes a string type or a type implementing driver.Valuer"}, nil},
		{"text/int64", "notes", int64(42), refset.ErrInvalidID, []string{"takes a string type"}, nil},
		{"text/named int", "notes", counterID(42), refset.ErrInvalidID, []string{"takes a string type"}, nil},
		{"text/float", "notes", 4.2, refset.ErrInvalidID, []string{"takes a string type"}, nil},
		{"text/bool", "notes", true, refset.ErrInvalidID, []string{"takes a string type"}, nil},
		{"text/time", "notes", at, refset.ErrInvalidID, []string{"takes a string type"}, nil},
		{"text/nil", "notes", nil, refset.ErrInvalidID, []string{"a nil ID"}, nil},
		{"text/nil pointer", "notes", (*string)(nil), refset.ErrInvalidID, []string{"a nil ID"}, nil},
		{"text/text", "notes", cleanup.TextID("obj-42"), nil, nil, nil},
		{"text/text of no such string", "notes", cleanup.TextID("obj-43"), refset.ErrNotFound, nil, nil},
		{"text/text of an integer", "notes", cleanup.TextID("42"), refset.ErrNotFound, nil, nil},

		{"integer/int64", "counters", int64(42), nil, nil, nil},
		{"integer/int", "counters", 42, nil, nil, nil},
		{"integer/int32", "counters", int32(42), nil, nil, nil},
		{"integer/uint16", "counters", uint16(42), nil, nil, nil},
		{"integer/named int", "counters", counterID(42), nil, nil, nil},
		{"integer/no such int", "counters", int64(43), refset.ErrNotFound, nil, nil},
		// A plain string is a string: no integer, whatever it spells.
		{"integer/string", "counters", "obj-42", refset.ErrInvalidID, []string{"takes an integer type", "cleanup.TextID"}, nil},
		{"integer/string of the integer", "counters", "42", refset.ErrInvalidID, []string{"takes an integer type"}, nil},
		{"integer/pointer to a string", "counters", &note, refset.ErrInvalidID, []string{"takes an integer type"}, nil},
		// A TextID is the ID as text (the refset command's, the console's), read as
		// the key's type.
		{"integer/text of the integer", "counters", cleanup.TextID("42"), nil, nil, nil},
		{"integer/text of no such integer", "counters", cleanup.TextID("43"), refset.ErrNotFound, nil, nil},
		{"integer/text of no integer", "counters", cleanup.TextID("obj-42"), refset.ErrInvalidID, []string{`"obj-42", given as text`}, nil},
		{"integer/empty text", "counters", cleanup.TextID(""), refset.ErrInvalidID, []string{`"", given as text`}, nil},
		{"integer/text of a fraction", "counters", cleanup.TextID("42.5"), refset.ErrInvalidID, []string{`"42.5", given as text`}, nil},
		{"integer/text out of range", "counters", cleanup.TextID("99999999999999999999"), refset.ErrInvalidID, []string{"given as text"}, nil},
		// PostgreSQL reads a bigint's input syntax; SQLite takes an integer as Go
		// writes it, no other spelling of it.
		{"integer/text of the integer spelled otherwise", "counters", cleanup.TextID(" +042"), nil, nil, refset.ErrInvalidID},

		{"bytes/array", "hashes", hash, nil, nil, nil},
		// SQLite's BLOB key takes any ID, as NewStore does (see cleanup.TextID).
		{"bytes/string", "hashes", "obj-42", refset.ErrInvalidID, []string{"takes a byte array"}, refset.ErrNotFound},
		// PostgreSQL reads bytea's hex form; SQLite's BLOB key compares values as
		// they are, so text names no bytes (see cleanup.TextID).
		{"bytes/text", "hashes", cleanup.TextID(`\x0102fe` + strings.Repeat("00", 29)), nil, nil, refset.ErrNotFound},
		{"bytes/text of no such bytes", "hashes", cleanup.TextID(`\x0102fd` + strings.Repeat("00", 29)), refset.ErrNotFound, nil, nil},
		{"bytes/text of no bytes", "hashes", cleanup.TextID(`\xzz`), refset.ErrInvalidID, []string{"given as text"}, refset.ErrNotFound},
		{"integer/named string", "counters", noteID("42"), refset.ErrInvalidID, []string{"takes an integer type"}, nil},
		{"integer/float", "counters", 42.0, refset.ErrInvalidID, []string{"takes an integer type"}, nil},
		{"integer/time", "counters", at, refset.ErrInvalidID, []string{"takes an integer type"}, nil},
	}
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ, testdb.Pgx}, func(t *testing.T, b testdb.Backend) {
		db := hostileSet(t, b)
		bytes := map[bool]string{false: "BLOB", true: "BYTEA"}[b.Postgres]
		hexec(t, db, `CREATE TABLE counters (id BIGINT PRIMARY KEY)`, `CREATE TABLE hashes (id `+bytes+` PRIMARY KEY)`)
		_, err := store.NewStore[counted, int64](t.Context(), db, store.Config{Table: "counters"})
		require.NoError(t, err)
		_, err = store.NewStore[hashedObj, [32]byte](t.Context(), db, store.Config{Table: "hashes"})
		require.NoError(t, err)
		hexec(t, db, `INSERT INTO notes (id) VALUES ('obj-42')`, `INSERT INTO counters (id) VALUES (42)`)
		require.NoError(t, refset.InTx(t.Context(), db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, db.Driver().Rebind(`INSERT INTO hashes (id) VALUES (?)`), hash[:])
			return err
		}))
		collectors := map[string]*cleanup.Collector{}
		for _, table := range []string{"notes", "counters", "hashes"} {
			collectors[table], err = cleanup.Install(t.Context(), db, cleanup.Config{Table: table})
			require.NoError(t, err)
		}
		for _, tc := range cases {
			c := collectors[tc.table]
			for name, call := range map[string]func() error{
				"Why":    func() error { _, err := c.Why(t.Context(), tc.id); return err },
				"Object": func() error { _, err := c.Object(t.Context(), tc.id); return err },
			} {
				t.Run(tc.name+"/"+name, func(t *testing.T) {
					err, want := call(), tc.want
					if tc.sqlite != nil && !b.Postgres {
						want = tc.sqlite
					}
					if want == nil {
						require.NoError(t, err)
						return
					}
					require.ErrorIs(t, err, want)
					if want == refset.ErrInvalidID {
						assert.NotErrorIs(t, err, refset.ErrSchema, "the caller's ID is wrong, not the schema")
						if _, text := tc.id.(cleanup.TextID); !text {
							assert.Contains(t, err.Error(), fmt.Sprintf("%T", tc.id), "names the type given")
						}
						for _, s := range tc.says {
							assert.Contains(t, err.Error(), s)
						}
					}
				})
			}
		}
	})
}

// A configuration that cannot work is refused with ErrInvalidConfig, saying what was
// wrong, and installs nothing; a Grace below the millisecond the trigger keeps it in
// is one millisecond, where it was installed as 0, which reads as no grace at all.
func TestHostileConfigs(t *testing.T) {
	db := hostileSet(t, testdb.SQLite)
	for _, tc := range []struct {
		name string
		cfg  cleanup.Config
	}{
		{"negative grace", cleanup.Config{Table: "notes", Grace: -time.Second}},
		{"negative batch", cleanup.Config{Table: "notes", BatchSize: -1}},
		{"negative workers", cleanup.Config{Table: "notes", Workers: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := cleanup.Install(t.Context(), db, tc.cfg)
			require.ErrorIs(t, err, refset.ErrInvalidConfig)
			assert.Contains(t, err.Error(), "negative")
			assert.Zero(t, hcount(t, db, "sqlite_master", "type = 'trigger'"), "nothing installed")
		})
	}
	t.Run("grace below a millisecond", func(t *testing.T) {
		_, err := cleanup.Install(t.Context(), db, cleanup.Config{Table: "notes", Grace: time.Microsecond})
		require.NoError(t, err)
		cfg, err := cleanup.Installed(t.Context(), db, "notes")
		require.NoError(t, err)
		assert.Equal(t, time.Millisecond, cfg.Grace, "the grace installed")
	})
}

// pinsSQL creates a holder table pins whose rows reference notes (indexed), declared
// with onDelete (RESTRICT, SET NULL, ...) and extra (DEFERRABLE ...).
func pinsSQL(onDelete, extra string) []string {
	return []string{`CREATE TABLE pins (id TEXT PRIMARY KEY, note TEXT REFERENCES notes (id) ON DELETE ` + onDelete + ` ` + extra + `)`,
		`CREATE INDEX pins_note ON pins (note)`}
}

// refsetTriggers counts the triggers refset made on table.
func refsetTriggers(tb testing.TB, b testdb.Backend, db refset.Database, table string) int64 {
	tb.Helper()
	if b.Postgres {
		return hcount(tb, db, "pg_trigger", "tgrelid = '"+table+"'::regclass AND tgname LIKE 'refset%'")
	}
	return hcount(tb, db, "sqlite_schema", "type = 'trigger' AND tbl_name = '"+table+"' AND name LIKE 'refset%'")
}

// A holder table dropped or altered behind a running collector's back (an operator's
// migration) does not stop it: the next Collect reads the catalog again and goes on,
// what the table held is reviewed again, and garbage is collected, once the grace
// period the set has ends.
func TestHostileHolderTableChangedWhileRunning(t *testing.T) {
	cases := []struct {
		name   string
		change []string
		// holder is the table that holds the pinned note afterwards, if any
		holder string
	}{
		{"dropped", []string{`DROP TABLE pins`}, ""},
		{"renamed", []string{`ALTER TABLE pins RENAME TO pins2`}, "pins2"},
		{"column renamed", []string{`ALTER TABLE pins RENAME COLUMN note TO note2`}, "pins"},
	}
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ}, func(t *testing.T, b testdb.Backend) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ctx := t.Context()
				db := hostileSet(t, b)
				hexec(t, db, pinsSQL("RESTRICT", "")...)
				c, err := cleanup.Install(ctx, db, cleanup.Config{Table: "notes", Grace: time.Millisecond})
				require.NoError(t, err)
				loose(t, b, db, "n", 4)
				hexec(t, db, `INSERT INTO pins (id, note) VALUES ('p', 'n0000')`)
				s, err := c.Collect(ctx)
				require.NoError(t, err)
				require.Equal(t, int64(3), s.Deleted, "%v", s)

				loose(t, b, db, "m", 2)
				hexec(t, db, tc.change...)
				// Objects are added between the change and the collector's next pass:
				// the set's trigger for new objects works whatever became of the
				// tables it knew, and queues them.
				loose(t, b, db, "j", 2)
				s, err = c.Collect(ctx)
				require.NoError(t, err, "a holder table changed is no reason to stop collecting")
				assert.GreaterOrEqual(t, s.Deleted, int64(4), "the objects added before and after the change: %v", s)
				if tc.holder != "" {
					// The changed table has refset's triggers for what it is now, and
					// none left of what it was.
					assert.Equal(t, int64(2), refsetTriggers(t, b, db, tc.holder), "refset's triggers on %s", tc.holder)
				}
				loose(t, b, db, "k", 2)
				// What the table held may be garbage now: it is reviewed again.
				time.Sleep(5 * time.Millisecond)
				_, err = c.Collect(ctx)
				require.NoError(t, err)
				if tc.holder == "" {
					assert.Zero(t, hcount(t, db, "notes", "true"), "the note the dropped table held is collected")
				} else {
					assert.Equal(t, int64(1), hcount(t, db, "notes", "true"), "the pinned note stays")
				}
				r, err := c.Check(ctx)
				require.NoError(t, err)
				assert.True(t, r.OK(), "%+v", r)
				if tc.holder != "" {
					// The changed table's writes work, and its deletes still queue.
					hexec(t, db, `DELETE FROM `+tc.holder)
					hexec(t, db, "UPDATE notes_review SET review_after = "+hpast(b))
					_, err = c.Collect(ctx)
					require.NoError(t, err)
					assert.Zero(t, hcount(t, db, "notes", "true"), "the note is collected once its pin goes")
				}
			})
		}
	})
}

// A key added while a collector runs that the database does not make refuse a delete
// (ON DELETE SET NULL, a deferred key on SQLite) is a holder as much as one Install
// found: the collector never deletes what its rows reference.
func TestHostileNewKeyThatDoesNotRefuse(t *testing.T) {
	cases := []struct {
		name     string
		onDelete string
		extra    string
	}{
		{"set null", "SET NULL", ""},
		{"set default", "SET DEFAULT", ""},
		{"deferred restrict", "NO ACTION", "DEFERRABLE INITIALLY DEFERRED"},
		{"restrict", "RESTRICT", ""},
	}
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ}, func(t *testing.T, b testdb.Backend) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ctx := t.Context()
				db := hostileSet(t, b)
				c, err := cleanup.Install(ctx, db, cleanup.Config{Table: "notes"})
				require.NoError(t, err)
				hexec(t, db, pinsSQL(tc.onDelete, tc.extra)...)
				loose(t, b, db, "n", 3)
				hexec(t, db, `INSERT INTO pins (id, note) VALUES ('p', 'n0001')`)
				s, err := c.Collect(ctx)
				if err != nil {
					// Once, perhaps: the collector found the key; never again.
					_, err = c.Collect(ctx)
				}
				require.NoError(t, err, "%v", s)
				assert.Equal(t, int64(1), hcount(t, db, "notes", "id = 'n0001'"), "the pinned note stays")
				assert.Equal(t, int64(1), hcount(t, db, "pins", "note = 'n0001'"), "the pin still references it")
				assert.Zero(t, hcount(t, db, "notes", "id <> 'n0001'"), "the notes nothing pins are collected")
			})
		}
	})
}

// A collector started late finds the work left for it and does it all: objects a
// program stored before any Install, holds that expired while no collector ran, a
// queue that a collector of a node since restarted left overdue. What nothing holds
// goes once its grace period ends, what a live hold holds stays, and Check is clean
// before and after.
func TestHostileLateStart(t *testing.T) {
	const grace = 20 * time.Millisecond
	cases := []struct {
		name string
		// restart: a collector was installed, and collected once, before the
		// objects and holds were written and the collector under test installed.
		restart bool
	}{
		{"first install", false},
		{"restarted node", true},
	}
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ}, func(t *testing.T, b testdb.Backend) {
		expired, live := "0", "9999999999999"
		if b.Postgres {
			expired, live = "now() - interval '1 hour'", "now() + interval '1 hour'"
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ctx := t.Context()
				db := hostileSet(t, b)
				if tc.restart {
					c, err := cleanup.Install(ctx, db, cleanup.Config{Table: "notes", Grace: grace})
					require.NoError(t, err)
					_, err = c.Collect(ctx)
					require.NoError(t, err)
				}
				var stmts []string
				for i := range 30 {
					stmts = append(stmts, fmt.Sprintf(`INSERT INTO notes (id) VALUES ('n%04d')`, i))
				}
				for i := 0; i < 30; i += 3 {
					stmts = append(stmts, fmt.Sprintf(`INSERT INTO notes_holds (holder, object_id, expires_at) VALUES ('e%d', 'n%04d', %s)`, i, i, expired),
						fmt.Sprintf(`INSERT INTO notes_holds (holder, object_id, expires_at) VALUES ('l%d', 'n%04d', %s)`, i+1, i+1, live))
				}
				hexec(t, db, stmts...)
				if tc.restart {
					// The node was down long enough for every review to fall due.
					hexec(t, db, "UPDATE notes_review SET review_after = "+hpast(b))
				}
				c, err := cleanup.Install(ctx, db, cleanup.Config{Table: "notes", Grace: grace, BatchSize: 4})
				require.NoError(t, err)
				r, err := c.Check(ctx)
				require.NoError(t, err)
				assert.True(t, r.OK(), "%+v", r)
				var total cleanup.Stats
				require.Eventually(t, func() bool {
					s, err := c.Collect(ctx)
					require.NoError(t, err)
					total.Add(s)
					return hcount(t, db, "notes", "true") == 10
				}, 5*time.Second, 5*time.Millisecond, "the objects nothing holds are collected")
				assert.Equal(t, int64(10), total.HoldsExpired, "%v", total)
				assert.Equal(t, int64(20), total.Deleted, "%v", total)
				assert.Equal(t, int64(10), hcount(t, db, "notes", "id IN (SELECT object_id FROM notes_holds)"), "the live holds' objects stay")
				r, err = c.Check(ctx)
				require.NoError(t, err)
				assert.True(t, r.OK(), "%+v", r)
			})
		}
	})
}
