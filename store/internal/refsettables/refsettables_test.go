package refsettables

import (
	"testing"

	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"

	"github.com/stretchr/testify/assert"
)

// A DBA's script carries the values in its statements: each in its own literal, also
// when one holds a quote or a question mark (a schema.Component's name is the
// caller's).
func TestScripts(t *testing.T) {
	for _, c := range []struct {
		name, got, want string
	}{
		{"version", Tables{}.SetVersionScript("set:items", 2),
			"INSERT INTO refset_schema_version (component, version) VALUES ('set:items', 2)\n" +
				"\tON CONFLICT (component) DO UPDATE SET version = excluded.version"},
		{"odd component", Tables{}.SetVersionScript("it's?", 1),
			"INSERT INTO refset_schema_version (component, version) VALUES ('it''s?', 1)\n" +
				"\tON CONFLICT (component) DO UPDATE SET version = excluded.version"},
		{"register", Tables{}.RegisterScript(refsetdriver.Registered{Table: sqlident.Ident{Schema: "app", Name: "items"},
			IDColumn: "id", Holds: sqlident.Ident{Schema: "app", Name: "items_holds"}, Queue: sqlident.Ident{Schema: "app", Name: "items_review"}}),
			"INSERT INTO refset_sets (table_name, id_column, holds_table, queue_table) VALUES ('app.items', 'id', 'app.items_holds', 'app.items_review')\n" +
				"\tON CONFLICT (table_name) DO UPDATE SET id_column = excluded.id_column,\n" +
				"\t\tholds_table = excluded.holds_table, queue_table = excluded.queue_table"},
	} {
		t.Run(c.name, func(t *testing.T) { assert.Equal(t, c.want, c.got) })
	}
}
