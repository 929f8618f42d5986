package cleanup_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/stretchr/testify/require"
)

// records keeps every record a logger made through its handler, to be read by a test.
type records struct {
	mu   sync.Mutex
	list []slog.Record
}

// handler is the slog.Handler of records, with the attributes of its logger.
type handler struct {
	r     *records
	attrs []slog.Attr
}

func (handler) Enabled(context.Context, slog.Level) bool { return true }

func (h handler) Handle(_ context.Context, r slog.Record) error {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.r.list = append(h.r.list, r)
	return nil
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	return handler{r: h.r, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}
func (h handler) WithGroup(string) slog.Handler { return h }

// attrs are the records' attributes of key whose message holds msg.
func (h *records) attrs(msg, key string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.list {
		if !strings.Contains(r.Message, msg) {
			continue
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == key {
				out = append(out, a.Value.String())
			}
			return true
		})
	}
	return out
}

// TestInstallLogsCascadingKeys: Install tells, through the database's logger, of each
// foreign key to the set declared ON DELETE CASCADE, whose rows keep nothing alive,
// and of no other key.
func TestInstallLogsCascadingKeys(t *testing.T) {
	cases := []struct {
		name   string
		tables []string // created after notes, each with its index
		want   []string // tables of the keys logged
	}{
		{
			name:   "a cascading key",
			tables: []string{`CREATE TABLE note_parts (note_id TEXT NOT NULL REFERENCES notes (id) ON DELETE CASCADE)`},
			want:   []string{"note_parts"},
		},
		{
			name: "two cascading keys beside a restricting one",
			tables: []string{
				`CREATE TABLE note_parts (note_id TEXT NOT NULL REFERENCES notes (id) ON DELETE CASCADE)`,
				`CREATE TABLE note_tags (note_id TEXT NOT NULL REFERENCES notes (id) ON DELETE CASCADE)`,
				`CREATE TABLE note_owners (note_id TEXT NOT NULL REFERENCES notes (id) ON DELETE RESTRICT)`,
			},
			want: []string{"note_parts", "note_tags"},
		},
		{
			name:   "restricting keys only",
			tables: []string{`CREATE TABLE note_owners (note_id TEXT NOT NULL REFERENCES notes (id) ON DELETE RESTRICT)`},
		},
		{
			name:   "a key that sets null",
			tables: []string{`CREATE TABLE note_links (note_id TEXT REFERENCES notes (id) ON DELETE SET NULL)`},
		},
	}
	testdb.Each(t, []testdb.Backend{testdb.SQLite, testdb.LibPQ, testdb.Pgx}, func(t *testing.T, b testdb.Backend) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				ctx := t.Context()
				log := &records{}
				db := b.Open(t, testdb.Options{Logger: slog.New(handler{r: log})})
				ddl := []string{`CREATE TABLE notes (id TEXT PRIMARY KEY)`}
				for _, q := range tc.tables {
					ddl = append(ddl, q)
					table := strings.Fields(q)[2]
					ddl = append(ddl, `CREATE INDEX `+table+`_note_id ON `+table+` (note_id)`)
				}
				require.NoError(t, refset.InTx(ctx, db, func(ctx context.Context, tx refset.Tx) error {
					for _, q := range ddl {
						if _, err := tx.ExecContext(ctx, q); err != nil {
							return err
						}
					}
					return nil
				}))
				_, err := store.NewStore[item, string](ctx, db, store.Config{Table: "notes"})
				require.NoError(t, err)
				_, err = cleanup.Install(ctx, db, cleanup.Config{Table: "notes"})
				require.NoError(t, err)

				keys := log.attrs("ON DELETE CASCADE", "key")
				require.Len(t, keys, len(tc.want), "logged: %q", keys)
				for i, table := range tc.want {
					require.Contains(t, keys[i], table)
				}
				for _, table := range unqualified(log.attrs("ON DELETE CASCADE", "table")) {
					require.Equal(t, "notes", table, "the set's table")
				}
			})
		}
	})
}

// unqualified drops the schemas Postgres names tables with.
func unqualified(tables []string) []string {
	out := make([]string, len(tables))
	for i, t := range tables {
		out[i] = t[strings.LastIndex(t, ".")+1:]
	}
	return out
}
