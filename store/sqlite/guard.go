package sqlite

import (
	"fmt"
	"strings"

	"github.com/refsetdb/refset/internal/engine"
	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/refset"
)

// connectionPragmas are the PRAGMAs that set what the writer's connection keeps past
// the transaction that sets it (or that SQLite refuses inside one): set in a unit of
// work, one would change every unit after it on the one writer, those that share its
// group and every later one (a read-only writer, CHECK constraints ignored, readers
// locked out by an exclusive lock, no wait for another process's lock, ...), and
// nothing rolls it back with the unit. Reading them stays allowed.
var connectionPragmas = map[string]bool{
	"analysis_limit": true, "auto_vacuum": true, "automatic_index": true,
	"busy_timeout": true, "cache_size": true, "cache_spill": true,
	"case_sensitive_like": true, "cell_size_check": true, "checkpoint_fullfsync": true,
	"count_changes": true, "data_store_directory": true, "default_cache_size": true,
	"empty_result_callbacks": true, "encoding": true, "foreign_keys": true,
	"full_column_names": true, "fullfsync": true, "hard_heap_limit": true,
	"ignore_check_constraints": true, "journal_mode": true, "journal_size_limit": true,
	"legacy_alter_table": true, "legacy_file_format": true, "locking_mode": true,
	"max_page_count": true, "mmap_size": true, "page_size": true, "query_only": true,
	"read_uncommitted": true, "recursive_triggers": true, "reverse_unordered_selects": true,
	"secure_delete": true, "short_column_names": true, "soft_heap_limit": true,
	"synchronous": true, "temp_store": true, "temp_store_directory": true, "threads": true,
	"trusted_schema": true, "wal_autocheckpoint": true, "writable_schema": true,
}

// statementGuard checks every statement run in a transaction refset began on a
// database (sqlstore.TxOptions.Check): what would change the writer's connection for
// the units of work after this one (a setting no rollback undoes, or an object that,
// once committed, stands in for the main schema's) is refused with
// refset.ErrInvalidCommand, unsent. That is a PRAGMA that sets the connection
// (connectionPragmas), and a temporary object that would stand in for the main
// schema's (SQLite looks an unqualified name up in the temp schema first): a
// temporary view or trigger, and a temporary table named as, or renamed to, a main
// table or view. A later unit's rows would otherwise go to a table of the writer's
// connection alone, told committed and lost when it closes. Temporary tables of other
// names (scratch tables, as clean-up's) are fine. Then the arguments are counted
// (checkArgs).
type statementGuard struct {
	// inMain reports whether the main schema has a table or view called name, as
	// committed: asked on a connection other than the writer's, which the unit holds.
	inMain func(name string) (bool, error)
}

func (g statementGuard) check(query string, args []any) error {
	if err := g.refuse(query); err != nil {
		return err
	}
	return checkArgs(query, args)
}

func (g statementGuard) refuse(query string) error {
	refused := func(why string, a ...any) error {
		return sentinel.New(msgPrefix, "", refset.ErrInvalidCommand, fmt.Errorf(why+
			"; it would change what the writer's connection does for the units of work after this one", a...))
	}
	if name := settingPragma(query); name != "" {
		return refused("PRAGMA %s sets the connection, whatever becomes of the unit (set it on the DSN, or outside refset's transactions)", name)
	}
	if !containsFold(query, "temp") && !containsFold(query, "rename") {
		return nil // the common case, without lexing
	}
	for _, st := range statements(sqlTokens(query)) {
		kind, name, temp := created(st)
		if renamed, ok := renamedTo(st); ok {
			kind, name, temp = "TABLE", renamed, true // a temporary table's rename, perhaps
		}
		if !temp {
			continue
		}
		switch kind {
		case "VIEW", "TRIGGER":
			return refused("a temporary %s (%s) applies to the main schema's tables on this connection alone", strings.ToLower(kind), name)
		case "TABLE":
			hides, err := g.inMain(name)
			if err != nil {
				return sentinel.Wrap(msgPrefix, "", translateError(err, ""))
			}
			if hides {
				return refused("a temporary table %s would stand in for the main schema's %s on this connection alone", name, name)
			}
		}
	}
	return nil
}

