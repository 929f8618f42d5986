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

// pgKeyIDs are string IDs at the edges of what the key types that take a string ID
// type keep as written.
var pgKeyIDs = []string{
	// numeric
	"12", "0012", "+12", " 12 ", " 12", "12 ", "1e5", "-0", "-12", "12.", ".5", "0.5", "12.0", "12.00", "12.345", "12.349",
	"12.35", "1.5", "1.50", "-0.00", "NaN", "nan", "Infinity", "-Infinity", "inf", "99999999.99", "123456789012", "abc",
	// uuid
	"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "D0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11",
	"{b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", "c0eebc999c0b4ef8bb6d6bb9bd380a11",
	// text: padding, trailing spaces, length, case
	"abcd", "ab", "ab ", "ab  ", "abcd ", "abcde", "ABCD", "Abcd", "AB", "ñand", "ÑAND", "x y", "x y ", "ab\t", " ab",
	strings.Repeat("n", 63), strings.Repeat("n", 64), strings.Repeat("ü", 31), strings.Repeat("ü", 32),
}

// A key case is a key type tried with string IDs, on one dialect, as CREATE TABLE
// writes it, with what it needs made first (domains), and what a refusal's message
// must name.
type keyCase struct {
	typ      string
	postgres bool
	setup    []string
	says     []string // what an error refusing an ID names: the type as judged, what to do
}

func keyCaseOf(typ string, pg bool, says ...string) keyCase {
	return keyCase{typ: typ, postgres: pg, says: says}
}

// keyCases are the key types tried: PostgreSQL's types that take a string ID type
// but write some back changed, or hold two equal (text keeps every string ID and
// checks none), the same under domains, and both dialects' collations that hold
// two different strings equal.
func keyCases() []keyCase {
	const sq, pg = false, true
	declareText := "declare the column text"
	withoutCollation := "declare the column without the collation"
	domains := []string{`CREATE DOMAIN money2 AS numeric(10,2)`, `CREATE DOMAIN id_uuid AS uuid`,
		`CREATE DOMAIN id_uuid2 AS id_uuid`, `CREATE DOMAIN short AS varchar(4)`}
	domain := func(name, base string) keyCase {
		k := keyCaseOf(name, pg, base, declareText)
		k.setup = domains
		return k
	}
	return []keyCase{
		keyCaseOf("numeric", pg, "numeric", declareText),
		keyCaseOf("numeric(20,0)", pg, "numeric(20,0)", declareText),
		keyCaseOf("numeric(10,2)", pg, "numeric(10,2)", declareText),
		keyCaseOf("uuid", pg, "uuid", declareText),
		keyCaseOf("char(4)", pg, "character(4)", declareText),
		keyCaseOf("bpchar", pg, "bpchar", declareText),
		keyCaseOf("varchar(4)", pg, "character varying(4)", declareText),
		keyCaseOf("name", pg, "name", declareText),
		keyCaseOf("text", pg),
		domain("money2", "numeric(10,2)"),
		domain("id_uuid2", "uuid"), // a domain over a domain over uuid
		domain("short", "character varying(4)"),

		keyCaseOf("TEXT COLLATE NOCASE", sq, "COLLATE NOCASE", withoutCollation),
		keyCaseOf("TEXT COLLATE RTRIM", sq, "COLLATE RTRIM", withoutCollation),
		keyCaseOf("UUID COLLATE NOCASE", sq, "COLLATE NOCASE"), // NUMERIC affinity too
		keyCaseOf("TEXT", sq),
	}
}

// A key that takes a string ID type but would store a string as another value
// (PostgreSQL's numeric "0012" as 12, "12.345" in numeric(10,2) as 12.35; uuid's
// upper case as lower case; char(4)'s "ab" as "ab  "; varchar(4)'s "abcd " as
// "abcd"; name's 64 bytes as 63; SQLite's NUMERIC affinity "0012" as 12), or as one
// equal to another's (bpchar's "ab " and "ab"; numeric's "12.0" and "12"; a NOCASE
// collation's "AB" and "ab", RTRIM's "ab " and "ab"), whether it is declared so or
// through domains, refuses each such ID with refset.ErrInvalidID that names the ID,
// the column, its type and what to do, on every call that sends it, before anything
// is written; it takes every other string, which reads back as written and finds
// only its own object. What the database does with each string is asked of the
// database itself, in a column of the same type: the test holds wherever the check
// and the database part. (citext, whose type NewStore reads as public.citext on a
// test's schema and does not take, is checked against the server in storesql's
// TestPostgresCitextCase.)
func TestKeysKeepStringIDs(t *testing.T) {
	eachNewStoreBackend(t, func(t *testing.T, b newStoreBackend) {
		for _, k := range keyCases() {
			if k.postgres == b.postgres {
				t.Run(k.typ, func(t *testing.T) { testKeyKeepsStringIDs(t, b, k) })
			}
		}
	})
}

