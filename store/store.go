// Package store is what every refset store shares: Open, which opens the database
// of either store (store/sqlite, store/postgres) from its DSN, and a set's Config,
// NewStore and NewCollector, which take the database of any store and find its
// dialect through the database's driver. A program that runs on both databases
// opens, builds its sets and collectors here, with one code path:
//
//	db, err := store.Open(ctx, dsn, sqlite.Options{}, postgres.Options{})
//	...
//	defer db.Close()
//	set, err := store.NewStore[Block, string](ctx, db, store.Config{Table: "blocks"})
//
// The stores' options name the stores a program can open: package store imports
// neither, so a program that passes only postgres.Options links no SQLite (and
// builds without cgo).
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/dblog"
	"github.com/refsetdb/refset/internal/migration"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/internal/sqlstore"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// Config names the table a set lives in. The table must exist; refset does not
// create the user's tables, since they carry the user's own columns and keys.
type Config struct {
	// Table is the object table, schema-qualified on PostgreSQL if need be
	// ("ledger.blocks").
	Table string
	// IDColumn is the column of the objects' IDs; "" means the table's primary key,
	// which it must be in any case.
	IDColumn string
	// HoldsTable names the set's holds table; "" means the one refset recorded the
	// set with when a store was built on it before (as schema.Set's HoldsTable), or
	// else Table + "_holds", in the same schema. A set recorded with another holds
	// table is refused (refset.ErrInvalidConfig): its holds would be left behind.
	HoldsTable string
}

// Options are the options every store's database takes: sqlite.Options and
// postgres.Options embed them beside their own. The zero value is a safe default.
type Options struct {
	// ExternalMigrations makes stores run no DDL: NewStore checks that refset's
	// tables and the set's are at the versions this code needs, and fails with
	// refset.ErrSchema (a *schema.PendingError, whose Plan.SQL() is the script to run)
	// when they are not, so the application's role needs no CREATE rights. A DBA
	// applies the SQL of a dry run of package schema's migrator as part of the
	// database's own migrations. Clean-up's Install still creates its triggers, and a
	// schema.Migrator the program runs itself still migrates.
	ExternalMigrations bool

	// Logger receives what refset does that an operator wants to know: transactions
	// the database aborted and refset retried (debug), conflicts that outlasted the
	// retries (warn), commits whose outcome is unknown (error), statements slower than
	// SlowStatement (warn), and clean-up's passes. Nil: refset logs nothing.
	Logger *slog.Logger

	// SlowStatement is the duration past which a statement refset runs (its own, and
	// those of Commands and InTx functions) is logged; a query is timed until its
	// first row is ready. Zero means one second; a negative value turns the log off.
	SlowStatement time.Duration

	// StatementCache is how many statements of refset.Exec commands the database keeps
	// prepared (SQLite: on its writer connection; PostgreSQL on lib/pq: on every
	// connection), so a hand-over's commands are not compiled again on every run. A
	// statement is prepared once it has run twice; the least recently used beyond
	// this many is closed. Zero means 64; a negative size prepares none. On lib/pq,
	// the statements of Adds and hand-overs sent in one simple query are as many
	// more per connection at most (prepared on first use, kept until the database is
	// closed). pgx keeps its own cache of every statement (its
	// statement_cache_capacity), so on pgx, and with postgres.Options.Unprepared,
	// refset adds none.
	StatementCache int

	// Observer is told what refset does in this database, for metrics: objects
	// added, hand-overs, retried and lasting conflicts, clean-up's collections, reads
	// a replica could not answer. Package otelrefset makes one that feeds
	// OpenTelemetry. Nil: nothing is told.
	Observer refset.Observer

	// RetryUnavailable is how long a unit of work is run again after it failed with
	// refset.ErrUnavailable (the server went away: a restart, a failover) and certainly
	// did not commit: InTx, and the Add, AddAll, Upgrade and Complete that run one. It
	// rides through a failover, which on PostgreSQL with a multi-host DSN takes a few
	// seconds to a new primary (see "Running on a high-availability cluster" in
	// SCALING.md): the next attempts wait 50 ms, then twice as long each time up to
	// one second, until the unit commits, fails otherwise, the context ends, or the
	// next attempt would start past RetryUnavailable after the first failure. A unit
	// whose COMMIT lost its connection runs again only when the server said it did not
	// commit, never after refset.ErrCommitUnknown. Each attempt is logged (info) and
	// told to the Observer (Retried). Zero, the default: never, the call fails at
	// once. As with conflicts, the unit's function must have no effects outside its
	// transaction, since it may run more than once.
	RetryUnavailable time.Duration
}

