// Package rowread lets a database read the one row of a lookup by key (a cache miss,
// an Upgrade's check that the object exists) over its driver's own interface rather
// than through database/sql. On pgx that spares database/sql's statement handle and
// the conversion of every column to a driver.Value and back, which is most of a
// lookup's client time: the scan writes straight into the object's fields.
//
// It is only a faster way to a result database/sql gives too. The store asks the
// database's Reader first and, when it declines or fails for any reason but an ended
// context, reads the same row through database/sql, which then succeeds or fails as it
// always did: retrying a broken connection, preparing a statement again after a
// schema change, converting what the driver could not, and reporting it the same way.
//
// A database carries its Reader in an embedded Handle, whose one method is
// unexported, so Of finds it while a caller outside this module can neither reach it
// nor fake it (the pattern of package pipeline).
package rowread

import "context"

// Row is the row a Reader found, for the caller's scan.
type Row interface {
	Scan(dest ...any) error
}

// Reader runs query with args on pool, one of the database's pools (its reader or its
// replica, as the caller got it from the database; never a transaction), and calls
// scan with its first row, if there is one. ran is false when the Reader cannot read
// on pool (not a pool it knows): nothing was sent. found reports whether a row came;
// err is the query's, the scan's or the connection's error, untranslated.
type Reader func(ctx context.Context, pool any, query string, args []any, scan func(Row) error) (ran, found bool, err error)

// Handle carries a database's Reader.
type Handle struct{ read Reader }

// NewHandle returns the Handle of read (nil: the database reads through database/sql
// only).
func NewHandle(read Reader) Handle { return Handle{read: read} }

func (h Handle) refsetRowRead() Reader { return h.read }

// carrier is a database that embeds a Handle.
type carrier interface{ refsetRowRead() Reader }

// Of is db's Reader, or nil.
func Of(db any) Reader {
	if c, ok := db.(carrier); ok {
		return c.refsetRowRead()
	}
	return nil
}
