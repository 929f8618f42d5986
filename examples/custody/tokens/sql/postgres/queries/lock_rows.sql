-- The general path's row locks: of the candidate tokens $1 (their IDs in one text
-- parameter, as the driver's StringList encodes them), those this transaction locked,
-- skipping the rows another transaction is locking right now so that a selector takes
-- other tokens instead of waiting. A dialect without this file (SQLite) runs one write
-- transaction at a time, so its rows need no lock: its transaction reads the candidates
-- again instead, those it found before it took the writer (tokens.go, readQueries).
SELECT id FROM tokens WHERE id = ANY ($1::text::text[]) FOR UPDATE SKIP LOCKED