// Settings are the options as a store's driver takes them.
func (o Options) Settings() refsetdriver.Settings {
	return refsetdriver.Settings{
		ExternalMigrations: o.ExternalMigrations,
		Logger:             o.Logger,
		SlowStatement:      dblog.Threshold(o.SlowStatement),
		Observer:           o.Observer,
		RetryUnavailable:   o.RetryUnavailable,
	}
}

// NewStore returns the store of a set of T in db, a database of store/sqlite or
// store/postgres (refset.ErrInvalidConfig for anything else). It checks every name
// in cfg, checks that each `db`-tagged field of T has a column, that each NOT NULL
// column without a default (nor an identity, generated or rowid column) has a field,
// and that the primary key is mapped to a field of type ID (refset.ErrSchema
// otherwise, naming the column and the `db` tag to add) whose Go type can hold the
// column's SQL type (refset.ErrSchema otherwise, naming the column, its type and ID:
// a string on an integer key, an integer on a text one; on SQLite by the column's
// affinity, any ID on a column declared BLOB or without a type; a type implementing
// sql.Scanner or driver.Valuer on any column), refuses a HoldsTable that
// is the set's object table or review queue (refset.ErrInvalidConfig), a table
// that is there and is no holds table (refset.ErrSchema), or another table than the
// one refset recorded the set with (refset.ErrInvalidConfig, naming that one) before
// it creates or records anything, and creates the
// holds table and review queue if they do not exist, also when refset's records say
// it made them before: tables dropped and made again (by hand, or by DROP SCHEMA ...
// CASCADE while refset_schema_version lives in another schema) get a working set.
// With the database's ExternalMigrations option it creates nothing and fails with
// refset.ErrSchema (a *schema.PendingError) when the schema is behind. It commits on
// its own: called with the context of a unit of work on db it fails at once with
// refset.ErrInUnitOfWork; called inside a unit's function with another context, it
// runs apart from the unit, but on PostgreSQL fails at once with
// refset.ErrInUnitOfWork, creating nothing, when the units on the goroutine hold
// every connection of the pool (it would wait for them for ever).
func NewStore[T refset.Identifiable[ID], ID comparable](ctx context.Context, db refset.Database, cfg Config) (refset.SetStore[T, ID], error) {
	cfg, err := recordedHolds(ctx, db, cfg)
	if err != nil {
		return nil, err
	}
	if err := checkHolds(ctx, db, cfg); err != nil {
		return nil, err
	}
	s, err := sqlstore.Open[T, ID](ctx, db, sqlstore.Config(cfg))
	if err != nil {
		return nil, err // not a nil *Store in a non-nil interface
	}
	if drv := db.Driver(); !drv.Unprepared() {
		// On the pool: refused at once, as the reads before, when it would wait for a
		// connection that only units of work on this goroutine could free.
		if err := refsetdriver.RefuseOwnPool(db, "prepare"); err != nil {
			return nil, fmt.Errorf("refset: new store of %s: %w", cfg.Table, err)
		}
		if err := s.Prepare(ctx, drv.Pool()); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// recordedHolds is cfg with HoldsTable, when it is "", filled in with the holds
// table refset's registry of sets (refset_sets) records for the set, if it records
// one: as schema.Set's HoldsTable "" means the one the set is registered with, a
// program that leaves it empty builds its store on the holds the set already has,
// wherever they are. (A HoldsTable other than the recorded one is refused by the
// migrator, before anything changes.) Whatever keeps cfg from being read (a bad
// name, no store's database, a call in a unit of work) is left to sqlstore.Open,
// which says it in its own words; a registry that cannot be read fails NewStore,
// since building the store without it would make the set another holds table.
func recordedHolds(ctx context.Context, db refset.Database, cfg Config) (Config, error) {
	if cfg.HoldsTable != "" {
		return cfg, nil
	}
	d, err := refsetdriver.Of(db)
	if err != nil || refsetdriver.RefuseUnit(ctx, db, "NewStore") != nil {
		return cfg, nil
	}
	table, _, _, err := migration.SetTables(cfg.Table, cfg.HoldsTable)
	if err != nil {
		return cfg, nil
	}
	reading := func(err error) error {
		return sentinel.Wrap("refset", fmt.Sprintf("new store of %s: reading refset's record of the set", table), db.TranslateError(err, ""))
	}
	sq := d.SchemaSQL()
	has, err := sq.HasSetTable(ctx, refsetdriver.ReaderFor(ctx, db))
	if err != nil {
		return cfg, reading(err)
	}
	if !has {
		return cfg, nil // no set recorded yet
	}
	r, err := sq.Lookup(ctx, refsetdriver.ReaderFor(ctx, db), table)
	switch {
	case errors.Is(err, refset.ErrNotFound):
		return cfg, nil
	case err != nil:
		return cfg, reading(err)
	}
	cfg.HoldsTable = r.Holds.Name
	return cfg, nil
}

// holdsColumns are the columns of every holds table refset makes.
var holdsColumns = []string{"holder", "object_id", "expires_at", "created_at"}

// checkHolds refuses, before NewStore runs any DDL or records the set, a holds table
// that cannot be one: the object table itself or its review queue
// (refset.ErrInvalidConfig), or a table of the database that is not a holds table
// (refset.ErrSchema). On a set refset made before, the migrations have nothing left
// to run, so only the statements NewStore prepares afterwards would find the holds
// table wrong, once the set's record already names it. Any other error is left to
// sqlstore.Open, which says it in its own words.
func checkHolds(ctx context.Context, db refset.Database, cfg Config) error {
	d, err := refsetdriver.Of(db)
	if err != nil || refsetdriver.RefuseUnit(ctx, db, "NewStore") != nil {
		return nil
	}
	table, holds, queue, err := migration.SetTables(cfg.Table, cfg.HoldsTable)
	if err != nil {
		return nil
	}
	cols, err := d.Columns(ctx, refsetdriver.ReaderFor(ctx, db), holds)
	if err != nil {
		return nil // a closed database, an ended context: sqlstore.Open says it
	}
	for _, t := range []struct {
		ident sqlident.Ident
		what  string
	}{{table, "the set's object table"}, {queue, "the set's review queue"}} {
		if strings.EqualFold(holds.String(), t.ident.String()) {
			return fmt.Errorf("refset: new store of %s: %w: HoldsTable %s is %s; name a table of its own, or leave it empty for %s_holds",
				table, refset.ErrInvalidConfig, holds, t.what, table.Name)
		}
	}
	if len(cols) == 0 {
		return nil // none yet: NewStore creates it
	}
	for _, want := range holdsColumns {
		if !slices.ContainsFunc(cols, func(c refsetdriver.Column) bool { return strings.EqualFold(c.Name, want) }) {
			return fmt.Errorf("refset: new store of %s: table %s, its holds table, is not one (it has no column %q): %w; name another with HoldsTable",
				table, holds, want, refset.ErrSchema)
		}
	}
	return nil
}

// NewCollector installs clean-up of cfg's set in db (see cleanup.Config), a database
// of store/sqlite or store/postgres, and returns its Collector.
func NewCollector(ctx context.Context, db refset.Database, cfg cleanup.Config) (*cleanup.Collector, error) {
	return cleanup.Install(ctx, db, cfg)
}
