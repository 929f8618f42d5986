package sqltext

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Modification takes the statements a data-modifying common table expression can
// hold, cut after their last token, and refuses every other.
func TestModification(t *testing.T) {
	cases := []struct {
		query string
		body  string // "" when refused
	}{
		{"DELETE FROM pending WHERE block_id = $1", "DELETE FROM pending WHERE block_id = $1"},
		{"  delete from pending where block_id = $1  ", "  delete from pending where block_id = $1"},
		{"INSERT INTO heads (block_id) VALUES ($1);", "INSERT INTO heads (block_id) VALUES ($1)"},
		{"INSERT INTO heads (block_id) VALUES ($1) ; ; -- done\n", "INSERT INTO heads (block_id) VALUES ($1)"},
		{"UPDATE owners SET block_id = $1 WHERE owner = $2 -- the owner\n", "UPDATE owners SET block_id = $1 WHERE owner = $2"},
		{"DELETE FROM pending WHERE block_id = $1 /* a comment; RETURNING */", "DELETE FROM pending WHERE block_id = $1"},
		{"-- lead\nDELETE FROM pending WHERE note = 'RETURNING;'", "-- lead\nDELETE FROM pending WHERE note = 'RETURNING;'"},
		{`UPDATE t SET "returning" = $1`, `UPDATE t SET "returning" = $1`},
		{"INSERT INTO heads VALUES ($1) ON CONFLICT (block_id) DO NOTHING", "INSERT INTO heads VALUES ($1) ON CONFLICT (block_id) DO NOTHING"},
		{"INSERT INTO heads SELECT $$;$$", "INSERT INTO heads SELECT $$;$$"},

		{"DELETE FROM pending WHERE block_id = $1 RETURNING block_id", ""},
		{"INSERT INTO heads VALUES ($1) returning *", ""},
		{"UPDATE t SET a = (SELECT 1) RETURNING a", ""},
		{"WITH x AS (SELECT 1) DELETE FROM pending", ""},
		{"(DELETE FROM pending)", ""},
		{"SELECT nextval('s')", ""},
		{"MERGE INTO t USING s ON t.id = s.id WHEN MATCHED THEN DELETE", ""},
		{"DELETE FROM a; DELETE FROM b", ""},
		{"DELETE FROM a; -- one\n SELECT 1", ""},
		{"INSERT INTO t VALUES (1) -- RETURNING\n", "INSERT INTO t VALUES (1)"},
		{"", ""},
		{"-- INSERT", ""},
		{"'DELETE'", ""},
	}
	for _, tc := range cases {
		body, ok := Modification(tc.query)
		assert.Equal(t, tc.body != "", ok, "%q", tc.query)
		assert.Equal(t, tc.body, body, "%q", tc.query)
	}
}
