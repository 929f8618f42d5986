package blockmanager

import (
	"bytes"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
)

// NullBlockID is the predecessor of a genesis block. It always counts as present.
const NullBlockID = "0000000000000000"

// Block is a block of a chain, stored in the blocks table.
type Block struct {
	HeaderSignature string `db:"header_signature"`
	PreviousBlockID string `db:"previous_block_id"`
	// PreviousBlockRef is the stored link to the predecessor (a FOREIGN KEY). The
	// manager sets it when the predecessor is stored; it is nil for a genesis block
	// and for a block still waiting for its predecessor.
	PreviousBlockRef *string `db:"previous_block_ref"`
	BlockNum         int64   `db:"block_num"`
	BatchIDs         IDs     `db:"batch_ids"`
	TransactionIDs   IDs     `db:"transaction_ids"`
	Payload          []byte  `db:"payload"`
}

// ID is the block's header signature.
func (b Block) ID() string { return b.HeaderSignature }

// IDs is a list of batch or transaction IDs, stored as a JSON array.
type IDs []string

// Value stores the list as JSON.
func (ids IDs) Value() (driver.Value, error) {
	if ids == nil {
		return "[]", nil
	}
	b, err := json.Marshal([]string(ids))
	return string(b), err
}

// Scan reads the JSON array back.
func (ids *IDs) Scan(src any) error {
	var b []byte
	switch v := src.(type) {
	case string:
		b = []byte(v)
	case []byte:
		b = v
	case nil:
		*ids = nil
		return nil
	default:
		return fmt.Errorf("blockmanager: cannot scan %T into IDs", src)
	}
	if out, ok := plainList(b); ok {
		*ids = out
		return nil
	}
	var out []string
	if err := json.Unmarshal(b, &out); err != nil {
		return fmt.Errorf("blockmanager: IDs: %w", err)
	}
	*ids = out
	return nil
}

// Errors of the block manager, besides refset's. Match them with errors.Is.
var (
	// ErrEmptyBranch: Put was given no blocks.
	ErrEmptyBranch = errors.New("blockmanager: empty branch")
	// ErrMissingPredecessor: the first block's predecessor is not stored. It also
	// matches refset.ErrNotFound.
	ErrMissingPredecessor = errors.New("blockmanager: missing predecessor")
	// ErrBrokenChain: a block of a branch does not follow the one before it (its
	// previous block ID or its number is wrong).
	ErrBrokenChain = errors.New("blockmanager: blocks do not chain")
	// ErrUnknownBlock: a block ID that is not stored. It also matches
	// refset.ErrNotFound.
	ErrUnknownBlock = errors.New("blockmanager: unknown block")
)

// plainList decodes the common case of a JSON array of strings without escapes or
// spaces, as Value writes IDs, without the reflection of encoding/json: walks decode
// two lists per block. Anything else is left to encoding/json.
func plainList(b []byte) ([]string, bool) {
	if len(b) < 2 || b[0] != '[' || b[len(b)-1] != ']' || bytes.IndexByte(b, '\\') >= 0 {
		return nil, false
	}
	body := b[1 : len(b)-1]
	if len(body) == 0 {
		return []string{}, true
	}
	parts := bytes.Split(body, []byte(`","`))
	out := make([]string, len(parts))
	for i, p := range parts {
		if i == 0 {
			if len(p) == 0 || p[0] != '"' {
				return nil, false
			}
			p = p[1:]
		}
		if i == len(parts)-1 {
			if len(p) == 0 || p[len(p)-1] != '"' {
				return nil, false
			}
			p = p[:len(p)-1]
		}
		if bytes.IndexByte(p, '"') >= 0 {
			return nil, false
		}
		out[i] = string(p)
	}
	return out, true
}
