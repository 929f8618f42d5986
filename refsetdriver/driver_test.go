package refsetdriver_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/refsetdb/refset/blockmanager"
	"github.com/refsetdb/refset/internal/test/testdb"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/store/sqlite"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOf(t *testing.T) {
	db := testdb.SQLite.Open(t, testdb.Options{}).(*sqlite.DB)

	d, err := refsetdriver.Of(db)
	require.NoError(t, err)
	assert.Equal(t, "sqlite", d.Name())
	assert.Same(t, db.Writer().DB, d.Pool(), "statements are prepared on the pool writes begin on")

	_, err = refsetdriver.Of(testdb.Plain(db))
	require.ErrorIs(t, err, refset.ErrInvalidConfig)
	_, err = blockmanager.Open(t.Context(), testdb.Plain(db), blockmanager.Config{})
	require.ErrorIs(t, err, refset.ErrInvalidConfig, "code above the stores finds the dialect through the driver, not the type")

	var zero sqlite.DB
	_, err = refsetdriver.Of(&zero)
	require.ErrorIs(t, err, refset.ErrInvalidConfig, "a DB the store did not open has no driver")
	_, err = zero.Begin(t.Context())
	require.ErrorIs(t, err, refset.ErrInvalidConfig)
	require.ErrorIs(t, refset.InTx(t.Context(), &zero, func(context.Context, refset.Tx) error { return nil }), refset.ErrInvalidConfig)
}

// RunAlone marks an error through wrapping, and Alone a context for the units it
// carries; neither marks what it was not given.
func TestRunAlone(t *testing.T) {
	base := errors.New("refused")
	assert.Nil(t, refsetdriver.RunAlone(nil))
	assert.False(t, refsetdriver.RunsAlone(base))
	marked := refsetdriver.RunAlone(base)
	assert.ErrorIs(t, marked, base, "the cause stays")
	assert.True(t, refsetdriver.RunsAlone(fmt.Errorf("unit: %w", marked)), "through wrapping")

	ctx := t.Context()
	assert.False(t, refsetdriver.MustRunAlone(ctx))
	alone := refsetdriver.Alone(ctx)
	assert.True(t, refsetdriver.MustRunAlone(alone))
	assert.True(t, refsetdriver.MustRunAlone(context.WithValue(alone, struct{}{}, 1)), "what derives from it")
}
