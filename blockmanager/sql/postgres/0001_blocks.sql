-- The RFC's tables. A block links to its predecessor through previous_block_ref once
-- the predecessor is stored (a FOREIGN KEY, so history cannot be deleted under a
-- chain); previous_block_id is what the block says its predecessor is.
CREATE TABLE IF NOT EXISTS blocks (
    header_signature   text   NOT NULL PRIMARY KEY,
    previous_block_id  text   NOT NULL,
    previous_block_ref text   REFERENCES blocks (header_signature) ON DELETE RESTRICT,
    block_num          bigint NOT NULL,
    batch_ids          text   NOT NULL,
    transaction_ids    text   NOT NULL,
    payload            bytea
);
CREATE INDEX IF NOT EXISTS blocks_previous_block_ref ON blocks (previous_block_ref);
-- Heights are contiguous along a branch, so a walk reads a page of heights with one
-- range scan and follows the links itself; the index covers what a walk that needs
-- only the links reads.
CREATE INDEX IF NOT EXISTS blocks_block_num ON blocks (block_num) INCLUDE (header_signature, previous_block_ref);

-- Which block holds a batch or transaction, so ContainsAnyBatches need not read
-- every block of a branch. The rows are parts of their block (ON DELETE CASCADE).
CREATE TABLE IF NOT EXISTS block_batches (
    batch_id text NOT NULL,
    block_id text NOT NULL REFERENCES blocks (header_signature) ON DELETE CASCADE,
    PRIMARY KEY (batch_id, block_id)
);
CREATE INDEX IF NOT EXISTS block_batches_block ON block_batches (block_id);
CREATE TABLE IF NOT EXISTS block_transactions (
    transaction_id text NOT NULL,
    block_id       text NOT NULL REFERENCES blocks (header_signature) ON DELETE CASCADE,
    PRIMARY KEY (transaction_id, block_id)
);
CREATE INDEX IF NOT EXISTS block_transactions_block ON block_transactions (block_id);

-- The completer's references: blocks waiting for their predecessor.
CREATE TABLE IF NOT EXISTS pending_blocks (
    block_id                  text NOT NULL PRIMARY KEY REFERENCES blocks (header_signature) ON DELETE RESTRICT,
    pending_previous_block_id text NOT NULL
);
CREATE INDEX IF NOT EXISTS pending_blocks_previous ON pending_blocks (pending_previous_block_id);

-- The chain controller's committed head. Fork heads are holds with an expiry.
CREATE TABLE IF NOT EXISTS chain_heads (
    chain_head text NOT NULL PRIMARY KEY REFERENCES blocks (header_signature) ON DELETE RESTRICT
);
