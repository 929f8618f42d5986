package sqlident

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/refsetdb/refset/internal/sentinel"
)

// identPattern is what refset accepts as a table or column name: a plain SQL
// identifier. Anything else (quotes, spaces, semicolons) is refused rather than
// escaped, so no user string ever reaches SQL unchecked.
var identPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// maxIdentLen is Postgres' limit (NAMEDATALEN-1); SQLite has none, but a name that
// works on one store should work on the other.
const maxIdentLen = 63

// Ident is an identifier, possibly schema-qualified ("ledger.blocks"). Parse checks
// one; an Ident written as a literal is not checked, but Quoted still quotes it as
// the one identifier it names.
type Ident struct {
	Schema string // "" for the default schema (search_path on Postgres, main on SQLite)
	Name   string
}

// Parse checks name, a plain identifier or schema.identifier.
func Parse(name string, allowSchema bool) (Ident, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 || (len(parts) == 2 && !allowSchema) {
		return Ident{}, fmt.Errorf("refset: %q: %w", name, sentinel.ErrInvalidIdentifier)
	}
	for _, p := range parts {
		if !identPattern.MatchString(p) || len(p) > maxIdentLen {
			return Ident{}, fmt.Errorf("refset: %q: %w (want letters, digits and _, at most %d characters, not starting with a digit)",
				name, sentinel.ErrInvalidIdentifier, maxIdentLen)
		}
	}
	if len(parts) == 2 {
		return Ident{Schema: parts[0], Name: parts[1]}, nil
	}
	return Ident{Name: parts[0]}, nil
}

// Must is Parse for names the library writes itself.
func Must(name string) Ident {
	id, err := Parse(name, true)
	if err != nil {
		panic(err)
	}
	return id
}

// Quoted is the identifier quoted for SQL. Both dialects quote with double quotes,
// and a double quote inside a name is written twice: a name Parse checked has none,
// but one in a literal Ident (Ident{Name: `a"b`}) stays one identifier rather than
// ending the quotes early.
func (i Ident) Quoted() string {
	if i.Schema == "" {
		return quote(i.Name)
	}
	return quote(i.Schema) + "." + quote(i.Name)
}

// quote is a delimited identifier naming name.
func quote(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// String is the identifier as written, unquoted.
func (i Ident) String() string {
	if i.Schema == "" {
		return i.Name
	}
	return i.Schema + "." + i.Name
}

// WithName is an identifier in the same schema with another name.
func (i Ident) WithName(name string) (Ident, error) {
	n, err := Parse(name, false)
	if err != nil {
		return Ident{}, err
	}
	return Ident{Schema: i.Schema, Name: n.Name}, nil
}

// sqlTypePattern accepts a column type as catalogs report it ("bigint",
// "character varying(128)", "VARCHAR(64)", "numeric(10,2)", "BLOB").
var sqlTypePattern = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_ ]*(\(\d+(,\s*\d+)?\))?$`)

// CheckType checks a column type read from a catalog before it is written into DDL.
func CheckType(typ string) error {
	if !sqlTypePattern.MatchString(typ) {
		return fmt.Errorf("refset: column type %q: %w", typ, sentinel.ErrInvalidIdentifier)
	}
	return nil
}
