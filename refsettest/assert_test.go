package refsettest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/store"
)

// TestAssertions runs each assertion, on each store, where it must pass and where it
// must fail, and checks what a failure says.
//
// The set: g <- a <- b, a chain; b is the chain controller's head, a is still
// pending, the publisher holds g in the set's holds table; o was garbage and has been
// collected; late was added after the collection and is held by nothing.
func TestAssertions(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			w := st.open(t)
			w.add(t, "g", "", w.blocks.Hold("publisher", 0))
			w.add(t, "a", "g", refset.Exec[string](`INSERT INTO pending_blocks (block_id) VALUES (?)`, 1))
			w.add(t, "b", "a", refset.Exec[string](`INSERT INTO chain_heads (block_id) VALUES (?)`, 1))
			w.add(t, "o", "g")
			require.EqualValues(t, 1, w.collect(t).Deleted)
			w.add(t, "late", "")

			c := w.collector
			// The schema-qualified name of a table, as Why names it on Postgres.
			qualified := func(table string) string {
				if w.schema == "" {
					return table
				}
				return w.schema + "." + table
			}
			tests := []struct {
				name    string
				assert  func(tb testing.TB) bool
				wantMsg []string // nil: the assertion must pass
			}{
				{"clean", func(tb testing.TB) bool { return refsettest.AssertClean(tb, c) }, nil},
				{"held by a row named by its key", func(tb testing.TB) bool {
					return refsettest.AssertHeldBy(tb, c, "b", "chain_heads.block_id (block_id='b')")
				}, nil},
				{"held by rows named by table and column, in any order", func(tb testing.TB) bool {
					return refsettest.AssertHeldBy(tb, c, "a", "pending_blocks.block_id", "blocks.prev")
				}, nil},
				{"held by an edge and a hold", func(tb testing.TB) bool {
					return refsettest.AssertHeldBy(tb, c, "g", "blocks.prev (id='a')", "blocks_holds.object_id")
				}, nil},
				{"held by a table named with its schema", func(tb testing.TB) bool {
					return refsettest.AssertHeldBy(tb, c, "b", qualified("chain_heads")+".block_id")
				}, nil},
				{"held by nothing", func(tb testing.TB) bool { return refsettest.AssertHeldBy(tb, c, "late") }, nil},
				{"gone", func(tb testing.TB) bool { return refsettest.AssertGone(tb, c, "o") }, nil},

				{"a wanted holder is missing", func(tb testing.TB) bool {
					return refsettest.AssertHeldBy(tb, c, "b", "chain_heads.block_id", "pending_blocks.block_id")
				}, []string{`AssertHeldBy(b): held by "` + qualified("chain_heads") + `.block_id (block_id='b')"`, `missing: "pending_blocks.block_id"`}},
				{"a holder is not wanted", func(tb testing.TB) bool {
					return refsettest.AssertHeldBy(tb, c, "a", "blocks.prev")
				}, []string{`unexpected: "` + qualified("pending_blocks") + `.block_id (block_id='a')"`}},
				{"the key differs", func(tb testing.TB) bool {
					return refsettest.AssertHeldBy(tb, c, "b", "chain_heads.block_id (block_id='a')")
				}, []string{`missing: "chain_heads.block_id (block_id='a')"`, "unexpected: "}},
				{"two rows wanted, one there", func(tb testing.TB) bool {
					return refsettest.AssertHeldBy(tb, c, "b", "chain_heads.block_id", "chain_heads.block_id")
				}, []string{`missing: "chain_heads.block_id"`}},
				{"another schema", func(tb testing.TB) bool {
					return refsettest.AssertHeldBy(tb, c, "b", "elsewhere.chain_heads.block_id")
				}, []string{`missing: "elsewhere.chain_heads.block_id"`}},
				{"held, but nothing wanted", func(tb testing.TB) bool {
					return refsettest.AssertHeldBy(tb, c, "b")
				}, []string{"want nothing", "unexpected: "}},
				{"a malformed want", func(tb testing.TB) bool {
					return refsettest.AssertHeldBy(tb, c, "b", "chain_heads")
				}, []string{`holder "chain_heads": want "table.column"`}},
				{"held by, but gone", func(tb testing.TB) bool {
					return refsettest.AssertHeldBy(tb, c, "o")
				}, []string{"AssertHeldBy(o): why:", "no object o"}},
				{"gone, but held", func(tb testing.TB) bool {
					return refsettest.AssertGone(tb, c, "b")
				}, []string{`AssertGone(b): it still exists, held by "` + qualified("chain_heads") + `.block_id`}},
				{"gone, but still there unheld", func(tb testing.TB) bool {
					return refsettest.AssertGone(tb, c, "late")
				}, []string{"AssertGone(late): it still exists, held by nothing"}},
				// No object has a nil or zero ID (refset refuses the zero ID), so
				// AssertGone of one would pass having checked nothing: a test that
				// read the ID off a nil token, or a nil pointer to it. Before, it
				// passed on every store.
				{"gone, of a nil ID", func(tb testing.TB) bool {
					return refsettest.AssertGone(tb, c, nil)
				}, []string{"AssertGone(<nil>): a nil or zero ID names no object"}},
				{"gone, of a nil pointer", func(tb testing.TB) bool {
					return refsettest.AssertGone(tb, c, (*string)(nil))
				}, []string{"a nil or zero ID names no object"}},
				{"gone, of the zero ID", func(tb testing.TB) bool {
					return refsettest.AssertGone(tb, c, "")
				}, []string{"a nil or zero ID names no object"}},
			}
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) { checkAssertion(t, tc.assert, tc.wantMsg) })
			}
			// A test checks what its own deferred work left from a t.Cleanup, where
			// tb.Context() is cancelled: each assertion that passes above passes there
			// too. (Registered after the world's database, so it runs before its Close.)
			t.Cleanup(func() {
				for _, tc := range tests {
					if tc.wantMsg == nil && !tc.assert(t) {
						t.Errorf("%s: failed when run from a t.Cleanup", tc.name)
					}
				}
			})
		})
	}
}

