package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
	"github.com/refsetdb/refset/store/internal/cleanupsql"
	"github.com/refsetdb/refset/store/internal/storesql"
)

// All of this store's SQL is here.

// nowMillis is the database clock in Unix milliseconds; julianday works on every
// SQLite version a user may link.
const nowMillis = `CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`

type dialect struct{}

// columnsSQL reads a table's columns. A column has a default when it is declared with
// one, or is the table's rowid alias (its one primary key column, of type INTEGER),
// which SQLite numbers itself. (In a WITHOUT ROWID table such a column is no alias;
// it is then a set's ID, which its Go type maps whatever this says.) Generated
// columns are not listed: pragma_table_info hides them.
const columnsSQL = `
SELECT c.name, c.type, c."notnull", c.pk > 0,
       c.dflt_value IS NOT NULL
         OR (c.pk = 1 AND upper(c.type) = 'INTEGER'
             AND (SELECT count(*) FROM pragma_table_info(?1) WHERE pk > 0) = 1)
FROM pragma_table_info(?1) c`

func (dialect) Columns(ctx context.Context, q refset.Querier, table sqlident.Ident) ([]refsetdriver.Column, error) {
	if table.Schema != "" {
		return nil, fmt.Errorf("refset/sqlite: table %s: schema-qualified names are for Postgres: %w", table, refset.ErrInvalidIdentifier)
	}
	return cleanupsql.Rows(ctx, q, columnsSQL, []any{table.Name},
		func(rows *sql.Rows, c *refsetdriver.Column) error {
			if err := rows.Scan(&c.Name, &c.Type, &c.NotNull, &c.Primary, &c.Default); err != nil {
				return err
			}
			if c.Type == "" {
				c.Type = "BLOB" // a column declared without a type has no affinity
			}
			return nil
		})
}

// Statements are the set's statements. Their column names are quoted as `name`, not
// "name": SQLite reads a double-quoted name that names no column as a string (its
// "double-quoted string literal" misfeature), so a select of a column dropped since
// the store was built would return the column's name as its value, and a look-up by a
// renamed ID column would find nothing, where both must fail as the table no longer
// matching the store (refset.ErrSchema), as on PostgreSQL.
func (dialect) Statements(t refsetdriver.SetTable) refsetdriver.Statements {
	return storesql.Statements(t, func(int) string { return "?" }, func(c string) string { return "`" + c + "`" }, nil, fmt.Sprintf(`INSERT INTO %s (holder, object_id, expires_at)
			VALUES (?1, ?2, CASE WHEN ?3 > 0 THEN %s + ?3 END)
			ON CONFLICT (object_id, holder) DO UPDATE SET expires_at = excluded.expires_at`, t.Holds.Quoted(), nowMillis))
}
