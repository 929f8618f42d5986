package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/refsetdb/refset/internal/dblog"
	"github.com/refsetdb/refset/internal/migration"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/internal/stmtcache"
	"github.com/refsetdb/refset/internal/txview"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// maxParams keeps a multi-row insert under both databases' limits on bound
// parameters (SQLite 32766, Postgres 65535), and maxRows keeps statements small.
const (
	maxParams = 30000
	maxRows   = 500
)

// Table is a set's table, checked against the catalog.
type Table struct {
	Name     sqlident.Ident
	Holds    sqlident.Ident
	IDColumn string
	IDType   string // the ID column's type as the catalog writes it
	// IDKeyType is what the ID column's values are stored and compared as
	// (refsetdriver.Column.KeyType, or IDType): what the ID type is judged by.
	IDKeyType string
	Mapping   *Mapping
	// Types are the mapped columns' types as the catalog writes them, in
	// Mapping.Columns order.
	Types []string
	// CheckID refuses (refset.ErrInvalidID) an ID the ID column would not keep as
	// written: on SQLite, a string that a key of NUMERIC affinity (declared UUID,
	// NUMERIC, DECIMAL, BOOLEAN, ...) would store as a number ("0012" as 12). nil, as for every
	// other column, checks nothing, at no cost. The store runs it on every ID it
	// sends, before the statement: see Store.refuse.
	CheckID func(id any) error
}

// SetTable is the table as a dialect writes its statements for it.
func (t Table) SetTable() refsetdriver.SetTable {
	return refsetdriver.SetTable{Name: t.Name, Holds: t.Holds, IDColumn: t.IDColumn, Columns: t.Mapping.Columns(), Types: t.Types}
}

// Resolve checks the struct T against the columns of table: every mapped column
// exists, every NOT NULL column without a default is mapped, the primary key is one
// column, mapped to a field of type ID. idColumn may
// be "" (use the primary key).
func Resolve[T refset.Identifiable[ID], ID comparable](table sqlident.Ident, idColumn string, cols []refsetdriver.Column) (Table, error) {
	m, err := NewMapping(reflect.TypeFor[T]())
	if err != nil {
		return Table{}, err
	}
	if len(cols) == 0 {
		return Table{}, fmt.Errorf("refset: table %s does not exist: %w", table, refset.ErrSchema)
	}
	byName := map[string]refsetdriver.Column{}
	for _, c := range cols {
		byName[c.Name] = c
	}
	for _, col := range m.Columns() {
		if _, ok := byName[col]; !ok {
			return Table{}, fmt.Errorf("refset: table %s has no column %q (mapped by %v): %w",
				table, col, m.typ, refset.ErrSchema)
		}
	}
	for _, c := range cols {
		if _, mapped := m.Field(c.Name); c.NotNull && !c.Default && !mapped {
			return Table{}, fmt.Errorf("refset: column %q of %s is NOT NULL without a default, and no field of %v maps it, "+
				"so every Add would fail: add a field tagged `db:%q`, or give the column a default: %w",
				c.Name, table, m.typ, c.Name, refset.ErrSchema)
		}
	}
	idCol, err := migration.IDColumn(table, idColumn, cols)
	if err != nil {
		return Table{}, err
	}
	idColumn = idCol.Name
	ft, ok := m.Field(idColumn)
	if !ok {
		return Table{}, fmt.Errorf("refset: %v has no field tagged `db:%q` for the ID: %w", m.typ, idColumn, refset.ErrSchema)
	}
	if want := reflect.TypeFor[ID](); ft != want {
		return Table{}, fmt.Errorf("refset: the ID field of %v has type %v, the set's ID type is %v: %w",
			m.typ, ft, want, refset.ErrSchema)
	}
	types := make([]string, len(m.Columns()))
	for i, col := range m.Columns() {
		types[i] = byName[col].Type
	}
	return Table{Name: table, IDColumn: idColumn, IDType: idCol.Type, IDKeyType: cmp.Or(idCol.KeyType, idCol.Type),
		Mapping: m, Types: types}, nil
}