// checkAssertion runs assert with a recorder: it must pass when wantMsg is nil, and
// otherwise fail once, with a message holding each of wantMsg, reporting with
// Errorf and returning.
func checkAssertion(t *testing.T, assert func(tb testing.TB) bool, wantMsg []string) {
	t.Helper()
	var ok bool
	rec, returned := run(t, func(tb testing.TB) { ok = assert(tb) })
	require.True(t, returned, "assertions report with Errorf and return, never end the test")
	require.False(t, rec.fatal || rec.skipped)
	if wantMsg == nil {
		require.True(t, ok)
		require.Empty(t, rec.errors)
		return
	}
	require.False(t, ok, "the assertion passed")
	require.Len(t, rec.errors, 1, "one failure, one message")
	for _, m := range wantMsg {
		require.Contains(t, rec.errors[0], m)
	}
}

// TestAssertCleanFindsLeak loses an unreferenced object's review-queue entry, which
// leaves it garbage no Collect will find: AssertClean must fail and name it.
func TestAssertCleanFindsLeak(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			w := st.open(t)
			w.add(t, "kept", "", refset.Exec[string](`INSERT INTO chain_heads (block_id) VALUES (?)`, 1))
			w.add(t, "lost", "")
			require.True(t, refsettest.AssertClean(t, w.collector))

			var queue string
			require.NoError(t, w.db.Reader().QueryRowContext(t.Context(),
				`SELECT queue_table FROM refset_sets WHERE table_name = 'blocks'`).Scan(&queue))
			exec(t, w.db, `DELETE FROM `+queue+` WHERE object_id = 'lost'`)

			var ok bool
			rec, _ := run(t, func(tb testing.TB) { ok = refsettest.AssertClean(tb, w.collector) })
			require.False(t, ok)
			require.Len(t, rec.errors, 1)
			require.Contains(t, rec.errors[0], "AssertClean: the set is not clean: 1 leaked, 0 dangling")
			require.Contains(t, rec.errors[0], "leaked 'lost'")
		})
	}
}

