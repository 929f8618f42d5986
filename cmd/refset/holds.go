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

// holdsTable finds the holds table of the set on --table in the registry of sets, and
// the dialect's SQL on refset's tables that reads and deletes its holds.
func holdsTable(ctx context.Context, c call) (refsetdriver.SchemaSQL, sqlident.Ident, error) {
	reg, err := c.registration(ctx)
	return c.db.Driver().SchemaSQL(), reg.Holds, err
}

// registration is the set on --table as the registry of sets records it: its tables.
func (c call) registration(ctx context.Context) (refsetdriver.Registered, error) {
	t, err := sqlident.Parse(c.table, true)
	if err != nil {
		return refsetdriver.Registered{}, err
	}
	reg, err := c.db.Driver().SchemaSQL().Lookup(ctx, c.db.Reader(), t)
	if err != nil && !refset.IsSentinel(err) {
		err = c.db.TranslateError(err, "")
	}
	return reg, err
}

type (
	holdsJSON struct {
		Table string     `json:"table"` // the holds table
		Now   time.Time  `json:"now"`   // the database's clock, which expiry follows
		Holds []holdJSON `json:"holds"`
	}
	holdJSON struct {
		Holder    stored     `json:"holder"`
		ObjectID  stored     `json:"object_id"`
		ExpiresAt *time.Time `json:"expires_at"` // null: held until unheld
		CreatedAt time.Time  `json:"created_at"`
		Expired   bool       `json:"expired"` // past expires_at; the next Collect removes it
	}
)

func holdsListCommand(fs *flag.FlagSet) func(context.Context, call) error {
	expired := fs.Bool("expired", false, "only holds past their expiry, by the database's clock")
	holder := fs.String("holder", "", "only the holds of this holder")
	return func(ctx context.Context, c call) error {
		if err := checkHolder(fs, *holder); err != nil {
			return err
		}
		d, holds, err := holdsTable(ctx, c)
		if err != nil {
			return err
		}
		now, hs, err := d.ListHolds(ctx, c.db.Reader(), holds, refsetdriver.HoldFilter{Expired: *expired, Holder: *holder})
		if err != nil {
			return c.db.TranslateError(err, "")
		}
		// The object ID as text whatever its type.
		doc := holdsJSON{Table: holds.String(), Now: now, Holds: []holdJSON{}}
		for _, h := range hs {
			j := holdJSON{Holder: stored(h.Holder), ObjectID: stored(h.ObjectID), CreatedAt: h.CreatedAt, Expired: h.Expired}
			if !h.ExpiresAt.IsZero() {
				j.ExpiresAt = &h.ExpiresAt
			}
			doc.Holds = append(doc.Holds, j)
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
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", printable(string(h.ObjectID)), printable(string(h.Holder)), expires, h.CreatedAt.Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "%d holds in %s (database clock %s)\n", len(doc.Holds), doc.Table, doc.Now.Format(time.RFC3339))
	return err
}

// checkHolder refuses a --holder given empty (refset.ErrInvalidConfig): left out,
// the flag means every holder, and `--holder "$HOLDER"` with the variable unset must
// not quietly mean that too.
func checkHolder(fs *flag.FlagSet, holder string) error {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "holder" })
	if given && holder == "" {
		return fmt.Errorf("%w: --holder is empty; name a holder, or leave the flag out for every holder", refset.ErrInvalidConfig)
	}
	return nil
}

func holdsRemoveCommand(fs *flag.FlagSet) func(context.Context, call) error {
	expired := fs.Bool("expired", false, "delete the holds past their expiry, by the database's clock (required: live holds are never deleted)")
	holder := fs.String("holder", "", "only the expired holds of this holder")
	return func(ctx context.Context, c call) error {
		if !*expired {
			return fmt.Errorf("%w: holds rm deletes expired holds only: give --expired (a live hold is its holder's to unhold)", refset.ErrInvalidConfig)
		}
		if err := checkHolder(fs, *holder); err != nil {
			return err
		}
		d, holds, err := holdsTable(ctx, c)
		if err != nil {
			return err
		}
		// Clean-up's triggers queue the objects whose holds go, as when Collect
		// expires them.
		var n int64
		err = refset.InTx(ctx, c.db, func(ctx context.Context, tx refset.Tx) error {
			n, err = d.DeleteExpiredHolds(ctx, tx, holds, *holder)
			return err
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "deleted %d expired holds from %s\n", n, holds)
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
