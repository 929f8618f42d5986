package postgres

import (
	"strconv"
	"strings"
	"sync"

	"github.com/refsetdb/refset/internal/sqltext"
	"github.com/refsetdb/refset/refsetdriver"
)

// A pipelined unit's statement whose row count refset checks would have to be
// answered before anything after it is sent, a round trip of its own. Where the
// statement lets (rowCheckedSQL), the server checks the count instead: the statement
// fails, aborting the transaction, when the count is wrong, and the unit goes in one
// batch with its COMMIT. refset is told the count either way, and so says what it
// always said.

// maxRowChecks bounds how many statements rowChecks keeps rewritten: a program's
// units are written in its code, few and repeated; past the bound (statements built
// with their values in them), each run rewrites its own.
const maxRowChecks = 1024

// rowChecks are the statements the server checks the row counts of, as sent: one
// per statement and count, "" for a statement the server cannot check (it then
// ends its segment, read before the next is sent).
type rowChecks struct {
	mu sync.RWMutex
	m  map[rowCheckKey]string
}

type rowCheckKey struct {
	query string
	want  int64
}

func newRowChecks() *rowChecks { return &rowChecks{m: map[rowCheckKey]string{}} }

// sent is what goes to the server for s: s.Query, or, when s is Checked and its count
// can be checked by the server, the statement that checks it.
func (c *rowChecks) sent(s refsetdriver.Statement) string {
	if !s.Checked || s.Rows < 0 {
		return s.Query
	}
	key := rowCheckKey{s.Query, s.Rows}
	c.mu.RLock()
	q, ok := c.m[key]
	c.mu.RUnlock()
	if !ok {
		if body, can := sqltext.Modification(s.Query); can {
			q = rowCheckedSQL(body, s.Rows)
		}
		c.remember(key, q)
	}
	if q == "" {
		return s.Query
	}
	return q
}

// wrapped is what a simple query of libpqPipeline sends for s: the statement that
// checks its count, if s is Checked, or else the one that returns it
// (rowCountedSQL); "" for a statement that cannot be either, which is then sent on
// its own, as it is.
func (c *rowChecks) wrapped(s refsetdriver.Statement) string {
	key := rowCheckKey{s.Query, -1}
	if s.Checked {
		key.want = s.Rows
	}
	c.mu.RLock()
	q, ok := c.m[key]
	c.mu.RUnlock()
	if ok {
		return q
	}
	if body, can := sqltext.Modification(s.Query); can {
		if s.Checked {
			q = rowCheckedSQL(body, s.Rows)
		} else {
			q = rowCountedSQL(body)
		}
	}
	c.remember(key, q)
	return q
}

// refuse remembers that the server cannot run s checked (Postgres refuses some
// tables' statements as common table expressions: rowCheckedInvalid): it is sent as
// it is from now on.
func (c *rowChecks) refuse(s refsetdriver.Statement) {
	key := rowCheckKey{s.Query, s.Rows}
	if !s.Checked {
		key.want = -1
	}
	c.remember(key, "")
}

func (c *rowChecks) remember(key rowCheckKey, q string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; ok || len(c.m) < maxRowChecks {
		c.m[key] = q
	}
}

// rowCountRefused reads err, the failure of a statement of rowCheckedSQL, as the row
// count the statement affected when that is what failed it.
func rowCountRefused(err error) (n int64, ok bool) {
	if sqlState(err) != codeInvalidTextRepresentation {
		return 0, false
	}
	_, count, found := strings.Cut(serverMessage(err), rowCountMark)
	if !found {
		return 0, false
	}
	end := 0
	for end < len(count) && count[end] >= '0' && count[end] <= '9' {
		end++
	}
	n, err = strconv.ParseInt(count[:end], 10, 64)
	return n, err == nil
}

// rowCheckedInvalid reports whether err, the failure of a statement of
// rowCheckedSQL, may be Postgres refusing to run the statement as a common table
// expression (feature_not_supported: a table whose rules Postgres does not apply
// there, DO INSTEAD NOTHING, DO ALSO, conditional ones), which the statement sent as
// it is would not be refused for.
func rowCheckedInvalid(err error) bool {
	return sqlState(err) == codeFeatureNotSupported
}
