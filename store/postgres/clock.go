package postgres

// Now and Expiry: the holds tables keep times as timestamptz.
func (dialectDriver) Now() string { return "now()" }

func (dialectDriver) Expiry(ms string) string {
	return "now() + (" + ms + ") * interval '1 millisecond'"
}
