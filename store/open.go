package store

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/refsetdb/refset/refset"
)

// Opener is a store's options as Open takes them: sqlite.Options and
// postgres.Options are Openers, each for the databases of its store. Package store
// imports neither store, so a program links only the stores it names (a
// PostgreSQL-only program builds without cgo); Open finds among them the one the
// DSN's form asks for.
type Opener interface {
	// Dialect is the dialect of the databases these options open, as the Name of
	// their Driver: "sqlite" or "postgres" (the forms of DSN Open gives it are
	// listed there).
	Dialect() string

	// OpenDSN opens the database dsn names with these options, as the store's own
	// Open does.
	OpenDSN(ctx context.Context, dsn string) (refset.Database, error)
}

// The dialects a DSN may name, and how Open's errors speak of them.
var dialects = []struct{ name, database, forms, options string }{
	{"sqlite", "SQLite", "a file path or a file: URL", "sqlite.Options"},
	{"postgres", "PostgreSQL", "a postgres:// or postgresql:// URL or a key=value connection string (host=... dbname=...)", "postgres.Options"},
}

// acceptedForms lists every DSN Open takes, for the error that refuses one.
func acceptedForms() string {
	var b strings.Builder
	b.WriteString("want ")
	for i, d := range dialects {
		if i > 0 {
			b.WriteString("; or ")
		}
		fmt.Fprintf(&b, "for %s, %s", d.database, d.forms)
	}
	return b.String()
}

var (
	// keyValue starts a libpq connection string: a keyword, then '='.
	keyValue = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*[ \t\n\r]*=`)
	// otherScheme starts a URL or a driver's DSN of a scheme of two letters or more
	// ("mysql:", "sqlserver:"); one letter is a Windows drive ("C:").
	otherScheme = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]+):`)
)

// DSNDialect is the dialect of the database dsn names, by its form alone (nothing is
// dialled), as the Name of the Driver Open would give it:
//
//   - "postgres": a URL of the postgres:// or postgresql:// scheme, or a libpq
//     key=value connection string ("host=db dbname=app", which starts with a keyword
//     and '=');
//   - "sqlite": a file: URL, or any other string as a file path.
//
// An empty DSN, a URL of another scheme ("mysql://..."), and any string that starts
// with a scheme of two letters or more and a colon ("sqlserver:...") fail with
// refset.ErrInvalidConfig naming the forms accepted. A SQLite file whose name has
// '=' or ':' in it is written as a path with a directory ("./a=b.db") or a file: URL.
// Spaces and newlines around the DSN are not part of it (Open leaves them out too);
// a file whose name starts or ends with one is a file: URL ("file:%20a.db").
// The error never quotes the DSN, which may hold a password.
func DSNDialect(dsn string) (string, error) {
	s := strings.TrimSpace(dsn)
	switch {
	case s == "":
		return "", fmt.Errorf("refset: open: %w: empty DSN: %s", refset.ErrInvalidConfig, acceptedForms())
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"), keyValue.MatchString(s):
		return "postgres", nil
	case strings.HasPrefix(s, "file:"):
		return "sqlite", nil
	}
	if m := otherScheme.FindStringSubmatch(s); m != nil {
		return "", fmt.Errorf("refset: open: %w: a DSN of scheme %q names no database refset opens: %s", refset.ErrInvalidConfig, m[1], acceptedForms())
	}
	return "sqlite", nil
}

// Open opens the database dsn names (see DSNDialect for the forms) with the options
// of its store among stores, and returns it for NewStore, NewCollector, the cleanup
// package, blockmanager and refset.InTx; Close closes it. One call opens either
// database, so a program runs on both with one code path:
//
//	db, err := store.Open(ctx, dsn, sqlite.Options{}, postgres.Options{Driver: postgres.DriverPgx})
//
// Each store's options stay its own: sqlite.Options' BusyTimeout, postgres.Options'
// Driver (lib/pq by default, or pgx), MaxConns, Replica. The database is a
// *sqlite.DB or a *postgres.DB, for a program that wants the store's own methods
// (a type assertion). Errors: refset.ErrInvalidConfig for a DSN of no form refset
// opens, for one whose store is not among stores, and for two options of one store;
// then those of the store's Open.
func Open(ctx context.Context, dsn string, stores ...Opener) (refset.Database, error) {
	dialect, err := DSNDialect(dsn)
	if err != nil {
		return nil, err
	}
	// The store gets the DSN DSNDialect read: a path read from a file or the
	// environment with a newline after it names the file without one.
	dsn = strings.TrimSpace(dsn)
	var opener Opener
	for _, o := range stores {
		if o == nil {
			return nil, fmt.Errorf("refset: open: %w: a nil Opener among the stores' options", refset.ErrInvalidConfig)
		}
		if o.Dialect() != dialect {
			continue
		}
		if opener != nil {
			return nil, fmt.Errorf("refset: open: %w: two options for %s (%T and %T); pass one", refset.ErrInvalidConfig, dialect, opener, o)
		}
		opener = o
	}
	if opener != nil {
		return opener.OpenDSN(ctx, dsn)
	}
	d := dialects[0]
	for _, d = range dialects {
		if d.name == dialect {
			break
		}
	}
	return nil, fmt.Errorf("refset: open: %w: the DSN names a %s database (%s), and no %s are among the options given; "+
		"pass them, as in store.Open(ctx, dsn, sqlite.Options{}, postgres.Options{})", refset.ErrInvalidConfig, d.database, d.forms, d.options)
}
