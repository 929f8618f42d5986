package pgtest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/lib/pq"
)

// tableName is a table as the catalog names it: its schema ("" when not said) and
// its name, both as stored, after PostgreSQL has folded and unquoted them.
type tableName struct{ schema, name string }

// String is t as a test would name it in big: a part that is not all lower case,
// digits and _ is quoted, as SQL needs it to be.
func (t tableName) String() string {
	if t.schema == "" {
		return quoteIfNeeded(t.name)
	}
	return quoteIfNeeded(t.schema) + "." + quoteIfNeeded(t.name)
}

// quoteIfNeeded is name as SQL must write it to name it: quoted if bare it would be
// folded or not read as one name.
func quoteIfNeeded(name string) string {
	bare := name != "" && !('0' <= name[0] && name[0] <= '9') && strings.IndexFunc(name, func(r rune) bool {
		return !(r == '_' || 'a' <= r && r <= 'z' || '0' <= r && r <= '9')
	}) < 0
	if bare {
		return name
	}
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// names reports whether t names the table x: the same name, and the same schema
// when both say one (a plan guard's test names its tables without their schema, and
// a plan built by hand may carry none).
func (t tableName) names(x tableName) bool {
	return t.name == x.name && (t.schema == "" || x.schema == "" || t.schema == x.schema)
}

// maxIdentBytes is PostgreSQL's limit on a name (NAMEDATALEN-1): it truncates a
// longer one, and so does parseTableName.
const maxIdentBytes = 63

// parseTableName reads s as PostgreSQL reads a table's name in SQL: "name" or
// "schema.name", each part bare, which PostgreSQL folds to lower case (Tokens is
// tokens), or double-quoted, which it keeps as written ("Tokens" is Tokens, a
// doubled quote inside is one).
func parseTableName(s string) (tableName, error) {
	var parts []string
	rest := s
	for {
		var part string
		var err error
		if quoted, ok := strings.CutPrefix(rest, `"`); ok {
			part, rest, err = cutQuotedIdent(quoted)
		} else {
			part, rest, err = cutBareIdent(rest)
		}
		if err != nil {
			return tableName{}, err
		}
		parts = append(parts, truncateIdent(part))
		if rest == "" {
			break
		}
		var ok bool
		if rest, ok = strings.CutPrefix(rest, "."); !ok {
			return tableName{}, fmt.Errorf("%q follows a name: want name, schema.name or a part \"quoted\"", rest)
		}
	}
	switch len(parts) {
	case 1:
		return tableName{name: parts[0]}, nil
	case 2:
		return tableName{schema: parts[0], name: parts[1]}, nil
	}
	return tableName{}, fmt.Errorf("%d parts: want name or schema.name", len(parts))
}

// cutQuotedIdent reads a quoted identifier, s being what follows its opening quote,
// and returns it (each doubled quote made one) and what follows its closing quote.
func cutQuotedIdent(s string) (ident, rest string, err error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '"' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 < len(s) && s[i+1] == '"' {
			b.WriteByte('"')
			i++
			continue
		}
		if b.Len() == 0 {
			return "", "", errors.New(`an empty quoted name ""`)
		}
		return b.String(), s[i+1:], nil
	}
	return "", "", errors.New("a quote without its closing quote")
}

// cutBareIdent reads an unquoted identifier at the start of s, folded to lower case
// as PostgreSQL folds it (ASCII letters only, as it does in UTF-8), and returns it
// and what follows it.
func cutBareIdent(s string) (ident, rest string, err error) {
	end := strings.IndexFunc(s, func(r rune) bool {
		return !(r == '_' || r == '$' || r >= utf8.RuneSelf || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
	})
	if end < 0 {
		end = len(s)
	}
	ident = s[:end]
	if ident == "" || ident[0] == '$' || '0' <= ident[0] && ident[0] <= '9' {
		return "", "", fmt.Errorf("%q does not start with a name", s)
	}
	return strings.Map(lowerASCII, ident), s[end:], nil
}

// lowerASCII folds an ASCII capital to lower case and leaves any other character.
func lowerASCII(r rune) rune {
	if 'A' <= r && r <= 'Z' {
		return r + 'a' - 'A'
	}
	return r
}

// truncateIdent cuts name to maxIdentBytes, on a character's boundary, as
// PostgreSQL does.
func truncateIdent(name string) string {
	if len(name) <= maxIdentBytes {
		return name
	}
	cut := maxIdentBytes
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut]
}

