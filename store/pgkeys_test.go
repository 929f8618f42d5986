package store_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/require"
)

// pgKeyIDs are string IDs at the edges of what PostgreSQL's key types that take a
// string ID type keep as written.
var pgKeyIDs = []string{
	// numeric
	"12", "0012", "+12", " 12 ", " 12", "12 ", "1e5", "-0", "-12", "12.", ".5", "0.5", "12.0", "12.00", "12.345", "12.349",
	"12.35", "1.5", "1.50", "-0.00", "NaN", "nan", "Infinity", "-Infinity", "inf", "99999999.99", "123456789012", "abc",
	// uuid
	"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "D0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
	"{b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", "c0eebc999c0b4ef8bb6d6bb9bd380a11",
	// text: padding, trailing spaces, length, case
	"abcd", "ab", "ab ", "ab  ", "abcd ", "abcde", "ABCD", "Abcd", "AB", "ñand", "ÑAND", "x y", "x y ",
	strings.Repeat("n", 63), strings.Repeat("n", 64), strings.Repeat("ü", 31), strings.Repeat("ü", 32),
}

// pgKeyTypes are the key types tried, as CREATE TABLE writes them; text keeps every
// string ID and checks none.
var pgKeyTypes = []string{"numeric", "numeric(20,0)", "numeric(10,2)", "uuid", "char(4)", "bpchar", "varchar(4)",
	"name", "text"}

// A PostgreSQL key type that takes a string ID type but would store a string as
// another value (numeric's "0012" as 12, "12.345" in numeric(10,2) as 12.35; uuid's
// upper case as lower case; char(4)'s "ab" as "ab  "; varchar(4)'s "abcd " as
// "abcd"; name's 64 bytes as 63), or as one equal to another's (bpchar's "ab " and
// "ab"; numeric's "12.0" and "12"), refuses each such ID with refset.ErrInvalidID that
// names the ID, the column, its type and what to do, on every call that sends it,
// before anything is written; it takes every other string, which reads back as
// written. What the server does with each string is asked of the server itself, in a
// column of the same type: the test holds wherever the check and PostgreSQL part.
// (citext, whose type NewStore reads as public.citext on a test's schema and does
// not take, is checked against the server in storesql's TestPostgresCitextCase.)
func TestPostgresKeysKeepStringIDs(t *testing.T) {
	eachNewStoreBackend(t, func(t *testing.T, b newStoreBackend) {
		if !b.postgres {
			t.Skip("PostgreSQL's key types (SQLite's: store/sqlite's TestNumericKeyKeepsStringIDs)")
		}
		for _, typ := range pgKeyTypes {
			t.Run(typ, func(t *testing.T) { testPostgresKeyKeepsStringIDs(t, b, typ) })
		}
	})
}

// pgKept is what PostgreSQL makes of a string in a key column.
type pgKept struct {
	back   string // as the driver reads it back
	failed bool   // the server refused it
}

