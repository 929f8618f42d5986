package cleanup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/refsetdb/refset/internal/ctxerr"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// This file is the algorithm: Collect's batches, which follow the garbage from the
// review queue, and Sweep, the full mark from the roots that repairs a lost queue.
// What a batch runs is the dialect's (refsetdriver.CleanupDialect).

// Stats is what a Collect call did.
type Stats struct {
	Batches   int
	Reviewed  int64
	Deleted   int64
	Postponed int64
	// Refused counts objects the database would not delete because of a foreign key
	// Install did not know (one added since). Collect then reads the catalog and
	// installs for the new key before it returns (Followed), or fails saying why it
	// cannot; the refused objects stay queued, a grace period later when their batch
	// deleted nothing else (one that did rolls back, see Collect, and the new plan
	// reviews them again).
	Refused int64
	// Followed lists the references Collect found and installed for after a refusal:
	// keys added to the schema while clean-up ran.
	Followed     []string
	HoldsExpired int64
	Duration     time.Duration
}

func (s Stats) String() string {
	return fmt.Sprintf("reviewed %d, deleted %d, postponed %d, refused %d, holds expired %d in %d batches, %v",
		s.Reviewed, s.Deleted, s.Postponed, s.Refused, s.HoldsExpired, s.Batches, s.Duration.Round(time.Microsecond))
}

// Add adds o to s: the totals of several Collects, as a loop of passes reports them.
func (s *Stats) Add(o Stats) {
	s.Batches += o.Batches
	s.Reviewed += o.Reviewed
	s.Deleted += o.Deleted
	s.Postponed += o.Postponed
	s.Refused += o.Refused
	s.Followed = append(s.Followed, o.Followed...)
	s.HoldsExpired += o.HoldsExpired
	s.Duration += o.Duration
}

// Collect deletes expired holds and every due object nothing references, batch by
// batch, until nothing is due, and returns what it did. Holds that expire, and
// entries that fall due, while it runs may wait for the next call. Each batch commits
// on its own: if ctx ends, what was done stays done, the rest waits for the next
// call, and Collect returns ctx's error with the stats of the batches that committed.
//
// A batch that fails because a referencing table or column it names is gone (dropped
// or renamed since the plan was made) rolls back, and Collect reads the catalog again,
// installs for it, queues the set's objects for review (what the reference held is
// no longer known), and goes on. An error that says the set's own tables or columns
// are gone matches refset.ErrSchema, and one from a closed database refset.ErrClosed:
// no retry mends either. Other errors: refset.ErrConflict (after retries),
// ErrUnavailable, ErrTimeout, the context's error.
//
// Each batch that deletes objects reads the foreign keys to the set before it commits:
// if one was added, dropped or changed since the plan was made, the batch rolls back
// (a key ON DELETE SET NULL refuses nothing, so the database would not have kept what
// it held), and Collect reads the catalog again and goes on as after a refusal. If the
// keys keep changing through every new plan the call makes, it returns
// refset.ErrConflict, and the next call goes on. A refusal, or a changed key, says the
// schema grew a key Install did not find: Collect then follows it as Install would
// (the triggers keep the grace period the database has), so a holder table added
// while the program runs is followed without a restart. If the new key
// cannot be followed (its column has no index, ErrUnindexed as an *UnindexedError
// naming the CREATE INDEX statements; a key Install refuses, refset.ErrSchema),
// Collect returns that error after the batches it ran, and every later call returns
// it before collecting anything, until the catalog can be followed: the refused
// objects stay queued, a grace period later, and Run's callback (or, without one,
// Run's failure after MaxFailedPasses) says what to run.
func (c *Collector) Collect(ctx context.Context) (_ Stats, err error) {
	if err := c.made("collect"); err != nil {
		return Stats{}, err
	}
	// Its batches run on workers of its own, whose stacks hold no unit of work: asked
	// here, on the caller's goroutine, whether units of work on it hold every
	// connection of the pool (the caller's context, inside a unit's function, carries
	// no unit), so that such a call fails at once rather than wait for ever.
	if err := refsetdriver.RefuseOwnPool(c.db, "collect"); err != nil {
		return Stats{}, err
	}
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	start := time.Now()
	var total Stats
	c.mu.Lock()
	unfollowed := c.unfollowed
	c.mu.Unlock()
	if unfollowed != nil {
		var err error
		if total.Followed, err = c.follow(ctx); err != nil {
			total.Duration = time.Since(start)
			return total, fmt.Errorf("refset/cleanup: collect %s: %w", c.current().Table, err)
		}
	}
	var first error
	for replanned := 0; ; replanned++ {
		s, err := c.batches(ctx)
		total.Add(s)
		first = err
		if first == nil && s.Refused > 0 {
			var added []string
			added, first = c.follow(ctx)
			total.Followed = append(total.Followed, added...)
		}
		if first == nil || replanned == maxReplans || ctx.Err() != nil || !stalePlan(first) {
			if errors.Is(first, refsetdriver.ErrStalePlan) {
				// The keys to the set changed again and again while this call ran:
				// a conflict with the schema's writers, which the next call retries.
				first = fmt.Errorf("%w: %w", refset.ErrConflict, first)
			}
			break
		}
		// A batch failed as one does on a plan the schema left behind: a referencing
		// table dropped or renamed, a column of one renamed (ErrSchema), a key added
		// that the database checks only at commit (SQLite's deferred keys), or any
		// key to the set added, dropped or changed since the plan (ErrStalePlan: a
		// key ON DELETE SET NULL refuses nothing, it nulls its rows' references,
		// and the batch must not commit such a delete). The batch rolled back; the collector reads the catalog again, installs for what it
		// finds, and goes on. A table of the set itself gone fails that too, with
		// ErrSchema, and Collect returns it.
		added, err := c.follow(ctx)
		total.Followed = append(total.Followed, added...)
		if err != nil {
			first = err
			break
		}
	}
	total.Duration = time.Since(start)
	if first != nil {
		if total.Batches > 0 {
			// What the batches committed is gone and counted in refset_collected,
			// whatever ended the call: an Observer's totals must not fall short of it.
			// Its context is the call's without the end, which came from elsewhere.
			c.obs.Collected(context.WithoutCancel(ctx), total.Deleted, total.HoldsExpired, total.Batches, total.Duration)
		}
		return total, fmt.Errorf("refset/cleanup: collect %s: %w", c.current().Table, first)
	}
	level := slog.LevelDebug
	if total.Refused > 0 {
		// A reference Install does not know keeps these objects: run Install again.
		level = slog.LevelWarn
	}
	c.log.LogAttrs(ctx, level, "refset/cleanup: collected",
		slog.Int64("deleted", total.Deleted), slog.Int64("holds_expired", total.HoldsExpired),
		slog.Int64("reviewed", total.Reviewed), slog.Int64("postponed", total.Postponed),
		slog.Int64("refused", total.Refused), slog.Int("batches", total.Batches),
		slog.Duration("duration", total.Duration))
	c.obs.Collected(ctx, total.Deleted, total.HoldsExpired, total.Batches, total.Duration)
	return total, nil
}

