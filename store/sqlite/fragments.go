package sqlite

import "encoding/json"

// What a component's own statements ask of SQLite (refsetdriver.Driver's
// fragments). SQLite offers neither TxLocks (its one writer orders write
// transactions) nor BulkWrites (a statement costs no round trip).

// ColumnIn reads the list as a JSON array (see StringList).
func (dialectDriver) ColumnIn(column string) string {
	return column + ` IN (SELECT value FROM json_each(?))`
}

// StringList is strings as a JSON array, for json_each.
func (dialectDriver) StringList(values []string) any {
	list, _ := json.Marshal(values) // strings always marshal
	return string(list)
}

// InProcess is true: SQLite's work is done by the goroutines that call it.
func (dialectDriver) InProcess() bool { return true }
