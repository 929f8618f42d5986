package sqlstore

import (
	"errors"
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
)

func TestForeignKeyErrorByVerb(t *testing.T) {
	driverErr := errors.New("FOREIGN KEY constraint failed")
	tests := []struct {
		query string
		want  error
	}{
		{"DELETE FROM blocks WHERE id = ?", refset.ErrReferenced},
		{"/* why */ delete from blocks", refset.ErrReferenced},
		{"WITH x AS (SELECT 1) DELETE FROM blocks", refset.ErrReferenced},
		{"INSERT INTO heads VALUES (?)", refset.ErrNotFound},
		{"-- hold\nINSERT OR REPLACE INTO heads VALUES (?)", refset.ErrNotFound},
		{"REPLACE INTO heads VALUES (?)", refset.ErrNotFound},
		{"UPDATE blocks SET prev = ?", refset.ErrNotFound},
		{"COMMIT", refset.ErrConstraint},
		{"", refset.ErrConstraint},
		{"SELECT 1", refset.ErrConstraint},
	}
	for _, tc := range tests {
		t.Run(tc.query, func(t *testing.T) {
			err := ForeignKeyError("refset/sqlite", driverErr, tc.query)
			assert.ErrorIs(t, err, tc.want)
			assert.ErrorIs(t, err, driverErr, "the driver's error stays reachable")
		})
	}
}
