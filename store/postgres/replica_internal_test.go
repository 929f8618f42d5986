package postgres

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The primary's insert position right after a page header stands for the page
// boundary, which is where a standby's replay of the last record ends.
func TestRecordEnd(t *testing.T) {
	w := walLayout{page: 8192, segment: 16 << 20}
	tests := []struct {
		name string
		lsn  uint64
		want uint64
	}{
		{"mid page", 3*8192 + 1000, 3*8192 + 1000},
		{"after a page header", 3*8192 + 24, 3 * 8192},
		{"after a segment's long header", 2<<24 + 40, 2 << 24},
		{"40 bytes into a page that starts no segment", 3*8192 + 40, 3*8192 + 40},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, w.recordEnd(tc.lsn))
		})
	}
}

func TestParseLSN(t *testing.T) {
	got, err := parseLSN("16/B374D848")
	require.NoError(t, err)
	assert.Equal(t, uint64(0x16)<<32|0xB374D848, got)
	_, err = parseLSN("nonsense")
	require.Error(t, err)
}
