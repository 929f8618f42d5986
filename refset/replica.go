package refset

import "errors"

// replicaReader is a database with a replica: postgres.DB.
type replicaReader interface {
	// ReplicaReader is where reads that may lag go, or nil without a replica.
	ReplicaReader() Querier
}

// ReplicaOf is db's replica, where the reads listed in the package's section "Reads
// from a replica" go first, or nil when db has none.
func ReplicaOf(db Database) Querier {
	if r, ok := db.(replicaReader); ok {
		return r.ReplicaReader()
	}
	return nil
}

// FallbackReason is why a read on a replica is made again on the primary, as
// Observer.ReadFellBack names it: "missing" when the replica found no row (err is
// nil, or matches ErrNotFound), "failed" for any other error.
func FallbackReason(err error) string {
	if err == nil || errors.Is(err, ErrNotFound) {
		return "missing"
	}
	return "failed"
}