// statements splits tokens at their semicolons.
func statements(toks []string) [][]string {
	var sts [][]string
	for start := 0; start < len(toks); {
		end := start
		for end < len(toks) && toks[end] != ";" {
			end++
		}
		if end > start {
			sts = append(sts, toks[start:end])
		}
		start = end + 1
	}
	return sts
}

// created reads a CREATE statement: what it creates (TABLE, VIEW, TRIGGER, INDEX),
// its name, and whether in the temp schema. kind is "" for any other statement.
func created(st []string) (kind, name string, temp bool) {
	if len(st) < 3 || !strings.EqualFold(st[0], "create") {
		return "", "", false
	}
	i := 1
	if strings.EqualFold(st[i], "temp") || strings.EqualFold(st[i], "temporary") {
		temp, i = true, i+1
	}
	if i < len(st) && (strings.EqualFold(st[i], "unique") || strings.EqualFold(st[i], "virtual")) {
		i++
	}
	if i >= len(st) {
		return "", "", false
	}
	kind = strings.ToUpper(st[i])
	i++
	if i+2 < len(st) && strings.EqualFold(st[i], "if") && strings.EqualFold(st[i+1], "not") && strings.EqualFold(st[i+2], "exists") {
		i += 3
	}
	if i >= len(st) {
		return "", "", false
	}
	name = unquote(st[i])
	if i+2 < len(st) && st[i+1] == "." {
		if s := strings.ToLower(name); s == "temp" || s == "temporary" {
			temp = true
		}
		name = unquote(st[i+2])
	}
	return kind, name, temp
}

// renamedTo is the new name of an ALTER TABLE ... RENAME TO statement.
func renamedTo(st []string) (string, bool) {
	if len(st) < 4 || !strings.EqualFold(st[0], "alter") || !strings.EqualFold(st[1], "table") {
		return "", false
	}
	for i := 2; i+2 < len(st); i++ {
		if strings.EqualFold(st[i], "rename") && strings.EqualFold(st[i+1], "to") {
			return unquote(st[i+2]), true
		}
	}
	return "", false
}

// settingPragma is the name of the first PRAGMA among query's statements that sets a
// connectionPragma (PRAGMA [schema.]name = value, or name(value)), "" if none does.
func settingPragma(query string) string {
	return setPragma(query, func(name string) bool { return connectionPragmas[name] })
}

// setPragma is the name, lower-cased, of the first PRAGMA among query's statements
// that sets a value (PRAGMA [schema.]name = value, or name(value)) and that is, ""
// if none does.
func setPragma(query string, is func(name string) bool) string {
	if !containsFold(query, "pragma") {
		return "" // the common case, without lexing
	}
	for _, st := range statements(sqlTokens(query)) {
		name, rest, ok := pragma(st)
		if ok && len(rest) > 0 && (rest[0] == "=" || rest[0] == "(") && is(name) {
			return name
		}
	}
	return ""
}

// pragma reads a PRAGMA statement: its name, lower-cased, and the tokens after it.
func pragma(st []string) (name string, rest []string, ok bool) {
	if len(st) < 2 || !strings.EqualFold(st[0], "pragma") {
		return "", nil, false
	}
	name, rest = unquote(st[1]), st[2:]
	if len(rest) >= 2 && rest[0] == "." {
		name, rest = unquote(rest[1]), rest[2:]
	}
	return strings.ToLower(name), rest, true
}

