package sqlstore

import (
	"errors"
	"testing"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

type fuzzObject struct {
	Key   string `db:"id"`
	Value int64  `db:"value"`
}

func (o fuzzObject) ID() string { return o.Key }

// Resolve reads what a catalog says of a table (any names and types, any flags); it
// never panics, refuses with ErrSchema or ErrInvalidIdentifier, and accepts only an ID
// column that is a valid identifier of a type fit to write into DDL.
func FuzzResolve(f *testing.F) {
	f.Add("id", "text", true, "value", "bigint", false, "", false)
	f.Add("id", "character varying(64)", true, "value", "bigint", false, "id", false)
	f.Add("id", "text; DROP TABLE x", true, "value", "bigint", false, "", false)
	f.Add("id", "text", true, "value", "bigint", true, "", false)
	f.Add("id", "", true, "value", "integer[]", false, "value", true)
	f.Add("ID", "text", true, "value", "bigint", false, "", true)
	f.Add(`i"d`, "text", true, "id", `"my type"`, false, "id", false)
	f.Fuzz(func(t *testing.T, name0, type0 string, primary0 bool, name1, type1 string, primary1 bool, idColumn string, third bool) {
		cols := []refsetdriver.Column{{Name: name0, Type: type0, Primary: primary0}, {Name: name1, Type: type1, Primary: primary1}}
		if third {
			cols = append(cols, refsetdriver.Column{Name: "id", Type: "text", Primary: true, NotNull: true})
		}
		table, err := Resolve[fuzzObject, string](sqlident.Must("objects"), idColumn, cols)
		if err != nil {
			if !errors.Is(err, refset.ErrSchema) && !errors.Is(err, refset.ErrInvalidIdentifier) {
				t.Fatalf("Resolve(%+v): error %v is neither ErrSchema nor ErrInvalidIdentifier", cols, err)
			}
			return
		}
		if _, err := sqlident.Parse(table.IDColumn, false); err != nil {
			t.Fatalf("Resolve(%+v) accepted ID column %q: %v", cols, table.IDColumn, err)
		}
		if err := sqlident.CheckType(table.IDType); err != nil {
			t.Fatalf("Resolve(%+v) accepted ID type %q: %v", cols, table.IDType, err)
		}
		if idColumn != "" && table.IDColumn != idColumn {
			t.Fatalf("Resolve(%+v, %q) chose ID column %q", cols, idColumn, table.IDColumn)
		}
	})
}
