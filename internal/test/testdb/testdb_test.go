package testdb

import (
	"context"
	"testing"

	"github.com/refsetdb/refset/refset"
)

// TestPlaces: each backend gives each test a database of its own, empty, and a
// second handle on its place (PlaceOf) sees what the first wrote.
func TestPlaces(t *testing.T) {
	Each(t, append(All(), Standby), func(t *testing.T, b Backend) {
		ctx := t.Context()
		first, other := b.Open(t, Options{}), b.New(t)
		if other.At == PlaceOf(t, first).At {
			t.Fatalf("two tests' databases share %s", other.At)
		}
		exec := func(db refset.Database, q string) {
			t.Helper()
			if err := refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
				_, err := tx.ExecContext(ctx, q)
				return err
			}); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		exec(first, `CREATE TABLE t (v TEXT)`)
		exec(first, `INSERT INTO t (v) VALUES ('written')`)
		again := PlaceOf(t, first).Open(t, Options{})
		var v string
		if err := again.Reader().QueryRowContext(ctx, `SELECT v FROM t`).Scan(&v); err != nil || v != "written" {
			t.Fatalf("the reopened database reads %q, %v", v, err)
		}
		var tables int
		if err := other.Open(t, Options{}).Reader().QueryRowContext(ctx, countTables(b)).Scan(&tables); err != nil || tables != 0 {
			t.Fatalf("a fresh database has %d tables (%v)", tables, err)
		}
	})
}

func countTables(b Backend) string {
	if b.Postgres {
		return `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()`
	}
	return `SELECT count(*) FROM sqlite_master WHERE type = 'table'`
}
