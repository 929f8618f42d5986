package postgres

import (
	"context"
	"database/sql"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// dialectDriver is this store's refsetdriver.Driver, bound to one database: its
// statements and catalog reads (dialect), its clean-up SQL (cleanupDialect), the pool
// and options of the database (refsetdriver.Binding), and the database itself for
// reads from its replica (refsetdriver.Replicated).
type dialectDriver struct {
	dialect
	cleanupDialect
	refsetdriver.Binding
	db *DB
}

// QueryOwn runs a statement that commits on its own (refsetdriver.OwnCommits; see
// own.go).
func (d dialectDriver) QueryOwn(ctx context.Context, query string, args []any, row func(*sql.Rows) error, committed refsetdriver.CommittedFunc) error {
	return d.db.queryOwn(ctx, query, args, row, committed)
}

var _ refsetdriver.OwnCommits = dialectDriver{}

// Name names the dialect: the folder of per-dialect SQL files.
func (dialectDriver) Name() string { return dialectName }

// Replica is the pool on the hot standby, or nil; nil too once the database is
// closed, so that refset's reads go to Reader, which refuses them (a caller's replica
// stays open after Close).
func (d dialectDriver) Replica() refset.Querier {
	if d.db.replicaPool == nil || d.db.Closed() {
		return nil // not a nil *sqlx.DB in a non-nil interface
	}
	return d.db.replicaPool
}

// ReplicaCaughtUp is the database's (DB.ReplicaCaughtUp).
func (d dialectDriver) ReplicaCaughtUp(ctx context.Context) (bool, error) {
	return d.db.ReplicaCaughtUp(ctx)
}

// pgxDriver is the driver of a database on pgx: a lookup by key reads its row over
// pgx itself (refsetdriver.RowReader; see pgxRowRead).
type pgxDriver struct{ dialectDriver }

func (d pgxDriver) ReadRow(ctx context.Context, pool any, query string, args []any, scan func(refsetdriver.Row) error) (ran, found bool, err error) {
	return d.db.pgxRowRead(ctx, pool, query, args, scan)
}

// pipeliningDriver is the driver of a database on pgx whose isolation level pgx
// takes: it also runs units of statements in fewer round trips
// (refsetdriver.Pipeliner; see pgxPipeline).
type pipeliningDriver struct {
	pgxDriver
	pipeline pgxPipeline
}

func (d pipeliningDriver) RunPipeline(ctx context.Context, stmts []refsetdriver.Statement, result refsetdriver.ResultFunc) error {
	return d.pipeline.run(ctx, stmts, result)
}

// libpqPipeliningDriver is the driver of a database on lib/pq whose isolation level
// lib/pq takes: it runs units of statements in fewer round trips
// (refsetdriver.Pipeliner; see libpqPipeline).
type libpqPipeliningDriver struct {
	dialectDriver
	pipeline libpqPipeline
}

func (d libpqPipeliningDriver) RunPipeline(ctx context.Context, stmts []refsetdriver.Statement, result refsetdriver.ResultFunc) error {
	return d.pipeline.run(ctx, stmts, result)
}

func (d libpqPipeliningDriver) Pipelines(stmts []refsetdriver.Statement) bool {
	return d.pipeline.takes(stmts)
}

var _ refsetdriver.SelectivePipeliner = libpqPipeliningDriver{}

// newDriver is the driver of db, opened through driverName, with binding.
func newDriver(db *DB, driverName string, binding refsetdriver.Binding) refsetdriver.Driver {
	d := dialectDriver{Binding: binding, db: db}
	if driverName != DriverPgx {
		if p, ok := newLibpqPipeline(db, db.isolation); ok {
			return libpqPipeliningDriver{dialectDriver: d, pipeline: p}
		}
		return d
	}
	if p, ok := newPgxPipeline(db, db.isolation, binding.Unprepared()); ok {
		return pipeliningDriver{pgxDriver: pgxDriver{d}, pipeline: p}
	}
	return pgxDriver{d}
}
