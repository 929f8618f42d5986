package console_test

import (
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/blockmanager"
	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/console"
	"github.com/refsetdb/refset/internal/test/pgtest"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/require"
)

// bigSet fills, on PostgreSQL through plain (a pool whose plans nobody watches), the
// notes set and a blockmanager chain built on db: objects notes n-0 .. n-(objects-1),
// nine in ten held by "app", one in a hundred by "lease" for an hour and one in a
// thousand by "old" past its expiry, one in ten pinned by a row of pins, one in ten
// queued for review (one in a thousand due an hour ago, the others in an hour); a committed
// chain m-0 .. m-(blocks-1), with a fork of three blocks every thousand blocks, in
// the fork cache, and a waiting block every ten thousand. Without triggers: the rows
// are consistent by construction, and the foreign keys' checks would take most of
// the time. Then ANALYZE, as a database of that size has statistics.
func bigSet(t testing.TB, db refset.Database, plain *sql.DB, objects, blocks int) {
	t.Helper()
	ctx := t.Context()
	_, err := blockmanager.Open(ctx, db, blockmanager.Config{})
	require.NoError(t, err)
	conn, err := plain.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	exec := pgtest.Exec(t, conn)
	exec(`CREATE TABLE notes (id TEXT PRIMARY KEY, body TEXT NOT NULL)`)
	exec(`CREATE TABLE pins (note_id TEXT PRIMARY KEY REFERENCES notes (id) ON DELETE RESTRICT)`)
	_, err = store.NewStore[note, string](ctx, db, store.Config{Table: "notes"})
	require.NoError(t, err)
	_, err = cleanup.Install(ctx, db, cleanup.Config{Table: "notes"})
	require.NoError(t, err)
	exec(`SET session_replication_role = replica`)
	exec(`INSERT INTO notes (id, body) SELECT 'n-' || i, 'body of ' || i FROM generate_series(0, $1::bigint - 1) i`, objects)
	exec(`INSERT INTO notes_holds (holder, object_id) SELECT 'app', 'n-' || i FROM generate_series(0, $1::bigint - 1) i WHERE i % 10 <> 0`, objects)
	exec(`INSERT INTO notes_holds (holder, object_id, expires_at) SELECT 'lease', 'n-' || i, now() + interval '1 hour'
		FROM generate_series(0, $1::bigint - 1) i WHERE i % 100 = 1`, objects)
	exec(`INSERT INTO notes_holds (holder, object_id, expires_at) SELECT 'old', 'n-' || i, now() - interval '1 hour'
		FROM generate_series(0, $1::bigint - 1) i WHERE i % 1000 = 2`, objects)
	exec(`INSERT INTO pins (note_id) SELECT 'n-' || i FROM generate_series(0, $1::bigint - 1) i WHERE i % 10 = 0`, objects)
	exec(`INSERT INTO notes_review (object_id, review_after)
		SELECT 'n-' || i, now() + CASE WHEN i % 1000 = 3 THEN interval '-1 hour' ELSE interval '1 hour' END
		FROM generate_series(0, $1::bigint - 1) i WHERE i % 10 = 3`, objects)
	exec(`INSERT INTO blocks (header_signature, previous_block_id, previous_block_ref, block_num, batch_ids, transaction_ids, segment)
		SELECT 'm-' || i, CASE WHEN i = 0 THEN $2 ELSE 'm-' || (i - 1) END, CASE WHEN i = 0 THEN NULL ELSE 'm-' || (i - 1) END,
			i, '[]', '[]', 1
		FROM generate_series(0, $1::bigint - 1) i`, blocks, blockmanager.NullBlockID)
	exec(`INSERT INTO blocks (header_signature, previous_block_id, previous_block_ref, block_num, batch_ids, transaction_ids, segment)
		SELECT 'f-' || i || '-' || k, prev, prev, i + k, '[]', '[]', -i
		FROM generate_series(0, $1::bigint - 1) i, generate_series(1, 3) k,
			LATERAL (SELECT CASE WHEN k = 1 THEN 'm-' || i ELSE 'f-' || i || '-' || (k - 1) END) p(prev)
		WHERE i % 1000 = 500 ORDER BY k`, blocks)
	exec(`INSERT INTO blocks_holds (holder, object_id, expires_at) SELECT $2, 'f-' || i || '-3', now() + interval '1 hour'
		FROM generate_series(0, $1::bigint - 1) i WHERE i % 1000 = 500`, blocks, blockmanager.ForkHolder)
	exec(`INSERT INTO blocks (header_signature, previous_block_id, block_num, batch_ids, transaction_ids, segment)
		SELECT 'w-' || i, 'never-' || i, i, '[]', '[]', -1 - i FROM generate_series(0, $1::bigint - 1) i WHERE i % 10000 = 5`, blocks)
	exec(`INSERT INTO pending_blocks (block_id, pending_previous_block_id)
		SELECT 'w-' || i, 'never-' || i FROM generate_series(0, $1::bigint - 1) i WHERE i % 10000 = 5`, blocks)
	exec(`INSERT INTO chain_heads (chain_head) VALUES ($1)`, fmt.Sprintf("m-%d", blocks-1))
	exec(`RESET session_replication_role`)
	pgtest.AnalyzeSchema(t, conn)
}

