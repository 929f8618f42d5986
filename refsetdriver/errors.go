package refsetdriver

import (
	"context"

	"github.com/refsetdb/refset/internal/ctxerr"
)

// ContextError returns err, made to match ctx.Err() too when ctx has ended and err
// does not match it already, as refset's own calls return theirs: for a component
// that runs its own statements, which drivers report cut short by their context in
// their own words (lib/pq's 57014 for a deadline as for a cancellation,
// database/sql's ErrTxDone for a transaction it rolled back). A statement a store's
// TranslateError reports interrupted then matches the context error that ended it
// alone, and says which. A nil err stays nil.
func ContextError(ctx context.Context, err error) error { return ctxerr.Wrap(ctx, err) }
