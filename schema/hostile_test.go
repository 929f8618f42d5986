package schema_test

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/child"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain runs a replica of TestReplicasMigrateAtOnce in a process started as one.
func TestMain(m *testing.M) {
	child.Main(m, map[string]func(arg string) int{"replica": child.JSON(replicaProcess)})
}

// slowSQL is a statement (PostgreSQL's if postgres) that takes a while: about d there,
// and on SQLite, which has no sleep, a count whose time grows with d (about a
// second and a half for a second, unraced).
func slowSQL(postgres bool, d time.Duration) string {
	if postgres {
		return fmt.Sprintf(`SELECT pg_sleep(%g)`, d.Seconds())
	}
	return fmt.Sprintf(`WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < %d) SELECT count(*) FROM c`,
		int(d.Seconds()*3_500_000))
}

// release is what a new release of a program adds: a component whose second
// migration records that it ran, in a table its first creates without IF NOT EXISTS,
// and whose third takes a while, so that replicas starting together overlap.
func release(postgres bool) schema.Config {
	return schema.Config{Sets: []schema.Set{{Table: "items"}}, Components: []schema.Component{{Name: "release", Migrations: fstest.MapFS{
		"0001_runs.sql":   sqlFile(`CREATE TABLE release_runs (migration TEXT NOT NULL)`),
		"0002_record.sql": sqlFile(`INSERT INTO release_runs (migration) VALUES ('0002')`),
		"0003_wait.sql":   sqlFile(slowSQL(postgres, 200*time.Millisecond)),
		"0004_after.sql":  sqlFile(`CREATE TABLE release_after (id TEXT PRIMARY KEY)`),
	}}}}
}

// replicaArg is what a replica process is given, as JSON: where the test's database
// is, and the isolation of its write transactions.
type replicaArg struct {
	Backend   string
	At        string
	Isolation sql.IsolationLevel
}

// openReplica opens the database at a as a replica of a program does, with a pool of
// its own; the caller closes it.
func openReplica(ctx context.Context, a replicaArg) (refset.Database, error) {
	b, ok := testdb.Named(a.Backend)
	if !ok {
		return nil, fmt.Errorf("no backend %q", a.Backend)
	}
	place := testdb.Place{Backend: b, At: a.At}
	if !b.Postgres {
		return place.Dial(ctx, testdb.Options{})
	}
	opts := place.PostgresOptions(testdb.Options{})
	opts.Isolation = a.Isolation
	return postgres.Open(ctx, a.At, opts)
}

// replicaProcess is a replica starting: it opens the database, says "ready", waits
// for a line on its standard input, migrates up, and prints what it ran.
func replicaProcess(a replicaArg) int {
	ctx := context.Background()
	db, err := openReplica(ctx, a)
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 1
	}
	defer db.(io.Closer).Close()
	m, err := schema.New(db, release(db.Driver().Name() == "postgres"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 1
	}
	fmt.Println("ready")
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 1
	}
	res, err := m.Migrate(ctx, schema.DirectionUp, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "replica:", err)
		return 1
	}
	fmt.Printf("ran %q\n", res)
	return 0
}

// migrateReplicas starts n replicas of the database at a, goroutines each with a pool
// of its own or processes, lets them migrate at once, and returns what each ran (the
// result's String) or the error it failed with.
func migrateReplicas(t *testing.T, a replicaArg, n int, processes bool) (ran []string, errs []error) {
	t.Helper()
	ran, errs = make([]string, n), make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	if !processes {
		for i := range n {
			db, err := openReplica(t.Context(), a)
			require.NoError(t, err)
			t.Cleanup(func() { db.(io.Closer).Close() })
			m, err := schema.New(db, release(db.Driver().Name() == "postgres"))
			require.NoError(t, err)
			wg.Go(func() {
				<-start
				res, err := m.Migrate(t.Context(), schema.DirectionUp, nil)
				ran[i], errs[i] = res.String(), err
			})
		}
		close(start)
		wg.Wait()
		return ran, errs
	}
	arg, err := json.Marshal(a)
	require.NoError(t, err)
	for i := range n {
		cmd := child.Command(t.Context(), "replica", string(arg))
		stdin, err := cmd.StdinPipe()
		require.NoError(t, err)
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		require.NoError(t, cmd.Start())
		out := bufio.NewReader(stdout)
		line, err := out.ReadString('\n')
		require.Equal(t, "ready\n", line, "replica %d: %v %s", i, err, stderr.String())
		wg.Go(func() {
			<-start
			_, _ = io.WriteString(stdin, "go\n")
			rest, _ := io.ReadAll(out)
			if err := cmd.Wait(); err != nil {
				errs[i] = fmt.Errorf("replica %d: %w: %s", i, err, stderr.String())
				return
			}
			_, err := fmt.Sscanf(string(rest), "ran %q\n", &ran[i])
			errs[i] = err
		})
	}
	close(start)
	wg.Wait()
	return ran, errs
}

