package ctxerr

import (
	"context"
	"errors"
	"testing"
)

// driverErr is how lib/pq reports a statement cut short, by a deadline or a cancel.
var driverErr = errors.New("pq: canceling statement due to user request")

// endedContexts are a context that was cancelled and one whose deadline passed.
func endedContexts(t *testing.T) (cancelled, expired context.Context) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), 0)
	t.Cleanup(cancel2)
	return cancelled, expired
}

func TestWrap(t *testing.T) {
	live := context.Background()
	cancelled, expired := endedContexts(t)

	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want error // nil: Wrap returns err itself
	}{
		{"nil error", cancelled, nil, nil},
		{"live context", live, driverErr, nil},
		{"cancelled", cancelled, driverErr, context.Canceled},
		{"deadline", expired, driverErr, context.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Wrap(tc.ctx, tc.err)
			if tc.want == nil {
				if got != tc.err {
					t.Fatalf("Wrap = %v, want the error unchanged (%v)", got, tc.err)
				}
				return
			}
			if !errors.Is(got, tc.want) || !errors.Is(got, driverErr) {
				t.Fatalf("Wrap = %v: want it to match %v and the driver's error", got, tc.want)
			}
		})
	}
	already := Wrap(cancelled, context.Canceled)
	if already != context.Canceled {
		t.Fatalf("an error matching the context's already is returned as it is, got %v", already)
	}
}

// TestInterrupted: a driver's report of an interrupted statement says which context
// error ended it once a Wrap whose context ended has seen it, matches that one and not
// the other, and says it once; with no context that ended, it is a cancel (an
// operator's pg_cancel_backend).
func TestInterrupted(t *testing.T) {
	cancelled, expired := endedContexts(t)

	tests := []struct {
		name     string
		ctx      context.Context
		want     error
		not      error
		ends     string
		wrapping int // how many Wraps the error passes on its way out
	}{
		{"deadline", expired, context.DeadlineExceeded, context.Canceled, "statement interrupted (context deadline exceeded)", 1},
		{"deadline, wrapped at each layer", expired, context.DeadlineExceeded, context.Canceled, "statement interrupted (context deadline exceeded)", 3},
		{"cancel", cancelled, context.Canceled, context.DeadlineExceeded, "statement interrupted (context canceled)", 2},
		{"no context ended", context.Background(), context.Canceled, context.DeadlineExceeded, "statement interrupted", 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Interrupted(driverErr)
			for range tc.wrapping {
				err = Wrap(tc.ctx, err)
			}
			if !errors.Is(err, tc.want) || errors.Is(err, tc.not) || !errors.Is(err, driverErr) || !IsInterrupted(err) {
				t.Fatalf("%v: want it to match %v and the driver's error, not %v", err, tc.want, tc.not)
			}
			if err.Error() != tc.ends {
				t.Fatalf("message %q, want %q", err, tc.ends)
			}
		})
	}
}
