package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// All of this store's SQL is here.

// nowMillis is the database clock in Unix milliseconds; julianday works on every
// SQLite version a user may link.
const nowMillis = `CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`

type dialect struct{}

func (dialect) Columns(ctx context.Context, q refset.Querier, table sqlident.Ident) ([]refsetdriver.Column, error) {
	if table.Schema != "" {
		return nil, fmt.Errorf("refset/sqlite: table %s: schema-qualified names are for Postgres: %w", table, refset.ErrInvalidIdentifier)
	}
	rows, err := q.QueryContext(ctx, `SELECT name, type, "notnull", pk FROM pragma_table_info(?)`, table.Name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []refsetdriver.Column
	for rows.Next() {
		var c refsetdriver.Column
		var pk int
		if err := rows.Scan(&c.Name, &c.Type, &c.NotNull, &pk); err != nil {
			return nil, err
		}
		c.Primary = pk > 0
		if c.Type == "" {
			c.Type = "BLOB" // a column declared without a type has no affinity
		}
		cols = append(cols, c)
	}
	return cols, rows.Err()
}

func (dialect) Statements(t refsetdriver.SetTable) refsetdriver.Statements {
	cols := t.Columns
	table, holds, id := t.Name.Quoted(), t.Holds.Quoted(), `"`+t.IDColumn+`"`
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + ")"
	insert := fmt.Sprintf(`INSERT INTO %s (%s) VALUES `, table, sqlstore.QuotedColumns(cols))
	return refsetdriver.Statements{
		Insert: insert + row,
		InsertRows: func(n int) string {
			return insert + strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
		},
		Select: fmt.Sprintf(`SELECT %s FROM %s WHERE %s = ?`, sqlstore.QuotedColumns(cols), table, id),
		Exists: fmt.Sprintf(`SELECT 1 FROM %s WHERE %s = ?`, table, id),
		Hold: fmt.Sprintf(`INSERT INTO %s (holder, object_id, expires_at)
			VALUES (?1, ?2, CASE WHEN ?3 > 0 THEN %s + ?3 END)
			ON CONFLICT (object_id, holder) DO UPDATE SET expires_at = excluded.expires_at`, holds, nowMillis),
		Unhold: fmt.Sprintf(`DELETE FROM %s WHERE holder = ? AND object_id = ?`, holds),
	}
}
