// Package sqlstore is the part of a SQL SetStore that does not depend on the dialect:
// checking and quoting identifiers, mapping a struct's `db` tags to a table's
// columns, and running Persist, Get, Has, Hold and Unhold with the statements a
// dialect package (store/sqlite, store/postgres) writes for it. After Prepare a store
// runs those statements prepared: reads on the database's reader, writes in the
// transactions the database began (Tx), which Begin returns.
package sqlstore
