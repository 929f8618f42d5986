// Command refsetvet reports calls of refset made inside a unit of work with a
// context other than the unit's own (the analyzer of package
// github.com/refsetdb/refset/analysis/unitctx). Run it with go vet, which hands it
// one package at a time:
//
//	go build -o refsetvet github.com/refsetdb/refset/cmd/refsetvet
//	go vet -vettool=$(pwd)/refsetvet ./...
//
// or on its own, with package patterns: refsetvet ./...
package main

import (
	"github.com/refsetdb/refset/analysis/unitctx"
	"golang.org/x/tools/go/analysis/singlechecker"
)

func main() { singlechecker.Main(unitctx.Analyzer) }