// Replicas of a program starting together on one database, each with a pool of its
// own (goroutines) or in processes of their own, all migrate up at once: none fails,
// none waits for ever, one of them runs each migration, exactly once, and the others
// find nothing to do. So on every isolation level a program may give its PostgreSQL
// transactions (postgres.Options.Isolation): under REPEATABLE READ and SERIALIZABLE a
// replica that waited for the lock reads a snapshot taken before it waited, and ran
// the migrations again, failing on a table that already existed.
func TestReplicasMigrateAtOnce(t *testing.T) {
	const replicas = 5
	cases := []struct {
		name      string
		backend   testdb.Backend
		isolation sql.IsolationLevel
		processes bool
		fresh     bool // nothing of refset's yet: core migrates too
	}{
		{name: "sqlite", backend: testdb.SQLite},
		{name: "sqlite processes", backend: testdb.SQLite, processes: true},
		{name: "postgres", backend: testdb.LibPQ},
		{name: "postgres fresh", backend: testdb.LibPQ, fresh: true},
		{name: "postgres repeatable read", backend: testdb.LibPQ, isolation: sql.LevelRepeatableRead},
		{name: "postgres serializable", backend: testdb.LibPQ, isolation: sql.LevelSerializable},
		{name: "postgres serializable fresh", backend: testdb.LibPQ, isolation: sql.LevelSerializable, fresh: true},
		{name: "pgx repeatable read", backend: testdb.Pgx, isolation: sql.LevelRepeatableRead},
		{name: "pgx serializable fresh", backend: testdb.Pgx, isolation: sql.LevelSerializable, fresh: true},
		{name: "postgres repeatable read processes", backend: testdb.LibPQ, isolation: sql.LevelRepeatableRead, processes: true},
		{name: "pgx serializable processes", backend: testdb.Pgx, isolation: sql.LevelSerializable, processes: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			place := c.backend.New(t)
			setup := place.Open(t, testdb.Options{})
			raw := setup.Driver().Pool()
			_, err := raw.ExecContext(t.Context(), `CREATE TABLE items (id TEXT PRIMARY KEY)`)
			require.NoError(t, err)
			want := "core 0 -> 2, release 0 -> 4, set:items 0 -> 3"
			if !c.fresh { // the release before this one
				m, err := schema.New(setup, schema.Config{Sets: []schema.Set{{Table: "items"}}})
				require.NoError(t, err)
				_, err = m.Migrate(t.Context(), schema.DirectionUp, nil)
				require.NoError(t, err)
				want = "release 0 -> 4"
			}

			ran, errs := migrateReplicas(t, replicaArg{Backend: c.backend.Name, At: place.At, Isolation: c.isolation}, replicas, c.processes)
			var did []string
			for i := range replicas {
				require.NoError(t, errs[i], "replica %d failed", i)
				if ran[i] != "" {
					did = append(did, ran[i])
				}
			}
			assert.Equal(t, []string{want}, did, "one replica migrated, the others found nothing to do")
			rows, err := raw.QueryContext(t.Context(), `SELECT migration FROM release_runs`)
			assert.Equal(t, []string{"0002"}, testdb.Column[string](t, rows, err), "each migration ran once")
			assert.Equal(t, map[string]int{"core": 2, "release": 4, "set:items": 3}, recorded(t, raw))
			m, err := schema.New(setup, release(c.backend.Postgres))
			require.NoError(t, err)
			require.NoError(t, m.Validate(t.Context()))
		})
	}
}

// recorded is refset_schema_version as the database has it, read outside refset.
func recorded(t *testing.T, raw *sql.DB) map[string]int {
	t.Helper()
	rows, err := raw.QueryContext(t.Context(), `SELECT component, version FROM refset_schema_version`)
	require.NoError(t, err)
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var c string
		var v int
		require.NoError(t, rows.Scan(&c, &v))
		got[c] = v
	}
	require.NoError(t, rows.Err())
	return got
}

// A migration whose context ends while it runs, or while it waits for the lock
// another holds, fails with the context's error and leaves nothing of it behind: no
// table of the migrations before the one cut short, no version recorded. Run again
// with time enough, it runs everything once.
func TestMigrateCancelledMidway(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		pg := b.db.Driver().Name() == "postgres"
		_, err := b.migrator(t, schema.Config{Sets: []schema.Set{{Table: "items"}}}).Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		before, versions := b.tables(t), recorded(t, b.raw)
		slow := schema.Config{Components: []schema.Component{{Name: "slow", Migrations: fstest.MapFS{
			"0001_a.sql":    sqlFile(`CREATE TABLE slow_a (id TEXT PRIMARY KEY)`),
			"0002_slow.sql": sqlFile(slowSQL(pg, time.Second)),
			"0003_c.sql":    sqlFile(`CREATE TABLE slow_c (id TEXT PRIMARY KEY)`),
		}}}}

		for _, c := range []struct {
			name  string
			short func() (context.Context, context.CancelFunc)
			is    error
		}{
			{"deadline", func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 150*time.Millisecond) },
				context.DeadlineExceeded},
			{"cancelled", func() (context.Context, context.CancelFunc) {
				short, cancel := context.WithCancel(ctx)
				time.AfterFunc(150*time.Millisecond, cancel)
				return short, cancel
			}, context.Canceled},
		} {
			t.Run(c.name, func(t *testing.T) {
				short, cancel := c.short()
				defer cancel()
				_, err := b.migrator(t, slow).Migrate(short, schema.DirectionUp, nil)
				require.ErrorIs(t, err, c.is)
				assert.Contains(t, err.Error(), "0002_slow.sql", "the migration cut short is named")
				assert.Equal(t, before, b.tables(t), "nothing half applied")
				assert.Equal(t, versions, recorded(t, b.raw), "nothing recorded")
			})
		}

		t.Run("waiting for the lock", func(t *testing.T) {
			holder := make(chan error, 1)
			go func() {
				res, err := b.migrator(t, slow).Migrate(ctx, schema.DirectionUp, nil)
				if err == nil && res.String() != "slow 0 -> 3" {
					err = fmt.Errorf("ran %q", res)
				}
				holder <- err
			}()
			time.Sleep(300 * time.Millisecond) // the holder is in its slow migration
			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			_, err := b.migrator(t, slow).Migrate(short, schema.DirectionUp, nil)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.NoError(t, <-holder)
			want := map[string]int{"slow": 3}
			for c, v := range versions {
				want[c] = v
			}
			assert.Equal(t, want, recorded(t, b.raw), "the holder's migration, once")
			res, err := b.migrator(t, slow).Migrate(ctx, schema.DirectionUp, nil)
			require.NoError(t, err)
			assert.Empty(t, res.Steps, "a retry finds it done")
			assert.Equal(t, 3, recorded(t, b.raw)["slow"])
		})
	})
}