// kept is what the database makes of a string in a key column.
type kept struct {
	back   string // as the driver reads it back
	failed bool   // the database refused it
	number bool   // SQLite stored it as a number, which a driver writes back alike
}

func testKeyKeepsStringIDs(t *testing.T, b newStoreBackend, k keyCase) {
	ctx := t.Context()
	db := b.open(t)
	pool := db.Driver().Pool()
	ph := func(n int) string { return "?" }
	if b.postgres {
		ph = func(n int) string { return fmt.Sprintf("$%d", n) }
	}
	for _, q := range append(slices.Clone(k.setup),
		fmt.Sprintf(`CREATE TABLE objs (id %s PRIMARY KEY, n BIGINT NOT NULL)`, k.typ),
		fmt.Sprintf(`CREATE TABLE probe (i BIGINT, x %s)`, k.typ)) {
		_, err := pool.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}

	// What the database makes of each string, as the driver reads it back, and
	// which strings it holds equal: the IDs', and those of strings the IDs differ
	// from by case or spaces, which a key that holds an ID equal to one of them must
	// refuse as well.
	probed := slices.Clone(pgKeyIDs)
	for _, id := range pgKeyIDs {
		probed = append(probed, strings.ToLower(id), strings.ToUpper(id), strings.Map(asciiLower, id), strings.TrimRight(id, " "), id+" ")
	}
	back := make([]kept, len(probed))
	typeOf := `'text'`
	if !b.postgres {
		typeOf = `typeof(x)`
	}
	for i, id := range probed {
		if _, err := pool.ExecContext(ctx, fmt.Sprintf(`INSERT INTO probe VALUES (%s, %s)`, ph(1), ph(2)), i, id); err != nil {
			back[i].failed = true
			continue
		}
		var typ string
		require.NoError(t, pool.QueryRowContext(ctx, fmt.Sprintf(`SELECT x, %s FROM probe WHERE i = %s`, typeOf, ph(1)), i).
			Scan(&back[i].back, &typ))
		back[i].number = typ != "text"
	}
	equal := map[int][]int{}
	for _, pair := range rows(t, db, `SELECT a.i || ' ' || b.i FROM probe a JOIN probe b ON a.x = b.x AND a.i <> b.i`) {
		var i, j int
		_, err := fmt.Sscan(pair, &i, &j)
		require.NoError(t, err)
		if probed[i] != probed[j] {
			equal[i] = append(equal[i], j)
		}
	}

	st, err := store.NewStore[item, string](ctx, db, store.Config{Table: "objs"})
	require.NoError(t, err, "a string ID type is taken on a %s key", k.typ)
	set := refset.New(st)
	var taken []string
	for i, id := range pgKeyIDs {
		kp := back[i]
		tok, err := set.Add(ctx, item{Key: id, N: int64(i)}, set.Hold("keeper", 0))
		if err == nil {
			require.False(t, kp.failed, "%q: the database refuses it, yet Add took it", id)
			require.Equal(t, id, kp.back, "%q is taken, but the database reads it back changed", id)
			lease, err := set.Get(ctx, tok)
			require.NoError(t, err)
			require.Equal(t, item{Key: id, N: int64(i)}, *lease.Value(), "%q reads back as added", id)
			for _, j := range equal[i] {
				require.NotContains(t, taken, probed[j], "%q and %q, equal in a %s column, are both taken", id, probed[j], k.typ)
			}
			taken = append(taken, id)
			continue
		}
		if !refset.IsSentinel(err) || !strings.Contains(err.Error(), "nothing was sent") {
			// Not the check: the database refused the string itself, an error as loud.
			require.True(t, kp.failed, "%q fails to be added (%v), though the database takes it alone: "+
				"the check let through an ID the key changes into another's", id, err)
			require.NotErrorIs(t, err, refset.ErrDuplicate, "%q", id)
			continue
		}
		require.ErrorIs(t, err, refset.ErrInvalidID, "%q", id)
		require.True(t, kp.failed || kp.back != id || kp.number || len(equal[i]) > 0,
			"%q is refused, but the database reads it back as written, equal to no other string", id)
		for _, want := range append([]string{fmt.Sprintf("%q", id), `"id"`}, k.says...) {
			require.ErrorContains(t, err, want, "the error says which ID, which column, why and what to do")
		}
		requireRefusedEverywhere(t, st, set, db, id)
	}
	t.Logf("%s: %d of %d IDs taken: %q", k.typ, len(taken), len(pgKeyIDs), taken)
	require.Equal(t, taken, rows(t, db, `SELECT id FROM objs ORDER BY n`), "the objects' IDs, each as added, and no other")
	require.ElementsMatch(t, taken, rows(t, db, `SELECT object_id FROM objs_holds`), "the holds' IDs, each as added, and no other")
	if len(k.says) == 0 {
		require.Len(t, taken, len(pgKeyIDs), "a text key keeps every string")
	}
}

