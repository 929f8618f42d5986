// Package storesql is the Go code that store/sqlite and store/postgres write alike
// around their SQL: a set's statements, which differ only in their placeholders and
// the clock of a hold's expiry, and the reading of a query's rows.
package storesql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// Statements are the statements of the set on t (see refsetdriver.Statements), with
// the dialect's placeholders: param(n) is the n-th (from 1) argument's. hold is the
// dialect's Hold statement, whose expiry follows its clock.
func Statements(t refsetdriver.SetTable, param func(n int) string, hold string) refsetdriver.Statements {
	table, id := t.Name.Quoted(), `"`+t.IDColumn+`"`
	cols := `"` + strings.Join(t.Columns, `", "`) + `"`
	insert := fmt.Sprintf(`INSERT INTO %s (%s) VALUES `, table, cols)
	rows := func(n int) string {
		var b strings.Builder
		b.WriteString(insert)
		for r := range n {
			if r > 0 {
				b.WriteString(", ")
			}
			b.WriteByte('(')
			for c := range t.Columns {
				if c > 0 {
					b.WriteString(", ")
				}
				b.WriteString(param(r*len(t.Columns) + c + 1))
			}
			b.WriteByte(')')
		}
		return b.String()
	}
	return refsetdriver.Statements{
		Insert:     rows(1),
		InsertRows: rows,
		Select:     fmt.Sprintf(`SELECT %s FROM %s WHERE %s = %s`, cols, table, id, param(1)),
		Exists:     fmt.Sprintf(`SELECT 1 FROM %s WHERE %s = %s`, table, id, param(1)),
		Hold:       hold,
		Unhold:     fmt.Sprintf(`DELETE FROM %s WHERE holder = %s AND object_id = %s`, t.Holds.Quoted(), param(1), param(2)),
	}
}

// Rows is every row query returns, each read into a T by scan.
func Rows[T any](ctx context.Context, q refset.Querier, query string, args []any, scan func(rows *sql.Rows, v *T) error) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var list []T
	for rows.Next() {
		var v T
		if err := scan(rows, &v); err != nil {
			rows.Close()
			return nil, err
		}
		list = append(list, v)
	}
	return list, errors.Join(rows.Err(), rows.Close())
}

// Clock is a dialect's clock (refsetdriver.Clock): now is its SQL, and a time it reads
// comes as a T, which at converts (NULL reads as the zero time).
func Clock[T any](now string, at func(T) time.Time) refsetdriver.Clock {
	return refsetdriver.Clock{Now: now, Scan: func() (any, func() time.Time) {
		var v sql.Null[T]
		return &v, func() time.Time {
			if !v.Valid {
				return time.Time{}
			}
			return at(v.V).UTC()
		}
	}}
}
