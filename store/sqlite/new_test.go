package sqlite

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const goodWriter = "?_foreign_keys=on&_journal_mode=WAL&_busy_timeout=5000&_txlock=immediate"

// TestNewFromCallersPools: pools the caller opened are refused, saying what to
// change, when they are not set up as refset needs. (That pools set up as it needs
// serve a set and stay open on Close is the conformance suite's CallersPools, on
// each driver.)
func TestNewFromCallersPools(t *testing.T) { eachDriver(t, testNewFromCallersPools) }

func testNewFromCallersPools(t *testing.T, driverName string) {
	ctx := t.Context()
	open := func(t *testing.T, dsn string, conns int) *sql.DB {
		t.Helper()
		p, err := sql.Open(driverName, dsn)
		require.NoError(t, err)
		p.SetMaxOpenConns(conns)
		t.Cleanup(func() { p.Close() })
		return p
	}

	cases := []struct {
		name          string
		writer        string // DSN parameters
		writerConns   int
		readers       string // "" : no reader pool; "other": readers on another file
		wantInMessage string
	}{
		{"foreign keys off", "?_journal_mode=WAL&_busy_timeout=5000&_txlock=immediate", 1, "", "_foreign_keys=on"},
		{"readers without foreign keys", goodWriter, 1, "?_query_only=true", "_foreign_keys=on"},
		{"not WAL", "?_foreign_keys=on&_busy_timeout=5000&_txlock=immediate", 1, "", "_journal_mode=WAL"},
		{"no busy timeout", "?_foreign_keys=on&_journal_mode=WAL&_busy_timeout=0&_txlock=immediate", 1, "", "_busy_timeout"},
		{"deferred transactions", "?_foreign_keys=on&_journal_mode=WAL&_busy_timeout=5000", 1, "", "_txlock=immediate"},
		{"several writer connections", goodWriter, 4, "", "SetMaxOpenConns(1)"},
		{"readers on another file", goodWriter, 1, "other", "readers are on"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			file := "file:" + filepath.Join(dir, "own.db")
			writer := open(t, file+tc.writer, tc.writerConns)
			var readers *sql.DB
			switch tc.readers {
			case "":
			case "other":
				readers = open(t, "file:"+filepath.Join(dir, "other.db")+"?_foreign_keys=on", 2)
			default:
				readers = open(t, file+tc.readers, 2)
			}
			_, err := New(ctx, writer, readers, Options{})
			require.ErrorIs(t, err, refset.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.wantInMessage)
		})
	}

	_, err := New(ctx, nil, nil, Options{})
	require.ErrorIs(t, err, refset.ErrInvalidConfig)
}

// The pools Open sets up pass New's checks: the checks ask for what Open does.
func TestOpenPoolsPassNewChecks(t *testing.T) {
	eachDriver(t, func(t *testing.T, driverName string) {
		db := openDB(t, Options{Driver: driverName})
		_, err := New(t.Context(), db.Writer().DB, db.Readers().DB, Options{})
		require.NoError(t, err)
	})
}
