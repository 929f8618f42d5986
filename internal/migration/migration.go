// Package migration is what refset's packages share about migrations, below package
// schema's migrator: reading NNNN_name.sql files, and naming and checking a set's
// tables. The migrator runs the files; a store reads a set's names and ID column
// here, as the migrator does, so that NewStore and a migration describe a set
// alike; the operators' command lists the versions a build of refset has.
package migration

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/sqlident"
)

// Migration is one SQL file.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// DownSuffix ends the name of a down migration, NNNN_name.down.sql, which undoes the
// up migration NNNN of the same folder.
const DownSuffix = ".down.sql"

// MaxVersion is the highest version a migration may have: what the version column
// of refset_schema_version (an INTEGER, 32 bits on PostgreSQL) records.
const MaxVersion = math.MaxInt32

// Read reads the up migrations (down false), the files NNNN_name.sql at the root of
// fsys, at least one, or the down ones beside them, NNNN_name.down.sql, in version
// order. Any other file is an error: a misnamed migration would otherwise never run.
// So is a version given twice, one above MaxVersion (a timestamp, say), which could
// not be recorded, and a file with nothing in it but white space, which would be
// recorded as run, having run nothing: one meant to do nothing says so in a comment.
func Read(fsys fs.FS, down bool) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, err
	}
	var ms []Migration
	seen := map[int]string{}
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || !digits(num) || v < 1 || !strings.HasSuffix(name, ".sql") || e.IsDir() {
			return nil, fmt.Errorf("bad migration file name %s (want a file NNNN_name.sql or NNNN_name%s, NNNN from 1)", name, DownSuffix)
		}
		if v > MaxVersion {
			return nil, fmt.Errorf("migration %s: version %d is above %d, the highest refset_schema_version records", name, v, MaxVersion)
		}
		if strings.HasSuffix(name, DownSuffix) != down {
			continue
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("two migrations of version %d: %s and %s", v, other, name)
		}
		seen[v] = name
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		if strings.TrimSpace(string(body)) == "" {
			return nil, fmt.Errorf("migration %s is empty (one meant to do nothing says so in an SQL comment)", name)
		}
		ms = append(ms, Migration{Version: v, Name: name, SQL: string(body)})
	}
	if len(ms) == 0 && !down {
		return nil, errors.New("no migrations")
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms, nil
}

// digits reports whether s is ASCII digits only: "+1" is not a version.
func digits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// Dialect reads a dialect's own migrations of one kind, "core" (refset's tables) or
// "set" (the templates of each set's tables), up or down, in version order.
func Dialect(s refsetdriver.SchemaSQL, kind string, down bool) ([]Migration, error) {
	sub, err := fs.Sub(s.Migrations(), kind)
	if err != nil {
		return nil, err
	}
	ms, err := Read(sub, down)
	if err != nil {
		if down {
			kind += " down"
		}
		return nil, fmt.Errorf("refset/schema: %s migrations for dialect %q: %w", kind, s.Name(), err)
	}
	return ms, nil
}

// SetTables are a set's object table, named by table (optionally schema-qualified),
// its holds table, holdsTable or table's name + "_holds" when it is "", and its review
// queue, table's name + "_review", both in table's schema.
func SetTables(table, holdsTable string) (t, holds, queue sqlident.Ident, err error) {
	if t, err = sqlident.Parse(table, true); err != nil {
		return
	}
	if holdsTable == "" {
		holdsTable = t.Name + "_holds"
	}
	if holds, err = t.WithName(holdsTable); err != nil {
		return t, holds, queue, fmt.Errorf("%w (name the holds table with HoldsTable)", err)
	}
	if queue, err = t.WithName(t.Name + "_review"); err != nil {
		return t, holds, queue, fmt.Errorf("%w (the review queue is named after the table; use a shorter name)", err)
	}
	return t, holds, queue, nil
}

// IDColumn is the ID column of the set on table, whose columns the catalog lists as
// cols: idColumn, or the table's primary key when idColumn is "". It must be the
// table's one-column primary key (refset.ErrSchema otherwise), since the holds
// table's foreign key references it, and its type one a migration can write.
func IDColumn(table sqlident.Ident, idColumn string, cols []refsetdriver.Column) (refsetdriver.Column, error) {
	var pk []refsetdriver.Column
	for _, c := range cols {
		if c.Primary {
			pk = append(pk, c)
		}
	}
	if idColumn == "" {
		if len(pk) != 1 {
			return refsetdriver.Column{}, fmt.Errorf("refset: table %s needs a one-column primary key (has %d): %w",
				table, len(pk), sentinel.ErrSchema)
		}
		idColumn = pk[0].Name
	}
	if _, err := sqlident.Parse(idColumn, false); err != nil {
		return refsetdriver.Column{}, err
	}
	if len(pk) != 1 || pk[0].Name != idColumn {
		return refsetdriver.Column{}, fmt.Errorf("refset: column %q of %s is not the table's one-column primary key: %w",
			idColumn, table, sentinel.ErrSchema)
	}
	if err := sqlident.CheckType(pk[0].Type); err != nil {
		return refsetdriver.Column{}, err
	}
	return pk[0], nil
}

// IndexName is the name of the index label of a table named table, on a database
// that keeps names of at most limit bytes whole (0: any): table + "_" + label, as
// refset always named a set's indexes, when that fits; otherwise the head of table,
// a hash of the whole name, and label, so that it fits and stays apart from every
// other. PostgreSQL would cut it to its first 63 bytes, which may be the table's own
// name (the index is then never made: CREATE INDEX IF NOT EXISTS finds the table) or
// the name it cut another index of the table to (made once, for the first). legacy is
// that cut name where the name changes (an index made before may have it), ""
// otherwise.
func IndexName(limit int, table, label string) (name, legacy string) {
	name = table + "_" + label
	if limit <= 0 || len(name) <= limit {
		return name, ""
	}
	h := sha256.Sum256([]byte(name))
	tail := "_" + hex.EncodeToString(h[:4]) + "_" + label
	// Names are ASCII (sqlident): a byte is a character.
	return table[:limit-len(tail)] + tail, name[:limit]
}