// A migration whose file fails at its second statement fails the whole migration,
// naming the file, with the database's sentinel; nothing of it is left, the first
// statement of the file and the files before it included, and the record is as it
// was. With the file mended, it runs from the start.
func TestMigrateFailingHalfway(t *testing.T) {
	files := func(second string) schema.Config {
		return schema.Config{Components: []schema.Component{{Name: "half", Migrations: fstest.MapFS{
			"0001_a.sql": sqlFile(`CREATE TABLE half_a (id TEXT PRIMARY KEY)`),
			"0002_b.sql": sqlFile("CREATE TABLE half_b (id TEXT PRIMARY KEY);\n" + second + ";\nCREATE TABLE half_c (id TEXT PRIMARY KEY);\n"),
		}}}}
	}
	cases := []struct {
		name   string
		second string
		is     error
	}{
		{"a table that is not there", `INSERT INTO nosuch (id) VALUES ('x')`, refset.ErrSchema},
		{"a syntax error", `CREATE TABEL half_x (id TEXT)`, refset.ErrStatement},
		{"a duplicate", `INSERT INTO half_a (id) VALUES ('x'), ('x')`, refset.ErrDuplicate},
	}
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		_, err := b.migrator(t, schema.Config{}).Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		before, versions := b.tables(t), recorded(t, b.raw)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				_, err := b.migrator(t, files(c.second)).Migrate(ctx, schema.DirectionUp, nil)
				require.ErrorIs(t, err, c.is)
				assert.Contains(t, err.Error(), "half 0002_b.sql")
				assert.Equal(t, before, b.tables(t), "nothing half applied")
				assert.Equal(t, versions, recorded(t, b.raw))
			})
		}
		res, err := b.migrator(t, files(`INSERT INTO half_a (id) VALUES ('x')`)).Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		assert.Equal(t, "half 0 -> 2", res.String())
		assert.Subset(t, b.tables(t), []string{"half_a", "half_b", "half_c"})
	})
}

// A folder of migrations that cannot work is refused by New, with
// refset.ErrInvalidConfig and a message naming the file, before anything runs: down
// files included, which would otherwise fail only when an operator needs them. A
// gap in the versions, and a migration of nothing but a comment, are fine.
func TestNewRefusesMalformedFiles(t *testing.T) {
	create := sqlFile(`CREATE TABLE m_a (id TEXT PRIMARY KEY)`)
	drop := sqlFile(`DROP TABLE m_a`)
	cases := []struct {
		name  string
		files fstest.MapFS
		says  string // in the error; "" for none
	}{
		{"two ups of a version", fstest.MapFS{"0001_a.sql": create, "01_b.sql": create}, "two migrations of version 1"},
		{"two downs of a version", fstest.MapFS{"0001_a.sql": create, "0001_a.down.sql": drop, "1_b.down.sql": drop},
			"two migrations of version 1: 0001_a.down.sql and 1_b.down.sql"},
		{"a down without its up", fstest.MapFS{"0001_a.sql": create, "0002_b.down.sql": drop}, "0002_b.down.sql undoes version 2"},
		{"an empty file", fstest.MapFS{"0001_a.sql": create, "0002_b.sql": sqlFile("")}, "0002_b.sql is empty"},
		{"white space", fstest.MapFS{"0001_a.sql": create, "0002_b.sql": sqlFile(" \n\t\n")}, "0002_b.sql is empty"},
		{"an empty down", fstest.MapFS{"0001_a.sql": create, "0001_a.down.sql": sqlFile("\n")}, "0001_a.down.sql is empty"},
		{"a signed version", fstest.MapFS{"+1_a.sql": create}, "bad migration file name +1_a.sql"},
		{"a timestamp version", fstest.MapFS{"20240102150405_a.sql": create}, "version 20240102150405 is above 2147483647"},
		{"a version beyond the record", fstest.MapFS{"2147483648_a.sql": create}, "version 2147483648 is above 2147483647"},
		{"a folder", fstest.MapFS{"0001_a.sql": create, "0002_b.sql/x": create}, "bad migration file name 0002_b.sql"},
		{"only downs", fstest.MapFS{"0001_a.down.sql": drop}, "no migrations"},
		{"a gap", fstest.MapFS{"0001_a.sql": create, "0001_a.down.sql": drop,
			"0003_c.sql": sqlFile(`CREATE TABLE m_c (id TEXT PRIMARY KEY)`), "0003_c.down.sql": sqlFile(`DROP TABLE m_c`)}, ""},
		{"a comment", fstest.MapFS{"0001_a.sql": sqlFile("-- nothing to do in this dialect\n")}, ""},
		{"the largest version", fstest.MapFS{"2147483647_a.sql": create, "2147483647_a.down.sql": drop}, ""},
	}
	type malformedCase = struct {
		name  string
		files fstest.MapFS
		says  string
	}
	forEach(t, cases, func(c malformedCase) string { return c.name }, func(t *testing.T, c malformedCase, b backend, _ *schema.Migrator) {
		ctx := t.Context()
		before := b.tables(t)
		m, err := schema.New(b.db, schema.Config{Components: []schema.Component{{Name: "m", Migrations: c.files}}})
		if c.says != "" {
			require.ErrorIs(t, err, refset.ErrInvalidConfig)
			assert.ErrorContains(t, err, c.says)
			assert.ErrorContains(t, err, `component "m"`)
			assert.Equal(t, before, b.tables(t), "nothing changed")
			return
		}
		require.NoError(t, err)
		_, err = m.Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		require.NoError(t, m.Validate(ctx))
		_, err = m.Migrate(ctx, schema.DirectionDown, &schema.MigrateOpts{Component: "m", TargetVersion: -1})
		if c.name == "a comment" {
			require.ErrorIs(t, err, refset.ErrInvalidConfig, "no down file")
			_, err = b.raw.ExecContext(ctx, `DELETE FROM refset_schema_version WHERE component = 'm'`)
		}
		require.NoError(t, err)
		assert.Zero(t, recorded(t, b.raw)["m"])
		assert.NotContains(t, b.tables(t), "m_a")
		assert.NotContains(t, b.tables(t), "m_c")
	})
}

