package sqlite

import (
	"context"
	"database/sql/driver"
	"strings"
	"testing"

	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/require"
)

// TestArgumentCountChecked: a statement given more arguments than SQLite binds is
// refused with refset.ErrStatement, as PostgreSQL refuses it, where go-sqlite3 alone
// runs it and drops the rest; as many as it binds run. The counts are SQLite's own:
// it refuses one argument fewer, and reports a single statement's count itself.
// modernc.org/sqlite reports no count (-1), and runs a query of several statements
// given too few, binding NULL: refset refuses that too, on both drivers. It also
// binds a named parameter (:a, @b, $c) by name alone, where go-sqlite3 takes a
// positional argument for it: such a statement given positional arguments is refused
// with refset.ErrStatement there whatever their number.
func TestArgumentCountChecked(t *testing.T) { eachDriver(t, testArgumentCountChecked) }

func testArgumentCountChecked(t *testing.T, driverName string) {
	db := openDB(t, Options{Driver: driverName})
	ctx := t.Context()
	_, err := db.Writer().ExecContext(ctx, `CREATE TABLE t (a, b)`)
	require.NoError(t, err)
	args := func(n int) []any {
		a := make([]any, n)
		for i := range a {
			a[i] = i + 1
		}
		return a
	}
	inTx := func(q string, n int) error {
		return refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, q, args(n)...)
			return err
		})
	}
	for _, tc := range sqltext.SQLiteParamCases {
		t.Run(tc.Query, func(t *testing.T) {
			single := !strings.Contains(tc.Query, ";")
			if n := numInput(t, db, tc.Query); single && (n != -1 || driverName == DriverMattn) {
				require.Equal(t, tc.Want, n, "SQLite's own count")
			}
			if tc.Want > 0 {
				if single || driverName == DriverMattn {
					_, err := db.Writer().ExecContext(ctx, tc.Query, args(tc.Want-1)...)
					require.Error(t, err, "SQLite refuses one argument fewer")
				}
				require.ErrorIs(t, inTx(tc.Query, tc.Want-1), refset.ErrStatement, "refset refuses one argument fewer")
			}
			if driverName == DriverModernc && strings.ContainsAny(tc.Query, ":@$") {
				require.ErrorIs(t, inTx(tc.Query, tc.Want), refset.ErrStatement, "modernc.org/sqlite binds named parameters by name alone")
			} else {
				require.NoError(t, inTx(tc.Query, tc.Want))
			}
			err := inTx(tc.Query, tc.Want+1)
			require.ErrorIs(t, err, refset.ErrStatement, "one argument more")
			require.Contains(t, err.Error(), "arguments")
		})
	}
}

// numInput is SQLite's count of the parameters of query, one statement.
func numInput(t *testing.T, db *DB, query string) int {
	t.Helper()
	conn, err := db.Writer().Conn(t.Context())
	require.NoError(t, err)
	defer conn.Close()
	n := -1
	require.NoError(t, conn.Raw(func(dc any) error {
		st, err := dc.(driver.Conn).Prepare(query)
		if err != nil {
			return err
		}
		defer st.Close()
		n = st.NumInput()
		return nil
	}))
	return n
}
