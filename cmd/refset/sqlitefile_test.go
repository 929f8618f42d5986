package main

import (
	"database/sql"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/stretchr/testify/require"
)

// sqliteFile makes a SQLite file in prepare's state, closed as its program leaves
// it (in WAL mode, the -wal file checkpointed and gone), in a directory of its own,
// and returns its path.
func sqliteFile(t *testing.T) string {
	t.Helper()
	b := backends()[0] // SQLite
	where := b.New(t)
	db := where.Open(t, testdb.Options{})
	prepare(t, b, db)
	require.NoError(t, db.Close())
	require.NoFileExists(t, where.At+"-wal")
	return where.At
}

// setJournalMode switches the SQLite file at path to mode ("delete", "wal").
func setJournalMode(t *testing.T, path, mode string) {
	t.Helper()
	pool, err := sql.Open("sqlite", path)
	require.NoError(t, err)
	defer pool.Close()
	var got string
	require.NoError(t, pool.QueryRowContext(t.Context(), "PRAGMA journal_mode = "+mode).Scan(&got))
	require.Equal(t, mode, got)
}

// fileState is what a command must not change of a file: its bytes, its
// modification time, and the files beside it.
type fileState struct {
	bytes    []byte
	modified time.Time
	beside   []string
}

func stateOf(t *testing.T, path string) fileState {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	st, err := os.Stat(path)
	require.NoError(t, err)
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	s := fileState{bytes: b, modified: st.ModTime()}
	for _, e := range entries {
		s.beside = append(s.beside, e.Name())
	}
	return s
}

// readingCommands are every command that only reads, on prepare's state.
var readingCommands = []struct {
	args []string
	code int
}{
	{[]string{"status"}, exitOK},
	{[]string{"status", "--json", "--exact"}, exitOK},
	{[]string{"why", "h", "--table", "blocks"}, exitOK},
	{[]string{"why", "--json", "y", "--table", "blocks"}, exitOK},
	{[]string{"check", "--table", "blocks"}, exitFindings},
	{[]string{"holds", "ls", "--table", "blocks"}, exitOK},
	{[]string{"migrate", "status"}, exitOK},
	{[]string{"migrate", "sql", "--table", "blocks"}, exitOK},
}

// TestReadingCommandsLeaveTheFile: a command that only reads leaves the SQLite file
// as it found it, byte for byte and in its journal mode: one in WAL mode, as a
// program leaves it, and one in rollback mode, which a command that opened it as the
// program does would switch to WAL. ui, which only reads too, as well.
func TestReadingCommandsLeaveTheFile(t *testing.T) {
	bin := buildCLI(t)
	for _, mode := range []string{"wal", "delete"} {
		t.Run(mode, func(t *testing.T) {
			path := sqliteFile(t)
			setJournalMode(t, path, mode)
			before := stateOf(t, path)
			time.Sleep(10 * time.Millisecond) // a write would show in the modification time
			check := func(t *testing.T) {
				t.Helper()
				after := stateOf(t, path)
				require.Equal(t, before.bytes, after.bytes, "the file is unchanged, byte for byte")
				require.Equal(t, before.modified, after.modified)
				if mode == "delete" {
					require.Equal(t, before.beside, after.beside, "no -wal or -shm file beside a file in rollback mode")
				}
			}
			for _, c := range readingCommands {
				t.Run(strings.Join(c.args, " "), func(t *testing.T) {
					cli(t, bin, []string{"--db", path}, c.code, c.args...)
					check(t)
				})
			}
			t.Run("ui", func(t *testing.T) {
				base, stop := startUI(t, bin, "ui", "--addr", "127.0.0.1:0", "--db", path)
				resp, err := http.Get(base)
				require.NoError(t, err)
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				require.NoError(t, err)
				require.Equal(t, http.StatusOK, resp.StatusCode)
				require.Equal(t, 0, stop())
				check(t)
			})
		})
	}
}

// allCommands are every command, on prepare's state.
var allCommands = [][]string{
	{"status"}, {"why", "h", "--table", "blocks"}, {"check", "--table", "blocks"}, {"holds", "ls", "--table", "blocks"},
	{"migrate", "status"}, {"migrate", "sql"}, {"ui", "--addr", "127.0.0.1:0"},
	{"collect", "--table", "blocks"}, {"sweep", "--table", "blocks"}, {"holds", "rm", "--expired", "--table", "blocks"},
	{"migrate", "up"}, {"migrate", "down", "--component", "set:tokens", "--target", "0"},
}