// A component whose versions have gaps (a release dropped a migration; the custody
// example's tables skip 4 and 5) goes down as it went up: by its migrations, each
// undone with its down file, MaxSteps counting migrations and not numbers, and a
// down to 0 undoes them all. It used to ask for the down file of every number below
// its version, and refused with ErrInvalidConfig for a version that never was.
func TestDownAcrossGaps(t *testing.T) {
	files := fstest.MapFS{}
	for _, v := range []int{1, 2, 5, 6} {
		files[fmt.Sprintf("%04d_t.sql", v)] = sqlFile(fmt.Sprintf(`CREATE TABLE gap_%d (id TEXT PRIMARY KEY)`, v))
		files[fmt.Sprintf("%04d_t.down.sql", v)] = sqlFile(fmt.Sprintf(`DROP TABLE gap_%d`, v))
	}
	cfg := schema.Config{Components: []schema.Component{{Name: "gaps", Migrations: files}}}
	type step struct {
		direction schema.Direction
		opts      schema.MigrateOpts
		want      string   // the result's String
		ran       []string // its versions' files
		tables    []int    // the gap_ tables afterwards
	}
	type gapCase struct {
		name  string
		steps []step
	}
	cases := []gapCase{
		{"to 0", []step{
			{schema.DirectionDown, schema.MigrateOpts{TargetVersion: -1}, "gaps 6 -> 0",
				[]string{"0006_t.down.sql", "0005_t.down.sql", "0002_t.down.sql", "0001_t.down.sql"}, nil},
			{schema.DirectionUp, schema.MigrateOpts{}, "gaps 0 -> 6", []string{"0001_t.sql", "0002_t.sql", "0005_t.sql", "0006_t.sql"}, []int{1, 2, 5, 6}},
		}},
		{"a step at a time", []step{
			{schema.DirectionDown, schema.MigrateOpts{}, "gaps 6 -> 5", []string{"0006_t.down.sql"}, []int{1, 2, 5}},
			{schema.DirectionDown, schema.MigrateOpts{}, "gaps 5 -> 2", []string{"0005_t.down.sql"}, []int{1, 2}},
			{schema.DirectionUp, schema.MigrateOpts{MaxSteps: 1}, "gaps 2 -> 5", []string{"0005_t.sql"}, []int{1, 2, 5}},
		}},
		{"steps across the gap", []step{
			{schema.DirectionDown, schema.MigrateOpts{MaxSteps: 3}, "gaps 6 -> 1",
				[]string{"0006_t.down.sql", "0005_t.down.sql", "0002_t.down.sql"}, []int{1}},
		}},
		{"to a target in the gap", []step{
			{schema.DirectionDown, schema.MigrateOpts{TargetVersion: 4}, "gaps 6 -> 4",
				[]string{"0006_t.down.sql", "0005_t.down.sql"}, []int{1, 2}},
			{schema.DirectionDown, schema.MigrateOpts{TargetVersion: 3}, "", nil, []int{1, 2}},
			{schema.DirectionDown, schema.MigrateOpts{}, "gaps 4 -> 1", []string{"0002_t.down.sql"}, []int{1}},
			{schema.DirectionUp, schema.MigrateOpts{}, "gaps 1 -> 6", []string{"0002_t.sql", "0005_t.sql", "0006_t.sql"}, []int{1, 2, 5, 6}},
		}},
	}
	forEach(t, cases, func(c gapCase) string { return c.name }, func(t *testing.T, c gapCase, b backend, _ *schema.Migrator) {
		ctx := t.Context()
		m := b.migrator(t, cfg)
		_, err := m.Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		for i, s := range c.steps {
			s.opts.Component = "gaps"
			for _, dry := range []bool{true, false} {
				s.opts.DryRun = dry
				res, err := m.Migrate(ctx, s.direction, &s.opts)
				require.NoError(t, err, "step %d, dry run %v", i, dry)
				assert.Equal(t, s.want, res.String(), "step %d, dry run %v", i, dry)
				var ran []string
				for _, st := range res.Steps {
					for _, v := range st.Versions {
						ran = append(ran, v.Name)
					}
				}
				assert.Equal(t, s.ran, ran, "step %d, dry run %v", i, dry)
			}
			var tables []int
			for _, v := range []int{1, 2, 5, 6} {
				for _, name := range b.tables(t) {
					if name == fmt.Sprintf("gap_%d", v) {
						tables = append(tables, v)
					}
				}
			}
			assert.Equal(t, s.tables, tables, "step %d", i)
		}
		_, err = m.Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		require.NoError(t, m.Validate(ctx), "up to date at the end")
		assert.Subset(t, b.tables(t), []string{"gap_1", "gap_2", "gap_5", "gap_6"})
	})
}