// Store is a SetStore on a SQL database, with the statements of its dialect.
type Store[T refset.Identifiable[ID], ID comparable] struct {
	db    refset.Database
	table Table
	stmt  refsetdriver.Statements
	// reads, replicaReads and writes are nil until Prepare: the store then runs
	// every statement unprepared. reads are the reads outside transactions (a cache
	// miss loads through the database's reader) prepared on the database's reader,
	// replicaReads on its replica: unprepared, SQLite compiles the statement on every
	// call (over a third of a miss) and lib/pq spends a second round trip to parse it.
	reads, replicaReads *stmtcache.Cache
	replica             refset.Querier // the database's replica, or nil
	// writes are the writing statements, prepared by Prepare on the pool that the
	// database begins its transactions on, by query; read-only after that.
	writes map[string]*sql.Stmt
	// rowRead reads a lookup's row over the driver's own interface, or is nil:
	// database/sql reads it.
	rowRead refsetdriver.RowReader
	drv     refsetdriver.Driver
	// idAt is the ID column's place among the mapped columns (Mapping.Columns).
	idAt int
}

// Prepare makes the store run its statements prepared: reads outside a transaction on
// the database's reader, prepared as first needed, and its writing statements, which
// it prepares now on pool, the pool db.Begin takes its transactions from, to run in
// those transactions. lib/pq then needs one round trip a statement where it needed
// two, and SQLite does not compile the statement again. The writes are prepared now,
// before any transaction, because preparing takes a connection from the pool, and
// inside a transaction on SQLite's one writer connection that would wait for itself.
func (s *Store[T, ID]) Prepare(ctx context.Context, pool *sql.DB) error {
	full := s.stmt.InsertRows(s.rowsPerInsert(len(s.table.Mapping.Columns())))
	writes := map[string]*sql.Stmt{}
	for _, query := range []string{s.stmt.Insert, full, s.stmt.Hold, s.stmt.Unhold} {
		st, err := pool.PrepareContext(ctx, query)
		if err != nil {
			for _, st := range writes {
				st.Close()
			}
			return sentinel.Wrap("refset", fmt.Sprintf("preparing the statements of %s", s.table.Name), s.db.TranslateError(err, query))
		}
		writes[query] = st
	}
	s.writes, s.reads, s.replicaReads = writes, readsOn(s.db.Reader()), readsOn(s.replica)
	// The database's Close closes them: on the caller's pools nothing else would.
	return refsetdriver.PreparedOf(s.drv).Add(s.closeStatements)
}

// closeStatements closes what Prepare prepared. The database is closed: what the
// store runs after fails on its pools (ErrClosed), prepared or not.
func (s *Store[T, ID]) closeStatements() error {
	var errs []error
	for _, st := range s.writes {
		errs = append(errs, st.Close())
	}
	return errors.Join(append(errs, s.reads.Close(), s.replicaReads.Close())...)
}

// exec runs a writing statement on q. In a transaction this store's database began it
// runs the statement Prepare made, bound to the transaction's connection; anywhere
// else, unprepared.
func (s *Store[T, ID]) exec(ctx context.Context, q refset.Querier, query string, args ...any) (sql.Result, error) {
	defer s.slow(ctx, query, time.Now())
	if tx := begun(q); tx != nil && tx.db == s.db {
		if st := s.writes[query]; st != nil {
			return tx.execStmt(ctx, st, query, args...)
		}
	}
	return q.ExecContext(ctx, query, args...)
}

// slow logs query, started at start, if it was slower than the database's
// threshold.
func (s *Store[T, ID]) slow(ctx context.Context, query string, start time.Time) {
	dblog.Slow(ctx, s.drv.Logger(), s.drv.SlowStatement(), query, start)
}

// begun is the Tx under q (refset hands commands and units of work a view of its
// transaction), or nil if q is not a transaction a store's database began.
func begun(q refset.Querier) *Tx {
	tx, _ := txview.Raw(q).(*Tx)
	return tx
}

// rowsPerInsert is how many rows of cols columns a multi-row insert takes.
func (s *Store[T, ID]) rowsPerInsert(cols int) int {
	params := maxParams
	if s.stmt.MaxInsertParams > 0 {
		params = s.stmt.MaxInsertParams
	}
	return max(1, min(maxRows, params/cols))
}

// readsOn is a cache of the reads prepared on pool, or nil when pool prepares nothing.
func readsOn(pool refset.Querier) *stmtcache.Cache {
	if p, ok := pool.(stmtcache.Preparer); ok {
		return stmtcache.New(p, stmtcache.DefaultSize, nil)
	}
	return nil
}

// read runs query on q: prepared when q is the database's reader or its replica. A
// prepared run that fails is forgotten and the query run again unprepared, which is
// what a read did before statements were prepared: a schema change, a lost
// connection or a closed database fail or succeed as they did then.
func (s *Store[T, ID]) read(ctx context.Context, q refset.Querier, query string, args ...any) (*sql.Rows, error) {
	defer s.slow(ctx, query, time.Now())
	// Postgres refuses a statement prepared before its table's columns changed type
	// ("cached plan must not change result type") on every connection it was prepared
	// on until it is prepared anew: a failed one is forgotten.
	reads := s.preparedOn(q)
	if st := reads.Stmt(ctx, query); st != nil {
		rows, err := st.QueryContext(ctx, args...)
		if err == nil || ctx.Err() != nil {
			return rows, err
		}
		reads.Forget(query, st)
	}
	return q.QueryContext(ctx, query, args...)
}

