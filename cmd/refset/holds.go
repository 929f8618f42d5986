package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/sqlident"
)

// holdsQuery is what the holds commands need of a set: its holds table, the
// dialect's clock, and the filter the flags ask for.
type holdsQuery struct {
	holds   sqlident.Ident
	clock   refsetdriver.Clock
	dialect schema.Dialect
	where   []string
	args    []any
}

// newHoldsQuery finds the holds table of the set on table in refset_sets. Every
// comparison with the time is the SQL of the dialect's clock (refsetdriver.Clock.Now),
// the one clean-up expires holds by, so this file writes no dialect's SQL.
func newHoldsQuery(ctx context.Context, db opened, table string, expired bool, holder string) (holdsQuery, error) {
	if table == "" {
		return holdsQuery{}, errors.New("--table is required")
	}
	d, err := refsetdriver.Of(db.Database)
	if err != nil {
		return holdsQuery{}, err
	}
	t, err := sqlident.Parse(table, true)
	if err != nil {
		return holdsQuery{}, err
	}
	has, err := d.SchemaSQL().TableExists(ctx, db.Reader(), sqlident.Ident{Name: "refset_sets"})
	if err != nil {
		return holdsQuery{}, db.TranslateError(err, "")
	}
	if !has {
		return holdsQuery{}, fmt.Errorf("%w: no refset tables (refset_sets) in this database: no store was built on it", refset.ErrNotFound)
	}
	reg, err := schema.Lookup(ctx, db.Reader(), d.Schema(), t)
	if err != nil {
		if !refset.IsSentinel(err) {
			err = db.TranslateError(err, "")
		}
		return holdsQuery{}, err
	}
	q := holdsQuery{holds: reg.Holds, clock: d.Clock(), dialect: d.Schema()}
	if expired {
		q.where = append(q.where, "expires_at <= "+q.clock.Now)
	}
	if holder != "" {
		q.where = append(q.where, "holder = ?")
		q.args = append(q.args, holder)
	}
	return q, nil
}

// sql is the statement head (SELECT ... FROM or DELETE FROM) on the holds table
// with the filter, rebound for the dialect.
func (q holdsQuery) sql(head, tail string) string {
	s := head + " " + q.holds.Quoted()
	if len(q.where) > 0 {
		s += " WHERE " + strings.Join(q.where, " AND ")
	}
	return q.dialect.Rebind(s + tail)
}

type (
	holdsJSON struct {
		Table string     `json:"table"` // the holds table
		Now   time.Time  `json:"now"`   // the database's clock, which expiry follows
		Holds []holdJSON `json:"holds"`
	}
	holdJSON struct {
		Holder    string     `json:"holder"`
		ObjectID  string     `json:"object_id"`
		ExpiresAt *time.Time `json:"expires_at"` // null: held until unheld
		CreatedAt time.Time  `json:"created_at"`
		Expired   bool       `json:"expired"` // past expires_at; the next Collect removes it
	}
)