// A database migrated by a newer release of the program (a version this one does not
// know): this one's Validate and Migrate up take it as up to date, change nothing and
// never lower the record; a down migration from there, which only the newer release
// has the files for, is refused with refset.ErrSchema saying so, changing nothing.
func TestNewerDatabase(t *testing.T) {
	newer := schema.Component{Name: "things", Migrations: fstest.MapFS{
		"0001_a.sql":      sqlFile(`CREATE TABLE things_a (id TEXT PRIMARY KEY)`),
		"0001_a.down.sql": sqlFile(`DROP TABLE things_a`),
		"0002_b.sql":      sqlFile(`CREATE TABLE things_b (id TEXT PRIMARY KEY)`),
		"0002_b.down.sql": sqlFile(`DROP TABLE things_b`),
		"0003_c.sql":      sqlFile(`CREATE TABLE things_c (id TEXT PRIMARY KEY)`),
		"0003_c.down.sql": sqlFile(`DROP TABLE things_c`),
	}}
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		_, err := b.migrator(t, schema.Config{Components: []schema.Component{newer}, Sets: []schema.Set{{Table: "items"}}}).
			Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		// A newer refset too, whose core is at a version this one does not know.
		_, err = b.raw.ExecContext(ctx, `UPDATE refset_schema_version SET version = 3 WHERE component = 'core'`)
		require.NoError(t, err)
		before, versions := b.tables(t), recorded(t, b.raw)
		old := b.migrator(t, schema.Config{Components: []schema.Component{things}, Sets: []schema.Set{{Table: "items"}}})

		require.NoError(t, old.Validate(ctx))
		for _, opts := range []*schema.MigrateOpts{nil, {Component: "things"}, {Component: "things", TargetVersion: 2}, {Component: "core", MaxSteps: 1}} {
			res, err := old.Migrate(ctx, schema.DirectionUp, opts)
			require.NoError(t, err)
			assert.Empty(t, res.Steps)
		}
		for _, c := range []struct {
			opts schema.MigrateOpts
			says string
		}{
			{schema.MigrateOpts{Component: "things"}, "things is at version 3, which this program does not know (its latest is 2)"},
			{schema.MigrateOpts{Component: "things", TargetVersion: -1}, "things is at version 3"},
			{schema.MigrateOpts{Component: "things", TargetVersion: 2}, "things is at version 3"},
			{schema.MigrateOpts{Component: "core", TargetVersion: 1}, "core is at version 3"},
		} {
			for _, dry := range []bool{false, true} {
				c.opts.DryRun = dry
				_, err := old.Migrate(ctx, schema.DirectionDown, &c.opts)
				require.ErrorIs(t, err, refset.ErrSchema, "%+v", c.opts)
				assert.ErrorContains(t, err, c.says)
			}
		}
		res, err := old.Migrate(ctx, schema.DirectionDown, &schema.MigrateOpts{Component: "things", TargetVersion: 3})
		require.NoError(t, err)
		assert.Empty(t, res.Steps, "at the target already")
		assert.Equal(t, before, b.tables(t), "nothing changed")
		assert.Equal(t, versions, recorded(t, b.raw), "the record is as the newer release left it")
	})
}

