package tokens

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/refsetdb/refset/refsettest"
	"github.com/refsetdb/refset/store/postgres"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) {
	refsettest.Main(m, map[string]func(arg string) int{"replica": replicaProcess})
}

// replicaConfig is what a replica process is told, as JSON.
type replicaConfig struct {
	DSN      string
	Duration time.Duration
	ID       string
}

// replicaResult is what a replica process reports.
type replicaResult struct {
	Paid, Refused int64
	Stats         LockStats
}

var processOwners = []string{"ann", "ben", "cat", "dan", "eve"}

// replicaProcess pays between random owners until its time is up, with four
// goroutines sharing one connection pool, and prints what it did.
func replicaProcess(arg string) int {
	var config replicaConfig
	if err := json.Unmarshal([]byte(arg), &config); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	id := config.ID
	ctx := context.Background()
	db, err := postgres.Open(ctx, config.DSN, postgres.Options{MaxConns: 8})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer db.Close()
	v, err := Open(ctx, db, Config{LockWait: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	deadline := time.Now().Add(config.Duration)
	results := make(chan replicaResult, 4)
	for w := range 4 {
		go func() {
			var r replicaResult
			rng := rand.New(rand.NewPCG(uint64(len(id)+w), uint64(time.Now().UnixNano())))
			for n := 0; time.Now().Before(deadline); n++ {
				from, to := processOwners[rng.IntN(len(processOwners))], processOwners[rng.IntN(len(processOwners))]
				tx := fmt.Sprintf("%s-%d-%d", id, w, n)
				err := payTx(ctx, v, tx, from, to, int64(1+rng.IntN(30)))
				switch {
				case err == nil:
					r.Paid++
				case errors.Is(err, ErrInsufficientFunds) || errors.Is(err, ErrLocked):
					r.Refused++
				default:
					fmt.Fprintln(os.Stderr, "pay:", err)
					os.Exit(1)
				}
			}
			results <- r
		}()
	}
	var total replicaResult
	for range 4 {
		r := <-results
		total.Paid += r.Paid
		total.Refused += r.Refused
	}
	total.Stats = v.Stats()
	if err := json.NewEncoder(os.Stdout).Encode(total); err != nil {
		return 1
	}
	return 0
}

func payTx(ctx context.Context, v *Vault, tx, from, to string, amount int64) error {
	locked, err := v.Select(ctx, tx, from, amount, Filter{Identifier: "GBP"}, 10*time.Second)
	if err != nil {
		return err
	}
	_, _, err = v.Spend(ctx, tx, WithChange(locked, from, gbp(to, amount)))
	return err
}

// Two replica processes select and spend against one Postgres for a while; the books
// balance afterwards, no token was locked or spent twice, and both did real work.
func TestTwoReplicaProcesses(t *testing.T) {
	t.Parallel() // a schema of its own; its processes run for a set time
	duration := 20 * time.Second
	if testing.Short() {
		duration = 3 * time.Second
	}
	where := libpqDB.new(t)
	dsn := where.at
	v := openVault(t, where.open(t, 0), Config{})
	for _, o := range processOwners {
		issue(t, v, o, repeat(200, 5)...)
	}

	var cmds []*exec.Cmd
	var outs []*strings.Builder
	for p := range 2 {
		config, err := json.Marshal(replicaConfig{DSN: dsn, Duration: duration, ID: fmt.Sprintf("p%d", p)})
		require.NoError(t, err)
		cmd := refsettest.Process(t.Context(), "replica", string(config))
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		require.NoError(t, cmd.Start())
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	var results []replicaResult
	for i, cmd := range cmds {
		require.NoError(t, cmd.Wait(), "replica %d: %s", i, outs[i])
		var r replicaResult
		require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(outs[i].String())), &r), "replica %d printed %q", i, outs[i])
		results = append(results, r)
	}
	a := audit(t, v)
	assert.Equal(t, int64(len(processOwners)*200*5), a.Remaining, "every unit is still owned by someone")
	for i, r := range results {
		assert.Positive(t, r.Paid, "replica %d paid nothing", i)
		t.Logf("replica %d: %d paid, %d refused, %d lock attempts, %d lost races", i, r.Paid, r.Refused, r.Stats.Attempts, r.Stats.LostRaces)
	}
}
