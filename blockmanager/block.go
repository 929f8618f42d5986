package blockmanager

import (
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/refsetdb/refset/internal/sentinel"
	"github.com/refsetdb/refset/refset"
)

// NullBlockID is the predecessor of a genesis block. It always counts as present.
const NullBlockID = "0000000000000000"

// Block is a block of a chain, stored in the blocks table. Put and Receive refuse
// (refset.ErrInvalidID) a block whose header signature or previous block ID is
// empty, one named NullBlockID, and IDs (its own, its predecessor's, its batches'
// and transactions') that are not valid UTF-8 or hold a NUL, which no database
// would store as given.
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

// checkBlock refuses, before anything is read or written, a block that no chain can
// hold: refset.ErrInvalidID for an empty header signature or predecessor, a block
// named NullBlockID (which names no block: it is genesis's predecessor), or an ID
// (the block's, its predecessor's, a batch's or a transaction's) that is not valid
// UTF-8 or holds a NUL, which PostgreSQL's text refuses and SQLite's JSON lists would
// change; ErrBrokenChain for a block that is its own predecessor, a genesis block not
// numbered 0, or any other block numbered below 1, which no block can precede.
func checkBlock(b Block) error {
	id := b.HeaderSignature
	switch {
	case id == "":
		return fmt.Errorf("blockmanager: %w: a block's header signature is empty (its previous block is %s, its number %d)",
			refset.ErrInvalidID, quoted(b.PreviousBlockID), b.BlockNum)
	case id == NullBlockID:
		return fmt.Errorf("blockmanager: %w: block %s: NullBlockID is the predecessor of genesis and names no block", refset.ErrInvalidID, quoted(id))
	case b.PreviousBlockID == "":
		return fmt.Errorf("blockmanager: %w: block %s: its previous block ID is empty (a genesis block follows NullBlockID)", refset.ErrInvalidID, quoted(id))
	}
	if err := checkText("header signature", id, id); err != nil {
		return err
	}
	if err := checkText("previous block ID", id, b.PreviousBlockID); err != nil {
		return err
	}
	for _, list := range []struct {
		what string
		ids  IDs
	}{{"batch ID", b.BatchIDs}, {"transaction ID", b.TransactionIDs}} {
		for _, s := range list.ids {
			if err := checkText(list.what, id, s); err != nil {
				return err
			}
		}
	}
	switch {
	case b.PreviousBlockID == id:
		return fmt.Errorf("%w: %s is its own previous block", ErrBrokenChain, quoted(id))
	case b.PreviousBlockID == NullBlockID && b.BlockNum != 0:
		return fmt.Errorf("%w: genesis block %s has number %d", ErrBrokenChain, shown(id), b.BlockNum)
	case b.PreviousBlockID != NullBlockID && b.BlockNum < 1:
		return fmt.Errorf("%w: %s has number %d, which no block can precede, but follows %s", ErrBrokenChain, shown(id), b.BlockNum, shown(b.PreviousBlockID))
	}
	return nil
}

// checkText refuses an ID of block id that the databases cannot store as it is.
func checkText(what, id, s string) error {
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("blockmanager: %w: block %s: %s %s is not valid UTF-8 text without NUL", refset.ErrInvalidID, quoted(id), what, quoted(s))
	}
	return nil
}

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

// shown is a block ID as an error's message shows it: quoted when it has characters
// that do not print (a peer's block ID with a newline would otherwise start a line
// of its own in a log), cut when long. quoted is the same, always quoted.
func shown(id any) string     { return sentinel.ID(id) }
func quoted(id string) string { return sentinel.QuotedID(id) }
