package ctxerr

import (
	"context"
	"errors"
	"testing"
)

func TestWrap(t *testing.T) {
	driverErr := errors.New("pq: canceling statement due to user request")

	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), 0)
	defer cancel2()

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