// classify tells group commit what a statement of a unit does to the writer's
// transaction (engine.Group.Classify), from its text alone, before it is sent; when
// in doubt, that it may write. It lexes only what holds "pragma", ";" or DDL's verb.
//
//   - PRAGMA defer_foreign_keys, set, lasts until the transaction ends, and would
//     defer the keys of every later unit of the group: it must run alone
//     (StatementAlone).
//   - DDL (CREATE, ALTER, DROP) that declares a foreign key DEFERRABLE INITIALLY
//     DEFERRED must run alone too; other DDL may change the schema otherwise: the
//     group asks again whether it may grow (StatementSchema).
//   - One statement that only reads (SELECT or VALUES, after a WITH prefix or not,
//     and PRAGMAs that read the schema or check it) fails alone when interrupted,
//     where an interrupted write rolls back the whole transaction: it runs with its
//     context (StatementReads). SQLite's WITH may lead an INSERT, UPDATE or DELETE,
//     which sqltext.Verb names, and RETURNING follows only those. A query of several
//     statements is a write.
func classify(query string) engine.Statement {
	if setPragma(query, func(name string) bool { return name == "defer_foreign_keys" }) != "" {
		return engine.StatementAlone
	}
	if strings.IndexByte(query, ';') >= 0 {
		if sts := statements(sqlTokens(query)); len(sts) != 1 {
			kind := engine.StatementWrites
			for _, st := range sts {
				if schemaVerb(strings.ToUpper(st[0])) {
					kind = engine.StatementSchema
				}
			}
			if kind == engine.StatementSchema && containsFold(query, "deferred") && declaresDeferred(query) {
				return engine.StatementAlone
			}
			return kind
		}
	}
	switch verb := sqltext.Verb(query); {
	case verb == "SELECT" || verb == "VALUES":
		return engine.StatementReads
	case schemaVerb(verb):
		if containsFold(query, "deferred") && declaresDeferred(query) {
			return engine.StatementAlone
		}
		return engine.StatementSchema
	case verb == "PRAGMA":
		if sts := statements(sqlTokens(query)); len(sts) == 1 {
			if name, rest, ok := pragma(sts[0]); ok && readingPragma(name, rest) {
				return engine.StatementReads
			}
		}
	}
	return engine.StatementWrites
}

func schemaVerb(verb string) bool { return verb == "CREATE" || verb == "ALTER" || verb == "DROP" }

// readingPragma reports whether PRAGMA name followed by rest only reads: the schema's
// lists and checks, which may take an argument, and values read without one.
func readingPragma(name string, rest []string) bool {
	switch name {
	case "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
		"foreign_key_list", "foreign_key_check", "integrity_check", "quick_check":
		return len(rest) == 0 || rest[0] == "("
	case "schema_version", "user_version", "application_id", "data_version", "freelist_count",
		"page_count", "foreign_keys", "defer_foreign_keys", "database_list", "collation_list",
		"compile_options", "function_list", "module_list", "pragma_list":
		return len(rest) == 0
	}
	return false
}

// sqlTokens splits query into SQLite's tokens as far as settingPragma needs: words,
// quoted names and strings whole, punctuation a byte each, comments and spaces left
// out.
func sqlTokens(q string) []string {
	var toks []string
	for i := 0; i < len(q); {
		c := q[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		case c == '-' && i+1 < len(q) && q[i+1] == '-':
			for i < len(q) && q[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(q) && q[i+1] == '*':
			if j := strings.Index(q[i+2:], "*/"); j >= 0 {
				i += j + 4
			} else {
				i = len(q)
			}
		case c == '\'' || c == '"' || c == '`' || c == '[':
			closing := c
			if c == '[' {
				closing = ']'
			}
			j := i + 1
			for j < len(q) {
				if q[j] == closing {
					if closing != ']' && j+1 < len(q) && q[j+1] == closing { // doubled: one quote
						j += 2
						continue
					}
					break
				}
				j++
			}
			toks = append(toks, q[i:min(j+1, len(q))])
			i = j + 1
		case c == '_' || c == '$' || c >= 0x80 || 'a' <= c|0x20 && c|0x20 <= 'z' || '0' <= c && c <= '9':
			j := i
			for j < len(q) && (q[j] == '_' || q[j] == '$' || q[j] >= 0x80 || 'a' <= q[j]|0x20 && q[j]|0x20 <= 'z' || '0' <= q[j] && q[j] <= '9') {
				j++
			}
			toks = append(toks, q[i:j])
			i = j
		default:
			toks = append(toks, q[i:i+1])
			i++
		}
	}
	return toks
}

// unquote is a name as SQLite reads it: without its quotes, doubled ones single.
func unquote(tok string) string {
	if len(tok) < 2 {
		return tok
	}
	switch tok[0] {
	case '"', '`', '\'':
		q := tok[:1]
		return strings.ReplaceAll(tok[1:len(tok)-1], q+q, q)
	case '[':
		return tok[1 : len(tok)-1]
	}
	return tok
}

// containsFold reports whether s holds the lower-case ASCII word w, in any case: a
// first byte compared before the rest, since every statement is read so.
func containsFold(s, w string) bool {
	for i := 0; i+len(w) <= len(s); i++ {
		if s[i]|0x20 == w[0] && strings.EqualFold(s[i:i+len(w)], w) {
			return true
		}
	}
	return false
}
