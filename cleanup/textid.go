package cleanup

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// TextID is an object's ID given as text, as an operator types it (the refset
// command's argument, the console's ?id=), for Why, WhyAll, WhyUpTo and Object to
// read as a value of the set's ID column's type, whatever that type is: the
// TextID "42" names the object 42 of a set of integer IDs, as the text "obj-42"
// names the object "obj-42" of a set of string IDs. A program that has the ID as a
// value of its own passes that value instead (an int64, a BlockID), which Why judges
// by its Go type: a plain string is a string, not a TextID, and is refused where the
// key takes no string.
//
// A text the key's type cannot read is refused with refset.ErrInvalidID, not
// answered ErrNotFound as though it named an object that is gone:
//   - on PostgreSQL the server reads the text as the key's type, by that type's
//     input syntax ("42" for a bigint, a UUID's text for a uuid, "\x0102" for a
//     bytea, which a read of its own turns into bytes first, since lib/pq would
//     send a string for a bytea as its bytes); a text it refuses as data (SQLSTATE
//     class 22: "abc", or "99999999999999999999", for a bigint; "\xzz" for a
//     bytea) is refset.ErrInvalidID, wrapping the server's error;
//   - on SQLite, which keeps any value in any column and compares loosely, the text
//     is read in Go by the column's affinity (https://www.sqlite.org/datatype3.html,
//     section 3.1): for INTEGER affinity (a declared type containing INT) it must
//     be an integer written as Go's strconv.FormatInt writes one ("42", "-7"; not
//     "042", "+42", " 42" or "4.2"), sent as an int64; for REAL affinity (REAL,
//     FLOA, DOUB) a number strconv.ParseFloat reads, but NaN, sent as a float64;
//     TEXT affinity (CHAR, CLOB, TEXT) takes any text, as it is. NUMERIC affinity
//     (any other declared type: NUMERIC, DECIMAL, BOOLEAN, DATE, UUID...) takes any
//     text, sent as text, which SQLite compares with the column as it stored the
//     ID: as a number if it reads as one, as text otherwise. BLOB affinity (BLOB,
//     or no declared type) takes any text, sent as text: such a column compares
//     values as they are, so the text names an ID stored as text, never one stored
//     as bytes or a number.
type TextID string

// readText is the value a report sends for text, a TextID, to the ID column of p,
// declared typ and of SQL type keyType (Column.KeyType, or typ), read as TextID
// says: refused is refset.ErrInvalidID where SQLite's column cannot hold it; err a
// failed read, or PostgreSQL's refusal of a bytea's text (which why's idError
// makes refset.ErrInvalidID).
func (c *Collector) readText(ctx context.Context, q refset.Querier, p *refsetdriver.Plan, text TextID, typ, keyType string) (arg any, refused, err error) {
	if c.dialect.Name() != "sqlite" {
		if !strings.EqualFold(keyType, "bytea") {
			return string(text), nil, nil // the server reads it as the key's type
		}
		// lib/pq sends a string for a bytea parameter as its bytes, not as bytea's
		// text: the server reads it here, as text, into bytes sent as they are.
		var b []byte
		err := q.QueryRowContext(ctx, c.dialect.Rebind(`SELECT CAST(CAST(? AS text) AS bytea)`), string(text)).Scan(&b)
		return b, nil, err
	}
	if arg, err = sqliteText(text, typ); err != nil {
		return nil, fmt.Errorf("%w: the ID %s, given as text, where the ID column %q of %s is of SQL type %s: %w; nothing was sent",
			refset.ErrInvalidID, sentinel.QuotedID(string(text)), p.IDColumn, p.Table, typ, err), nil
	}
	return arg, nil, nil
}

// sqliteText is the value the text of an ID is sent as, for an ID column of SQLite
// declared typ (see TextID), or why the column cannot hold it.
func sqliteText(text TextID, typ string) (any, error) {
	s, u := string(text), strings.ToUpper(typ)
	switch {
	case strings.Contains(u, "INT"):
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != s {
			return nil, errors.New("INTEGER affinity, which takes the text of an integer as Go writes one (42, -7)")
		}
		return n, nil
	case strings.Contains(u, "CHAR") || strings.Contains(u, "CLOB") || strings.Contains(u, "TEXT"), u == "" || strings.Contains(u, "BLOB"):
		return s, nil // TEXT affinity, then BLOB
	case strings.Contains(u, "REAL") || strings.Contains(u, "FLOA") || strings.Contains(u, "DOUB"):
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || math.IsNaN(f) {
			return nil, errors.New("REAL affinity, which takes the text of a number (4.2, -1e9)")
		}
		return f, nil
	}
	return s, nil // NUMERIC affinity
}

// dataException reports whether err is the database's refusal of a value (SQLSTATE
// class 22, data exception: invalid input syntax, out of range), as lib/pq's and
// pgx's errors say it.
func dataException(err error) bool {
	var se interface{ SQLState() string }
	return errors.As(err, &se) && strings.HasPrefix(se.SQLState(), "22")
}
