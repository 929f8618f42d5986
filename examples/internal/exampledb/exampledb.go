// Package exampledb is the database the example programs run on: a SQLite file, or
// a schema of their own in a PostgreSQL database, which they drop at the end, so that
// they never touch the tables already there.
package exampledb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/refsetdb/refset/store/sqlite"
)

// DB is an example's database, on which it opens one connection pool or several (one
// per replica).
type DB struct {
	path  string // the SQLite file; "" on PostgreSQL
	dsn   string // the PostgreSQL DSN, its search_path the example's schema
	pools []interface{ Close() error }
	drop  func() // removes what New made
}

// New makes the database of the example called name. With a PostgreSQL DSN it is a
// new schema, refset_<name>_<time>; else the SQLite file path, which must not exist
// yet, or a new file in a temporary directory when path is "".
func New(ctx context.Context, name, path, pgDSN string) (*DB, error) {
	if pgDSN == "" {
		drop := func() {}
		if path == "" {
			dir, err := os.MkdirTemp("", "refset-"+name)
			if err != nil {
				return nil, err
			}
			path, drop = filepath.Join(dir, name+".db"), func() { os.RemoveAll(dir) }
		} else if _, err := os.Stat(path); err == nil {
			return nil, errors.New(path + " exists: the example wants a new database file")
		}
		return &DB{path: path, drop: drop}, nil
	}
	admin, err := postgres.Open(ctx, pgDSN, postgres.Options{MaxConns: 1})
	if err != nil {
		return nil, err
	}
	schema := fmt.Sprintf("refset_%s_%d", name, time.Now().UnixNano())
	if _, err := admin.Pool.ExecContext(ctx, `CREATE SCHEMA `+schema); err != nil {
		admin.Close()
		return nil, err
	}
	return &DB{dsn: withSearchPath(pgDSN, schema), drop: func() {
		admin.Pool.Exec(`DROP SCHEMA ` + schema + ` CASCADE`)
		admin.Close()
	}}, nil
}

// withSearchPath adds a search_path to a PostgreSQL DSN, URL or key=value pairs.
func withSearchPath(dsn, schema string) string {
	switch {
	case !strings.Contains(dsn, "://"):
		return dsn + " search_path=" + schema
	case strings.Contains(dsn, "?"):
		return dsn + "&search_path=" + schema
	}
	return dsn + "?search_path=" + schema
}

// Postgres reports whether the database is PostgreSQL: an example's own tables
// spell their types for it.
func (d *DB) Postgres() bool { return d.dsn != "" }

// Open opens a connection pool on the database, of maxConns connections at most on
// PostgreSQL (0: the store's default). Close closes it.
func (d *DB) Open(ctx context.Context, maxConns int) (refset.Database, error) {
	var db interface {
		refset.Database
		Close() error
	}
	var err error
	if d.Postgres() {
		db, err = postgres.Open(ctx, d.dsn, postgres.Options{MaxConns: maxConns})
	} else {
		db, err = sqlite.Open(ctx, d.path, sqlite.Options{})
	}
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
