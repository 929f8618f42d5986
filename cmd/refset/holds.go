package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// holdsQuery is what the holds commands need of a set: the dialect's SQL on refset's
// tables, the set's holds table and the filter the flags ask for.
type holdsQuery struct {
	sql    refsetdriver.SchemaSQL
	holds  sqlident.Ident
	filter refsetdriver.HoldFilter
}

// newHoldsQuery finds the holds table of the set on --table in the registry of sets.
func newHoldsQuery(ctx context.Context, c call, expired bool, holder string) (holdsQuery, error) {
	db := c.db
	d, err := refsetdriver.Of(db)
	if err != nil {
		return holdsQuery{}, err
	}
	t, err := sqlident.Parse(c.table, true)
	if err != nil {
		return holdsQuery{}, err
	}
	has, err := d.SchemaSQL().HasSetTable(ctx, db.Reader())
	if err != nil {
		return holdsQuery{}, db.TranslateError(err, "")
	}
	if !has {
		return holdsQuery{}, fmt.Errorf("%w: no refset tables (refset_sets) in this database: no store was built on it", refset.ErrNotFound)
	}
	reg, err := d.SchemaSQL().Lookup(ctx, db.Reader(), t)
	if err != nil {
		if !refset.IsSentinel(err) {
			err = db.TranslateError(err, "")
		}
		return holdsQuery{}, err
	}
	return holdsQuery{sql: d.SchemaSQL(), holds: reg.Holds, filter: refsetdriver.HoldFilter{Expired: expired, Holder: holder}}, nil
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

func holdsListCommand(fs *flag.FlagSet) func(context.Context, call) error {
	expired := fs.Bool("expired", false, "only holds past their expiry, by the database's clock")
	holder := fs.String("holder", "", "only the holds of this holder")
	return func(ctx context.Context, c call) error {
		q, err := newHoldsQuery(ctx, c, *expired, *holder)
		if err != nil {
			return err
		}
		doc, err := listHolds(ctx, c.db, q)
		if err != nil {
			return err
		}
		return c.print(doc)
	}
}

func (doc holdsJSON) text(out io.Writer) error {
	tw := newTable(out, "OBJECT", "HOLDER", "EXPIRES", "CREATED")
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
		return err
	}
	_, err := fmt.Fprintf(out, "%d holds in %s (database clock %s)\n", len(doc.Holds), doc.Table, doc.Now.Format(time.RFC3339))
	return err
}

// listHolds reads every hold q selects, the object ID as text whatever its type.
func listHolds(ctx context.Context, db opened, q holdsQuery) (holdsJSON, error) {
	doc := holdsJSON{Table: q.holds.String(), Holds: []holdJSON{}}
	now, holds, err := q.sql.ListHolds(ctx, db.Reader(), q.holds, q.filter)
	if err != nil {
		return doc, db.TranslateError(err, "")
	}
	doc.Now = now
	for _, h := range holds {
		j := holdJSON{Holder: h.Holder, ObjectID: h.ObjectID, CreatedAt: h.CreatedAt, Expired: h.Expired}
		if !h.ExpiresAt.IsZero() {
			j.ExpiresAt = &h.ExpiresAt
		}
		doc.Holds = append(doc.Holds, j)
	}
	return doc, nil
}

func holdsRemoveCommand(fs *flag.FlagSet) func(context.Context, call) error {
	expired := fs.Bool("expired", false, "delete the holds past their expiry, by the database's clock (required: live holds are never deleted)")
	holder := fs.String("holder", "", "only the expired holds of this holder")
	return func(ctx context.Context, c call) error {
		if !*expired {
			return fmt.Errorf("%w: holds rm deletes expired holds only: give --expired (a live hold is its holder's to unhold)", refset.ErrInvalidConfig)
		}
		q, err := newHoldsQuery(ctx, c, true, *holder)
		if err != nil {
			return err
		}
		// Clean-up's triggers queue the objects whose holds go, as when Collect
		// expires them.
		var n int64
		err = refset.InTx(ctx, c.db, func(tx refset.Tx) error {
			n, err = q.sql.DeleteExpiredHolds(ctx, tx, q.holds, q.filter.Holder)
			return err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "deleted %d expired holds from %s\n", n, q.holds)
		return nil
	}
}

func sweepCommand(fs *flag.FlagSet) func(context.Context, call) error {
	collector := installing(fs, "sweep")
	return func(ctx context.Context, c call) error {
		col, err := collector(ctx, c)
		if err != nil {
			return err
		}
		// The mark takes one statement; the progress bar follows the collection
		// after it, once the unreachable objects are queued.
		stop := showProgress(ctx, col, c.out, time.Second)
		queued, s, err := col.Sweep(ctx)
		stop()
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "queued %d unreachable objects; collected: %s\n", queued, s)
		summary(c.out, 1, s)
		return nil
	}
}
