package postgres_test

import (
	"context"
	"log"
	"time"

	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/store"
	"github.com/refsetdb/refset/store/postgres"
)

type Token struct {
	Key    string `db:"id"`
	Owner  string `db:"owner"`
	Amount int64  `db:"amount"`
}

func (t Token) ID() string { return t.Key }

// Several replicas may open the same database; each builds its own set on the shared
// table. A hold with an expiry is a lock that lapses by the database's clock.
// (Not run by go test: it needs a server.)
func Example() {
	ctx := context.Background()
	db, err := postgres.Open(ctx, "postgres://app@localhost/custody?sslmode=disable", postgres.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	setStore, err := store.NewStore[Token, string](ctx, db, store.Config{Table: "custody.tokens"})
	if err != nil {
		log.Fatal(err)
	}
	tokens := refset.New(setStore)
	if _, err := tokens.Upgrade(ctx, "token-1", tokens.Hold("tx-42", 30*time.Second)); err != nil {
		log.Fatal(err)
	}
}
