package postgres

// Expiry: the holds tables keep times as timestamptz.
func (dialectDriver) Expiry(ms string) string {
	return "now() + (" + ms + ") * interval '1 millisecond'"
}