// TestNotASQLiteFile: every command refuses a --db that is no SQLite database,
// naming it and saying why, and leaves it as it is: a missing file is not created,
// an empty one stays empty.
func TestNotASQLiteFile(t *testing.T) {
	bin := buildCLI(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	empty := filepath.Join(dir, "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	text := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(text, []byte("these are not the pages of a SQLite database, not at all"), 0o644))
	short := filepath.Join(dir, "short.db")
	require.NoError(t, os.WriteFile(short, []byte("SQLite"), 0o644))
	for _, f := range []struct{ name, path, says string }{
		{"missing", missing, "no such file or directory"},
		{"empty", empty, "is empty, not a SQLite database"},
		{"text", text, "is not a SQLite database"},
		{"shorter than a header", short, "is not a SQLite database"},
		{"directory", dir, "is a directory"},
	} {
		for _, args := range allCommands {
			t.Run(f.name+"/"+strings.Join(args, " "), func(t *testing.T) {
				_, stderr, code := runCLI(t, bin, append(args, "--db", f.path)...)
				require.Equal(t, exitError, code, stderr)
				require.Contains(t, stderr, f.path)
				require.Contains(t, stderr, f.says)
			})
		}
	}
	require.NoFileExists(t, missing, "refset never creates a SQLite file")
	st, err := os.Stat(empty)
	require.NoError(t, err)
	require.Zero(t, st.Size(), "an empty file stays empty")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 3, "no -wal, -shm or journal file beside them")
}

// asUnprivileged runs a command as a user whom file permissions bind: as itself,
// or, when the test runs as root, whom they do not, as nobody. A file or
// directory made read-only then really is read-only to the command.
func asUnprivileged(t *testing.T) func(*exec.Cmd) {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	return func(cmd *exec.Cmd) {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
}

// openToAll lets every user reach and read path, a file or directory in the test's
// temporary directories, and its directories: those are the test user's alone.
func openToAll(t *testing.T, path string) {
	t.Helper()
	for p := path; strings.HasPrefix(p, os.TempDir()+string(filepath.Separator)); p = filepath.Dir(p) {
		st, err := os.Stat(p)
		require.NoError(t, err)
		require.NoError(t, os.Chmod(p, st.Mode().Perm()|0o555))
	}
}

// readOnly makes path read-only (0444 for a file, 0555 for a directory) until the
// test ends.
func readOnly(t *testing.T, path string) {
	t.Helper()
	st, err := os.Stat(path)
	require.NoError(t, err)
	mode := os.FileMode(0o444)
	if st.IsDir() {
		mode = 0o555
	}
	require.NoError(t, os.Chmod(path, mode))
	t.Cleanup(func() { os.Chmod(path, st.Mode().Perm()) })
}

// TestReadOnlySQLiteFile: on a SQLite file that is read-only, in a directory that
// is read-only too, every command that only reads answers and changes nothing, and
// every command that writes fails saying that the file or its directory is
// read-only. In a directory that is not, a command that writes says the same of a
// read-only file. The commands run as a user the permissions bind, also when the
// test runs as root (asUnprivileged).
func TestReadOnlySQLiteFile(t *testing.T) {
	bin := buildCLI(t)
	openToAll(t, bin)
	unprivileged := asUnprivileged(t)
	writing := [][]string{
		{"collect", "--table", "blocks"}, {"sweep", "--table", "blocks"}, {"holds", "rm", "--expired", "--table", "blocks"},
		{"migrate", "up", "--table", "notes"}, {"migrate", "down", "--component", "set:tokens", "--target", "0"},
	}
	// A file on which migrate up has a set to make.
	file := func(t *testing.T) string {
		path := sqliteFile(t)
		pool, err := sql.Open("sqlite", path)
		require.NoError(t, err)
		defer pool.Close()
		_, err = pool.ExecContext(t.Context(), `CREATE TABLE notes (id TEXT PRIMARY KEY)`)
		require.NoError(t, err)
		openToAll(t, path)
		return path
	}

	t.Run("read-only directory", func(t *testing.T) {
		path := file(t)
		readOnly(t, path)
		readOnly(t, filepath.Dir(path))
		before := stateOf(t, path)
		for _, c := range readingCommands {
			t.Run(strings.Join(c.args, " "), func(t *testing.T) {
				stdout, stderr, code := runCLIWith(t, unprivileged, bin, append(c.args, "--db", path)...)
				require.Equal(t, c.code, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
				// No -shm file can be made beside it, nor is a -wal file there: it
				// is read without locks, as a file nothing writes.
				require.Contains(t, stderr, "refset: note: reading "+path+" without locks")
			})
		}
		t.Run("ui", func(t *testing.T) {
			// ui reads for as long as it serves: not without locks.
			_, stderr, code := runCLIWith(t, unprivileged, bin, "ui", "--addr", "127.0.0.1:0", "--db", path)
			require.Equal(t, exitError, code, stderr)
			require.Contains(t, stderr, "the directory of the SQLite file "+path+" is read-only, and SQLite must create "+path+"-shm there")
			require.Contains(t, stderr, "ui, which reads for as long as it serves, does not read a file without locks")
		})
		for _, args := range writing {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				_, stderr, code := runCLIWith(t, unprivileged, bin, append(args, "--db", path)...)
				require.Equal(t, exitError, code, stderr)
				cmd, _ := lookup(args)
				require.Contains(t, stderr, "the SQLite file "+path+", or its directory, is read-only, and "+cmd.name+" writes to them")
				require.Contains(t, stderr, "invalid configuration: the database is read-only")
			})
		}
		require.Equal(t, before, stateOf(t, path), "nothing changed")
	})

	t.Run("read-only file", func(t *testing.T) {
		path := file(t)
		readOnly(t, path)
		require.NoError(t, os.Chmod(filepath.Dir(path), 0o777)) // SQLite makes its -wal and -shm files there
		before := stateOf(t, path)
		for _, args := range writing {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				_, stderr, code := runCLIWith(t, unprivileged, bin, append(args, "--db", path)...)
				require.Equal(t, exitError, code, stderr)
				require.Contains(t, stderr, "the SQLite file "+path+", or its directory, is read-only")
			})
		}
		stdout, stderr, code := runCLIWith(t, unprivileged, bin, "status", "--db", path)
		require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
		require.NotContains(t, stderr, "without locks", "SQLite makes its -shm file, and reads with locks")
		require.Equal(t, before.bytes, stateOf(t, path).bytes, "nothing changed")
	})
}