// Limits at the ends of their range: those that cannot work are refused with
// refset.ErrInvalidConfig, changing nothing; those that can (as many steps as an int
// holds) work.
func TestMigrateOptsOutOfRange(t *testing.T) {
	up, down := schema.DirectionUp, schema.DirectionDown
	cases := []struct {
		name      string
		direction schema.Direction
		opts      schema.MigrateOpts
		refused   bool
		want      string // the result, when it works
	}{
		{name: "up to the largest int", direction: up, opts: schema.MigrateOpts{Component: "things", TargetVersion: math.MaxInt}, refused: true},
		{name: "up to the smallest int", direction: up, opts: schema.MigrateOpts{Component: "things", TargetVersion: math.MinInt}, refused: true},
		{name: "down to the largest int", direction: down, opts: schema.MigrateOpts{Component: "things", TargetVersion: math.MaxInt}, refused: true},
		{name: "down to the smallest int", direction: down, opts: schema.MigrateOpts{Component: "things", TargetVersion: math.MinInt}, refused: true},
		{name: "the fewest steps down", direction: down, opts: schema.MigrateOpts{Component: "things", MaxSteps: math.MinInt}, refused: true},
		{name: "the fewest steps up", direction: up, opts: schema.MigrateOpts{Component: "things", MaxSteps: math.MinInt}, refused: true},
		{name: "steps of everything", direction: up, opts: schema.MigrateOpts{MaxSteps: math.MaxInt}, refused: true},
		{name: "the most steps up", direction: up, opts: schema.MigrateOpts{Component: "things", MaxSteps: math.MaxInt}},
		{name: "the most steps down", direction: down, opts: schema.MigrateOpts{Component: "things", MaxSteps: math.MaxInt}, want: "things 2 -> 0"},
		{name: "the most steps down to 1", direction: down, opts: schema.MigrateOpts{Component: "things", MaxSteps: math.MaxInt, TargetVersion: 1},
			want: "things 2 -> 1"},
	}
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		m := b.migrator(t, full)
		_, err := m.Migrate(ctx, up, nil)
		require.NoError(t, err)
		before, versions := b.tables(t), recorded(t, b.raw)
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				for _, dry := range []bool{true, false} {
					c.opts.DryRun = dry
					res, err := m.Migrate(ctx, c.direction, &c.opts)
					if c.refused {
						require.ErrorIs(t, err, refset.ErrInvalidConfig, "dry run %v", dry)
						assert.Equal(t, before, b.tables(t), "nothing changed")
						assert.Equal(t, versions, recorded(t, b.raw), "nothing recorded")
						continue
					}
					require.NoError(t, err, "dry run %v", dry)
					assert.Equal(t, c.want, res.String(), "dry run %v", dry)
				}
				if c.want != "" { // back up for the next case
					_, err := m.Migrate(ctx, up, nil)
					require.NoError(t, err)
				}
			})
		}
	})
}

// A Migrator whose database was closed fails, with refset.ErrClosed, whatever it is
// asked; it does not panic or wait.
func TestMigrateOnAClosedDatabase(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		m := b.migrator(t, full)
		_, err := m.Migrate(ctx, schema.DirectionUp, &schema.MigrateOpts{Component: "things"})
		require.NoError(t, err)
		require.NoError(t, b.db.(io.Closer).Close())
		for _, c := range []struct {
			direction schema.Direction
			opts      *schema.MigrateOpts
		}{
			{schema.DirectionUp, nil},
			{schema.DirectionUp, &schema.MigrateOpts{DryRun: true}},
			{schema.DirectionDown, &schema.MigrateOpts{Component: "things"}},
			{schema.DirectionDown, &schema.MigrateOpts{Component: "things", DryRun: true}},
		} {
			_, err := m.Migrate(ctx, c.direction, c.opts)
			require.ErrorIs(t, err, refset.ErrClosed, "%s %+v", c.direction, c.opts)
		}
		require.ErrorIs(t, m.Validate(ctx), refset.ErrClosed)
		_, err = schema.New(b.db, full)
		require.NoError(t, err, "New reads no database")
	})
}

// The script of a dry run runs as Migrate would, also when a migration's last line is
// a comment after a statement with no semicolon: the script's semicolon used to land
// in the comment, and the record of the version ran into the migration, a syntax
// error for the DBA.
func TestDryRunScriptOfCommentedMigrations(t *testing.T) {
	cfg := schema.Config{Components: []schema.Component{{Name: "commented", Migrations: fstest.MapFS{
		"0001_a.sql":      sqlFile("CREATE TABLE commented_a (id TEXT PRIMARY KEY) -- the first table\n"),
		"0001_a.down.sql": sqlFile("DROP TABLE commented_a /* and its rows */"),
		"0002_b.sql":      sqlFile("CREATE TABLE commented_b (id TEXT PRIMARY KEY); -- the second\n"),
		"0002_b.down.sql": sqlFile("DROP TABLE commented_b\n-- and its rows"),
		"0003_c.sql":      sqlFile("-- nothing to do in this dialect"),
		"0003_c.down.sql": sqlFile("-- nothing to undo"),
	}}}}
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		m := b.migrator(t, cfg)
		runDryRun(t, b, m, schema.DirectionUp, schema.MigrateOpts{}, "core 0 -> 2, commented 0 -> 3")
		require.NoError(t, m.Validate(ctx))
		assert.Subset(t, b.tables(t), []string{"commented_a", "commented_b"})
		runDryRun(t, b, m, schema.DirectionDown, schema.MigrateOpts{Component: "commented", TargetVersion: -1}, "commented 3 -> 0")
		assert.NotContains(t, b.tables(t), "commented_a")
		assert.NotContains(t, b.tables(t), "commented_b")
		assert.Zero(t, recorded(t, b.raw)["commented"])
	})
}

