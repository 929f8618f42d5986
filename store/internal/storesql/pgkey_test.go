package storesql

import (
	"database/sql"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/sqlident"
)

// numericSpellings are strings at the edges of what numeric keeps as written.
var numericSpellings = []string{
	"12", "0012", "+12", " 12", "12 ", " 12 ", "\t12", "1e5", "1E5", "1e-3", "1.5e3", "-0", "0", "-12", "00",
	"12.", ".5", "0.5", "-.5", "12.0", "12.00", "12.000", "12.345", "12.35", "12.349", "1.50", "-0.00", "0.00",
	"-0.0", "0.001", "-0.001", "0.00100", "0.01000", "0.0000", "1200", "1234", "1200.0", "-1200", "100",
	"99999999.99", "99999999.995", "-99999999.99", "100000000.00", "12345678901234567890", "123456789012345678901",
	"0.00999", "-0.00999", "0.00000", "0.1234", "-0.9999", "0.12345", "0.99995", "99900", "-99900", "9999900", "10000000", "50",
	"NaN", "nan", "NAN", " NaN", "+NaN", "-NaN", "Infinity", "-Infinity", "+Infinity", "infinity", "inf", "-inf",
	"", " ", ".", "-", "+", "-.", "abc", "0x10", "1_000", "0b1", "0o7", "１２", "1 2", "1.2.3", "--1", "12abc",
}

// numericSpelling is a random string near a number: digits, mostly, with now and
// then a sign, a point, an exponent, a space or a letter.
func numericSpelling(r *rand.Rand) string {
	const alphabet = "0000123456789999.-+ eEnaNIfity_x"
	var b strings.Builder
	digits := func(n int) {
		for ; n > 0; n-- {
			b.WriteByte('0' + byte(r.IntN(10)))
		}
	}
	if r.IntN(2) == 0 { // a number's shape: [-]digits[.digits], zeros anywhere
		if r.IntN(3) == 0 {
			b.WriteByte('-')
		}
		digits(r.IntN(5))
		if r.IntN(3) > 0 {
			b.WriteByte('.')
			digits(r.IntN(7))
		}
		return b.String()
	}
	for n := 1 + r.IntN(14); n > 0; n-- {
		if r.IntN(3) > 0 {
			b.WriteByte('0' + byte(r.IntN(10)))
		} else {
			b.WriteByte(alphabet[r.IntN(len(alphabet))])
		}
	}
	return b.String()
}

// What PostgresKeyType takes of a string ID on a numeric key is exactly what
// PostgreSQL's numeric, of each typmod, reads back as written: the server is asked
// what it makes of each string (the edges in numericSpellings and random ones), and
// a string is taken if and only if it comes back unchanged. A string the server
// refuses (too large for numeric(p,s), not a number) is refused too.
func TestPostgresNumericSpelling(t *testing.T) {
	dsn, _ := pgtest.New(t)
	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	var version int
	require.NoError(t, db.QueryRowContext(t.Context(), `SELECT current_setting('server_version_num')::int`).Scan(&version))
	if version < 150000 {
		t.Skipf("numeric's scale past its precision and below 0 are PostgreSQL 15's; the server is %d", version)
	}
	r := rand.New(rand.NewPCG(1, 2))
	spellings := append([]string{}, numericSpellings...)
	for range 800 {
		spellings = append(spellings, numericSpelling(r))
	}
	for _, typ := range []string{"numeric", "numeric(20,0)", "numeric(10,2)", "numeric(3,5)", "numeric(5,-2)",
		"numeric(1,0)", "numeric(4,4)", "numeric(1000,500)"} {
		changes := PostgresKeyType(typ).changes
		require.NotNil(t, changes, typ)
		taken := 0
		for _, s := range spellings {
			var back string
			err := db.QueryRowContext(t.Context(), `SELECT $1::`+typ+`::text`, s).Scan(&back)
			kept := err == nil && back == s
			if kept && changes(s) && typ == "numeric" {
				// Kept as written, but equal to the spelling without the zeros
				// that end its fraction, which is taken: one value, one ID.
				short := strings.TrimSuffix(strings.TrimRight(s, "0"), ".")
				require.False(t, changes(short), "%q, for %q", short, s)
				var same bool
				require.NoError(t, db.QueryRowContext(t.Context(), `SELECT $1::numeric = $2::numeric`, s, short).Scan(&same))
				require.True(t, same, "%q is refused, but the server holds it apart from %q", s, short)
				continue
			}
			require.Equal(t, kept, !changes(s), "%q as %s reads back %q (%v)", s, typ, back, err)
			if kept {
				taken++
			}
		}
		t.Logf("%s: %d of %d strings read back as written", typ, taken, len(spellings))
		require.Positive(t, taken, "some strings are kept")
	}
	// PostgreSQL's own limits on an unconstrained numeric: past them it refuses the
	// string; the check refuses it before.
	for _, s := range []string{strings.Repeat("9", pgNumericIntegers), "1" + strings.Repeat("0", pgNumericIntegers),
		"0." + strings.Repeat("1", pgNumericFraction), "0." + strings.Repeat("1", pgNumericFraction+1)} {
		var back string
		err := db.QueryRowContext(t.Context(), `SELECT $1::numeric::text`, s).Scan(&back)
		require.Equal(t, err == nil && back == s, !PostgresKeyType("numeric").changes(s), "%d characters: %v", len(s), err)
	}
}