func holdsListCommand(fs *flag.FlagSet) func(context.Context, opened, []string, io.Writer) (int, error) {
	asJSON := fs.Bool("json", false, "print JSON")
	table := fs.String("table", "", "the set's object table (required)")
	expired := fs.Bool("expired", false, "only holds past their expiry, by the database's clock")
	holder := fs.String("holder", "", "only the holds of this holder")
	return func(ctx context.Context, db opened, _ []string, out io.Writer) (int, error) {
		q, err := newHoldsQuery(ctx, db, *table, *expired, *holder)
		if err != nil {
			return exitError, err
		}
		doc, err := listHolds(ctx, db, q)
		if err != nil {
			return exitError, err
		}
		if *asJSON {
			return exitOK, writeJSON(out, doc)
		}
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "OBJECT\tHOLDER\tEXPIRES\tCREATED")
		for _, h := range doc.Holds {
			expires := "-"
			if h.ExpiresAt != nil {
				expires = h.ExpiresAt.Format(time.RFC3339)
				if h.Expired {
					expires += " (expired)"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", h.ObjectID, h.Holder, expires, h.CreatedAt.Format(time.RFC3339))
		}
		if err := tw.Flush(); err != nil {
			return exitError, err
		}
		fmt.Fprintf(out, "%d holds in %s (database clock %s)\n", len(doc.Holds), doc.Table, doc.Now.Format(time.RFC3339))
		return exitOK, nil
	}
}

// listHolds reads every hold q selects, the object ID as text whatever its type.
func listHolds(ctx context.Context, db opened, q holdsQuery) (holdsJSON, error) {
	doc := holdsJSON{Table: q.holds.String(), Holds: []holdJSON{}}
	r := db.Reader()
	nowDst, now := q.clock.Scan()
	if err := r.QueryRowContext(ctx, `SELECT `+q.clock.Now).Scan(nowDst); err != nil {
		return doc, db.TranslateError(err, "")
	}
	doc.Now = now()
	stmt := q.sql(fmt.Sprintf(`SELECT holder, CAST(object_id AS TEXT), expires_at, created_at,
		CASE WHEN expires_at <= %s THEN 1 ELSE 0 END FROM`, q.clock.Now), ` ORDER BY object_id, holder`)
	rows, err := r.QueryContext(ctx, stmt, q.args...)
	if err != nil {
		return doc, db.TranslateError(err, stmt)
	}
	for rows.Next() {
		var h holdJSON
		var expired int
		expDst, expires := q.clock.Scan()
		createdDst, created := q.clock.Scan()
		if err := rows.Scan(&h.Holder, &h.ObjectID, expDst, createdDst, &expired); err != nil {
			rows.Close()
			return doc, db.TranslateError(err, stmt)
		}
		if e := expires(); !e.IsZero() {
			h.ExpiresAt = &e
		}
		h.CreatedAt, h.Expired = created(), expired == 1
		doc.Holds = append(doc.Holds, h)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return doc, db.TranslateError(err, stmt)
	}
	return doc, nil
}

func holdsRemoveCommand(fs *flag.FlagSet) func(context.Context, opened, []string, io.Writer) (int, error) {
	table := fs.String("table", "", "the set's object table (required)")
	expired := fs.Bool("expired", false, "delete the holds past their expiry, by the database's clock (required: live holds are never deleted)")
	holder := fs.String("holder", "", "only the expired holds of this holder")
	return func(ctx context.Context, db opened, _ []string, out io.Writer) (int, error) {
		if !*expired {
			return exitError, fmt.Errorf("%w: holds rm deletes expired holds only: give --expired (a live hold is its holder's to unhold)", refset.ErrInvalidConfig)
		}
		q, err := newHoldsQuery(ctx, db, *table, true, *holder)
		if err != nil {
			return exitError, err
		}
		// Clean-up's triggers queue the objects whose holds go, as when Collect
		// expires them.
		var n int64
		stmt := q.sql("DELETE FROM", "")
		err = refset.InTx(ctx, db.Database, func(tx refset.Tx) error {
			res, err := tx.ExecContext(ctx, stmt, q.args...)
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		if err != nil {
			return exitError, err
		}
		fmt.Fprintf(out, "deleted %d expired holds from %s\n", n, q.holds)
		return exitOK, nil
	}
}

func sweepCommand(fs *flag.FlagSet) func(context.Context, opened, []string, io.Writer) (int, error) {
	table := fs.String("table", "", "the set's object table (required)")
	grace := fs.Duration("grace", cleanup.DefaultGrace, "the grace period of new objects; sweep installs clean-up's triggers with it, so give the one the set's program uses")
	return func(ctx context.Context, db opened, _ []string, out io.Writer) (int, error) {
		if *table == "" {
			return exitError, errors.New("--table is required")
		}
		if *grace <= 0 {
			return exitError, fmt.Errorf("%w: --grace must be positive", refset.ErrInvalidConfig)
		}
		c, err := db.collector(ctx, cleanup.Config{Table: *table, Grace: *grace})
		if err != nil {
			return exitError, err
		}
		// The mark takes one statement; the progress bar follows the collection
		// after it, once the unreachable objects are queued.
		stop := showProgressAfter(ctx, c, out, time.Second)
		queued, s, err := c.Sweep(ctx)
		stop()
		if err != nil {
			return exitError, err
		}
		fmt.Fprintf(out, "queued %d unreachable objects; collected: %s\n", queued, s)
		summary(out, 1, s)
		return exitOK, nil
	}
}
