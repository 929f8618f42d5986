package conformance

import (
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/refset"
	"github.com/stretchr/testify/require"
)

// readmeWords are the words by which docs/errors.md's table of errors names each mistake
// of testSameMistakeSameSentinel that a user's SQL makes; the row that holds them must
// be the one of the sentinel the mistake gets on every store.
var readmeWords = map[string]string{
	"unknown column":                        "a table, column or function",
	"unknown column in an INSERT":           "a table, column or function",
	"unknown table":                         "a table, column or function",
	"unknown function":                      "a table, column or function",
	"syntax error":                          "a syntax error",
	"too few arguments":                     "a wrong number of arguments",
	"too many arguments":                    "a wrong number of arguments",
	"a value of the wrong type":             "a value of the wrong type",
	"a value of the wrong type, not STRICT": "a value of the wrong type",
	"a value no driver sends":               "a value of the wrong type",
	"NOT NULL violated":                     "a NOT NULL",
	"CHECK violated":                        "CHECK constraint",
	"unique violated":                       "a unique key",
	"foreign key violated (parent missing)": "a foreign key",
}

// TestDocumentedErrors: docs/errors.md's table of errors names real sentinels, each once, and
// says of every mistake the suites make in a user's SQL the sentinel it gets
// (mistakes).
func TestDocumentedErrors(t *testing.T) {
	text, err := os.ReadFile("../../../docs/errors.md")
	require.NoError(t, err)
	_, table, ok := strings.Cut(string(text), "Errors are sentinels matched with `errors.Is`:")
	require.True(t, ok, "docs/errors.md has no table of errors")
	table, _, _ = strings.Cut(strings.TrimLeft(table, "\n"), "\n\n")

	require.Len(t, sentinelsByName, len(sentinel.All), "sentinelsByName names every sentinel")
	row := regexp.MustCompile("^\\| `(?:refset\\.)?(Err[A-Za-z]+)` \\| (.+) \\|$")
	rows := map[string]string{} // sentinel's name -> what the row says
	for _, line := range strings.Split(table, "\n")[2:] {
		m := row.FindStringSubmatch(line)
		require.NotNil(t, m, "a row of docs/errors.md's table of errors: %q", line)
		require.NotContains(t, rows, m[1], "docs/errors.md's table of errors names %s twice", m[1])
		require.Truef(t, isSentinel(m[1]), "docs/errors.md's table of errors names %s, which is no sentinel of refset's", m[1])
		rows[m[1]] = m[2]
	}
	for _, m := range mistakes {
		words, ok := readmeWords[m.name]
		require.Truef(t, ok, "mistake %q has no words in readmeWords", m.name)
		var says []string
		for name, what := range rows {
			if strings.Contains(what, words) {
				says = append(says, name)
			}
		}
		want := sentinelName(m.want)
		require.Equalf(t, []string{want}, says, "docs/errors.md's table of errors on %s (%q): every store says %s", m.name, words, want)
	}
}

// sentinelsByName are refset's sentinels by name.
var sentinelsByName = map[string]error{
	"ErrNotFound": refset.ErrNotFound, "ErrDuplicate": refset.ErrDuplicate, "ErrReferenced": refset.ErrReferenced,
	"ErrTokenConsumed": refset.ErrTokenConsumed, "ErrInvalidToken": refset.ErrInvalidToken,
	"ErrInvalidCommand": refset.ErrInvalidCommand, "ErrInvalidTx": refset.ErrInvalidTx, "ErrInvalidID": refset.ErrInvalidID,
	"ErrInvalidIdentifier": refset.ErrInvalidIdentifier, "ErrSchema": refset.ErrSchema, "ErrConflict": refset.ErrConflict,
	"ErrConstraint": refset.ErrConstraint, "ErrClosed": refset.ErrClosed, "ErrUnavailable": refset.ErrUnavailable,
	"ErrCommitUnknown": refset.ErrCommitUnknown, "ErrTimeout": refset.ErrTimeout, "ErrInvalidConfig": refset.ErrInvalidConfig,
	"ErrStatement": refset.ErrStatement, "ErrInUnitOfWork": refset.ErrInUnitOfWork,
}

func isSentinel(name string) bool { _, ok := sentinelsByName[name]; return ok }

// sentinelName is the name of sentinel s.
func sentinelName(s error) string {
	for name, e := range sentinelsByName {
		if errors.Is(s, e) && errors.Is(e, s) {
			return name
		}
	}
	return "?"
}
