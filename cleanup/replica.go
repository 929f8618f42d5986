package cleanup

import (
	"context"
	"errors"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// onReplica runs report, a read of what changes (holds, references, the queue), on
// the database's replica once the replica shows every write the primary had
// committed when the report began, so a report sees the caller's own writes as it
// would on the primary. It runs report on the primary when there is no replica, when
// the replica does not catch up within its wait (postgres.Options.ReplicaWait), or
// when the replica fails. A report that finds no such object (refset.ErrNotFound) on
// a replica that caught up has its answer.
func onReplica(ctx context.Context, db refset.Database, report func(q refset.Querier) error) error {
	drv := db.Driver()
	r, ok := drv.(refsetdriver.Replicated)
	if !ok || r.Replica() == nil {
		return report(db.Reader())
	}
	caughtUp, err := r.ReplicaCaughtUp(ctx)
	if err == nil && caughtUp {
		if err = report(r.Replica()); err == nil || errors.Is(err, refset.ErrNotFound) {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	reason := "behind"
	if err != nil {
		reason = "failed"
	}
	drv.Observer().ReadFellBack(ctx, "report", reason)
	return report(db.Reader())
}
