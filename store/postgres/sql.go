package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// All of this store's SQL is here.

// binaryParametersSQL tells whether lib/pq sends arguments with binary_parameters on,
// given the argument `\x00` as a string. With it on, lib/pq sends the string as it
// is, which the server reads as bytea's hex form: one byte. Without it, lib/pq first
// asks the server for the parameter's type and escapes the string as bytea: four.
const binaryParametersSQL = `SELECT octet_length($1::bytea)`

type dialect struct{}

// columnsSQL reads a table's columns; to_regclass resolves an unqualified name through
// search_path as the statements will, and yields no rows for a missing table.
const columnsSQL = `
SELECT a.attname,
       format_type(a.atttypid, a.atttypmod),
       a.attnotnull,
       COALESCE(a.attnum = ANY (i.indkey), false)
FROM pg_attribute a
LEFT JOIN pg_index i ON i.indrelid = a.attrelid AND i.indisprimary
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum`

func (dialect) Columns(ctx context.Context, q refset.Querier, table sqlident.Ident) ([]refsetdriver.Column, error) {
	rows, err := q.QueryContext(ctx, columnsSQL, table.Quoted())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []refsetdriver.Column
	for rows.Next() {
		var c refsetdriver.Column
		if err := rows.Scan(&c.Name, &c.Type, &c.NotNull, &c.Primary); err != nil {
			return nil, err
		}
		cols = append(cols, c)
	}
	return cols, rows.Err()
}

func (dialect) Statements(t refsetdriver.SetTable) refsetdriver.Statements {
	cols := t.Columns
	table, holds, id := t.Name.Quoted(), t.Holds.Quoted(), `"`+t.IDColumn+`"`
	params := make([]string, len(cols))
	for i := range cols {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	insert := fmt.Sprintf(`INSERT INTO %s (%s) VALUES `, table, sqlstore.QuotedColumns(cols))
	return refsetdriver.Statements{
		Insert: insert + "(" + strings.Join(params, ", ") + ")",
		InsertRows: func(n int) string {
			var b strings.Builder
			b.WriteString(insert)
			for r := range n {
				if r > 0 {
					b.WriteString(", ")
				}
				b.WriteByte('(')
				for c := range cols {
					if c > 0 {
						b.WriteString(", ")
					}
					b.WriteString("$" + strconv.Itoa(r*len(cols)+c+1))
				}
				b.WriteByte(')')
			}
			return b.String()
		},
		Select: fmt.Sprintf(`SELECT %s FROM %s WHERE %s = $1`, sqlstore.QuotedColumns(cols), table, id),
		Exists: fmt.Sprintf(`SELECT 1 FROM %s WHERE %s = $1`, table, id),
		Hold: fmt.Sprintf(`INSERT INTO %s (holder, object_id, expires_at)
			VALUES ($1, $2, CASE WHEN $3::bigint > 0 THEN now() + $3::bigint * interval '1 millisecond' END)
			ON CONFLICT (object_id, holder) DO UPDATE SET expires_at = EXCLUDED.expires_at`, holds),
		Unhold: fmt.Sprintf(`DELETE FROM %s WHERE holder = $1 AND object_id = $2`, holds),
	}
}
