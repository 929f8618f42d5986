package schema

import (
	"fmt"
	"strings"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

// MigrateResult is what a migration ran or, in a dry run, would run.
type MigrateResult struct {
	Direction Direction
	DryRun    bool
	// Steps are the components whose version changed (or, for a set, whose
	// registration was written or removed), in the order they ran; none when there
	// was nothing to do.
	Steps []Step

	sql refsetdriver.SchemaSQL // the dialect the script is written in
}

// Step is what a migration did to one component: its version went from From to To
// (To below From down) by running Versions.
type Step struct {
	// Component is "core", "set:<table>" or a Component's Name.
	Component string
	// From is the version recorded before: 0 for a new component, and for one of
	// refset's whose tables were gone, whose migrations ran again.
	From, To int
	// Versions are the migrations that ran, in order, each with its SQL.
	Versions []MigrateVersion
	// Registration says a set's registration in refset_sets was written (up: it was
	// missing or differed) or removed (down to 0).
	Registration bool

	reg *refsetdriver.Registered // the registration written, up, or removed, down
}

// MigrateVersion is one migration that ran, or would run.
type MigrateVersion struct {
	Version int
	Name    string // its file, NNNN_name.sql (or .down.sql)
	SQL     string // as it ran: a set's migrations are written for its tables
	// Duration is how long it ran; 0 in a dry run.
	Duration time.Duration
}

// String names each step, as "core 0 -> 2, set:items 0 -> 3" (or "set:items
// registration" for a registration alone); "" when nothing ran.
func (r *MigrateResult) String() string {
	if r == nil {
		return ""
	}
	var parts []string
	for _, s := range r.Steps {
		parts = append(parts, s.String())
	}
	return strings.Join(parts, ", ")
}

func (s Step) String() string {
	if s.Registration && s.From == s.To {
		return s.Component + " registration"
	}
	return fmt.Sprintf("%s %d -> %d", s.Component, s.From, s.To)
}

// SQL is the result as one script; "" when nothing ran. It is the script a DBA runs,
// in one transaction and with a role that may create (or drop) tables, where the
// application's may not (store.Options.ExternalMigrations): each component's
// migrations followed by the record of its version and, for a set, its registration
// (written up, removed down to 0), as Migrate writes them, so that a later Migrate
// finds nothing to do. Every statement of refset's up creates only what is missing,
// and down drops only what is there, so running it twice does no harm.
func (r *MigrateResult) SQL() string {
	if r == nil || len(r.Steps) == 0 || r.sql == nil {
		return ""
	}
	var b strings.Builder
	if r.Direction == DirectionDown {
		fmt.Fprintf(&b, "-- refset schema: down %s. Run in one transaction.\n", r)
	} else {
		fmt.Fprintf(&b, "-- refset schema: %s. Run in one transaction.\n", r)
		b.WriteString(r.sql.VersionTable() + ";\n")
	}
	for _, s := range r.Steps {
		for _, v := range s.Versions {
			fmt.Fprintf(&b, "\n-- %s %s\n%s\n", s.Component, v.Name, statement(v.SQL))
		}
		if s.To != s.From {
			b.WriteString(r.sql.SetVersionScript(s.Component, s.To) + ";\n")
		}
		switch {
		case s.reg == nil:
		case r.Direction == DirectionDown:
			b.WriteString(r.sql.UnregisterScript(s.reg.Table) + ";\n")
		default:
			b.WriteString(r.sql.RegisterScript(*s.reg) + ";\n")
		}
	}
	return b.String()
}

// statement ends a migration's text with a semicolon, so the next one starts a new
// statement. The semicolon goes on a line of its own: a text whose last line is a
// comment would take one written after it into the comment, and the statement before
// would run into the next one.
func statement(text string) string {
	text = strings.TrimSpace(text)
	if strings.HasSuffix(text, ";") {
		return text
	}
	if last := text[strings.LastIndex(text, "\n")+1:]; strings.Contains(last, "--") || strings.HasSuffix(text, "*/") {
		return text + "\n;"
	}
	return text + ";"
}

// PendingError says a database lacks schema this code needs (Validate), where the
// application may not create it itself (ExternalMigrations). It matches
// refset.ErrSchema; its Plan is the dry run of the up migration that would bring the
// database up to date, and Plan.SQL() the script to run.
type PendingError struct {
	Plan *MigrateResult
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("refset/schema: %v: the database lacks %s (with ExternalMigrations the application runs no DDL: "+
		"have a DBA run the script of this error's Plan.SQL(), through errors.As with *schema.PendingError, or of a dry run, "+
		"schema.New(db, cfg) then Migrate(ctx, schema.DirectionUp, &schema.MigrateOpts{DryRun: true}))", refset.ErrSchema, e.Plan)
}

// Is matches refset.ErrSchema.
func (e *PendingError) Is(target error) bool { return target == refset.ErrSchema }