// A set refset recorded with one holds table is not moved to another by a Migrate
// naming it (schema.Set.HoldsTable): the holds in the recorded one would be left to
// nobody. The Migrate, dry or not, fails with refset.ErrInvalidConfig naming the
// recorded table and changes nothing; HoldsTable "" or the recorded name migrate.
func TestSetKeepsItsHoldsTable(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		_, err := b.migrator(t, schema.Config{Sets: []schema.Set{{Table: "items", HoldsTable: "items_kept"}}}).
			Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		before, versions := b.tables(t), recorded(t, b.raw)

		for _, holds := range []string{"items_holds", "elsewhere"} {
			for _, dry := range []bool{false, true} {
				_, err := b.migrator(t, schema.Config{Sets: []schema.Set{{Table: "items", HoldsTable: holds}}}).
					Migrate(ctx, schema.DirectionUp, &schema.MigrateOpts{DryRun: dry})
				require.ErrorIs(t, err, refset.ErrInvalidConfig, "%s, dry run %v", holds, dry)
				assert.ErrorContains(t, err, "items_kept")
			}
		}
		assert.Equal(t, before, b.tables(t), "nothing changed")
		assert.Equal(t, versions, recorded(t, b.raw))
		for _, holds := range []string{"", "items_kept"} {
			_, err := b.migrator(t, schema.Config{Sets: []schema.Set{{Table: "items", HoldsTable: holds}}}).
				Migrate(ctx, schema.DirectionUp, nil)
			require.NoError(t, err, "HoldsTable %q", holds)
		}
		assert.Equal(t, before, b.tables(t))
	})
}

// setIndexes are the columns of each index but primary keys on a set's holds table
// and review queue, by index name, as the database's catalog has them.
func setIndexes(t *testing.T, b backend, holds, queue string) map[string]string {
	t.Helper()
	query := `SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() AND tablename IN ($1, $2) AND indexname NOT LIKE '%pkey'`
	if b.db.Driver().Name() == "sqlite" {
		query = `SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name IN (?, ?) AND sql IS NOT NULL`
	}
	rows, err := b.raw.QueryContext(t.Context(), query, holds, queue)
	require.NoError(t, err)
	defer rows.Close()
	got := map[string]string{}
	for rows.Next() {
		var name, def string
		require.NoError(t, rows.Scan(&name, &def))
		_, cols, _ := strings.Cut(def[strings.LastIndex(def, " ON "):], "(")
		got[name], _, _ = strings.Cut(cols, ")")
	}
	require.NoError(t, rows.Err())
	return got
}

// A set whose holds table or review queue has a long name gets its three indexes
// (holds by holder, holds by expiry, the queue by due time) under names the database
// keeps whole. PostgreSQL cuts a name past 63 bytes short, silently: for a table of
// 56 characters (the longest whose review queue's name fits) or a holds table of 62
// or 63 the cut names were one another's or the table's own, and the indexes were
// never made. A set migrated before (version 2) gets what it lacks, and
// its indexes made under cut names are renamed, when it migrates to version 3.
func TestLongSetNames(t *testing.T) {
	cases := []struct {
		table, holds string
	}{
		{table: strings.Repeat("a", 40)},
		{table: strings.Repeat("b", 52)},
		{table: strings.Repeat("c", 56)},
		{table: "e", holds: strings.Repeat("h", 62)},
		{table: "f", holds: strings.Repeat("i", 63)},
	}
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := t.Context()
		postgres := b.db.Driver().Name() == "postgres"
		for _, c := range cases {
			holds := c.holds
			if holds == "" {
				holds = c.table + "_holds"
			}
			queue := c.table + "_review"
			_, err := b.raw.ExecContext(ctx, `CREATE TABLE `+c.table+` (id TEXT PRIMARY KEY)`)
			require.NoError(t, err)
			set := schema.Config{Sets: []schema.Set{{Table: c.table, HoldsTable: c.holds}}}
			want := map[string]string{}
			check := func(when string) {
				t.Helper()
				got := setIndexes(t, b, holds, queue)
				cols := map[string]int{}
				for name, col := range got {
					if postgres {
						assert.LessOrEqual(t, len(name), 63, "%s %s: index %s", c.table, when, name)
					}
					cols[col]++
				}
				assert.Equal(t, map[string]int{"holder": 1, "expires_at": 1, "review_after": 1}, cols,
					"%s %s: each index once: %v", c.table, when, got)
				if len(want) == 0 {
					want = got
				}
				assert.Equal(t, want, got, "%s %s: the same names", c.table, when)
			}

			_, err = b.migrator(t, set).Migrate(ctx, schema.DirectionUp, nil)
			require.NoError(t, err)
			check("made now")
			if !postgres {
				continue // SQLite keeps every name whole: nothing was ever cut
			}

			// As the migrations before version 3 left it: the indexes made under the
			// names PostgreSQL cut (CREATE INDEX IF NOT EXISTS skipping those whose cut
			// name was taken), at version 2.
			_, err = b.migrator(t, set).Migrate(ctx, schema.DirectionDown, &schema.MigrateOpts{Component: "set:" + c.table, TargetVersion: 2})
			require.NoError(t, err)
			for name := range want {
				_, err = b.raw.ExecContext(ctx, `DROP INDEX "`+name+`"`)
				require.NoError(t, err)
			}
			for _, q := range []string{
				`CREATE INDEX IF NOT EXISTS "` + holds + `_holder" ON "` + holds + `" (holder)`,
				`CREATE INDEX IF NOT EXISTS "` + holds + `_expires" ON "` + holds + `" (expires_at) WHERE expires_at IS NOT NULL`,
				`CREATE INDEX IF NOT EXISTS "` + queue + `_due" ON "` + queue + `" (review_after)`,
			} {
				_, err = b.raw.ExecContext(ctx, q)
				require.NoError(t, err)
			}
			t.Logf("%s at version 2: %v", c.table, setIndexes(t, b, holds, queue))
			_, err = b.migrator(t, set).Migrate(ctx, schema.DirectionUp, nil)
			require.NoError(t, err)
			check("migrated from version 2")
		}
	})
}