// AssertHeldBy's documentation names a row by its key as "block_id='b1'" on text and
// "id=7" on a number; those wants, verbatim, hold on every store, though PostgreSQL
// renders every value quoted (id='7') and SQLite a number bare (id=7).
func TestAssertHeldByDocumentedKeys(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			w := st.open(t)
			exec(t, w.db, `CREATE TABLE payments (id INTEGER PRIMARY KEY, block_id TEXT NOT NULL REFERENCES blocks (id))`)
			exec(t, w.db, `CREATE INDEX payments_block ON payments (block_id)`)
			w.add(t, "b1", "", refset.Exec[string](`INSERT INTO chain_heads (block_id) VALUES (?)`, 1))
			w.add(t, "paid", "", refset.Exec[string](`INSERT INTO payments (id, block_id) VALUES (7, ?)`, 1))

			require.True(t, refsettest.AssertHeldBy(t, w.collector, "b1", "chain_heads.block_id (block_id='b1')"))
			require.True(t, refsettest.AssertHeldBy(t, w.collector, "paid", "payments.block_id (id=7)"))
			// The key as the failure prints it, pasted back, holds too.
			require.True(t, refsettest.AssertHeldBy(t, w.collector, "paid", "payments.block_id (id='7')"))

			// Another value is another row: quoting must not make keys alike.
			for _, want := range []string{"payments.block_id (id=8)", "payments.block_id (id='8')", "payments.block_id (id=07)", "payments.block_id (id='7 ')"} {
				rec, _ := run(t, func(tb testing.TB) { refsettest.AssertHeldBy(tb, w.collector, "paid", want) })
				require.Len(t, rec.errors, 1, "want %s", want)
				require.Contains(t, rec.errors[0], `missing: "`+want+`"`)
			}
		})
	}
}

