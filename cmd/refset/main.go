package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
	_ "github.com/refsetdb/refset/store/sqlite/modernc" // modernc.org/sqlite (pure Go)
)

// Exit codes; see the package documentation.
const (
	exitOK       = 0
	exitFindings = 1
	exitError    = 2
)

func main() {
	ctx, stop := interruptible()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// interruptible is the context of a command, which the first interrupt (Ctrl-C)
// cancels, so that the command stops as soon as it can. The interrupt is caught no
// more from then on: a second one ends the process at once, whatever the command
// still waits for.
func interruptible() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}

// command is one subcommand. The flags of its own are declared on fs by setup, which
// returns the function that runs it once the flags are parsed.
type command struct {
	name, args, summary string
	positional          int  // how many arguments besides the flags
	set                 bool // works on one set, named by --table (required)
	json                bool // takes --json, to print its document as JSON instead of text
	// writes changes the database. A command that does not opens a SQLite file
	// read-only, and leaves it as it found it.
	writes bool
	// migrates works on a database without refset's tables, which it creates or
	// describes; every other command refuses one.
	migrates bool
	// serves runs until interrupted, reading all the while (ui).
	serves bool
	setup  func(fs *flag.FlagSet) func(context.Context, call) error
	// check, when not nil, checks the parsed flags before the database is opened, so
	// that a command refused for its flags never connects.
	check func(fs *flag.FlagSet) error
}

// call is what a command runs with: the database, its positional arguments, where it
// prints, and the flags several commands share.
type call struct {
	db   refset.Database
	args []string
	out  io.Writer
	// stderr is where a command that serves (ui) logs what goes wrong meanwhile.
	stderr io.Writer
	table  string // --table, of a command on one set
	json   bool   // --json
}

// errFindings is a command's error when it did its job and found what exit code 1
// reports: leaked objects or dangling references.
var errFindings = errors.New("findings")

// noFlags is the setup of a command that takes no flags of its own.
func noFlags(run func(context.Context, call) error) func(*flag.FlagSet) func(context.Context, call) error {
	return func(*flag.FlagSet) func(context.Context, call) error { return run }
}

var commands = []command{
	{name: "status", json: true, summary: "every set's objects, holds, review queue and objects collected, and the schema versions", setup: statusCommand, check: capCheck},
	{name: "why", args: "ID", positional: 1, set: true, json: true, summary: "every row that keeps object ID of the set on --table alive", setup: noFlags(why)},
	{name: "check", set: true, json: true, summary: "leaked objects and dangling references of the set on --table (exit 1 if any)", setup: noFlags(check)},
	{name: "collect", set: true, writes: true, summary: "delete what nothing references in the set on --table", setup: collectCommand, check: positiveDurations("interval", "grace")},
	{name: "sweep", set: true, writes: true, summary: "queue every object no root reaches in the set on --table, then collect", setup: sweepCommand, check: positiveDurations("grace")},
	{name: "migrate status", json: true, migrates: true, summary: "each component's recorded and available schema version, and what is pending", setup: onSets(migration.status)},
	{name: "migrate up", writes: true, migrates: true, summary: "apply the pending migrations of refset's tables and print what was done", setup: onSets(migration.up)},
	{name: "migrate sql", migrates: true, summary: "print the pending migrations as a SQL script for a DBA, changing nothing", setup: onSets(migration.script)},
	{name: "migrate down", writes: true, migrates: true, summary: "take one component (--component) down to version --target", setup: migrateDownCommand, check: migrateDownCheck},
	{name: "holds ls", set: true, json: true, summary: "list the holds of the set on --table", setup: holdsListCommand},
	{name: "holds rm", set: true, writes: true, summary: "delete the expired holds of the set on --table (by the database's clock)", setup: holdsRemoveCommand},
	{name: "ui", serves: true, summary: "serve the web console, which only reads, on --addr (loopback unless --token)", setup: uiCommand, check: uiCheck},
}