// pinsRelease is a program's release that adds a holder table of the set items, pins,
// while the program runs (AfterSets: after the set's tables), and whose down undoes it.
var pinsRelease = schema.Config{Components: []schema.Component{{Name: "pins", AfterSets: true, Migrations: fstest.MapFS{
	"0001_pins.sql": sqlFile(`CREATE TABLE pins (id TEXT PRIMARY KEY, item TEXT NOT NULL REFERENCES items (id) ON DELETE RESTRICT);
CREATE INDEX pins_item ON pins (item)`),
	"0001_pins.down.sql": sqlFile(`DROP TABLE pins`),
}}}}

// A migration that adds a table holding a set's objects, and later one that drops it,
// run while collectors of the set run (two, as two replicas) and writers add objects
// and pin some: no collector stops or fails for good, no pinned object is ever
// deleted, and once the writers stop every object nothing holds is collected, those
// the dropped table held included.
func TestMigrateWhileCollectorsRun(t *testing.T) {
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ}, func(t *testing.T, b testdb.Backend) {
		ctx := t.Context()
		db := b.Open(t, testdb.Options{})
		require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
			_, err := tx.ExecContext(ctx, `CREATE TABLE items (id TEXT PRIMARY KEY)`)
			return err
		}))
		_, err := store.NewStore[item, string](ctx, db, store.Config{Table: "items"})
		require.NoError(t, err)
		count := func(q string) int {
			var n int
			require.NoError(t, db.Reader().QueryRowContext(ctx, q).Scan(&n))
			return n
		}

		const grace = 30 * time.Millisecond
		runCtx, stop := context.WithCancel(ctx)
		var runs sync.WaitGroup
		runErrs := make([]error, 2)
		var passErrs sync.Map
		for i := range runErrs {
			on := db
			if b.Postgres {
				on = testdb.PlaceOf(t, db).Open(t, testdb.Options{})
			}
			c, err := cleanup.Install(ctx, on, cleanup.Config{Table: "items", Grace: grace, BatchSize: 7})
			require.NoError(t, err)
			runs.Go(func() {
				runErrs[i] = c.Run(runCtx, 5*time.Millisecond, func(_ cleanup.Stats, err error) {
					if err != nil {
						passErrs.Store(err.Error(), err)
					}
				})
			})
		}

		// Writers add objects; once pins exists, they pin every third, in the
		// transaction that adds it, as a holder would.
		var (
			pinned   sync.Map // id -> true while a pin row holds it
			writers  sync.WaitGroup
			stopping = make(chan struct{})
			writeErr = make([]error, 3)
		)
		for w := range writeErr {
			writers.Go(func() {
				for n := 0; ; n++ {
					select {
					case <-stopping:
						return
					default:
					}
					id := fmt.Sprintf("w%d-%05d", w, n)
					err := refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
						if _, err := tx.ExecContext(ctx, db.Driver().Rebind(`INSERT INTO items (id) VALUES (?)`), id); err != nil {
							return err
						}
						if n%3 != 0 {
							return nil
						}
						_, err := tx.ExecContext(ctx, db.Driver().Rebind(`INSERT INTO pins (id, item) VALUES (?, ?)`), id, id)
						return err
					})
					switch {
					case err == nil:
						if n%3 == 0 {
							pinned.Store(id, true)
						}
					case errors.Is(err, refset.ErrSchema):
						// pins not there (yet, or any more): add the object alone. The
						// set's trigger for new objects works whatever became of pins,
						// before and after a collector installs again.
						err := refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
							_, err := tx.ExecContext(ctx, db.Driver().Rebind(`INSERT INTO items (id) VALUES (?)`), id)
							return err
						})
						if err != nil {
							writeErr[w] = fmt.Errorf("an object alone, pins being gone: %w", err)
							return
						}
					default:
						writeErr[w] = err
						return
					}
					time.Sleep(time.Millisecond)
				}
			})
		}

		time.Sleep(50 * time.Millisecond)
		m, err := schema.New(db, pinsRelease)
		require.NoError(t, err)
		_, err = m.Migrate(ctx, schema.DirectionUp, nil)
		require.NoError(t, err)
		time.Sleep(300 * time.Millisecond)
		// Every pinned object is there, whatever the collectors did meanwhile.
		pinned.Range(func(k, _ any) bool {
			assert.Equal(t, 1, count(fmt.Sprintf(`SELECT count(*) FROM items WHERE id = '%s'`, k)), "pinned %s", k)
			return true
		})
		require.Positive(t, count(`SELECT count(*) FROM pins`))
		_, err = m.Migrate(ctx, schema.DirectionDown, &schema.MigrateOpts{Component: "pins"})
		require.NoError(t, err)
		time.Sleep(100 * time.Millisecond)
		close(stopping)
		writers.Wait()
		for _, err := range writeErr {
			require.NoError(t, err)
		}

		// Once the writers stop, everything goes: nothing holds any object now.
		require.Eventually(t, func() bool { return count(`SELECT count(*) FROM items`) == 0 }, 15*time.Second, 20*time.Millisecond,
			"every object is collected, those the dropped table held included (%d left)", count(`SELECT count(*) FROM items`))
		stop()
		runs.Wait()
		for _, err := range runErrs {
			require.NoError(t, err, "Run stopped before its context ended")
		}
		passErrs.Range(func(k, _ any) bool {
			t.Logf("a pass failed: %s", k)
			return true
		})
	})
}
