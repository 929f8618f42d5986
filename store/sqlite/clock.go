package sqlite

// Now and Expiry: the holds tables keep times as Unix milliseconds.
func (dialectDriver) Now() string { return nowMillis }

func (dialectDriver) Expiry(ms string) string { return nowMillis + " + (" + ms + ")" }
