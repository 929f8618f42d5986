package postgres

import (
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type (
	namedString string
	namedInt    int32
)

func ptr[T any](v T) *T { return &v }

// valuer is a driver.Valuer that gives its text, or fails for "fail".
type valuer struct{ s string }

func (v valuer) Value() (driver.Value, error) {
	if v.s == "fail" {
		return nil, errors.New("no value")
	}
	return v.s, nil
}

// timeValuer gives a time, which has no literal here.
type timeValuer struct{}

func (timeValuer) Value() (driver.Value, error) { return time.Now(), nil }

// A value written into a statement as a literal, or given as a literal to EXECUTE of
// the statement prepared, stores exactly what lib/pq stores when it sends the value as
// an argument, in both of lib/pq's modes, or is refused: hostile strings stay strings,
// and the table they aim at stays.
func TestLiteralStoresWhatLibPQSends(t *testing.T) {
	allBytes := make([]byte, 256)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	hostile := []string{
		`'); DROP TABLE lit; --`, `' OR '1'='1`, `'`, `''`, `*/ DROP TABLE lit; /*`, `$1`, `$$ DROP TABLE lit $$`,
		`E'`, "line\nbreak\ttab", "ünïcødé ✓ 🚀", strings.Repeat("x'", 50_000), "", " ", "NULL", "-- not a comment",
	}
	type value struct {
		column string // and the cast its parameter is written with, if any
		v      any
	}
	var cases []value
	for _, s := range hostile {
		cases = append(cases, value{"t", s}, value{"y", s})
		if j := fmt.Sprintf(`{"s": %q}`, s); !strings.Contains(j, `\`) { // JSON's escapes are backslashes
			cases = append(cases, value{"j", j})
		}
	}
	cases = append(cases,
		value{"i", int64(math.MaxInt64)}, value{"i", int64(math.MinInt64)}, value{"i", 0}, value{"i", int8(-1)},
		value{"i", namedInt(7)}, value{"i", "42"}, value{"t", int64(42)},
		value{"n", uint64(math.MaxUint64)}, value{"n", uint(3)}, value{"n", 0.1},
		value{"f", 0.1}, value{"f", math.Copysign(0, -1)}, value{"f", 1e300}, value{"f", 5e-324},
		value{"f", math.MaxFloat64}, value{"f", math.NaN()}, value{"f", math.Inf(1)}, value{"f", math.Inf(-1)},
		value{"r", float32(0.1)}, value{"f", float32(0.1)},
		value{"b", true}, value{"b", false}, value{"t", true},
		value{"t", namedString("it's named")}, value{"t", nil}, value{"i", nil},
		value{"y::bytea", allBytes}, value{"y::bytea", []byte{}}, value{"y::bytea", []byte(`\x00'`)},
		value{"y", []byte(nil)}, value{"t", []byte(nil)},
		value{"t", ptr("it's pointed to")}, value{"t", (*string)(nil)}, value{"i", ptr(ptr(int64(5)))},
		value{"y::bytea", ptr([]byte{1, 2})},
		value{"t", valuer{"it's a value"}}, value{"t", &valuer{"by pointer"}}, value{"t", (*valuer)(nil)},
		value{"t", sql.NullString{String: "x", Valid: true}}, value{"t", sql.NullString{}},
		value{"i", sql.NullInt64{Int64: -9, Valid: true}}, value{"f", sql.NullFloat64{Float64: 2.5, Valid: true}},
	)
	refused := []value{
		{"t", `back\slash`}, {"y", `\x41`}, {"t", "nul\x00"}, {"t", "\xff\xfe"},
		{"y", []byte("bytes without a cast")}, {"t", []byte("text")},
		{"t", time.Now()}, {"t", valuer{"fail"}}, {"t", valuer{`back\slash`}}, {"t", timeValuer{}}, {"t", sql.NullTime{Valid: true}}, {"t", ptr(time.Now())}, {"t", ptr(`back\slash`)}, {"t", []string{"a"}}, {"n", uint(math.MaxUint64)},
	}

	for _, binary := range []bool{false, true} {
		t.Run(fmt.Sprint("binary_parameters=", binary), func(t *testing.T) {
			ctx := t.Context()
			dsn := pgtest.DSN(t)
			if binary {
				dsn += "&binary_parameters=yes"
			}
			pool := callersPool(t, DriverLibPQ, dsn)
			conn, err := pool.Conn(ctx) // one session: its prepared statements
			require.NoError(t, err)
			defer conn.Close()
			_, err = conn.ExecContext(ctx, `CREATE TABLE lit (k int PRIMARY KEY, t text, i bigint, n numeric, f float8, r real, b bool, y bytea, j jsonb)`)
			require.NoError(t, err)
			failed := 0 // cases refused every way
			for i, c := range cases {
				column, cast, _ := strings.Cut(c.column, "::")
				if cast != "" {
					cast = "::" + cast
				}
				query := fmt.Sprintf(`INSERT INTO lit (k, %s) VALUES ($1, $2%s)`, column, cast)
				_, sentErr := conn.ExecContext(ctx, query, 3*i, c.v)
				// Written in, and EXECUTEd with literals (what lib/pq's simple
				// queries send: libpqPipeline).
				var b, e strings.Builder
				require.True(t, inlined(&b, query, []any{3*i + 1, c.v}), "%s %#v", c.column, c.v)
				_, literalErr := conn.ExecContext(ctx, b.String())
				name := fmt.Sprint("lit_", i)
				_, err := conn.ExecContext(ctx, "PREPARE "+name+" AS "+query)
				require.NoError(t, err)
				require.True(t, executed(&e, name, query, []any{3*i + 2, c.v}), "%s %#v", c.column, c.v)
				_, executeErr := conn.ExecContext(ctx, e.String())
				if sentErr != nil {
					require.Error(t, literalErr, "%s %#v: lib/pq's %v", c.column, c.v, sentErr)
					require.Error(t, executeErr, "%s %#v: lib/pq's %v", c.column, c.v, sentErr)
					assert.Equal(t, sqlState(sentErr), sqlState(literalErr), "%s %#v", c.column, c.v)
					assert.Equal(t, sqlState(sentErr), sqlState(executeErr), "%s %#v", c.column, c.v)
					failed++
					continue
				}
				require.NoError(t, literalErr, "%s %#v: %s", c.column, c.v, b.String())
				require.NoError(t, executeErr, "%s %#v: %s", c.column, c.v, e.String())
				var same bool
				require.NoError(t, conn.QueryRowContext(ctx, fmt.Sprintf(
					`SELECT a.%[1]s IS NOT DISTINCT FROM b.%[1]s AND a.%[1]s IS NOT DISTINCT FROM c.%[1]s FROM lit a, lit b, lit c WHERE a.k = $1 AND b.k = $2 AND c.k = $3`, column),
					3*i, 3*i+1, 3*i+2).Scan(&same))
				assert.True(t, same, "%s %#v: %s; %s", c.column, c.v, b.String(), e.String())
			}
			for _, c := range refused {
				column, cast, _ := strings.Cut(c.column, "::")
				query := fmt.Sprintf(`INSERT INTO lit (k, %s) VALUES ($1, $2%s)`, column, cast)
				assert.False(t, inlined(nil, query, []any{-1, c.v}), "%s %#v", c.column, c.v)
				var e strings.Builder
				assert.False(t, executed(&e, "lit_0", query, []any{-1, c.v}), "%s %#v", c.column, c.v)
			}
			var rows int
			require.NoError(t, conn.QueryRowContext(ctx, `SELECT count(*) FROM lit`).Scan(&rows))
			assert.Equal(t, 3*(len(cases)-failed), rows, "every insert stored its row, and nothing else ran")
		})
	}
}

// A statement is written with its arguments only when it names each of them, as the
// server wants when they are sent: one that names fewer or more is sent with them,
// and refused as it always was.
func TestInlinedTakesEveryArgument(t *testing.T) {
	cases := []struct {
		query string
		args  []any
		ok    bool
	}{
		{"SELECT $1", []any{1}, true},
		{"SELECT $1, $1", []any{1}, true},
		{"SELECT $2, $1", []any{1, 2}, true},
		{"SELECT 1", nil, true},
		{"SELECT $1", []any{1, 2}, false},
		{"SELECT $2", []any{1, 2}, false},
		{"SELECT $2", []any{1}, false},
		{"SELECT 1", []any{1}, false},
		{"SELECT $1", make([]any, 65), false},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.ok, inlined(nil, tc.query, tc.args), "%s %v", tc.query, tc.args)
	}
}
