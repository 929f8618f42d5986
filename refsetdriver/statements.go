package refsetdriver

import "github.com/refsetdb/refset/sqlident"

// Column is a table column as the database catalog describes it.
type Column struct {
	Name    string
	Type    string // as the catalog writes it, e.g. "text", "VARCHAR(128)"
	NotNull bool
	Primary bool // part of the primary key
	// Default is a column the database fills when an INSERT leaves it out: one with
	// a DEFAULT (a serial's too), an identity or generated column, SQLite's rowid
	// alias (INTEGER PRIMARY KEY). A NOT NULL column without it must be mapped.
	Default bool
	// KeyType is what the column's values are stored and compared as, where Type
	// does not say it: the type a PostgreSQL domain is over ("numeric(10,2)"), then
	// " COLLATE name" where the column compares strings by a collation that may hold
	// two different strings equal (SQLite's NOCASE and RTRIM, or one the program
	// registered; a nondeterministic PostgreSQL collation). SchemaSQL.CheckIDType
	// judges a set's ID type by it. "" means Type.
	KeyType string
}

// SetTable is a set's table, checked against the catalog, as a dialect writes its
// statements for it.
type SetTable struct {
	Name     sqlident.Ident
	Holds    sqlident.Ident
	IDColumn string
	Columns  []string // the mapped columns, in the order Insert takes them
	// Types are the mapped columns' types as the catalog writes them, in Columns
	// order ("bytea"); empty where the caller did not read them.
	Types []string
}

// Statements are the dialect's SQL for one set. Each takes its arguments in this
// order:
//
//	Insert: the mapped columns, in SetTable.Columns order
//	InsertRows(n): n rows of the mapped columns, one after the other
//	Select: id          (selects the mapped columns)
//	Exists: id
//	Hold:   holder, id, ttl in milliseconds (0: never expires)
//	Unhold: holder, id
type Statements struct {
	Insert, Select, Exists, Hold, Unhold string
	InsertRows                           func(n int) string
	// MaxInsertParams, if not zero, is how many parameters one InsertRows statement
	// may bind: a driver whose binding costs more than linearly in them (modernc.org/
	// sqlite looks each one up among all the arguments) writes more rows in more,
	// shorter statements. Zero: up to 30,000 (under both databases' limits).
	MaxInsertParams int
}
