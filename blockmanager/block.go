package blockmanager

import (
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
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
	var s string
	switch v := src.(type) {
	case string:
		s = v
	case []byte:
		s = string(v) // the driver may reuse v; the IDs share this copy
	case nil:
		*ids = nil
		return nil
	default:
		return fmt.Errorf("blockmanager: cannot scan %T into IDs", src)
	}
	if out, ok := plainList(s); ok {
		*ids = out
		return nil
	}
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
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
// two lists per block. The IDs are substrings of s, so a list costs one allocation.
// Anything else is left to encoding/json.
func plainList(s string) ([]string, bool) {
	if len(s) < 2 || s[0] != '[' || s[len(s)-1] != ']' || strings.IndexByte(s, '\\') >= 0 {
		return nil, false
	}
	body := s[1 : len(s)-1]
	if len(body) == 0 {
		return []string{}, true
	}
	if len(body) < 2 || body[0] != '"' || body[len(body)-1] != '"' {
		return nil, false
	}
	body = body[1 : len(body)-1]
	out := make([]string, 0, strings.Count(body, `","`)+1)
	for id := range strings.SplitSeq(body, `","`) {
		if strings.IndexByte(id, '"') >= 0 {
			return nil, false
		}
		out = append(out, id)
	}
	return out, true
}
