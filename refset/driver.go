package refset

import (
	"log/slog"
	"time"

	"github.com/refsetdb/refset/internal/dblog"
	"github.com/refsetdb/refset/internal/txview"
	"github.com/refsetdb/refset/refsetdriver"
)

// capabilities are what the core asks of a database's driver (refsetdriver.Of).
// A database without one, a SetStore's of the caller's own, has none of them: no
// logs, no metrics, ? as its placeholder, no pipelining.
type capabilities struct {
	log    *slog.Logger
	slow   time.Duration
	obs    Observer
	rebind rebinder
	pipe   refsetdriver.Pipeliner // nil: none
	// retryUnavailable is how long a unit of work that certainly did not commit is
	// run again after ErrUnavailable; 0: never.
	retryUnavailable time.Duration
}

func capabilitiesOf(db Database) capabilities {
	drv, err := refsetdriver.Of(db)
	if err != nil {
		return capabilities{log: dblog.Or(nil), obs: NoObserver{}, rebind: asWritten{}}
	}
	pipe, _ := drv.(refsetdriver.Pipeliner)
	return capabilities{log: drv.Logger(), slow: drv.SlowStatement(), obs: drv.Observer(), rebind: drv, pipe: pipe,
		retryUnavailable: drv.RetryUnavailable()}
}

// rebinder writes a statement's ? placeholders as its database does: a Driver (the
// Driver itself, not its method value, which would be allocated on every unit of
// work and every view).
type rebinder = txview.Rebinder

// asWritten leaves every statement as it is written: a database without a driver.
type asWritten struct{}

func (asWritten) Rebind(query string) string { return query }
