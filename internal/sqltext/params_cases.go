package sqltext

// SQLiteParamCases are queries and the number of arguments SQLite binds for each,
// shared by this package's test of SQLiteParams and store/sqlite's, which checks
// them against SQLite itself.
var SQLiteParamCases = []struct {
	Query string
	Want  int
}{
	{`SELECT 1`, 0},
	{`SELECT ?`, 1},
	{`INSERT INTO t (a, b) VALUES (?, ?)`, 2},
	{`SELECT '?', "?" /* ? */ -- ?` + "\n", 0},
	{`SELECT ?2`, 2},
	{`SELECT ?1, ?1`, 1},
	{`SELECT ?3, ?`, 4},
	{`SELECT :a, :a, @b, $c`, 3},
	{`SELECT :a, ?, :a`, 2},
	{`SELECT ?; SELECT ?, ?`, 3},
	{`SELECT ?;;SELECT ?`, 2},
	{`SELECT CASE WHEN ? THEN 1 END`, 1},
	{`SELECT ? -- ? ; SELECT ?`, 1},
}
