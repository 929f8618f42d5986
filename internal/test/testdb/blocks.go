package testdb

import (
	"database/sql"
	"strings"
	"testing"
)

// Block is the object the suites and benchmarks store: the RFC's chained block, its
// ID its hash, with a payload.
type Block struct {
	Hash    string  `db:"id"`
	Prev    *string `db:"prev"`
	Height  int64   `db:"height"`
	Payload []byte  `db:"payload"`
}

func (b Block) ID() string { return b.Hash }

// BlocksSchema is the RFC's example, written with {Text}-style column types (see
// [Types.In]): blocks chained by a self-reference, and two components' reference
// tables, pending and heads.
const BlocksSchema = `
CREATE TABLE blocks (
    id      {Text} NOT NULL PRIMARY KEY,
    prev    {Text} REFERENCES blocks (id) ON DELETE RESTRICT,
    height  {Int} NOT NULL,
    payload {Bytes}
);
CREATE TABLE pending (block_id {Text} NOT NULL PRIMARY KEY REFERENCES blocks (id) ON DELETE RESTRICT);
CREATE TABLE heads   (block_id {Text} NOT NULL PRIMARY KEY REFERENCES blocks (id) ON DELETE RESTRICT);
`

// Types are a dialect's column types, for statements the suites write once for every
// dialect.
type Types struct {
	Text, Int, Bytes, Time, Bool, Float string
}

var (
	sqliteTypes   = Types{Text: "TEXT", Int: "INTEGER", Bytes: "BLOB", Time: "TIMESTAMP", Bool: "BOOLEAN", Float: "REAL"}
	postgresTypes = Types{Text: "text", Int: "bigint", Bytes: "bytea", Time: "timestamptz", Bool: "boolean", Float: "double precision"}
)

// Types are the column types of b's dialect.
func (b Backend) Types() Types {
	if b.Postgres {
		return postgresTypes
	}
	return sqliteTypes
}

// In writes ty's types for the names {Text}, {Int}, {Bytes}, {Time}, {Bool} and
// {Float} in q.
func (ty Types) In(q string) string {
	return strings.NewReplacer("{Text}", ty.Text, "{Int}", ty.Int, "{Bytes}", ty.Bytes,
		"{Time}", ty.Time, "{Bool}", ty.Bool, "{Float}", ty.Float).Replace(q)
}

// Column is every value of the one column of rows, which a query returned with err;
// it fails tb on err or on an error reading them, and closes rows.
func Column[T any](tb testing.TB, rows *sql.Rows, err error) []T {
	tb.Helper()
	if err != nil {
		tb.Fatalf("testdb: query: %v", err)
	}
	defer rows.Close()
	var values []T
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			tb.Fatalf("testdb: scan: %v", err)
		}
		values = append(values, v)
	}
	if err := rows.Err(); err != nil {
		tb.Fatalf("testdb: read rows: %v", err)
	}
	return values
}