// preparedOn is the store's prepared reads on q, or nil when q is neither of the
// database's pools (a transaction) or the store runs unprepared.
func (s *Store[T, ID]) preparedOn(q refset.Querier) *stmtcache.Cache {
	switch {
	case q == s.db.Reader():
		return s.reads
	case s.replica != nil && q == s.replica:
		return s.replicaReads
	}
	return nil
}

// New returns a Store for a resolved table.
func New[T refset.Identifiable[ID], ID comparable](db refset.Database, table Table, stmt refsetdriver.Statements) *Store[T, ID] {
	drv := db.Driver()
	rowRead, _ := drv.(refsetdriver.RowReader)
	return &Store[T, ID]{db: db, drv: drv, table: table, stmt: stmt, replica: refsetdriver.ReplicaOf(drv), rowRead: rowRead,
		idAt: slices.Index(table.Mapping.Columns(), table.IDColumn)}
}

// refuse is the error of an ID the table's CheckID refuses, or nil. Every method
// that sends an ID to the database calls it first (Persist, PersistAll and
// InsertStatement with the ID field's value, which is what the insert writes,
// refusedRow): a refused ID reaches no table, and a look-up by it reads nothing.
func (s *Store[T, ID]) refuse(id ID) error {
	if s.table.CheckID == nil {
		return nil
	}
	return s.table.CheckID(id)
}

// refusedRow is refuse for the insert arguments of a row (Mapping.Values).
func (s *Store[T, ID]) refusedRow(args []any) error {
	if s.table.CheckID == nil || s.idAt < 0 {
		return nil
	}
	return s.table.CheckID(args[s.idAt])
}

// Database is the database the set lives in.
func (s *Store[T, ID]) Database() refset.Database { return s.db }

// Table is the set's table, as checked against the catalog.
func (s *Store[T, ID]) Table() Table { return s.table }

// Persist inserts obj.
func (s *Store[T, ID]) Persist(ctx context.Context, q refset.Querier, obj T) error {
	args := s.table.Mapping.Values(reflect.ValueOf(obj))
	if err := s.refusedRow(args); err != nil {
		return err
	}
	if _, err := s.exec(ctx, q, s.stmt.Insert, args...); err != nil {
		return s.failed(err, s.stmt.Insert)
	}
	return nil
}

// InsertStatement is Persist's statement for obj, for a pipelined Add
// (refsetdriver.Inserter), or the error of an ID the table's CheckID refuses.
func (s *Store[T, ID]) InsertStatement(obj T) (refsetdriver.Statement, error) {
	args := s.table.Mapping.Values(reflect.ValueOf(obj))
	if err := s.refusedRow(args); err != nil {
		return refsetdriver.Statement{}, err
	}
	return refsetdriver.Statement{Query: s.stmt.Insert, Args: args}, nil
}

// PersistAll inserts objs with multi-row inserts.
func (s *Store[T, ID]) PersistAll(ctx context.Context, q refset.Querier, objs []T) error {
	cols := len(s.table.Mapping.Columns())
	per := s.rowsPerInsert(cols)
	full := ""
	for start := 0; start < len(objs); start += per {
		chunk := objs[start:min(start+per, len(objs))]
		stmt := full
		if len(chunk) != per || full == "" {
			stmt = s.stmt.InsertRows(len(chunk))
			if len(chunk) == per {
				full = stmt
			}
		}
		args := make([]any, 0, len(chunk)*cols)
		for _, o := range chunk {
			row := s.table.Mapping.Values(reflect.ValueOf(o))
			if err := s.refusedRow(row); err != nil {
				return err
			}
			args = append(args, row...)
		}
		if _, err := s.exec(ctx, q, stmt, args...); err != nil {
			return s.failed(err, stmt)
		}
	}
	return nil
}