// maxReplans bounds how many times one Collect reads the catalog again after a batch
// failed as on a stale plan (stalePlan): a failure that a new plan does not mend (a
// trigger of the user's that fails) is returned rather than retried for ever.
const maxReplans = 2

// stalePlan says that err, a batch's failure, may come from a plan the schema left
// behind: a table or column it names gone (ErrSchema), or a delete the database
// refused only at COMMIT, where a deferred key of a table added since is checked
// (SQLite names it a constraint, not a reference).
// A batch that finds the foreign keys to the set changed since the plan was made
// (refsetdriver.ErrStalePlan) rolled back for the same reason.
func stalePlan(err error) bool {
	return errors.Is(err, refsetdriver.ErrStalePlan) || errors.Is(err, refset.ErrSchema) ||
		errors.Is(err, refset.ErrReferenced) || errors.Is(err, refset.ErrConstraint)
}

// batches runs the batches of one pass on the current plan, as many workers as
// Config.Workers allows, until nothing is due or one fails, and returns what they
// committed and the first error (the context's if it ended between batches).
func (c *Collector) batches(ctx context.Context) (Stats, error) {
	var total Stats
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		// holdsDone: a batch found fewer expired holds than it could take, so none
		// was left that another worker had not taken. Later batches skip the look:
		// holds that expire during this call wait for the next, as entries that fall
		// due during it may.
		holdsDone atomic.Bool
	)
	// workCtx also ends when one worker fails, to stop the others.
	workCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Workers start one at a time: another only once a batch came back full, so
	// that there may be more due than one worker takes. A queue with little due
	// costs a batch or two, however many Workers the Config allows.
	var (
		started atomic.Int64
		work    func()
	)
	more := func() {
		if started.Add(1) <= int64(c.workers) {
			wg.Go(work)
		}
	}
	work = func() {
		for workCtx.Err() == nil {
			expired, b, err := c.batchOnce(workCtx, !holdsDone.Load())
			if err == nil && expired < int64(c.batch) {
				holdsDone.Store(true)
			}
			if err == nil && (expired >= int64(c.batch) || b.Reviewed >= int64(c.batch)) {
				more()
			}
			mu.Lock()
			if err != nil {
				if errors.Is(err, refsetdriver.ErrStalePlan) {
					// Rolled back, but what the database refused was refused: a key
					// the plan did not know, which the new plan follows.
					total.Refused += b.Refused
				}
				if first == nil {
					first = err
					cancel()
				}
				mu.Unlock()
				return
			}
			total.Batches++
			total.HoldsExpired += expired
			total.Reviewed += b.Reviewed
			total.Deleted += b.Deleted
			total.Postponed += b.Postponed
			total.Refused += b.Refused
			mu.Unlock()
			// Done when a batch found nothing due, or could only put what it found
			// back for later (objects busy or refused, which a short RetryDelay or
			// Grace may make due again at once): going on could review them again
			// and again. What else is due, the other workers or the next call take.
			if expired == 0 && b.Reviewed == b.Postponed+b.Refused {
				return
			}
		}
	}
	more()
	wg.Wait()
	if first == nil {
		// The workers stopped between batches (or never began) because ctx ended: the
		// queue may not be done, and the caller must not read the stats as if it were.
		first = ctx.Err()
	}
	return total, first
}

