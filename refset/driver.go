package refset

import (
	"log/slog"
	"time"

	"github.com/refsetdb/refset/internal/dblog"
	"github.com/refsetdb/refset/refsetdriver"
)

// capabilities are what the core asks of a database's driver (refsetdriver.Of).
// A database without one, a SetStore's of the caller's own, has none of them: no
// logs, no metrics, ? as its placeholder, no pipelining.
type capabilities struct {
	log    *slog.Logger
	slow   time.Duration
	obs    Observer
	rebind func(query string) string
	pipe   refsetdriver.Pipeliner // nil: none
	// retryUnavailable is how long a unit of work that certainly did not commit is
	// run again after ErrUnavailable; 0: never.
	retryUnavailable time.Duration
}

func capabilitiesOf(db Database) capabilities {
	drv, err := refsetdriver.Of(db)
	if err != nil {
		return capabilities{log: dblog.Or(nil), obs: NoObserver{}, rebind: func(q string) string { return q }}
	}
	pipe, _ := drv.(refsetdriver.Pipeliner)
	return capabilities{log: drv.Logger(), slow: drv.SlowStatement(), obs: drv.Observer(), rebind: drv.Rebind, pipe: pipe,
		retryUnavailable: drv.RetryUnavailable()}
}