// Get loads the object with that ID.
func (s *Store[T, ID]) Get(ctx context.Context, q refset.Querier, id ID) (T, error) {
	var obj T
	if err := s.refuse(id); err != nil {
		return obj, err
	}
	found, err := s.readRow(ctx, q, s.stmt.Select, []any{refset.Arg(id)}, func(r refsetdriver.Row) error {
		return s.table.Mapping.Scan(r, reflect.ValueOf(&obj))
	})
	var failed scanError
	switch {
	case errors.As(err, &failed):
		if err = s.db.TranslateError(failed.err, s.stmt.Select); !refset.IsSentinel(err) {
			// database/sql could not convert a stored value to the field's type.
			err = sentinel.New("refset", fmt.Sprintf("reading %s %s", s.table.Name, sentinel.ID(id)), refset.ErrSchema, err)
		}
		return obj, err
	case err != nil:
		return obj, s.failed(err, s.stmt.Select)
	case !found:
		return obj, sentinel.New("refset", fmt.Sprintf("%s %s", s.table.Name, sentinel.ID(id)), refset.ErrNotFound, nil)
	}
	return obj, nil
}

// Has reports whether an object with that ID is stored.
func (s *Store[T, ID]) Has(ctx context.Context, q refset.Querier, id ID) (bool, error) {
	if err := s.refuse(id); err != nil {
		return false, err
	}
	found, err := s.readRow(ctx, q, s.stmt.Exists, []any{refset.Arg(id)}, nil)
	if err != nil {
		return false, s.failed(err, s.stmt.Exists)
	}
	return found, nil
}

// failed is the error of the store's own statement query, which failed with err:
// translated, and ErrSchema when no sentinel names it (a value the driver could not
// encode for a column whose type changed since the store was built): the store's
// statements were written for its table as it was.
func (s *Store[T, ID]) failed(err error, query string) error {
	if err = s.db.TranslateError(err, query); err == nil || Translated(err) {
		return err
	}
	return sentinel.New("refset", "", refset.ErrSchema, err)
}

// scanError is a row that was found but could not be scanned.
type scanError struct{ err error }

func (e scanError) Error() string { return e.err.Error() }

// readRow runs a lookup by key on q and, if it finds a row, scans it with scan (nil:
// only whether there is one matters). An error of scan comes back as a scanError;
// every error is untranslated.
//
// On one of the database's pools, the database's rowread.Reader reads the row first,
// if it has one. Anything it fails with but an ended context is left to the read
// through database/sql (read), which then fails or succeeds as a lookup always did:
// a broken connection is retried on another, a statement is prepared again after a
// schema change, and a value the driver's own scan refuses is converted, or refused,
// by database/sql.
func (s *Store[T, ID]) readRow(ctx context.Context, q refset.Querier, query string, args []any, scan func(refsetdriver.Row) error) (bool, error) {
	if s.rowRead != nil && (q == s.db.Reader() || (s.replica != nil && q == s.replica)) {
		start := time.Now()
		if scan == nil {
			scan = func(refsetdriver.Row) error { return nil }
		}
		ran, found, err := s.rowRead.ReadRow(ctx, q, query, args, scan)
		if ran && (err == nil || ctx.Err() != nil) {
			s.slow(ctx, query, start)
			return found, err
		}
	}
	rows, err := s.read(ctx, q, query, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return false, rows.Err()
	}
	if scan != nil {
		if err := scan(rows); err != nil {
			return true, scanError{err}
		}
	}
	return true, rows.Close()
}

// Hold records holder's hold on the object, expiring ttl after the statement writes
// it by the database's clock, or never when ttl is 0.
func (s *Store[T, ID]) Hold(ctx context.Context, q refset.Querier, id ID, holder string, ttl time.Duration) error {
	ms := ttl.Milliseconds()
	if ttl > 0 && ms == 0 {
		ms = 1 // a positive ttl under a millisecond still expires
	}
	if err := s.refuse(id); err != nil {
		return err
	}
	if _, err := s.exec(ctx, q, s.stmt.Hold, holder, refset.Arg(id), ms); err != nil {
		return sentinel.Wrap("refset", fmt.Sprintf("hold %s for %q", sentinel.ID(id), holder), s.failed(err, s.stmt.Hold))
	}
	return nil
}

// Unhold removes holder's hold on the object; ErrNotFound if there was none.
func (s *Store[T, ID]) Unhold(ctx context.Context, q refset.Querier, id ID, holder string) error {
	if err := s.refuse(id); err != nil {
		return err
	}
	res, err := s.exec(ctx, q, s.stmt.Unhold, holder, refset.Arg(id))
	if err != nil {
		return s.failed(err, s.stmt.Unhold)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return s.failed(err, s.stmt.Unhold)
	}
	if n == 0 {
		return sentinel.New("refset", "unhold "+sentinel.ID(id), refset.ErrNotFound, fmt.Errorf("%q holds no such object", holder))
	}
	return nil
}
