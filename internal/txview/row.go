package txview

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"sync"
)

// A *sql.Row holds its query's answer on the connection until Scan reads it, and it
// gives no way to see when that happened. So the View's QueryRowContext reads the
// row itself, the statement in flight all the while, and hands the caller a Row
// that database/sql makes of the values it read: from rowDB, a database in memory
// whose one query returns the values (or the error) the context carries. The
// caller's Scan converts them exactly as it would have the driver's, since they are
// the driver's values.

// rowKey is the context key of the answer rowDB's query returns.
type rowKey struct{}

// answer is a query's first row, as the driver gave it, or its error.
type answer struct {
	columns []string
	values  []driver.Value // nil: no row
	err     error
}

// rowDB is the database whose Rows carry the answers of QueryRowContext.
var rowDB = sync.OnceValue(func() *sql.DB { return sql.OpenDB(rowConnector{}) })

// readRow reads the first row of rows, and closes them. A query whose first row
// could not be read, or that failed, answers with its error: database/sql's own,
// as a *sql.Row's Scan would have returned it.
func readRow(rows *sql.Rows, err error) *answer {
	if err != nil {
		return &answer{err: err}
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return &answer{err: err}
	}
	a := &answer{columns: cols}
	if !rows.Next() {
		a.err = rows.Err()
		return a
	}
	vals := make([]any, len(cols))
	dest := make([]any, len(cols))
	for i := range vals {
		dest[i] = &vals[i]
	}
	// Scanning into *any keeps the driver's value (a []byte copied).
	if err := rows.Scan(dest...); err != nil {
		return &answer{err: err}
	}
	if err := rows.Close(); err != nil {
		return &answer{err: err}
	}
	a.values = make([]driver.Value, len(vals))
	for i, v := range vals {
		a.values[i] = v
	}
	return a
}

// row is a as a *sql.Row. ctx gives the Row's values; its end does not matter,
// since nothing is left to wait for.
func (a *answer) row(ctx context.Context) *sql.Row {
	return rowDB().QueryRowContext(context.WithValue(context.WithoutCancel(ctx), rowKey{}, a), "")
}

type rowConnector struct{}

func (rowConnector) Connect(context.Context) (driver.Conn, error) { return rowConn{}, nil }
func (rowConnector) Driver() driver.Driver                        { return rowDriver{} }

type rowDriver struct{}

func (rowDriver) Open(string) (driver.Conn, error) { return rowConn{}, nil }

// rowConn answers its queries with the answer their context carries.
type rowConn struct{}

var errRowConn = errors.New("txview: the connection only hands over rows already read")

func (rowConn) Prepare(string) (driver.Stmt, error) { return nil, errRowConn }
func (rowConn) Close() error                        { return nil }
func (rowConn) Begin() (driver.Tx, error)           { return nil, errRowConn }

func (rowConn) QueryContext(ctx context.Context, _ string, _ []driver.NamedValue) (driver.Rows, error) {
	a, ok := ctx.Value(rowKey{}).(*answer)
	if !ok {
		return nil, errRowConn
	}
	if a.err != nil && a.columns == nil {
		return nil, a.err
	}
	return &rowRows{a: a}, nil
}

// rowRows are an answer's rows: its row, if any, then its error or the end.
type rowRows struct {
	a    *answer
	read bool
}

func (r *rowRows) Columns() []string { return r.a.columns }
func (r *rowRows) Close() error      { return nil }

func (r *rowRows) Next(dest []driver.Value) error {
	if r.read || r.a.values == nil {
		if r.a.err != nil {
			return r.a.err
		}
		return io.EOF
	}
	r.read = true
	copy(dest, r.a.values)
	return nil
}
