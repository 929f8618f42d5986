// Package storesql is the Go code that store/sqlite and store/postgres write alike
// around their SQL: a set's statements, which differ only in their placeholders and
// the clock of a hold's expiry, the clock, and the shell of a store's part of
// refset's schema.
package storesql

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"time"

	"github.com/refsetdb/refset/internal/migration"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
	"github.com/refsetdb/refset/store/internal/refsettables"
)

// Statements are the statements of the set on t (see refsetdriver.Statements), with
// the dialect's placeholders, param(n) the n-th (from 1) argument's, and its quoted
// column names, quote(name). An insert's placeholder is followed by cast(type), given
// its column's type (t.Types), if cast is not nil. hold is the dialect's Hold
// statement, whose expiry follows its clock.
func Statements(t refsetdriver.SetTable, param func(n int) string, quote func(name string) string, cast func(colType string) string, hold string) refsetdriver.Statements {
	table, id := t.Name.Quoted(), quote(t.IDColumn)
	quoted := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		quoted[i] = quote(c)
	}
	cols := strings.Join(quoted, ", ")
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
				if cast != nil && c < len(t.Types) {
					b.WriteString(cast(t.Types[c]))
				}
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

// Schema is a store's part of refset's schema (refsetdriver.SchemaSQL): its
// migration files and their lock, and its statements on refset's own tables and its
// catalog's look-up of a table (refsettables.Tables, written with its placeholders
// and clock).
type Schema struct {
	refsettables.Tables
	name    string
	files   fs.FS
	lock    func(ctx context.Context, tx refset.Tx) error
	keyType func(typ string) KeyType
	maxName int
	fold    bool
}

// SchemaDialect is what a store's Schema is made of.
type SchemaDialect struct {
	Name   string                    // the dialect's name
	Files  fs.FS                     // holding sql/schema/{core,set}
	Rebind func(query string) string // writes the dialect's placeholders into a statement written with ?
	Clock  refsetdriver.Clock
	// LockMigrations serialises migrations across processes until tx ends; nil: the
	// write transaction itself does.
	LockMigrations func(ctx context.Context, tx refset.Tx) error
	TableExists    func(ctx context.Context, q refset.Querier, table sqlident.Ident) (bool, error)
	// KeyType judges a key column's SQL type, as the dialect's catalog writes it,
	// for the ID types that can hold it (SQLiteKeyType, PostgresKeyType).
	KeyType func(typ string) KeyType
	// MaxName is the longest name the dialect keeps whole (it cuts a longer one
	// short, silently); 0: no limit.
	MaxName int
	// FoldsCase says the dialect's names compare without regard to case.
	FoldsCase bool
}

// NewSchema is the Schema of d.
func NewSchema(d SchemaDialect) Schema {
	files, err := fs.Sub(d.Files, "sql/schema")
	if err != nil {
		panic(err) // the embedded folder is part of the store's package
	}
	lock := d.LockMigrations
	if lock == nil {
		lock = func(context.Context, refset.Tx) error { return nil }
	}
	return Schema{Tables: refsettables.New(d.Rebind, d.TableExists, d.Clock), name: d.Name, files: files, lock: lock,
		keyType: d.KeyType, maxName: d.MaxName, fold: d.FoldsCase}
}

// CheckIDType: see refsetdriver.SchemaSQL.
func (s Schema) CheckIDType(table sqlident.Ident, column, typ string, id reflect.Type) error {
	return checkIDType(s.keyType, table, column, typ, id)
}

// IDCheck is the check the set's store runs on each ID it sends to the set's ID
// column (see idCheck), or nil when there is none. internal/sqlstore's Open finds it
// on the dialect's SchemaSQL.
func (s Schema) IDCheck(table sqlident.Ident, column, typ string, id reflect.Type) func(id any) error {
	return idCheck(s.keyType, table, column, typ, id)
}

// IndexName: see refsetdriver.SchemaSQL.
func (s Schema) IndexName(table, label string) (name, legacy string) {
	return migration.IndexName(s.maxName, table, label)
}

// SameTable: see refsetdriver.SchemaSQL.
func (s Schema) SameTable(a, b sqlident.Ident) bool {
	if a.Schema == "" || b.Schema == "" {
		a.Schema, b.Schema = "", ""
	}
	return a == b || s.fold && strings.EqualFold(a.String(), b.String())
}

func (s Schema) Name() string                                           { return s.name }
func (s Schema) Migrations() fs.FS                                      { return s.files }
func (s Schema) LockMigrations(ctx context.Context, tx refset.Tx) error { return s.lock(ctx, tx) }
