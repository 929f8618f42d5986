package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
	"github.com/refsetdb/refset/store/internal/cleanupsql"
	"github.com/refsetdb/refset/store/internal/storesql"
)

// All of this store's SQL is here.

// nowMillis is the database clock in Unix milliseconds; julianday works on every
// SQLite version a user may link. SQLite keeps the time in whole milliseconds, but
// julianday gives it in days, as a double: multiplied back, a millisecond comes out
// a hair below itself about half the time, so it is rounded, not cut (cut, a lock
// lived up to a millisecond less than its ttl). legacyNowMillis is the clock as
// triggers installed before were written with it (see InstalledGraceIn).
const (
	nowMillis       = `CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER)`
	legacyNowMillis = `CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`
)

type dialect struct{}

// columnsSQL reads a table's columns. A column has a default when it is declared with
// one, or is the table's rowid alias (its one primary key column, of type INTEGER),
// which SQLite numbers itself. (In a WITHOUT ROWID table such a column is no alias;
// it is then a set's ID, which its Go type maps whatever this says.) Generated
// columns are not listed: pragma_table_info hides them. The last column is the
// collation the primary key's index compares a key column by ("" for others).
const columnsSQL = `
SELECT c.name, c.type, c."notnull", c.pk > 0,
       c.dflt_value IS NOT NULL
         OR (c.pk = 1 AND upper(c.type) = 'INTEGER'
             AND (SELECT count(*) FROM pragma_table_info(?1) WHERE pk > 0) = 1),
       coalesce((SELECT x.coll FROM pragma_index_list(?1) l, pragma_index_xinfo(l.name) x
                 WHERE l.origin = 'pk' AND x.key AND x.name = c.name), '')
FROM pragma_table_info(?1) c`

func (dialect) Columns(ctx context.Context, q refset.Querier, table sqlident.Ident) ([]refsetdriver.Column, error) {
	if table.Schema != "" {
		return nil, fmt.Errorf("refset/sqlite: table %s: schema-qualified names are for Postgres: %w", table, refset.ErrInvalidIdentifier)
	}
	var collations []string
	cols, err := cleanupsql.Rows(ctx, q, columnsSQL, []any{table.Name},
		func(rows *sql.Rows, c *refsetdriver.Column) error {
			var collation string
			if err := rows.Scan(&c.Name, &c.Type, &c.NotNull, &c.Primary, &c.Default, &collation); err != nil {
				return err
			}
			if c.Type == "" {
				c.Type = "BLOB" // a column declared without a type has no affinity
			}
			collations = append(collations, collation)
			return nil
		})
	if err != nil {
		return nil, err
	}
	for i := range cols {
		if cols[i].Primary {
			if cols[i].KeyType, err = keyCollation(ctx, q, table, cols[i], collations[i]); err != nil {
				return nil, err
			}
		}
	}
	return cols, nil
}

// keyCollationSQL tells how a column of a table compares strings, by what a UNION
// with it keeps (a compound SELECT compares by its leftmost column's collation):
// whether it holds "A" equal to "a" (NOCASE), and "A" equal to "A " (RTRIM). SQLite
// has no catalog of a column's collation; the primary key's index names its own,
// which a PRIMARY KEY clause may set apart from the column's.
const keyCollationSQL = `
SELECT (SELECT count(*) FROM (SELECT %[2]s FROM %[1]s WHERE 0 UNION SELECT 'A' UNION SELECT 'a')) = 1,
       (SELECT count(*) FROM (SELECT %[2]s FROM %[1]s WHERE 0 UNION SELECT 'A' UNION SELECT 'A ')) = 1`

// keyCollation is the key type (refsetdriver.Column.KeyType) of c, a primary key
// column of table whose key index compares by indexCollation: its type, then
// " COLLATE name" where it compares by a collation other than BINARY, which holds two
// different strings equal (NOCASE, RTRIM, or one the program registered); "" for
// BINARY. A key whose index compares otherwise than its column (PRIMARY KEY (id
// COLLATE ...)) is refused with refset.ErrSchema: a foreign key, the set's holds
// table's too, cannot reference it (SQLite: "foreign key mismatch").
func keyCollation(ctx context.Context, q refset.Querier, table sqlident.Ident, c refsetdriver.Column, indexCollation string) (string, error) {
	var nocase, rtrim bool
	query := fmt.Sprintf(keyCollationSQL, table.Quoted(), sqlident.Ident{Name: c.Name}.Quoted())
	if err := q.QueryRowContext(ctx, query).Scan(&nocase, &rtrim); err != nil {
		return "", err
	}
	column := "BINARY"
	switch {
	case nocase && !rtrim:
		column = "NOCASE"
	case rtrim && !nocase:
		column = "RTRIM"
	case nocase && rtrim:
		column = "" // the program's own collation, which the index names
	}
	if indexCollation == "" { // no index: a rowid key, compared by its column's collation
		indexCollation = column
		if column == "" {
			indexCollation = "the column's own"
		}
	}
	index := strings.ToUpper(indexCollation)
	if column != "" && index != column && (index == "BINARY" || index == "NOCASE" || index == "RTRIM") {
		return "", fmt.Errorf("refset/sqlite: the primary key of %s compares %q by COLLATE %s, the column by COLLATE %s: "+
			"no foreign key can reference it (the set's holds table's neither: SQLite's \"foreign key mismatch\"); "+
			"declare the collation on the column, not in the PRIMARY KEY clause: %w", table, c.Name, index, column, refset.ErrSchema)
	}
	if index == "BINARY" {
		return "", nil
	}
	return c.Type + " COLLATE " + indexCollation, nil
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