// usage lists the commands whose names start with group ("migrate"), or every
// command when group is "".
func usage(w io.Writer, group string) {
	name := "<command>"
	if group != "" {
		name = group + " <command>"
	}
	fmt.Fprintf(w, "Usage: refset %s [flags]\n\nCommands:\n", name)
	for _, c := range commands {
		if g, _, _ := strings.Cut(c.name, " "); group == "" || g == group {
			fmt.Fprintf(w, "  %-15s %s\n", c.name, c.summary)
		}
	}
	fmt.Fprintf(w, "\nrefset %s -h shows a command's flags.\n"+
		"Exit codes: 0 success (and ui stopped by an interrupt), 1 check found leaked or dangling objects, "+
		"2 usage, connection or database error, an interrupt, or output that could not be written.\n", name)
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// run is the whole program but for the process: it returns the exit code. Every
// command prints through one output, so that a write that failed (a full disk, a
// closed pipe), whichever print met it, fails the command.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	out := &output{w: stdout}
	code := runCommand(ctx, args, out, stderr)
	if out.err != nil {
		fmt.Fprintf(stderr, "refset: writing the output: %v\n", out.err)
		return exitError
	}
	return code
}

// output is a command's standard output, which keeps the error of the first write
// that failed; the writes after it write nothing.
type output struct {
	w   io.Writer
	err error
}

func (o *output) Write(p []byte) (int, error) {
	if o.err != nil {
		return 0, o.err
	}
	n, err := o.w.Write(p)
	o.err = err
	return n, err
}

// runCommand is run, printing to stdout.
func runCommand(ctx context.Context, args []string, stdout *output, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr, "")
		return exitError
	}
	if isHelp(args[0]) {
		usage(stdout, "")
		return exitOK
	}
	cmd, words := lookup(args)
	if cmd == nil {
		subs := subcommands(args[0])
		switch {
		case len(subs) > 0 && len(args) > 1 && isHelp(args[1]):
			usage(stdout, args[0])
			return exitOK
		case len(subs) > 0:
			fmt.Fprintf(stderr, "refset %s: want one of %s\n\n", args[0], strings.Join(subs, ", "))
			usage(stderr, args[0])
		default:
			fmt.Fprintf(stderr, "refset: unknown command %q\n\n", args[0])
			usage(stderr, "")
		}
		return exitError
	}

	fs := flag.NewFlagSet("refset "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // usage goes to stdout on -h, to stderr after an error
	dbFlag := fs.String("db", "", "a SQLite file path or file: URL, or a PostgreSQL DSN (postgres://... or key=value ...)")
	driverFlag := fs.String("driver", "", "the Postgres driver: postgres (lib/pq, the default) or pgx")
	replicaFlag := fs.String("replica", "", "a DSN of a hot standby of the --db PostgreSQL, where status, why and check read once it has replayed the latest writes")
	unpreparedFlag := fs.Bool("unprepared", false, "prepare no statements on the PostgreSQL --db: needed behind a pooler in transaction mode, such as PgBouncer before 1.21")
	var c call
	if cmd.set {
		fs.StringVar(&c.table, "table", "", "the set's object table (required)")
	}
	if cmd.json {
		fs.BoolVar(&c.json, "json", false, "print JSON")
	}
	exec := cmd.setup(fs)
	cmdUsage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: refset %s [flags]%s\n\n%s.\n\nFlags:\n", cmd.name, strings.TrimRight(" "+cmd.args, " "), cmd.summary)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	pos, err := parse(fs, args[words:])
	if errors.Is(err, flag.ErrHelp) {
		cmdUsage(stdout)
		return exitOK
	}
	if err == nil && len(pos) != cmd.positional {
		err = fmt.Errorf("want %d argument(s) (%s), got %d: %q", cmd.positional, cmd.args, len(pos), pos)
	}
	if err == nil && *dbFlag == "" {
		err = errors.New("--db is required")
	}
	if err == nil && cmd.set && c.table == "" {
		err = errors.New("--table is required")
	}
	if err == nil && cmd.check != nil {
		err = cmd.check(fs)
	}
	if err != nil {
		fmt.Fprintf(stderr, "refset %s: %v\n\n", cmd.name, err)
		cmdUsage(stderr)
		return exitError
	}

	conn := connection{dsn: *dbFlag, driver: *driverFlag, replica: *replicaFlag, unprepared: *unpreparedFlag,
		readOnly: !cmd.writes, lockless: !cmd.writes && !cmd.serves, notices: stderr}
	fail := func(err error) int {
		if stdout.err != nil && errors.Is(err, stdout.err) {
			return exitError // run says that the output failed
		}
		fmt.Fprintf(stderr, "refset %s: %s\n", cmd.name, escapeControls(explain(ctx, err, cmd, conn).Error()))
		return exitError
	}
	db, err := open(ctx, conn)
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	if !cmd.migrates {
		if err := hasSchema(ctx, db); err != nil {
			return fail(err)
		}
	}
	c.db, c.args, c.out, c.stderr = db, pos, stdout, stderr
	if cmd.set {
		if c.table, err = registeredTable(ctx, db, c.table); err != nil {
			return fail(err)
		}
	}
	switch err := exec(ctx, c); {
	case errors.Is(err, errFindings):
		return exitFindings
	case err != nil:
		return fail(err)
	}
	return exitOK
}

