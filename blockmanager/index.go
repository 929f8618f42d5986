package blockmanager

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/refsetdb/refset/refset"
)

// indexRows are the rows of one of the batch and transaction indexes for some
// blocks: row i is (ids[i], blocks[i]), one for each ID a block lists.
type indexRows struct{ ids, blocks []string }

// indexOf is the rows of the index of list for blocks. A block may list an ID
// twice; its index row is one.
func indexOf(blocks []storedBlock, list func(Block) IDs) indexRows {
	n := 0
	for _, sb := range blocks {
		n += len(list(sb.Block))
	}
	rows := indexRows{ids: make([]string, 0, n), blocks: make([]string, 0, n)}
	for _, sb := range blocks {
		listed := list(sb.Block)
		for i, id := range listed {
			if slices.Contains(listed[:i], id) {
				continue
			}
			rows.ids = append(rows.ids, id)
			rows.blocks = append(rows.blocks, sb.HeaderSignature)
		}
	}
	return rows
}

// indexRowsPerInsert is how many rows a multi-row insert of index rows takes where
// the database has no BulkWrites (SQLite): a full chunk has always the same text.
const indexRowsPerInsert = 500

// insertIndexes writes the batch and transaction index rows of blocks.
func (m *Manager) insertIndexes(ctx context.Context, tx refset.Tx, blocks []storedBlock) error {
	batches := indexOf(blocks, func(b Block) IDs { return b.BatchIDs })
	txns := indexOf(blocks, func(b Block) IDs { return b.TransactionIDs })
	if m.stmt.insertIndexes != "" {
		list := m.stmt.list
		_, err := tx.ExecContext(ctx, m.stmt.insertIndexes,
			list(batches.ids), list(batches.blocks), list(txns.ids), list(txns.blocks))
		return err
	}
	for _, index := range []struct {
		table, column string
		rows          indexRows
	}{
		{"block_batches", "batch_id", batches},
		{"block_transactions", "transaction_id", txns},
	} {
		for start := 0; start < len(index.rows.ids); start += indexRowsPerInsert {
			end := min(start+indexRowsPerInsert, len(index.rows.ids))
			args := make([]any, 0, 2*(end-start))
			for i := start; i < end; i++ {
				args = append(args, index.rows.ids[i], index.rows.blocks[i])
			}
			q := m.sql(fmt.Sprintf(`INSERT INTO %s (%s, block_id) VALUES %s`, index.table, index.column,
				strings.TrimSuffix(strings.Repeat("(?, ?), ", end-start), ", ")))
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return err
			}
		}
	}
	return nil
}