// bigPages are the pages of a set bigSet filled that read the database, but for the
// sets page. (The clean-up page reads the sampler's samples alone.)
func bigPages(objects, blocks int) []string {
	return []string{
		objectPath("notes", fmt.Sprintf("n-%d", objects/2)), objectPath("notes", fmt.Sprintf("n-%d", objects/2+1)),
		objectPath("blocks", fmt.Sprintf("m-%d", blocks-10)), objectPath("blocks", fmt.Sprintf("m-%d", blocks/2)),
		"/chain", "/holds?table=notes", "/holds?table=notes&holder=lease", "/holds?table=blocks",
	}
}

// On a set of 30,000 objects and a chain of 30,000 blocks, every page reads by key,
// by index, or up to a cap that a Limit enforces: no sequential scan of a big table
// but one a Limit stops, no index read end to end, no index read whole for a few
// rows, no JIT (pgtest.PlanFaults). That holds for the sets page, for refset status's
// reads (cleanup.Status, cleanup.Counts, exact counts aside), and for the sampler,
// whose every sample is one statement.
func TestPlans(t *testing.T) {
	const objects, blocks = 30_000, 30_000
	ctx := t.Context()
	log, db, plain := refsettest.PlanGuard(t)
	bigSet(t, db, plain, objects, blocks)
	// The fork cache (blocks_holds) holds 30 forks and the blocks' review queue
	// nothing: a scan of either is the planner's right choice.
	big := []string{"notes", "notes_holds", "notes_review", "pins", "blocks", "block_batches", "block_transactions"}

	h, err := console.New(ctx, db, console.Config{SampleEvery: time.Hour})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, h.Close()) })
	// The sampler's first sample runs before the pages are checked: its plans are
	// none of theirs (the sampler's own are checked below).
	require.Eventually(t, func() bool {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1/cleanup", nil))
		return strings.Contains(rec.Body.String(), "1 samples,")
	}, 20*time.Second, 10*time.Millisecond, "the sampler's first sample")
	for _, p := range append([]string{"/"}, bigPages(objects, blocks)...) {
		plans := log.PlansOf(t, func() {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1"+p, nil))
			require.Equal(t, http.StatusOK, rec.Code, "%s: %s", p, rec.Body)
		})
		refsettest.AssertPlans(t, p, plans, big...)
	}
	// refset status's reads, and the counts of a set past the cap: estimates.
	var st cleanup.DatabaseStatus
	refsettest.AssertPlans(t, "status", log.PlansOf(t, func() {
		st, err = cleanup.Status(ctx, db)
		require.NoError(t, err)
	}), big...)
	require.Len(t, st.Sets, 2)
	notes := st.Sets[1]
	require.Equal(t, "notes", notes.Table)
	require.Equal(t, cleanup.Estimated, notes.Objects.Accuracy)
	require.InEpsilon(t, objects, notes.Objects.N, 0.1, "the planner's estimate")
	require.Equal(t, cleanup.Count{N: objects / 1000}, notes.Overdue, "counted over the index")
	require.Equal(t, cleanup.Count{N: objects / 1000}, notes.HoldsExpired, "counted over the index")
	refsettest.AssertPlans(t, "counts", log.PlansOf(t, func() {
		_, err := cleanup.Counts(ctx, db)
		require.NoError(t, err)
	}), big...)
	// The sampler's statement: once the counter has the list of sets, a sample is
	// one statement.
	counter := cleanup.NewCounter(db, cleanup.StatusOptions{})
	_, err = counter.Counts(ctx)
	require.NoError(t, err)
	plans := log.PlansOf(t, func() {
		_, err := counter.Counts(ctx)
		require.NoError(t, err)
	})
	require.Len(t, plans, 1, "one statement a sample")
	refsettest.AssertPlans(t, "sampler", plans, big...)
	require.Empty(t, log.Unparsed())
}
