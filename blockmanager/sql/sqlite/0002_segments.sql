-- A walk reads a branch a segment at a time: a run of blocks along one branch, one
-- block per height as far as the writers could arrange, which one range scan of
-- (segment, block_num) reads whatever else is stored. The segment is a hint the walk
-- checks link by link (see segment.go). Blocks stored before segments existed are
-- all in segment 0, where a page is a range of heights, as walks read them before;
-- adding a column with a constant default rewrites no row.
ALTER TABLE blocks ADD COLUMN segment INTEGER NOT NULL DEFAULT 0;
CREATE INDEX IF NOT EXISTS blocks_segment ON blocks (segment, block_num);
-- The walks read by segment now; nothing reads by height alone.
DROP INDEX IF EXISTS blocks_block_num;
