-- A spend on Postgres is one statement, committed on its own; when it must be refused
-- (nothing locked, outputs that do not balance the inputs, books that disagree) this
-- raises, so the statement and everything it did is undone. A NULL reason refuses
-- nothing. The codes are custody's own: CU001 nothing locked, CU002 unbalanced,
-- CU003 the books disagree.
CREATE OR REPLACE FUNCTION custody_refuse(code text, reason text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF reason IS NOT NULL THEN
        RAISE EXCEPTION 'custody: %', reason USING ERRCODE = code;
    END IF;
    RETURN true;
END
$$;
