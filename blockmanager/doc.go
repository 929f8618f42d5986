// Package blockmanager is Hyperledger Sawtooth's BlockManager rebuilt on a
// refset.RefSet, as the RefSet RFC describes.
//
// Blocks live in the blocks table. A block links to its predecessor through
// previous_block_ref, a FOREIGN KEY to the same table, so the database refuses to
// delete history that a chain still stands on; committed history needs no reference
// rows of its own. The RFC's two components keep their references in their own
// tables: the Completer in pending_blocks (blocks waiting for their predecessor), the
// ChainController in chain_heads (the committed head) and in a fork cache of holds
// that expire. When a waiting block's predecessor arrives, through the completer or
// through Put, the waiting block is linked and handed to the controller: the release
// command deletes the pending row and the controller's acquire command records it, in
// the transaction that stored the predecessor. The fork cache holds the heads of
// branches other than the committed one, never a committed block.
//
// Every block also carries a segment number: the manager keeps the blocks of a
// segment on one line of a branch, so a walk (Branch, BranchDiff, CommonAncestor)
// reads a branch a segment at a time, each page one range scan, however many other
// blocks are stored. The segment is a hint the walks check link by link; blocks
// stored before segments existed are all in segment 0 and walked as before.
//
// Every transaction the package opens is refset.InTx's, so a Command passed to Put
// that fails or panics leaves nothing behind.
//
// Whatever no component references any more (a stale fork, a branch put and then
// released) is pruned by the set's clean-up (package cleanup), which the Manager
// installs: run Collector().Run in the background, or Collect when convenient.
//
// # Tables of your own
//
// A program may keep its own tables that reference blocks, before the first Open or
// while the manager runs; clean-up finds them in the catalog. Reference
// blocks (header_signature), and index the referencing column (clean-up refuses a
// reference without an index: Open fails, and a running collector's passes fail,
// with the CREATE INDEX to run; the refset command's why and check answer all the
// same). Declare the key by what its rows are:
//
//   - A holder, whose rows keep a block alive (an escrow, an audit pin): ON DELETE
//     RESTRICT. Clean-up deletes a block only once no such row references it.
//   - Per-block data, deleted with its block (receipts, an index of the block's
//     contents): ON DELETE CASCADE, with the table named in Config.Parts. A cascading
//     key from a table Parts does not name is warned of at every Open, since a holder
//     declared CASCADE by mistake lets clean-up delete the blocks it meant to hold.
//
// A table created before Open is followed from Open on. One created while the
// manager runs is followed by the running collector (Collector().Collect or Run)
// once it meets a block only that table keeps: the database refuses the delete, and
// the collector installs for the new table in the same pass, with no restart; until
// then the block is simply not deleted, and no signal is lost, since deleting a row
// of the new table can only matter for a block that its review will find.
//
// The Manager keeps no state in memory that correctness depends on: a new process on
// the same database carries on where the last one stopped, and several receivers, in
// one process or many on one Postgres, may work at once.
package blockmanager