// An ID of a Go type the set's ID column does not take names no object: the
// database would compare it loosely and find nothing (SQLite, and lib/pq on a text
// key, answered "no such object"), so AssertGone passed though the object it meant,
// "obj-42", is there, held. Each assertion fails instead, once, naming the type
// given and what the set takes, on each store; the same object asked for by a
// string ID shows it exists. So does a string, "obj-42" or "42", on a set of integer
// IDs, where SQLite compared it loosely and AssertGone passed: only a cleanup.TextID
// is an ID as text, read as the key's type.
func TestAssertWrongIDType(t *testing.T) {
	type blockNumber int
	tests := []struct {
		name    string
		assert  func(tb testing.TB, c *cleanup.Collector) bool
		wantMsg []string // nil: the assertion must pass
	}{
		{"held, by its string ID", func(tb testing.TB, c *cleanup.Collector) bool {
			return refsettest.AssertHeldBy(tb, c, "obj-42", "chain_heads.block_id")
		}, nil},
		{"gone, by its string ID", func(tb testing.TB, c *cleanup.Collector) bool {
			return refsettest.AssertGone(tb, c, "obj-42")
		}, []string{"AssertGone(obj-42): it still exists, held by"}},
		{"gone, of an int", func(tb testing.TB, c *cleanup.Collector) bool {
			return refsettest.AssertGone(tb, c, 42)
		}, []string{"AssertGone(42): an ID of type int names no object of the set, so nothing was checked", "invalid id", "takes a string type"}},
		{"gone, of an int64", func(tb testing.TB, c *cleanup.Collector) bool {
			return refsettest.AssertGone(tb, c, int64(42))
		}, []string{"AssertGone(42): an ID of type int64 names no object"}},
		{"gone, of a named int", func(tb testing.TB, c *cleanup.Collector) bool {
			return refsettest.AssertGone(tb, c, blockNumber(42))
		}, []string{"an ID of type refsettest_test.blockNumber names no object", "takes a string type"}},
		{"gone, of a float", func(tb testing.TB, c *cleanup.Collector) bool {
			return refsettest.AssertGone(tb, c, 42.0)
		}, []string{"an ID of type float64 names no object"}},
		{"held by, of an int", func(tb testing.TB, c *cleanup.Collector) bool {
			return refsettest.AssertHeldBy(tb, c, 42, "chain_heads.block_id")
		}, []string{"AssertHeldBy(42): why:", "an ID of type int", "takes a string type"}},
	}
	// On a set of integer IDs, with the object 42, held: a string is no ID of it,
	// whatever it spells. SQLite compared one loosely and found nothing, so that
	// AssertGone passed having checked nothing.
	integerTests := []struct {
		name    string
		assert  func(tb testing.TB, c *cleanup.Collector) bool
		wantMsg []string
	}{
		{"held, by its int64 ID", func(tb testing.TB, c *cleanup.Collector) bool {
			return refsettest.AssertHeldBy(tb, c, int64(42), "counter_refs.counter_id")
		}, nil},
		{"gone, by its int ID", func(tb testing.TB, c *cleanup.Collector) bool {
			return refsettest.AssertGone(tb, c, 42)
		}, []string{"AssertGone(42): it still exists, held by"}},
		{"gone, of no such int", func(tb testing.TB, c *cleanup.Collector) bool {
			return refsettest.AssertGone(tb, c, 43)
		}, nil},
		{"gone, of a string", func(tb testing.TB, c *cleanup.Collector) bool {
			return refsettest.AssertGone(tb, c, "obj-42")
		}, []string{"AssertGone(obj-42): an ID of type string names no object of the set, so nothing was checked", "takes an integer type"}},
		{"gone, of the string of its ID", func(tb testing.TB, c *cleanup.Collector) bool {
			return refsettest.AssertGone(tb, c, "42")
		}, []string{"AssertGone(42): an ID of type string names no object", "takes an integer type"}},
		{"gone, of the string of no such ID", func(tb testing.TB, c *cleanup.Collector) bool {
			return refsettest.AssertGone(tb, c, "43")
		}, []string{"AssertGone(43): an ID of type string names no object"}},
		{"held by, of a string", func(tb testing.TB, c *cleanup.Collector) bool {
			return refsettest.AssertHeldBy(tb, c, "42", "counter_refs.counter_id")
		}, []string{"AssertHeldBy(42): why:", "an ID of type string", "takes an integer type"}},
		{"held by, of its text", func(tb testing.TB, c *cleanup.Collector) bool {
			return refsettest.AssertHeldBy(tb, c, cleanup.TextID("42"), "counter_refs.counter_id")
		}, nil},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			w := st.open(t)
			w.add(t, "obj-42", "", refset.Exec[string](`INSERT INTO chain_heads (block_id) VALUES (?)`, 1))
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					checkAssertion(t, func(tb testing.TB) bool { return tc.assert(tb, w.collector) }, tc.wantMsg)
				})
			}
			exec(t, w.db, `CREATE TABLE counters (id BIGINT PRIMARY KEY)`)
			exec(t, w.db, `CREATE TABLE counter_refs (counter_id BIGINT PRIMARY KEY REFERENCES counters (id))`)
			_, err := store.NewStore[counter, int64](t.Context(), w.db, store.Config{Table: "counters"})
			require.NoError(t, err)
			c, err := store.NewCollector(t.Context(), w.db, cleanup.Config{Table: "counters", Grace: grace})
			require.NoError(t, err)
			exec(t, w.db, `INSERT INTO counters (id) VALUES (42)`)
			exec(t, w.db, `INSERT INTO counter_refs (counter_id) VALUES (42)`)
			for _, tc := range integerTests {
				t.Run("integer/"+tc.name, func(t *testing.T) {
					checkAssertion(t, func(tb testing.TB) bool { return tc.assert(tb, c) }, tc.wantMsg)
				})
			}
		})
	}
}

// counter is an object of a set of integer IDs.
type counter struct {
	N int64 `db:"id"`
}

func (c counter) ID() int64 { return c.N }