// errNoSchema is the error of a command on a database without refset's tables.
var errNoSchema = fmt.Errorf("%w: no refset tables (refset_sets) in this database: no store was built on it "+
	"(refset migrate up creates them)", refset.ErrNotFound)

// hasSchema refuses a database without refset's tables, which every command but
// migrate's needs: no store was built on it, or --db names another database.
func hasSchema(ctx context.Context, db refset.Database) error {
	has, err := db.Driver().SchemaSQL().HasSetTable(ctx, db.Reader())
	if err != nil {
		return db.TranslateError(err, "")
	}
	if !has {
		return errNoSchema
	}
	return nil
}

// lookup finds the command args start with, a name of one word (status) or two
// (migrate up), and how many arguments its name took.
func lookup(args []string) (*command, int) {
	for i := range commands {
		words := strings.Fields(commands[i].name)
		if len(args) >= len(words) && slices.Equal(args[:len(words)], words) {
			return &commands[i], len(words)
		}
	}
	return nil, 0
}

// subcommands are the second words of the commands named group (migrate: status,
// up, ...), none if group is no group.
func subcommands(group string) []string {
	var subs []string
	for _, c := range commands {
		if g, sub, ok := strings.Cut(c.name, " "); ok && g == group {
			subs = append(subs, sub)
		}
	}
	return subs
}

// parse parses flags wherever they stand among the arguments (refset why ID --table
// T), which flag.FlagSet alone stops at the first argument to do; after "--" every
// argument is positional.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// registeredTable is the object table of the set that name names, as its store
// registered it, so that --table takes the table with its schema or without
// (public.notes for a set on notes, or notes for one on public.notes, on Postgres;
// main.notes on SQLite). A name that no registered set's table resolves to is
// returned as it is, but for SQLite's main, which it drops; one that differs from a
// set's table only by case is refused, naming that table (refset.ErrNotFound).
func registeredTable(ctx context.Context, db refset.Database, name string) (string, error) {
	given, err := sqlident.Parse(name, true)
	if err != nil {
		return "", err
	}
	d, q := db.Driver(), db.Reader()
	has, err := d.SchemaSQL().HasSetTable(ctx, q)
	if err != nil {
		return "", db.TranslateError(err, "")
	}
	var tables []string
	if has {
		if tables, err = d.SchemaSQL().SetTables(ctx, q); err != nil {
			return "", db.TranslateError(err, "")
		}
	}
	table := resolveTable(ctx, d, q, given, tables)
	if slices.Contains(tables, table) {
		return table, nil
	}
	// refset quotes the names it registered, so a set's table is named in its case,
	// though SQLite compares names without it and Postgres folds an unquoted one to
	// lower case: a name that differs only by case means that table, most likely,
	// and is refused saying so, not taken for a table no store registered.
	for _, t := range tables {
		if strings.EqualFold(t, table) || strings.EqualFold(t, name) {
			return "", fmt.Errorf("%w: no set on table %s; the set on %s differs only by case, and --table names a table "+
				"as its store registered it", refset.ErrNotFound, name, t)
		}
	}
	return table, nil
}

// resolveTable is the table among tables, the sets' as their stores registered
// them, that given names, with its schema or without: given as it is (less SQLite's
// main) when none.
func resolveTable(ctx context.Context, d refsetdriver.Driver, q refset.Querier, given sqlident.Ident, tables []string) string {
	if slices.Contains(tables, given.String()) {
		return given.String()
	}
	want, err := d.Qualify(ctx, q, given)
	if err != nil {
		return given.String() // no such table: the command says so
	}
	for _, t := range tables {
		id, err := sqlident.Parse(t, true)
		if err != nil {
			continue
		}
		if got, err := d.Qualify(ctx, q, id); err == nil && got == want {
			return t
		}
	}
	if want.Schema == "" && given.Schema != "" {
		return want.String()
	}
	return given.String()
}

