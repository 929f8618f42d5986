// The packages the analyzer's tests check: a user's program of refset's real API.
module example.com/unitctxtest

go 1.25.0

require github.com/refsetdb/refset v0.0.0

require github.com/jmoiron/sqlx v1.4.0 // indirect

replace github.com/refsetdb/refset => ../../..