func testPostgresKeyKeepsStringIDs(t *testing.T, b newStoreBackend, typ string) {
	ctx := t.Context()
	db := b.open(t)
	pool := db.Driver().Pool()
	for _, q := range []string{
		fmt.Sprintf(`CREATE TABLE objs (id %s PRIMARY KEY, n BIGINT NOT NULL)`, typ),
		fmt.Sprintf(`CREATE TABLE probe (i BIGINT, x %s)`, typ),
	} {
		_, err := pool.ExecContext(ctx, q)
		require.NoError(t, err)
	}
	catalogType := rows(t, db, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute
WHERE attrelid = 'objs'::regclass AND attname = 'id'`)[0]

	// What the server makes of each string, as the driver reads it back, and which
	// strings it holds equal.
	kept := make([]pgKept, len(pgKeyIDs))
	for i, id := range pgKeyIDs {
		if _, err := pool.ExecContext(ctx, `INSERT INTO probe VALUES ($1, $2)`, i, id); err != nil {
			kept[i].failed = true
			continue
		}
		require.NoError(t, pool.QueryRowContext(ctx, `SELECT x FROM probe WHERE i = $1`, i).Scan(&kept[i].back))
	}
	equal := map[int][]int{}
	for _, pair := range rows(t, db, `SELECT a.i || ' ' || b.i FROM probe a JOIN probe b ON a.x = b.x AND a.i <> b.i`) {
		var i, j int
		_, err := fmt.Sscan(pair, &i, &j)
		require.NoError(t, err)
		equal[i] = append(equal[i], j)
	}

	st, err := store.NewStore[item, string](ctx, db, store.Config{Table: "objs"})
	require.NoError(t, err, "a string ID type is taken on a %s key", typ)
	set := refset.New(st)
	var taken []string
	for i, id := range pgKeyIDs {
		k := kept[i]
		tok, err := set.Add(ctx, item{Key: id, N: int64(i)}, set.Hold("keeper", 0))
		if err == nil {
			require.False(t, k.failed, "%q: the server refuses it, yet Add took it", id)
			require.Equal(t, id, k.back, "%q is taken, but the server reads it back changed", id)
			lease, err := set.Get(ctx, tok)
			require.NoError(t, err)
			require.Equal(t, item{Key: id, N: int64(i)}, *lease.Value(), "%q reads back as added", id)
			for _, j := range equal[i] {
				require.NotContains(t, taken, pgKeyIDs[j], "%q and %q, equal in a %s column, are both taken", id, pgKeyIDs[j], typ)
			}
			taken = append(taken, id)
			continue
		}
		if !refset.IsSentinel(err) || !strings.Contains(err.Error(), "nothing was sent") {
			// Not the check: the server refused the string itself, an error as loud.
			require.True(t, k.failed, "%q fails to be added (%v), though the server takes it alone: "+
				"the check let through an ID the key changes into another's", id, err)
			require.NotErrorIs(t, err, refset.ErrDuplicate, "%q", id)
			continue
		}
		require.ErrorIs(t, err, refset.ErrInvalidID, "%q", id)
		require.True(t, k.failed || k.back != id || len(equal[i]) > 0,
			"%q is refused, but the server reads it back as written, equal to no other string", id)
		for _, want := range []string{fmt.Sprintf("%q", id), `"id"`, catalogType, "declare the column text"} {
			require.ErrorContains(t, err, want, "the error says which ID, which column, why and what to do")
		}
		requireRefusedEverywhere(t, st, set, db, id)
	}
	t.Logf("%s: %d of %d IDs taken: %q", catalogType, len(taken), len(pgKeyIDs), taken)
	require.Equal(t, taken, rows(t, db, `SELECT id FROM objs ORDER BY n`), "the objects' IDs, each as added, and no other")
	require.ElementsMatch(t, taken, rows(t, db, `SELECT object_id FROM objs_holds`), "the holds' IDs, each as added, and no other")
	if typ == "text" {
		require.Len(t, taken, len(pgKeyIDs), "a text key keeps every string")
	}
}

// requireRefusedEverywhere checks that every call sending the ID id, which the set's
// key refuses, refuses it too with refset.ErrInvalidID.
func requireRefusedEverywhere(t *testing.T, st refset.SetStore[item, string], set *refset.RefSet[item, string], db refset.Database, id string) {
	t.Helper()
	ctx := t.Context()
	calls := map[string]func() error{
		"AddAll":              func() error { _, err := set.AddAll(ctx, []item{{Key: "fine"}, {Key: id}}); return err },
		"Upgrade":             func() error { _, err := set.Upgrade(ctx, id); return err },
		"Upgrade with a hold": func() error { _, err := set.Upgrade(ctx, id, set.Hold("keeper", 0)); return err },
		"Load":                func() error { _, err := set.Load(ctx, id); return err },
		"the store's Get":     func() error { _, err := st.Get(ctx, db.Reader(), id); return err },
		"the store's Has":     func() error { _, err := st.Has(ctx, db.Reader(), id); return err },
		"the store's Hold":    func() error { return st.Hold(ctx, db.Driver().Pool(), id, "keeper", 0) },
		"the store's Unhold":  func() error { return st.Unhold(ctx, db.Driver().Pool(), id, "keeper") },
	}
	for _, name := range slices.Sorted(maps.Keys(calls)) {
		require.ErrorIs(t, calls[name](), refset.ErrInvalidID, "%s %q", name, id)
	}
}

// An Add with no command, or with Exec commands only, which PostgreSQL's drivers
// pipeline (the store gives its insert as a statement, refsetdriver.Inserter),
// refuses an ID its key would change as every other call does, writing nothing.
func TestPostgresKeyRefusedOnPipelinedAdd(t *testing.T) {
	eachNewStoreBackend(t, func(t *testing.T, b newStoreBackend) {
		if !b.postgres {
			t.Skip("PostgreSQL's drivers pipeline an Add")
		}
		ctx := t.Context()
		db := b.open(t)
		_, err := db.Driver().Pool().ExecContext(ctx, `CREATE TABLE objs (id numeric(10,2) PRIMARY KEY, n BIGINT NOT NULL)`)
		require.NoError(t, err)
		st, err := store.NewStore[item, string](ctx, db, store.Config{Table: "objs"})
		require.NoError(t, err)
		set := refset.New(st)
		_, err = set.Add(ctx, item{Key: "0012", N: 1})
		require.ErrorIs(t, err, refset.ErrInvalidID, "Add")
		_, err = set.Add(ctx, item{Key: "12.345", N: 2}, refset.Exec[string](`UPDATE objs SET n = n WHERE $1::text = ''`, -1))
		require.ErrorIs(t, err, refset.ErrInvalidID, "Add with an Exec command")
		require.Empty(t, rows(t, db, `SELECT id FROM objs`), "nothing was written")
		_, err = set.Add(ctx, item{Key: "12.00", N: 3})
		require.NoError(t, err, "an ID spelled as the key writes it is taken")
	})
}
