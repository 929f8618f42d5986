package sqlite

// Expiry: the holds tables keep times as Unix milliseconds. SQLite reads 'now' once
// per step of a statement, so the clock is read as the row is written, not when the
// transaction began: whatever made the transaction slow before the write does not
// come off the hold's life.
func (dialectDriver) Expiry(ms string) string { return nowMillis + " + (" + ms + ")" }