// inspect is a collector of the set on --table that installs nothing (cleanup.Inspect).
func (c call) inspect(ctx context.Context) (*cleanup.Collector, error) {
	return cleanup.Inspect(ctx, c.db, cleanup.Config{Table: c.table})
}

// document is what a command that takes --json prints: itself as JSON, or its text.
type document interface{ text(out io.Writer) error }

func (c call) print(doc document) error {
	if !c.json {
		return doc.text(c.out)
	}
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// newTable is a tabwriter for a table with a header row of columns.
func newTable(out io.Writer, columns ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(columns, "\t"))
	return tw
}

// The JSON documents the commands print: their field names are the command's
// interface, kept apart from the Go types they are read from.
type (
	statusJSON struct {
		Now      time.Time     `json:"now"`
		Sets     []setJSON     `json:"sets"`
		Versions []versionJSON `json:"schema_versions"`
		cap      int64         // --cap, for the text's legend
	}
	setJSON struct {
		Table           string     `json:"table"`
		UndeclaredParts []string   `json:"undeclared_parts,omitempty"`
		Objects         int64      `json:"objects"`
		HoldsLive       int64      `json:"holds_live"`
		HoldsExpired    int64      `json:"holds_expired"`
		Queued          int64      `json:"queued"`
		Overdue         int64      `json:"overdue"`
		OldestDue       *time.Time `json:"oldest_due"` // null when the queue is empty
		Collected       int64      `json:"collected"`
		// Inexact names the counts above that are not counts of every row: "estimate"
		// (the database's, from its statistics) or "more_than" (a lower bound).
		Inexact map[string]string `json:"inexact,omitempty"`
	}
	versionJSON struct {
		Component string `json:"component"`
		Version   int    `json:"version"`
	}
	whyJSON struct {
		Table   string       `json:"table"`
		ID      stored       `json:"id"`
		Holders []holderJSON `json:"holders"` // empty: the object is garbage
		// Queued says the clean-up queue has an entry for the object: clean-up
		// reviews it once it is due, and deletes it if nothing holds it then.
		Queued bool `json:"queued"`
		// Leaked is garbage that is not queued: clean-up never finds it, and only
		// a sweep deletes it.
		Leaked bool `json:"leaked"`
		// MissingIndexes are the CREATE INDEX statements that clean-up needs before
		// it collects again; why answers without them.
		MissingIndexes []string `json:"missing_indexes,omitempty"`
	}
	holderJSON struct {
		Table  string `json:"table"`  // an identifier, as sqlident checks it
		Column string `json:"column"` // an identifier
		Key    stored `json:"key"`
	}
	checkJSON struct {
		Table          string   `json:"table"`
		OK             bool     `json:"ok"`
		Leaked         int64    `json:"leaked"`
		Dangling       int64    `json:"dangling"`
		Samples        []stored `json:"samples"`
		MissingIndexes []string `json:"missing_indexes,omitempty"`
		// UndeclaredParts are keys ON DELETE CASCADE to the set from tables its
		// program did not declare as parts (cleanup.Config.Parts).
		UndeclaredParts []string `json:"undeclared_parts,omitempty"`
	}
)

// capFlag declares --cap, the rows each count of status and ui reads at most in a
// table (cleanup.StatusOptions.Cap).
func capFlag(fs *flag.FlagSet) *int64 {
	return fs.Int64("cap", cleanup.DefaultCountCap, "the rows each count reads at most in a table; past them it is the database's estimate")
}

// capCheck refuses, before the database is opened, a --cap that is not positive.
func capCheck(fs *flag.FlagSet) error {
	if n, _ := fs.Lookup("cap").Value.(flag.Getter).Get().(int64); n <= 0 {
		return fmt.Errorf("%w: --cap must be positive", refset.ErrInvalidConfig)
	}
	return nil
}