// bigTables are the names a test gave a plan guard's big tables, each read as
// PostgreSQL reads it (parseTableName), by the name as the test wrote it.
type bigTables map[string]tableName

// parseBig reads the names of big; bad are those that are no table's name, each
// with why.
func parseBig(big map[string]bool) (tables bigTables, bad []string) {
	tables = bigTables{}
	for _, written := range slices.Sorted(maps.Keys(big)) {
		t, err := parseTableName(written)
		if err != nil {
			bad = append(bad, fmt.Sprintf("big table %q is not a table's name: %v", written, err))
			continue
		}
		tables[written] = t
	}
	return tables, bad
}

// matching returns the names of b, as written, that name the table t reads, or,
// when t is a partition, its partitioned table root: a partition is read as part of
// its table.
func (b bigTables) matching(t, root tableName) []string {
	var found []string
	for written, big := range b {
		if big.names(t) || big.names(root) {
			found = append(found, written)
		}
	}
	return found
}

// tableExists reports whether catalog has the table (or view) t: in its schema, or
// without one, in a schema of the session's search_path, as a statement would find it.
func tableExists(ctx context.Context, catalog *sql.DB, t tableName) (bool, error) {
	var found bool
	err := catalog.QueryRowContext(ctx, `SELECT EXISTS (SELECT FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relname = $2 AND CASE WHEN $1 = '' THEN n.nspname = ANY (current_schemas(true)) ELSE n.nspname = $1 END)`,
		t.schema, t.name).Scan(&found)
	return found, err
}

// partitionRootsSQL returns, for the tables named by the arrays of schemas $1 and
// names $2, those that are partitions, with the partitioned table at the top of
// their tree.
const partitionRootsSQL = `SELECT n.nspname, c.relname, rn.nspname, r.relname
	FROM unnest($1::text[], $2::text[]) AS t (nsp, rel)
	JOIN pg_namespace n ON n.nspname = t.nsp
	JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.rel
	JOIN pg_class r ON r.oid = pg_partition_root(c.oid)
	JOIN pg_namespace rn ON rn.oid = r.relnamespace
	WHERE c.relispartition`

// partitionRoots asks catalog for the partitioned table of each partition that
// plans read (by their nodes' schema and name, which auto_explain gives with
// log_verbose) and returns them by partition.
func partitionRoots(ctx context.Context, catalog *sql.DB, plans []Plan) (map[tableName]tableName, error) {
	var schemas, names []string
	seen := map[tableName]bool{}
	for _, p := range plans {
		nodes(p.Tree, func(n map[string]any, _ bool) {
			if t, ok := nodeTable(n); ok && t.schema != "" && !seen[t] {
				seen[t] = true
				schemas, names = append(schemas, t.schema), append(names, t.name)
			}
		})
	}
	roots := map[tableName]tableName{}
	if len(names) == 0 {
		return roots, nil
	}
	rows, err := catalog.QueryContext(ctx, partitionRootsSQL, pq.Array(schemas), pq.Array(names))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var part, root tableName
		if err := rows.Scan(&part.schema, &part.name, &root.schema, &root.name); err != nil {
			return nil, err
		}
		roots[part] = root
	}
	return roots, rows.Err()
}

// nodeTable is the table a plan node reads or writes, if any.
func nodeTable(n map[string]any) (tableName, bool) {
	name, _ := n["Relation Name"].(string)
	schema, _ := n["Schema"].(string)
	return tableName{schema: schema, name: name}, name != ""
}
