package refset

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// RetryConflicts runs work again only after a conflict, and a bounded number of times.
func TestRetryConflicts(t *testing.T) {
	other := errors.New("not a conflict")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name      string
		ctx       context.Context
		fails     []error // what each run returns; nil after the list ends
		wantRuns  int
		wantErrIs error
	}{
		{"succeeds at once", t.Context(), nil, 1, nil},
		{"succeeds after two conflicts", t.Context(), []error{ErrConflict, fmt.Errorf("deadlock: %w", ErrConflict)}, 3, nil},
		{"other errors are not retried", t.Context(), []error{other}, 1, other},
		{"gives up after six conflicts", t.Context(), []error{ErrConflict, ErrConflict, ErrConflict, ErrConflict, ErrConflict, ErrConflict, ErrConflict}, maxAttempts, ErrConflict},
		{"stops waiting when ctx ends", cancelled, []error{ErrConflict}, 1, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := 0
			err := RetryConflicts(tc.ctx, nil, func() error {
				runs++
				if runs <= len(tc.fails) {
					return tc.fails[runs-1]
				}
				return nil
			})
			assert.Equal(t, tc.wantRuns, runs)
			if tc.wantErrIs == nil {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, tc.wantErrIs)
			}
		})
	}
}