// positiveDurations refuses, before the database is opened, a duration flag among
// names given and not positive (refset.ErrInvalidConfig): a flag left out keeps its
// default.
func positiveDurations(names ...string) func(fs *flag.FlagSet) error {
	return func(fs *flag.FlagSet) error {
		var err error
		fs.Visit(func(f *flag.Flag) {
			if d, ok := f.Value.(flag.Getter).Get().(time.Duration); ok && err == nil && slices.Contains(names, f.Name) && d <= 0 {
				err = fmt.Errorf("%w: --%s must be positive", refset.ErrInvalidConfig, f.Name)
			}
		})
		return err
	}
}

// statusCommand prints cleanup.StatusWith's report: counts that stop at --cap rows
// of a table, or, with --exact, that read every table whole.
func statusCommand(fs *flag.FlagSet) func(context.Context, call) error {
	exact := fs.Bool("exact", false, "count every row of every table: reads each table whole, a cost that follows the size of the sets")
	limit := capFlag(fs)
	return func(ctx context.Context, c call) error {
		s, err := cleanup.StatusWith(ctx, c.db, cleanup.StatusOptions{Cap: *limit, Exact: *exact})
		if err != nil {
			return err
		}
		doc := statusJSON{Now: s.Now, Sets: []setJSON{}, Versions: []versionJSON{}, cap: *limit}
		for _, st := range s.Sets {
			j := setJSON{Table: st.Table, Objects: st.Objects.N, HoldsLive: st.HoldsLive.N, HoldsExpired: st.HoldsExpired.N,
				Queued: st.Queued.N, Overdue: st.Overdue.N, Collected: st.Collected, UndeclaredParts: st.UndeclaredParts}
			for name, n := range map[string]cleanup.Count{"objects": st.Objects, "holds_live": st.HoldsLive,
				"holds_expired": st.HoldsExpired, "queued": st.Queued, "overdue": st.Overdue} {
				if !n.Exact() {
					if j.Inexact == nil {
						j.Inexact = map[string]string{}
					}
					j.Inexact[name] = inexactJSON[n.Accuracy]
				}
			}
			if !st.OldestDue.IsZero() {
				j.OldestDue = &st.OldestDue
			}
			doc.Sets = append(doc.Sets, j)
		}
		for _, v := range s.Versions {
			doc.Versions = append(doc.Versions, versionJSON{Component: v.Component, Version: v.Version})
		}
		return c.print(doc)
	}
}

// inexactJSON is what setJSON.Inexact says of a count that is not exact.
var inexactJSON = map[cleanup.Accuracy]string{cleanup.Estimated: "estimate", cleanup.MoreThan: "more_than"}

// count is the count of field, as the text prints it (cleanup.Count's String).
func (st setJSON) count(field string, n int64) string {
	c := cleanup.Count{N: n}
	for a, name := range inexactJSON {
		if st.Inexact[field] == name {
			c.Accuracy = a
		}
	}
	return c.String()
}

func (doc statusJSON) text(out io.Writer) error {
	fmt.Fprintf(out, "database clock %s\n\n", doc.Now.Format(time.RFC3339))
	tw := newTable(out, "SET", "OBJECTS", "HOLDS LIVE", "HOLDS EXPIRED", "QUEUED", "OVERDUE", "OLDEST DUE", "COLLECTED")
	inexact := false
	for _, st := range doc.Sets {
		oldest := "-"
		if st.OldestDue != nil {
			oldest = st.OldestDue.Format(time.RFC3339)
			if lag := doc.Now.Sub(*st.OldestDue); lag > 0 {
				oldest += fmt.Sprintf(" (%s ago)", lag.Round(time.Second))
			}
		}
		inexact = inexact || len(st.Inexact) > 0
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", st.Table, st.count("objects", st.Objects), st.count("holds_live", st.HoldsLive),
			st.count("holds_expired", st.HoldsExpired), st.count("queued", st.Queued), st.count("overdue", st.Overdue), oldest, st.Collected)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if inexact {
		fmt.Fprintf(out, "\n~N: about N rows, the database's estimate from its statistics; >N: more than N rows, where it has none.\n"+
			"Each count reads at most %d rows of a table (--cap); --exact counts every row, reading each table whole.\n", doc.cap)
	}
	for _, st := range doc.Sets {
		warnParts(out, st.Table, st.UndeclaredParts)
	}
	fmt.Fprintf(out, "\nschema versions\n")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, v := range doc.Versions {
		fmt.Fprintf(tw, "  %s\t%d\n", printable(v.Component), v.Version)
	}
	return tw.Flush()
}

