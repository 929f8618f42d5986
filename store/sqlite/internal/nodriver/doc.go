// Package nodriver holds the test of a program that links no SQLite driver: its test
// binary imports store/sqlite alone, as a program that forgot to choose one would.
package nodriver
