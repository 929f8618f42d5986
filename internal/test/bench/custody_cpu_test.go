package bench

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Where a custody payment's CPU goes, on a machine other work shares: the whole
// machine's busy time (cpu-us/cycle, cpu_test.go) counts everyone's, so the custody
// benchmarks also read the CPU time of their own server processes and of their own
// Go process.
//
// Each side tags its connections with an application_name of its own; serverClock
// finds their backends in pg_stat_activity and reads each one's user and system time
// from /proc/<pid>/stat, which works where the server runs on this machine (as the
// benchmarks' server does) and reads as zero, and is not reported, elsewhere.

// withApplicationName is dsn with its connections' application_name set to app.
func withApplicationName(tb testing.TB, dsn, app string) string {
	tb.Helper()
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return dsn + " application_name=" + app
	}
	u, err := url.Parse(dsn)
	must(tb, err)
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// serverClock is the CPU time, when a measurement started, of the backends serving
// connections named app, and of this process.
type serverClock struct {
	db      *sql.DB
	app     string
	backend map[int]time.Duration
	client  time.Duration
}

func startServerClock(tb testing.TB, db *sql.DB, app string) serverClock {
	c := serverClock{db: db, app: app}
	c.backend, c.client = c.read(tb), processCPU()
	return c
}

// read is the CPU time of each backend serving app, by process ID.
func (c serverClock) read(tb testing.TB) map[int]time.Duration {
	tb.Helper()
	rows, err := c.db.QueryContext(context.Background(), `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, c.app)
	must(tb, err)
	defer rows.Close()
	out := map[int]time.Duration{}
	for rows.Next() {
		var pid int
		must(tb, rows.Scan(&pid))
		if cpu, ok := pidCPU(pid); ok {
			out[pid] = cpu
		}
	}
	must(tb, rows.Err())
	return out
}

// report adds server-cpu-us/cycle (the side's backends; one that was not there when
// the clock started counts from zero) and client-cpu-us/cycle (this process).
func (c serverClock) report(b *testing.B, cycles int) {
	client := processCPU() - c.client
	var server time.Duration
	for pid, cpu := range c.read(b) {
		server += cpu - c.backend[pid]
	}
	if server > 0 {
		b.ReportMetric(float64(server.Microseconds())/float64(cycles), "server-cpu-us/cycle")
	}
	b.ReportMetric(float64(client.Microseconds())/float64(cycles), "client-cpu-us/cycle")
}

// pidCPU is a process's user and system time, from /proc/<pid>/stat.
func pidCPU(pid int) (time.Duration, bool) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold spaces: the fields start after it.
	_, rest, ok := bytes.Cut(stat, []byte(") "))
	fields := bytes.Fields(rest)
	if !ok || len(fields) < 13 {
		return 0, false
	}
	const tick = 10 * time.Millisecond // USER_HZ, 100 on every Linux architecture Go supports
	var cpu time.Duration
	for _, f := range fields[11:13] { // utime, stime: fields 14 and 15 of the line
		n, err := strconv.ParseInt(string(f), 10, 64)
		if err != nil {
			return 0, false
		}
		cpu += time.Duration(n) * tick
	}
	return cpu, true
}

// processCPU is this process's user and system time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// statementClock is pg_stat_statements when a measurement started, for
// REFSET_BENCH_CUSTODY_STATEMENTS=1: the statements custody ran meanwhile, by the time
// the server spent executing them, go to the benchmark's log. Connect with
// pg_stat_statements.track=all (a DSN parameter) to see the statements inside
// custody_pay and the clean-up triggers too (the extension must be in schema public).
// Other sessions' statements on the same
// tables count as well: run the benchmark alone.
type statementClock struct {
	db    *sql.DB
	start map[int64]statementStats
}

type statementStats struct {
	calls, blocks, wal int64
	ms                 float64
	query              string
}

func startStatementClock(tb testing.TB, db *sql.DB) *statementClock {
	if os.Getenv("REFSET_BENCH_CUSTODY_STATEMENTS") == "" {
		return nil
	}
	c := &statementClock{db: db}
	c.start = c.read(tb)
	return c
}

func (c *statementClock) read(tb testing.TB) map[int64]statementStats {
	tb.Helper()
	rows, err := c.db.QueryContext(context.Background(), `SELECT queryid, calls, total_exec_time,
		shared_blks_hit + shared_blks_read, wal_records, left(regexp_replace(query, '\s+', ' ', 'g'), 100)
		FROM public.pg_stat_statements WHERE query ~* 'custody|tokens|token_'`)
	must(tb, err)
	defer rows.Close()
	out := map[int64]statementStats{}
	for rows.Next() {
		var id int64
		var s statementStats
		must(tb, rows.Scan(&id, &s.calls, &s.ms, &s.blocks, &s.wal, &s.query))
		out[id] = s
	}
	must(tb, rows.Err())
	return out
}

// log writes the statements run since the clock started, by total time.
func (c *statementClock) log(b *testing.B, cycles int) {
	if c == nil {
		return
	}
	var lines []string
	for id, s := range c.read(b) {
		o := c.start[id]
		if calls := s.calls - o.calls; calls > 0 {
			lines = append(lines, fmt.Sprintf("%10.0f µs/cycle %8d calls %8.1f µs/call %6.1f blocks/call %5.1f wal/call  %s",
				1000*(s.ms-o.ms)/float64(cycles), calls, 1000*(s.ms-o.ms)/float64(calls),
				float64(s.blocks-o.blocks)/float64(calls), float64(s.wal-o.wal)/float64(calls), s.query))
		}
	}
	slices.Sort(lines)
	slices.Reverse(lines)
	b.Logf("statements by server time (pg_stat_statements):\n%s", strings.Join(lines, "\n"))
}