func why(ctx context.Context, c call) error {
	col, err := c.inspect(ctx)
	if err != nil {
		return err
	}
	hs, err := col.WhyAll(ctx, cleanup.TextID(c.args[0]))
	if err != nil {
		return err
	}
	doc := whyJSON{Table: c.table, ID: stored(c.args[0]), Holders: []holderJSON{}, MissingIndexes: col.Unindexed()}
	for _, h := range hs {
		doc.Holders = append(doc.Holders, holderJSON{Table: h.Table, Column: h.Column, Key: stored(h.Key)})
	}
	// Garbage is deleted only if the queue leads clean-up to it.
	if doc.Queued, err = c.queued(ctx, c.args[0]); err != nil {
		return err
	}
	doc.Leaked = len(doc.Holders) == 0 && !doc.Queued
	return c.print(doc)
}

// queued reports whether the clean-up queue of the set on --table has an entry for
// the object id.
func (c call) queued(ctx context.Context, id string) (bool, error) {
	reg, err := c.registration(ctx)
	if err != nil {
		return false, err
	}
	var n int
	q := c.db.Driver().Rebind(fmt.Sprintf(`SELECT count(*) FROM %s WHERE object_id = ?`, reg.Queue.Quoted()))
	if err := c.db.Reader().QueryRowContext(ctx, q, refset.Arg(id)).Scan(&n); err != nil {
		return false, c.db.TranslateError(err, q)
	}
	return n > 0, nil
}

func (doc whyJSON) text(out io.Writer) error {
	switch {
	case doc.Leaked:
		fmt.Fprintf(out, "%s: nothing references it, and it is not in the clean-up queue: it leaked, and clean-up never deletes it; "+
			"refset sweep --table %s queues and deletes every such object\n", printable(string(doc.ID)), doc.Table)
	case len(doc.Holders) == 0:
		fmt.Fprintf(out, "%s: nothing references it; it is in the clean-up queue, and clean-up deletes it once it is due\n", printable(string(doc.ID)))
	}
	for _, h := range doc.Holders {
		fmt.Fprintln(out, printable(cleanup.Holder{Table: h.Table, Column: h.Column, Key: string(h.Key)}.String()))
	}
	warnIndexes(out, doc.MissingIndexes)
	return nil
}

// warnIndexes says which indexes clean-up lacks: it refuses to collect until they
// exist, while the reports answer.
func warnIndexes(out io.Writer, stmts []string) {
	for _, s := range stmts {
		fmt.Fprintf(out, "warning: a column that references the set has no index; clean-up collects nothing until it exists: %s\n", printable(s))
	}
}

// warnParts names the cascading keys to table that its program did not declare as
// parts: clean-up deletes objects their rows would hold.
func warnParts(out io.Writer, table string, keys []string) {
	for _, k := range keys {
		fmt.Fprintf(out, "warning: %s is ON DELETE CASCADE to %s, and not declared a part (cleanup.Config.Parts): its rows keep nothing alive; "+
			"declare it ON DELETE RESTRICT if they hold objects\n", printable(k), table)
	}
}

func check(ctx context.Context, c call) error {
	col, err := c.inspect(ctx)
	if err != nil {
		return err
	}
	r, err := col.Check(ctx)
	if err != nil {
		return err
	}
	doc := checkJSON{Table: c.table, OK: r.OK(), Leaked: r.Leaked, Dangling: r.Dangling, Samples: storedAll(r.Samples),
		MissingIndexes: r.Unindexed, UndeclaredParts: r.UndeclaredParts}
	if doc.Samples == nil {
		doc.Samples = []stored{}
	}
	if err := c.print(doc); err != nil || doc.OK {
		return err
	}
	return errFindings
}

func (doc checkJSON) text(out io.Writer) error {
	fmt.Fprintf(out, "%s: %d leaked, %d dangling\n", doc.Table, doc.Leaked, doc.Dangling)
	for _, s := range doc.Samples {
		fmt.Fprintf(out, "  %s\n", printable(string(s)))
	}
	if doc.Leaked > 0 {
		fmt.Fprintf(out, "leaked objects are garbage no queue entry leads to: run a sweep to collect them\n")
	}
	warnIndexes(out, doc.MissingIndexes)
	warnParts(out, doc.Table, doc.UndeclaredParts)
	return nil
}

