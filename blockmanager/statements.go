package blockmanager

import (
	"strings"

	"github.com/refsetdb/refset/refsetdriver"
)

// statements are the manager's statements whose text depends on the database:
// written once, at Open, from what its driver offers, and rebound to its
// placeholders.
type statements struct {
	// lock takes a lock until the transaction ends, named by its one argument
	// (the arrivals gate's exclusive, too: see passGate), and gateShared the gate's
	// shared. Both are "" where the database runs one write transaction at a time,
	// which orders them already.
	lock, gateShared string
	// predecessor reads a block as a predecessor (predecessorSQL). keep does too,
	// and keeps its row from clean-up until the transaction ends; keepGated passes
	// the arrivals gate first, named by its first argument: "" where the database
	// needs no gate, and keep no lock.
	predecessor, keep, keepGated string
	lookUp                       string // lookUpSQL
	// storedIDs, storedLinks and waitingFor take one list; pendingOf takes the same
	// list twice. storedLinks reads each block's number and previous block ID.
	storedIDs, storedLinks, waitingFor, pendingOf string
	// insertIndexes writes the rows of both indexes in one statement, from four
	// lists: batch IDs and their blocks, transaction IDs and theirs. "" where the
	// database takes multi-row inserts instead.
	insertIndexes string
	// list encodes a list of IDs as one argument.
	list func(ids []string) any
}

func newStatements(drv refsetdriver.Driver) statements {
	pendingWhere := `SELECT block_id, pending_previous_block_id FROM pending_blocks WHERE `
	s := statements{
		predecessor: drv.Rebind(predecessorSQL),
		lookUp:      drv.Rebind(lookUpSQL),
		storedIDs:   drv.Rebind(`SELECT header_signature FROM blocks WHERE ` + drv.ColumnIn("header_signature")),
		storedLinks: drv.Rebind(`SELECT header_signature, block_num, previous_block_id FROM blocks WHERE ` + drv.ColumnIn("header_signature")),
		waitingFor:  drv.Rebind(pendingWhere + drv.ColumnIn("pending_previous_block_id")),
		pendingOf:   drv.Rebind(pendingWhere + drv.ColumnIn("block_id") + ` OR ` + drv.ColumnIn("pending_previous_block_id")),
		list:        drv.StringList,
	}
	s.keep = s.predecessor
	if locks, ok := drv.(refsetdriver.TxLocks); ok {
		s.lock = drv.Rebind(`SELECT ` + locks.TxLock(false))
		s.gateShared = drv.Rebind(`SELECT ` + locks.TxLock(true))
		keyShare := ` ` + locks.KeyShare("p")
		s.keep = drv.Rebind(predecessorSQL + keyShare)
		// The gate is taken as the statement joins the predecessor's row, before the
		// row lock above the join.
		gated := strings.Replace(predecessorSQL, `FROM blocks p WHERE`,
			`FROM blocks p, (SELECT `+locks.TxLock(true)+`) gate WHERE`, 1)
		s.keepGated = drv.Rebind(gated + keyShare)
	}
	if bulk, ok := drv.(refsetdriver.BulkWrites); ok {
		// One round trip and one statement text whatever the number of blocks (pgx
		// prepares and caches every statement text it runs, so texts that vary with
		// the number of rows would fill its cache).
		s.insertIndexes = drv.Rebind(`WITH batches AS (
		INSERT INTO block_batches (batch_id, block_id) SELECT * FROM ` + bulk.Unnest(2) + `)
	INSERT INTO block_transactions (transaction_id, block_id) SELECT * FROM ` + bulk.Unnest(2))
	}
	return s
}
