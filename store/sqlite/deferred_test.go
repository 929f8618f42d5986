package sqlite

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pledgesTable's references to items are checked at COMMIT (DEFERRABLE INITIALLY
// DEFERRED): a unit may pledge an item it adds later in the same unit.
const pledgesTable = `CREATE TABLE IF NOT EXISTS pledges (id TEXT PRIMARY KEY,
	item TEXT NOT NULL REFERENCES items (id) DEFERRABLE INITIALLY DEFERRED)`

// A unit of work whose deferred foreign key fails at COMMIT fails alone, with
// ErrConstraint, and leaves nothing: not its rows, not the writer inside its
// transaction (SQLite keeps a transaction open when its COMMIT fails so, and every
// later write would fail), and not the units that shared its group, which commit.
// Each driver, with group commit and without.
func TestDeferredForeignKeyFailsItsUnitAlone(t *testing.T) {
	for _, grouped := range []bool{true, false} {
		t.Run(fmt.Sprintf("group=%v", grouped), func(t *testing.T) {
			eachDriver(t, func(t *testing.T, driverName string) {
				ctx := t.Context()
				opts := Options{Driver: driverName, NoGroupCommit: !grouped}
				if grouped {
					opts.groupMaxAge = time.Minute // the units below share groups however slow the machine
				}
				db, _ := groupDB(t, opts)
				_, err := db.Writer().ExecContext(ctx, pledgesTable)
				require.NoError(t, err)
				count := func(table string) int {
					var n int
					require.NoError(t, db.Readers().QueryRowContext(ctx, `SELECT count(*) FROM `+table).Scan(&n))
					return n
				}

				// pledge runs a unit that pledges item for id and writes its row in units;
				// item must exist by COMMIT.
				pledge := func(ctx context.Context, id, item string) error {
					return refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
						if _, err := tx.ExecContext(ctx, `INSERT INTO units (id) VALUES (?)`, id); err != nil {
							return err
						}
						_, err := tx.ExecContext(ctx, `INSERT INTO pledges (id, item) VALUES (?, ?)`, id, item)
						return err
					})
				}
				_, err = db.Writer().ExecContext(ctx, `INSERT INTO items (id) VALUES ('kept')`)
				require.NoError(t, err)

				// Alone.
				err = pledge(ctx, "alone", "no such item")
				require.ErrorIs(t, err, refset.ErrConstraint)
				assert.Zero(t, count("units"), "the failed unit left nothing")
				require.NoError(t, pledge(ctx, "after", "kept"), "the writer is free again")
				assert.Equal(t, 1, count("units"))

				// Among others: eight goroutines at once, one unit in four pledging
				// nothing.
				var wg sync.WaitGroup
				errs := make([]error, 32)
				for g := range 8 {
					wg.Go(func() {
						for i := g; i < len(errs); i += 8 {
							item := "kept"
							if i%4 == 0 {
								item = "no such item"
							}
							errs[i] = pledge(ctx, fmt.Sprintf("u%d", i), item)
						}
					})
				}
				wg.Wait()
				for i, err := range errs {
					if i%4 == 0 {
						assert.ErrorIs(t, err, refset.ErrConstraint, "u%d pledged nothing", i)
					} else {
						assert.NoError(t, err, "u%d pledged what exists", i)
					}
				}
				assert.Equal(t, 1+24, count("units"), "every unit that could commit did, and only those")
				assert.Equal(t, count("units"), count("pledges"))
				rows, err := db.Readers().QueryContext(ctx, `PRAGMA foreign_key_check`)
				require.NoError(t, err)
				assert.False(t, rows.Next(), "a reference dangles")
				require.NoError(t, rows.Close())
			})
		})
	}
}
