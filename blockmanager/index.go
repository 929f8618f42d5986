package blockmanager

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/lib/pq"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/schema"
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

// insertIndexesSQL writes the rows of both indexes in one statement on Postgres, as
// arrays (see textArray): one round trip and one statement text whatever the number
// of blocks. (pgx prepares and caches every statement text it runs, so texts that
// vary with the number of rows would fill its cache.)
const insertIndexesSQL = `WITH batches AS (
		INSERT INTO block_batches (batch_id, block_id) SELECT * FROM unnest($1::text::text[], $2::text::text[]))
	INSERT INTO block_transactions (transaction_id, block_id) SELECT * FROM unnest($3::text::text[], $4::text::text[])`

// textArray is strings as one Postgres array literal, for a parameter the statement
// declares text and casts to text[] ($1::text::text[]). Both drivers pass text
// through as it is; given an array parameter, pgx parsed lib/pq's array literal
// back into a slice to encode it again, a tenth of a Put's time on the client.
func textArray(list []string) string {
	v, _ := pq.StringArray(list).Value() // strings always encode
	if s, ok := v.(string); ok {
		return s
	}
	return "{}" // nil
}

// indexRowsPerInsert is how many rows a multi-row insert of index rows takes on
// SQLite: a full chunk has always the same text.
const indexRowsPerInsert = 500

// insertIndexes writes the batch and transaction index rows of blocks.
func (m *Manager) insertIndexes(ctx context.Context, tx refset.Tx, blocks []storedBlock) error {
	batches := indexOf(blocks, func(b Block) IDs { return b.BatchIDs })
	txns := indexOf(blocks, func(b Block) IDs { return b.TransactionIDs })
	if m.dialect == schema.Postgres {
		_, err := tx.ExecContext(ctx, insertIndexesSQL,
			textArray(batches.ids), textArray(batches.blocks), textArray(txns.ids), textArray(txns.blocks))
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
			q := fmt.Sprintf(`INSERT INTO %s (%s, block_id) VALUES %s`, index.table, index.column,
				strings.TrimSuffix(strings.Repeat("(?, ?), ", end-start), ", "))
			if _, err := tx.ExecContext(ctx, q, args...); err != nil {
				return err
			}
		}
	}
	return nil
}
