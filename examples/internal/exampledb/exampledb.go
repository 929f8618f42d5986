// Package exampledb is the database the example programs run on: a SQLite file, or
// a schema of their own in a PostgreSQL database, which they drop at the end, so that
// they never touch the tables already there.
package exampledb

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
	_ "github.com/refsetdb/refset/store/sqlite/modernc" // modernc.org/sqlite (pure Go)
)

// DB is an example's database, on which it opens one connection pool or several (one
// per replica).
type DB struct {
	dsn      string // what store.Open takes: the SQLite file, or the PostgreSQL DSN with the example's schema as its search_path
	postgres bool
	pools    []refset.Database
	drop     func() // removes what New made
}

// New makes the database of the example called name from dsn, in any form store.Open
// takes: with a PostgreSQL DSN it is a new schema, refset_<name>_<time>, in that
// database; with a SQLite path (or file: URL) that file, which must not exist yet;
// with "" a new file in a temporary directory.
func New(ctx context.Context, name, dsn string) (*DB, error) {
	dialect := "sqlite"
	if dsn != "" {
		var err error
		if dialect, err = store.DSNDialect(dsn); err != nil {
			return nil, err
		}
	}
	if dialect == (sqlite.Options{}).Dialect() {
		drop := func() {}
		if dsn == "" {
			dir, err := os.MkdirTemp("", "refset-"+name)
			if err != nil {
				return nil, err
			}
			dsn, drop = filepath.Join(dir, name+".db"), func() { os.RemoveAll(dir) }
		} else if _, err := os.Stat(dsn); err == nil {
			return nil, errors.New(dsn + " exists: the example wants a new database file")
		}
		return &DB{dsn: dsn, drop: drop}, nil
	}
	admin, err := postgres.Open(ctx, dsn, postgres.Options{MaxConns: 1})
	if err != nil {
		return nil, err
	}
	schema := fmt.Sprintf("refset_%s_%d", name, time.Now().UnixNano())
	if _, err := admin.Pool().ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		admin.Close()
		return nil, err
	}
	withSchema, err := withSearchPath(dsn, schema)
	if err != nil {
		admin.Pool().Exec(`DROP SCHEMA ` + schema)
		admin.Close()
		return nil, err
	}
	return &DB{dsn: withSchema, postgres: true, drop: func() {
		admin.Pool().Exec(`DROP SCHEMA ` + schema + ` CASCADE`)
		admin.Close()
	}}, nil
}

// withSearchPath sets the search_path of a PostgreSQL DSN, a URL or key=value pairs,
// to schema, replacing one it had.
func withSearchPath(dsn, schema string) (string, error) {
	if !strings.Contains(dsn, "://") {
		return dsn + " search_path=" + schema, nil // a later key wins
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", errors.New("the PostgreSQL DSN is not a valid URL") // not the URL: it may hold a password
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// DSN is the example's database as store.Open takes it: the SQLite file, or the
// PostgreSQL DSN whose search_path is the example's schema.
func (d *DB) DSN() string { return d.dsn }

// Postgres reports whether the database is PostgreSQL.
func (d *DB) Postgres() bool { return d.postgres }

// Open opens a connection pool on the database with store.Open, of maxConns
// connections at most on PostgreSQL (0: the store's default). Close closes it.
func (d *DB) Open(ctx context.Context, maxConns int) (refset.Database, error) {
	db, err := store.Open(ctx, d.dsn, sqlite.Options{}, postgres.Options{MaxConns: maxConns})
	if err != nil {
		return nil, err
	}
	d.pools = append(d.pools, db)
	return db, nil
}

// Close closes every pool Open opened, then drops the schema or removes the temporary
// directory New made.
func (d *DB) Close() {
	for _, db := range d.pools {
		db.Close()
	}
	d.drop()
}
