package sqlite

// Expiry: the holds tables keep times as Unix milliseconds.
func (dialectDriver) Expiry(ms string) string { return nowMillis + " + (" + ms + ")" }
