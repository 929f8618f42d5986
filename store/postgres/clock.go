package postgres

// Expiry: the holds tables keep times as timestamptz. The clock is read as the row
// is written (clock_timestamp()), not when its transaction began (now()): whatever
// made the transaction slow before the write must not come off the hold's life.
func (dialectDriver) Expiry(ms string) string {
	return "clock_timestamp() + (" + ms + ") * interval '1 millisecond'"
}
