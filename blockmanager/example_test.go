package blockmanager_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"

	"github.com/refsetdb/refset/blockmanager"
	"github.com/refsetdb/refset/store/sqlite"
	_ "github.com/refsetdb/refset/store/sqlite/modernc" // modernc.org/sqlite (pure Go)
)

func block(id, prev string, num int64) blockmanager.Block {
	return blockmanager.Block{HeaderSignature: id, PreviousBlockID: prev, BlockNum: num,
		BatchIDs: blockmanager.IDs{"batch-" + id}}
}

// Blocks arrive out of order: the completer keeps those whose predecessor is missing
// as pending, and completes them all when it arrives.
func ExampleCompleter() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "blockmanager-example")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "node.db"), sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	m, err := blockmanager.Open(ctx, db, blockmanager.Config{})
	if err != nil {
		log.Fatal(err)
	}
	c := m.Completer()
	for _, b := range []blockmanager.Block{
		block("b2", "b1", 2),
		block("b1", "b0", 1),
		block("b0", blockmanager.NullBlockID, 0),
	} {
		out, err := c.Receive(ctx, b)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: pending=%v completed=%d\n", b.HeaderSignature, out.Pending, out.Completed)
	}
	head, _ := m.Controller().Head(ctx)
	fmt.Println("head:", head)
	var branch []string
	for b, err := range m.Branch(ctx, head) {
		if err != nil {
			log.Fatal(err)
		}
		branch = append(branch, b.HeaderSignature)
	}
	fmt.Println("branch:", strings.Join(branch, " <- "))
	found, _ := m.ContainsAnyBatches(ctx, head, []string{"batch-b1"})
	fmt.Println("batch-b1 on the head's branch:", found)
	// Output:
	// b2: pending=true completed=0
	// b1: pending=true completed=0
	// b0: pending=false completed=3
	// head: b2
	// branch: b2 <- b1 <- b0
	// batch-b1 on the head's branch: true
}
