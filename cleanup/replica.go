package cleanup

import (
	"context"
	"errors"

	"github.com/refsetdb/refset/refset"
)

// onReplica runs report, a read of what changes (holds, references, the queue), on
// the database's replica once the replica shows every write the primary had
// committed when the report began, so a report sees the caller's own writes as it
// would on the primary. It runs report on the primary when there is no replica, when
// the replica does not catch up within its wait (postgres.Options.ReplicaWait), or
// when the replica fails. A report that finds no such object (refset.ErrNotFound) on
// a replica that caught up has its answer.
func onReplica(ctx context.Context, db refset.Database, report func(q refset.Querier) error) error {
	replica := refset.ReplicaOf(db)
	if replica == nil {
		return report(db.Reader())
	}
	caughtUp, err := replicaCaughtUp(ctx, db)
	if err == nil && caughtUp {
		if err = report(replica); err == nil || errors.Is(err, refset.ErrNotFound) {
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
	refset.ObserverOf(db).ReadFellBack(ctx, "report", reason)
	return report(db.Reader())
}

// catchingUp is a database whose replica can tell when it shows the primary's
// latest writes: postgres.DB.
type catchingUp interface {
	ReplicaCaughtUp(ctx context.Context) (bool, error)
}

// replicaCaughtUp reports whether db's replica shows every write the primary had
// committed when it was called (false for a database that cannot tell).
func replicaCaughtUp(ctx context.Context, db refset.Database) (bool, error) {
	c, ok := db.(catchingUp)
	if !ok {
		return false, nil
	}
	return c.ReplicaCaughtUp(ctx)
}
