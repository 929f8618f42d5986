// Package mattn links github.com/mattn/go-sqlite3, SQLite's C source compiled with
// cgo, as a driver of store/sqlite: a program that imports it for its side effect,
//
//	import _ "github.com/refsetdb/refset/store/sqlite/mattn"
//
// opens its SQLite databases with it. It is the faster of the two drivers, and needs a
// C compiler. Linked beside store/sqlite/modernc, it is the default, and modernc.org/
// sqlite is there to be asked for by name (sqlite.Options.Driver). In a program built
// with CGO_ENABLED=0, go-sqlite3 is a stub that fails when used: Open then refuses
// with refset.ErrInvalidConfig, saying so, rather than fail on its first statement.
package mattn
