package blockmanager

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIDsRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		ids  IDs
		want IDs
	}{
		{"nil", nil, IDs{}},
		{"empty", IDs{}, IDs{}},
		{"one", IDs{"abc"}, IDs{"abc"}},
		{"several", IDs{"a", "b", "c"}, IDs{"a", "b", "c"}},
		{"empty strings", IDs{"", ""}, IDs{"", ""}},
		{"quotes and separators", IDs{`a","b`, `"`, `\`, "x,y"}, IDs{`a","b`, `"`, `\`, "x,y"}},
		{"unicode", IDs{"héllo", "世界"}, IDs{"héllo", "世界"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := tc.ids.Value()
			require.NoError(t, err)
			var got IDs
			require.NoError(t, got.Scan(v))
			assert.Equal(t, tc.want, got)
			var fromBytes IDs
			require.NoError(t, fromBytes.Scan([]byte(v.(string))))
			assert.Equal(t, tc.want, fromBytes)
		})
	}
	var ids IDs
	require.Error(t, ids.Scan(42))
	require.Error(t, ids.Scan("not json"))
	require.NoError(t, ids.Scan(nil))
	assert.Nil(t, ids)
}