// follow installs for the references the catalog has now, after a refusal said a
// key was added since the plan was made, and returns those it had not followed. On
// Postgres it takes the locks Install takes: CREATE TRIGGER on the new table (SHARE
// ROW EXCLUSIVE) waits for that table's writers to commit, and holds up its new
// writes, and only its, for as long as the short transaction takes; the triggers of
// the tables already followed are replaced in place, which locks no table. An error
// is kept (unfollowed), so that the next Collect tries again before collecting.
func (c *Collector) follow(ctx context.Context) ([]string, error) {
	before := c.current().References
	first, err := c.install(ctx, true)
	gone := c.gone(before)
	if err == nil && (first || len(gone) > 0) {
		// The set's triggers had been dropped: what was stored meanwhile was never
		// queued. Or a reference the plan followed is gone (its table dropped or
		// renamed, its column renamed, its key dropped): its rows stopped holding
		// their objects with no trigger to say so, and which objects they held is
		// no longer known. Either way the set's objects are queued, a grace period
		// ahead, as the first Install queues them.
		if len(gone) > 0 {
			c.log.Warn("refset/cleanup: foreign keys followed before are gone from the schema: queueing the set's objects for review",
				slog.Any("references", gone))
		}
		err = c.enqueueExisting(ctx)
	}
	if err != nil {
		err = c.schemaError(err)
		if !errors.Is(err, refset.ErrClosed) && ctx.Err() == nil {
			c.mu.Lock()
			c.unfollowed = err
			c.mu.Unlock()
		}
		return nil, fmt.Errorf("following the schema as it is now (keys added, tables dropped since Install): %w", err)
	}
	var added []string
	for _, r := range c.current().References {
		if !slices.ContainsFunc(before, sameReference(r)) {
			added = append(added, r.String())
		}
	}
	if len(added) > 0 {
		c.log.Info("refset/cleanup: followed foreign keys added since Install", slog.Any("references", added))
	}
	return added, nil
}

// sameReference matches a reference of the same table and column as r.
func sameReference(r Reference) func(Reference) bool {
	return func(b Reference) bool { return b.Table == r.Table && strings.EqualFold(b.Column, r.Column) }
}

// gone lists the references of before that the current plan no longer has (none
// when the plan is not newer than before).
func (c *Collector) gone(before []Reference) []string {
	var out []string
	now := c.current().References
	for _, r := range before {
		if !slices.ContainsFunc(now, sameReference(r)) {
			out = append(out, r.String())
		}
	}
	return out
}

// batchOnce runs one batch transaction: expired holds (when expire), then due
// entries, on the plan of the time it starts.
func (c *Collector) batchOnce(ctx context.Context, expire bool) (expired int64, b refsetdriver.Batch, err error) {
	if err := refsetdriver.RefuseUnit(ctx, c.db, "clean-up's Collect"); err != nil {
		return 0, b, err
	}
	p := c.current()
	err = refset.InTx(ctx, c.db, func(ctx context.Context, tx refset.Tx) error {
		var err error
		if expire {
			if expired, err = c.dialect.ExpireHolds(ctx, tx, p, c.batch); err != nil {
				return err
			}
		}
		if b, err = c.dialect.CollectBatch(ctx, tx, p, c.batch); err != nil {
			return err
		}
		// Counted in the transaction that deleted them: exact, whoever collects.
		return c.dialect.AddCollected(ctx, tx, p, b.Deleted)
	})
	return expired, b, c.schemaError(err)
}

// Sweep is the full mark-and-sweep: it marks every object reachable from a root,
// queues the rest (objects still in their grace period keep it), and collects. Use
// it to repair a database whose queue was lost (the first Install queues the objects
// a set had before it); its cost follows the size of the set. Errors: those of Collect.
func (c *Collector) Sweep(ctx context.Context) (queued int64, s Stats, err error) {
	if err := c.made("sweep"); err != nil {
		return 0, Stats{}, err
	}
	defer func() { err = ctxerr.Wrap(ctx, err) }()
	if err := refsetdriver.RefuseUnit(ctx, c.db, "clean-up's Sweep"); err != nil {
		return 0, s, fmt.Errorf("refset/cleanup: sweep %s: %w", c.current().Table, err)
	}
	p := c.current()
	err = refset.InTx(ctx, c.db, func(ctx context.Context, tx refset.Tx) error {
		var err error
		queued, err = c.dialect.EnqueueUnreachable(ctx, tx, p)
		return err
	})
	if err = c.schemaError(err); err != nil {
		return 0, s, fmt.Errorf("refset/cleanup: sweep %s: %w", p.Table, err)
	}
	s, err = c.Collect(ctx)
	return queued, s, err
}
