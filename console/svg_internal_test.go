package console

import "testing"

func TestAmount(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "0"}, {11, "11"}, {2.5, "2.5"}, {2.46, "2.5"}, {59.99, "60"}, {-0.04, "0"}, {-3, "-3"}, {1234567, "1234567"},
	} {
		if got := amount(tc.v); got != tc.want {
			t.Errorf("amount(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}
