// Package sqlident checks and quotes the SQL identifiers refset writes into
// statements: table, column and index names, and column types read from catalogs.
// Names are validated, never escaped: a name that is not a plain identifier is
// refused with refset.ErrInvalidIdentifier before any SQL is built from it.
package sqlident