// A uuid key takes a string only as PostgreSQL writes the uuid back: lower case,
// hyphens, no braces.
func TestPostgresUUIDSpelling(t *testing.T) {
	dsn, _ := pgtest.New(t)
	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	changes := PostgresKeyType("uuid").changes
	for _, s := range []string{
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}",
		"a0eebc999c0b4ef8bb6d6bb9bd380a11", "a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11", " a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
		"00000000-0000-0000-0000-000000000000", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1g", "a0eebc99+9c0b-4ef8-bb6d-6bb9bd380a11",
		"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1", "",
	} {
		var back string
		err := db.QueryRowContext(t.Context(), `SELECT $1::uuid::text`, s).Scan(&back)
		require.Equal(t, err == nil && back == s, !changes(s), "%q reads back %q (%v)", s, back, err)
	}
}

// A citext key takes only strings that are their own lower case: of those, the server
// holds no two equal, whatever its collation's lower(); and each other string is
// equal to its lower case (with the C collation's lower(), ASCII letters only: one
// with other upper-case letters is refused though this server would keep it apart).
func TestPostgresCitextCase(t *testing.T) {
	dsn, _ := pgtest.New(t)
	db, err := sql.Open("postgres", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	ctx := t.Context()
	// One database, many test schemas: the extension goes in public, once.
	tx, err := db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('refset test: citext'))`)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `CREATE EXTENSION IF NOT EXISTS citext SCHEMA public`)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())

	changes := PostgresKeyType("citext").changes
	strs := []string{"abc", "ABC", "Abc", "abc1", "a-b_c d", "ñand", "ÑAND", "straße", "STRASSE", "ß", "ẞ", "ǅ", "ǆ", "Ǆ",
		"İ", "i̇", "ı", "I", "i", "\u212a", "k", "K", "ς", "σ", "Σ", "é", "É", "e\u0301", "12", "日本"}
	equal := func(a, b string) bool {
		var same bool
		require.NoError(t, db.QueryRowContext(ctx, `SELECT $1::public.citext OPERATOR(public.=) $2::public.citext`, a, b).Scan(&same))
		return same
	}
	for i, a := range strs {
		if changes(a) {
			ascii := strings.IndexFunc(a, func(r rune) bool { return r > 0x7f }) < 0
			require.True(t, !ascii || equal(a, strings.ToLower(a)), "%q is refused, but the server holds it apart from %q", a, strings.ToLower(a))
			continue
		}
		for _, b := range strs[i+1:] {
			require.False(t, !changes(b) && equal(a, b), "%q and %q, both taken, are one key", a, b)
		}
	}
	require.False(t, PostgresKeyType("public.citext").changes == nil, "a citext in another schema is checked too")
}

// A key that keeps every string as written (text, varchar without a length), and
// every ID type but a string one, has no check: the store runs none, at no cost.
func TestPostgresTextKeysCheckNothing(t *testing.T) {
	table := sqlident.Ident{Name: "objs"}
	for _, typ := range []string{"text", "character varying", "varchar", "TEXT"} {
		require.Nil(t, idCheck(PostgresKeyType, table, "id", typ, reflect.TypeFor[string]()), typ)
	}
	for _, typ := range []string{"numeric", "numeric(20,0)", "uuid"} {
		require.Nil(t, idCheck(PostgresKeyType, table, "id", typ, reflect.TypeFor[int64]()), typ)
		require.NotNil(t, idCheck(PostgresKeyType, table, "id", typ, reflect.TypeFor[string]()), typ)
	}
}