// A key compared by a collation refset cannot follow (a nondeterministic one on
// PostgreSQL, declared on the column or on its domain, which may hold "ABC" equal
// to "abc" by rules of its own) takes no string ID type: NewStore refuses one with
// refset.ErrSchema naming the collation, before it creates or records anything.
func TestNondeterministicKeyRefusesStringIDs(t *testing.T) {
	// (SQLite's NOCASE and RTRIM are followed: TestKeysKeepStringIDs.)
	eachNewStoreBackendOf(t, func(b newStoreBackend) bool { return b.postgres }, func(t *testing.T, b newStoreBackend) {
		for _, column := range []string{"text COLLATE ci", "ci_text", "varchar(64) COLLATE ci"} {
			t.Run(column, func(t *testing.T) {
				ctx := t.Context()
				db := b.open(t)
				for _, q := range []string{
					`CREATE COLLATION ci (provider = icu, locale = 'und-u-ks-level2', deterministic = false)`,
					`CREATE DOMAIN ci_text AS text COLLATE ci`,
					fmt.Sprintf(`CREATE TABLE objs (id %s PRIMARY KEY, n BIGINT NOT NULL)`, column),
				} {
					_, err := db.Driver().Pool().ExecContext(ctx, q)
					require.NoError(t, err, q)
				}
				before := everything(t, db, b.postgres)
				_, err := store.NewStore[item, string](ctx, db, store.Config{Table: "objs"})
				require.ErrorIs(t, err, refset.ErrSchema)
				for _, want := range []string{`"id"`, "COLLATE ci", "nondeterministic", "string", "deterministic collation"} {
					require.ErrorContains(t, err, want, "the error names the column, its collation and what to do")
				}
				require.Equal(t, before, everything(t, db, b.postgres), "a refused NewStore changes nothing")
				_, err = store.NewStore[idObject[scannedID], scannedID](ctx, db, store.Config{Table: "objs"})
				require.NoError(t, err, "an ID type that scans and values itself is its own affair")
			})
		}
	})
}

// On SQLite, a key whose PRIMARY KEY clause compares by another collation than its
// column can be referenced by no foreign key ("foreign key mismatch"), the set's
// holds table's neither: NewStore refuses it with refset.ErrSchema, saying so and
// what to do, before it creates or records anything, whatever the ID type.
func TestKeyCollatedApartFromItsColumn(t *testing.T) {
	// (A PostgreSQL key compares by its column's collation.)
	eachNewStoreBackendOf(t, func(b newStoreBackend) bool { return !b.postgres }, func(t *testing.T, b newStoreBackend) {
		for _, table := range []string{
			`CREATE TABLE objs (id TEXT COLLATE NOCASE NOT NULL, n BIGINT NOT NULL, PRIMARY KEY (id COLLATE BINARY))`,
			`CREATE TABLE objs (id TEXT NOT NULL, n BIGINT NOT NULL, PRIMARY KEY (id COLLATE NOCASE)) WITHOUT ROWID`,
			`CREATE TABLE objs (id TEXT COLLATE RTRIM NOT NULL, n BIGINT NOT NULL, PRIMARY KEY (id COLLATE NOCASE))`,
		} {
			t.Run(table, func(t *testing.T) {
				ctx := t.Context()
				db := b.open(t)
				_, err := db.Driver().Pool().ExecContext(ctx, table)
				require.NoError(t, err)
				before := everything(t, db, false)
				_, err = store.NewStore[item, string](ctx, db, store.Config{Table: "objs"})
				require.ErrorIs(t, err, refset.ErrSchema)
				for _, want := range []string{`"id"`, "foreign key", "declare the collation on the column"} {
					require.ErrorContains(t, err, want)
				}
				_, err = store.NewStore[idObject[scannedID], scannedID](ctx, db, store.Config{Table: "objs"})
				require.ErrorIs(t, err, refset.ErrSchema, "whatever the ID type")
				require.Equal(t, before, everything(t, db, false), "a refused NewStore changes nothing")
			})
		}
	})
}

func asciiLower(r rune) rune {
	if r >= 'A' && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
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
	eachNewStoreBackendOf(t, func(b newStoreBackend) bool { return b.postgres }, func(t *testing.T, b newStoreBackend) {
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