// installing declares --grace for a command that installs clean-up as the set's
// program does (collect, sweep), and returns how it gets the set's collector. Without
// --grace it installs with the settings the set's last Install left in the database
// (cleanup.Installed), so that it never changes the program's grace period.
func installing(fs *flag.FlagSet, verb string) func(context.Context, call) (*cleanup.Collector, error) {
	grace := fs.Duration("grace", 0, "the grace period of new objects, which "+verb+" installs clean-up's triggers with "+
		"(default: the one the set's triggers apply, as its program installed them; "+cleanup.DefaultGrace.String()+" if none did)")
	return func(ctx context.Context, c call) (*cleanup.Collector, error) {
		given := false
		fs.Visit(func(f *flag.Flag) { given = given || f.Name == "grace" })
		if given && *grace <= 0 {
			return nil, fmt.Errorf("%w: --grace must be positive", refset.ErrInvalidConfig)
		}
		cfg, err := cleanup.Installed(ctx, c.db, c.table)
		if err != nil {
			return nil, err
		}
		if given {
			cfg.Grace = *grace
		}
		return cleanup.Install(ctx, c.db, cfg)
	}
}

func collectCommand(fs *flag.FlagSet) func(context.Context, call) error {
	untilEmpty := fs.Bool("until-empty", false, "repeat passes, --interval apart, while a pass postponed objects another transaction was using")
	interval := fs.Duration("interval", time.Second, "the pause between passes with --until-empty")
	collector := installing(fs, "collect")
	return func(ctx context.Context, c call) error {
		if *interval <= 0 {
			return fmt.Errorf("%w: --interval must be positive", refset.ErrInvalidConfig)
		}
		col, err := collector(ctx, c)
		if err != nil {
			return err
		}
		var total cleanup.Stats
		passes := 0
		for {
			passes++
			stop := showProgress(ctx, col, c.out, 0)
			s, err := col.Collect(ctx)
			stop()
			fmt.Fprintf(c.out, "pass %d: %s\n", passes, s)
			total.Add(s)
			if err != nil {
				return err
			}
			if !*untilEmpty || s.Postponed == 0 {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(*interval):
			}
		}
		summary(c.out, passes, total)
		return nil
	}
}

// isTerminal reports whether out is a terminal, where progress may redraw a line;
// piped output gets plain lines only.
func isTerminal(out io.Writer) bool {
	if o, ok := out.(*output); ok {
		out = o.w
	}
	f, ok := out.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// showProgress redraws, on a terminal, a bar of the review queue's due entries worked
// off while a pass runs, read from the queue every few hundred milliseconds; the
// function it returns stops it and clears the line. Elsewhere it does nothing. It
// counts the due entries after wait (during which the pass queues them, as a sweep
// does), or at once when wait is 0.
func showProgress(ctx context.Context, c *cleanup.Collector, out io.Writer, wait time.Duration) (stop func()) {
	if !isTerminal(out) {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		select {
		case <-done:
			return
		case <-time.After(wait):
		}
		_, due, err := c.Queue(ctx)
		if err != nil || due == 0 {
			<-done
			return
		}
		// Redrawn until done is closed, then the line is cleared.
		t := time.NewTicker(300 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(out, "\r\033[K")
				return
			case <-t.C:
				if _, left, err := c.Queue(ctx); err == nil {
					fmt.Fprint(out, "\r"+progressBar(due-left, due))
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// progressBar draws worked of total as a bar 30 wide with its counts.
func progressBar(worked, total int64) string {
	worked = max(0, min(worked, total))
	const width = 30
	filled := int(worked * width / total)
	return fmt.Sprintf("[%s%s] %d/%d due entries reviewed", strings.Repeat("#", filled), strings.Repeat(".", width-filled), worked, total)
}

// summary prints a collect's totals as a table.
func summary(out io.Writer, passes int, total cleanup.Stats) {
	tw := newTable(out, "\nPASSES", "REVIEWED", "DELETED", "POSTPONED", "REFUSED", "HOLDS EXPIRED", "TIME")
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t%d\t%d\t%v\n", passes, total.Reviewed, total.Deleted, total.Postponed,
		total.Refused, total.HoldsExpired, total.Duration.Round(time.Millisecond))
	tw.Flush()
}
