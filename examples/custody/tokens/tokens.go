package tokens

import (
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
	"github.com/refsetdb/refset/schema"
	"github.com/refsetdb/refset/store"
)

// migrations is custody's SQL: a folder per dialect named as the database's driver
// names it, with the dialect's tables and its own statements (queries), if it has
// any, and the locks' migrations, written alike for every dialect (locks).
//
//go:embed sql
var migrations embed.FS

// Token is a fungible token: an amount of an identifier ("GBP", "BTC") of a type,
// issued by an issuer, notarised by a notary, owned by an owner.
type Token struct {
	TokenID    string `db:"id"`
	Owner      string `db:"owner"`
	Type       string `db:"token_type"`
	Identifier string `db:"identifier"`
	Issuer     string `db:"issuer"`
	Notary     string `db:"notary"`
	Amount     int64  `db:"amount"`
}

// ID is the token's ID.
func (t Token) ID() string { return t.TokenID }

// Filter narrows a selection: empty fields match anything; Predicate, if set, is
// asked about each candidate.
//
// Predicate runs while Select looks for candidates: on PostgreSQL in Select's
// transaction, on SQLite before it begins (so that a refusal does not hold the one
// writer), in the unit's transaction inside a unit of work. It should be quick and
// must not call the Vault: a unit's transaction holds SQLite's one writer. If it panics,
// Select rolls back any transaction it began, so no lock or open transaction is left
// behind, and then panics again with the same value.
type Filter struct {
	Type, Identifier, Issuer, Notary string
	Predicate                        func(Token) bool
}

// Errors of custody. Match them with errors.Is.
var (
	// ErrInsufficientFunds: the owner's matching tokens, locked or not, do not cover
	// the amount.
	ErrInsufficientFunds = errors.New("tokens: insufficient funds")
	// ErrLocked: the owner has enough, but other transactions hold locks on too much
	// of it; it may succeed later.
	ErrLocked = errors.New("tokens: funds sufficient but locked by other transactions")
	// ErrNothingLocked: Spend found no token locked by the transaction: its locks
	// expired (whether or not another transaction has taken their tokens since), it
	// released or spent them, or it never selected any.
	ErrNothingLocked = errors.New("tokens: no token locked by the transaction")
	// ErrUnbalanced: a spend's outputs do not add up to its inputs, per kind of token.
	// It is also what a spend meets when some of its locks expired (taken over by
	// another transaction or not: an expired lock is no lock): less is locked than the
	// outputs were made for.
	ErrUnbalanced = errors.New("tokens: outputs do not balance the inputs")
	// ErrInvalid: a malformed request (empty owner or transaction ID, a non-positive
	// amount, a token with no owner, an ID, owner, type, identifier, issuer or notary
	// that is not valid UTF-8, holds a NUL or is longer than MaxText bytes, two tokens
	// of one request with one ID, an output whose ID another token has).
	ErrInvalid = errors.New("tokens: invalid request")
)

// MaxText is the longest transaction ID, token ID, owner, type, identifier, issuer or
// notary, in bytes. PostgreSQL indexes the owner, the identifier and the ID together,
// and refuses an index row of more than about 2.7 kB.
const MaxText = 512

// checkText refuses what a text column cannot keep on every database alike: invalid
// UTF-8 and NUL (PostgreSQL refuses both; SQLite would keep them), and more than
// MaxText bytes.
func checkText(what, s string) error {
	switch {
	case len(s) > MaxText:
		return fmt.Errorf("%w: %s of %d bytes, more than %d", ErrInvalid, what, len(s), MaxText)
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s %q is not valid UTF-8", ErrInvalid, what, s)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s %q holds a NUL", ErrInvalid, what, s)
	}
	return nil
}

// checkTexts is checkText of each pair of what and s.
func checkTexts(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		if err := checkText(pairs[i], pairs[i+1]); err != nil {
			return err
		}
	}
	return nil
}

// takenID is err, and ErrInvalid beside it when a token ID the caller gave is taken.
func takenID(err error) error {
	if errors.Is(err, refset.ErrDuplicate) && !errors.Is(err, ErrInvalid) {
		return fmt.Errorf("%w: a token ID is taken: %w", ErrInvalid, err)
	}
	return err
}

// lockHolder is the holder of txID's locks.
func lockHolder(txID string) string { return "tx:" + txID }

// Config tunes a Vault. The zero value is a sane default.
type Config struct {
	// MaxAttempts bounds how often Select tries again at once after losing a race for
	// a token to another transaction. Zero means 30.
	MaxAttempts int
	// Grace is the clean-up grace period of new tokens. Zero means one minute.
	Grace time.Duration
	// LockWait is how long Select waits when the owner has enough but other
	// transactions hold locks on too much of it, polling with jittered exponential
	// back-off (up to 250 ms apart, so many waiters do not swamp the database). Zero
	// means it fails with ErrLocked at once.
	LockWait time.Duration
	// Logger receives the collector's passes of Collect (see cleanup.Config.Logger).
	// Nil means the database's logger (the stores' Options.Logger), if any.
	Logger *slog.Logger
}

// Vault holds the tokens of one database. Replicas each open their own Vault on the
// same database.
type Vault struct {
	db          refset.Database
	drv         refsetdriver.Driver // what differs between databases
	fast        bool                // the dialect has the fast paths' statements (postgres.go)
	stmts       statements          // the fast paths' statements
	lockRowsSQL string              // the general path's statement that takes candidates' rows (lockRows)
	oneWriter   bool                // the general path's transaction takes the one writer (lookFirst)
	set         *refset.RefSet[Token, string]
	collector   *cleanup.Collector
	maxAttempts int
	lockWait    time.Duration
	attempts    atomic.Int64
	lost        atomic.Int64
	general     atomic.Int64
	takeovers   atomic.Int64
}

// Open creates the custody tables if needed (on a database of store/sqlite or
// store/postgres), installs clean-up and returns the vault.
func Open(ctx context.Context, db refset.Database, cfg Config) (*Vault, error) {
	v := &Vault{db: db, maxAttempts: cfg.MaxAttempts, lockWait: cfg.LockWait}
	if v.maxAttempts <= 0 {
		v.maxAttempts = 30
	}
	grace := cfg.Grace
	if grace <= 0 {
		grace = time.Minute
	}
	collect := cleanup.Config{Table: "tokens", Grace: grace, Logger: cfg.Logger}
	var err error
	if v.drv, err = refsetdriver.Of(db); err != nil {
		return nil, fmt.Errorf("tokens: open: %w", err)
	}
	v.readQueries()
	if err = v.migrate(ctx); err != nil {
		return nil, fmt.Errorf("tokens: open: %w", err)
	}
	var tokens refset.SetStore[Token, string]
	if tokens, err = store.NewStore[Token, string](ctx, db, store.Config{Table: "tokens"}); err == nil {
		v.set = refset.New(tokens)
		v.collector, err = store.NewCollector(ctx, db, collect)
	}
	if err != nil {
		return nil, fmt.Errorf("tokens: open: %w", err)
	}
	return v, nil
}

// migrate brings custody's tables up to date, in one transaction; a later Open finds
// nothing to do.
func (v *Vault) migrate(ctx context.Context) error {
	m, err := v.migrator()
	if err == nil {
		_, err = m.Migrate(ctx, schema.DirectionUp, nil)
	}
	return err
}

// migrator is refset's migrator of custody's tables: the dialect's tables (the tokens
// table among them), then the tokens set's (its holds table and review queue, which
// reference the tokens table), then the locks' migrations, written alike for every
// dialect, which read the set's holds table. Each is recorded under a name of its own.
func (v *Vault) migrator() (*schema.Migrator, error) {
	tables, err := fs.Sub(migrations, v.sqlDir()+"/tables")
	if err != nil {
		return nil, err
	}
	locks, err := fs.Sub(migrations, "sql/locks")
	if err != nil {
		return nil, err
	}
	return schema.New(v.db, schema.Config{
		Components: []schema.Component{
			{Name: "custody-tables", Migrations: tables},
			{Name: "custody-locks", Migrations: locks, AfterSets: true},
		},
		Sets: []schema.Set{{Table: "tokens"}},
	})
}

// sqlDir is the folder of the database's dialect in migrations.
func (v *Vault) sqlDir() string { return "sql/" + v.drv.Name() }

// readQueries reads the dialect's own statements (sqlDir()/queries/<name>.sql), those
// it has: the fast paths' (all three or none: Select's, Pay's and Spend's call
// functions of its tables) and the general path's row locks.
func (v *Vault) readQueries() {
	query := func(name string) string {
		text, _ := fs.ReadFile(migrations, v.sqlDir()+"/queries/"+name+".sql") // none: the dialect does without
		return strings.TrimSpace(sqlComment.ReplaceAllString(string(text), ""))
	}
	v.lockRowsSQL = query("lock_rows")
	if v.lockRowsSQL == "" {
		// No row locks: write transactions run one at a time, so a candidate stays
		// what the transaction read of it. Candidates read before it began (lookFirst)
		// are read again in it: those spent or locked meanwhile are left.
		v.oneWriter = true
		v.lockRowsSQL = v.sql(`SELECT t.id FROM tokens t WHERE ` + v.drv.ColumnIn("t.id") +
			` AND NOT EXISTS (SELECT 1 FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > ` + v.clock() + `)`)
	}
	own, ok := v.drv.(refsetdriver.OwnCommits)
	v.stmts.db, v.stmts.own = v.db, own
	v.stmts.selects.query, v.stmts.pay.query, v.stmts.spend.query = query("select"), query("pay"), query("spend")
	v.stmts.paid, v.stmts.selected = query("paid"), query("selected")
	// The fast paths commit on their own: they run where the Driver can run them so.
	v.fast = v.stmts.selects.query != "" && ok
}

// sqlComment is a whole-line comment of an SQL file: for its reader, not the server
// (an unprepared statement would send it on every call).
var sqlComment = regexp.MustCompile(`(?m)^\s*--.*\n`)

// Collect is the tokens' clean-up: it removes the expired locks no Select took over
// (counted in HoldsExpired), then collects any token nothing holds.
func (v *Vault) Collect(ctx context.Context) (cleanup.Stats, error) {
	expired, err := v.exec(ctx, `DELETE FROM token_locks WHERE expires_at <= `+v.clock())
	if err != nil {
		return cleanup.Stats{}, err
	}
	stats, err := v.collector.Collect(ctx)
	stats.HoldsExpired += expired
	return stats, err
}

// clock is the database's clock as a statement reads it, which every test of a lock
// here reads: the moment the row is read, as the dialect's Expiry writes the locks'
// expiries (PostgreSQL's clock_timestamp()), not the start of the transaction (its
// now(), which in a unit of work may be long past, and would find locks live that
// expired since). It is never earlier than the test, so no lock is found expired
// while it lives.
func (v *Vault) clock() string { return v.drv.Expiry("0") }

// Set is the set the tokens live in.
func (v *Vault) Set() *refset.RefSet[Token, string] { return v.set }

func (v *Vault) sql(q string) string { return v.drv.Rebind(q) }

// NewID returns a random token ID.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Issue creates tokens (an ID is made for each token without one), held by their
// owners, in one transaction; txID is recorded as their creator.
func (v *Vault) Issue(ctx context.Context, txID string, toks ...Token) ([]Token, error) {
	var out []Token
	err := refset.InTx(ctx, v.db, func(ctx context.Context, tx refset.Tx) error {
		var err error
		if out, err = prepare(txID, toks); err == nil {
			out, err = v.create(ctx, tx, txID, out, true)
		}
		return err
	})
	if err != nil {
		return nil, takenID(err)
	}
	return out, nil
}

// prepare checks new tokens and gives an ID to each that has none.
func prepare(txID string, toks []Token) ([]Token, error) {
	if txID == "" {
		return nil, fmt.Errorf("%w: empty transaction ID", ErrInvalid)
	}
	if err := checkText("transaction ID", txID); err != nil {
		return nil, err
	}
	out := make([]Token, len(toks))
	ids := make(map[string]bool, len(toks))
	for i, t := range toks {
		if t.Owner == "" || t.Amount <= 0 || t.Identifier == "" {
			return nil, fmt.Errorf("%w: token %+v needs an owner, an identifier and a positive amount", ErrInvalid, t)
		}
		if err := checkTexts("token ID", t.TokenID, "owner", t.Owner, "type", t.Type, "identifier", t.Identifier,
			"issuer", t.Issuer, "notary", t.Notary); err != nil {
			return nil, err
		}
		if t.TokenID == "" {
			t.TokenID = NewID()
		}
		if ids[t.TokenID] {
			return nil, fmt.Errorf("%w: two tokens with ID %q", ErrInvalid, t.TokenID)
		}
		ids[t.TokenID] = true
		out[i] = t
	}
	return out, nil
}

// create adds tokens that prepare has checked, held by their owners; issued says
// whether they are new value (Issue) rather than a spend's outputs.
func (v *Vault) create(ctx context.Context, tx refset.Tx, txID string, out []Token, issued bool) ([]Token, error) {
	if len(out) == 0 {
		return out, nil
	}
	if _, err := v.set.AddAllTx(ctx, tx, out); err != nil {
		return nil, err
	}
	// The owners' holds and the history rows, a thousand rows per statement (both
	// databases bound the parameters of one statement).
	for start := 0; start < len(out); start += 1000 {
		chunk := out[start:min(start+1000, len(out))]
		owners := make([]any, 0, len(chunk))
		history := make([]any, 0, 6*len(chunk))
		for _, t := range chunk {
			owners = append(owners, t.TokenID)
			history = append(history, t.TokenID, t.Owner, t.Identifier, t.Amount, txID, issued)
		}
		if _, err := tx.ExecContext(ctx, v.sql(`INSERT INTO token_owners (token_id) VALUES `+rows(len(chunk), 1)), owners...); err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, v.sql(`INSERT INTO token_history (token_id, owner, identifier, amount, created_by, issued) VALUES `+rows(len(chunk), 6)), history...); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// rows is the placeholders of n rows of k values: (?, ?), (?, ?), ...
func rows(n, k int) string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", k), ", ") + ")"
	return strings.TrimSuffix(strings.Repeat(row+", ", n), ", ")
}

func list(n int) string { return strings.TrimSuffix(strings.Repeat("?, ", n), ", ") }

// Select locks tokens of owner matching f until they cover amount, for txID, each
// lock expiring ttl after it is taken, by the database's clock. It returns the locked
// tokens (their sum may exceed amount: Spend gives the change back). It fails with
// ErrInsufficientFunds or ErrLocked, and then holds no lock it took.
//
// The databases keep a lock's expiry in whole milliseconds, and ttl is rounded up to
// them, so that a lock lives at least ttl: a positive ttl under a millisecond makes a
// lock of one millisecond (not one expired as it is written). Every positive
// time.Duration, up to the largest (about 292 years), is honoured on every database.
// A ttl of zero or less fails with ErrInvalid and changes nothing.
// A connection
// lost once PostgreSQL's fast path sent its statement is settled as Pay's is: Select
// returns txID's live locks on matching tokens if they cover amount (those of an
// earlier Select of txID among them), refset.ErrUnavailable otherwise. SelectUntil
// also says when the locks expire.
func (v *Vault) Select(ctx context.Context, txID, owner string, amount int64, f Filter, ttl time.Duration) ([]Token, error) {
	got, _, err := v.SelectUntil(ctx, txID, owner, amount, f, ttl)
	return got, err
}

// SelectUntil is Select, and also returns when the locks it took expire by the
// database's clock (the earliest of them): no other transaction takes the tokens
// before then. Each lock's ttl starts when the lock is written, not when the call
// began, so whatever made the call slow (a large claim, a wait for another
// transaction's row lock, a loaded server) does not come off it; what the commit and
// the answer's way back take does. A caller that waited before using the tokens (to
// ask someone, say) compares the expiry with the database's clock to tell how long it
// still has.
func (v *Vault) SelectUntil(ctx context.Context, txID, owner string, amount int64, f Filter, ttl time.Duration) (locked []Token, expires time.Time, err error) {
	if txID == "" || owner == "" || amount <= 0 || ttl <= 0 {
		return nil, time.Time{}, fmt.Errorf("%w: Select needs a transaction ID, an owner, a positive amount and a positive ttl (%v)", ErrInvalid, ttl)
	}
	if err := checkTexts("transaction ID", txID, "owner", owner, "type", f.Type, "identifier", f.Identifier,
		"issuer", f.Issuer, "notary", f.Notary); err != nil {
		return nil, time.Time{}, err
	}
	err = v.retry(ctx, func() (err error) {
		locked, expires, err = v.selectAttempt(ctx, txID, owner, amount, f, ttl)
		return err
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	return locked, expires, nil
}

// lockMillis is a lock's time-to-live ttl, positive, in the whole milliseconds the
// databases keep expiries in, rounded up: a lock lives at least ttl. (Rounded down,
// as time.Duration.Milliseconds rounds, a ttl under a millisecond was 0, a lock that
// had expired when it was written.) The largest time.Duration is some 9.2e12 ms, which
// neither database's arithmetic on the clock overflows.
func lockMillis(ttl time.Duration) int64 {
	ms := int64(ttl / time.Millisecond)
	if ttl%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// retry runs attempt until it succeeds or fails for good, and counts the attempts
// and the races lost. A race lost to another transaction (errRace, a lock the
// locks' primary key refused, a deadlock or serialization failure) is tried again at
// once, after a jittered pause so racing replicas fall out of step; after
// MaxAttempts of those, or when funds are locked by committed transactions
// (ErrLocked), it waits with jittered exponential back-off, until LockWait has
// passed. A duplicate key is a race only where selectOnce says so (a lock's): one of
// an output's ID is the caller's, and trying again would meet it again.
func (v *Vault) retry(ctx context.Context, attempt func() error) error {
	deadline := time.Now().Add(v.lockWait)
	wait := time.Millisecond
	for races := 0; ; {
		v.attempts.Add(1)
		err := attempt()
		race := errors.Is(err, errRace) || errors.Is(err, refset.ErrConflict)
		if race {
			v.lost.Add(1)
			races++
		}
		var pause time.Duration
		switch {
		case race && races < v.maxAttempts:
			pause = time.Duration(mrand.IntN(1+min(races, 10)*500)) * time.Microsecond
		case race && time.Now().After(deadline):
			return fmt.Errorf("%w: lost the race for tokens %d times: %w", ErrLocked, races, err)
		case race: // too contended to win now: wait as for locked funds, then race again
			races = 0
			fallthrough
		case errors.Is(err, ErrLocked) && time.Now().Before(deadline):
			// Funds locked by committed transactions free up when those spend or
			// release: wait, backing off.
			pause, wait = wait/2+time.Duration(mrand.Int64N(int64(wait))), min(2*wait, 250*time.Millisecond)
		default:
			return err
		}
		select {
		case <-time.After(pause):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// selectAttempt tries once to lock tokens covering amount: on Postgres, when the
// filter can be said in SQL, with custody_select (postgres.go), one statement that
// cannot lose a race for a token; otherwise with the general path, a transaction of
// several statements. Both take over expired locks and tell why funds are short.
func (v *Vault) selectAttempt(ctx context.Context, txID, owner string, amount int64, f Filter, ttl time.Duration) ([]Token, time.Time, error) {
	if v.fast && f.Predicate == nil {
		return v.selectFast(ctx, txID, owner, amount, f, ttl)
	}
	v.general.Add(1)
	found, err := v.lookFirst(ctx, owner, amount, f)
	if err != nil {
		return nil, time.Time{}, err
	}
	var got []Token
	var expires time.Time
	err = refset.InTx(ctx, v.db, func(ctx context.Context, tx refset.Tx) error {
		var err error
		got, expires, err = v.selectOnce(ctx, tx, found, lockHolder(txID), owner, amount, f, ttl)
		return err
	})
	// A panic of the caller's Predicate rolls back the transaction it ran in, if any
	// (refset.InTx does that for any panic), and goes on with its own value and stack.
	return got, expires, err
}

// errRace: the tokens chosen were being locked by another transaction.
var errRace = errors.New("tokens: lost a race for a token")

// selectOnce locks, in tx, tokens of owner matching f that cover amount, for holder,
// taking them from found if lookFirst found them, or looking for them in tx.
func (v *Vault) selectOnce(ctx context.Context, tx refset.Tx, found []Token, holder, owner string, amount int64, f Filter, ttl time.Duration) ([]Token, time.Time, error) {
	if found == nil {
		var err error
		if found, err = v.look(ctx, tx, owner, amount, f); err != nil {
			return nil, time.Time{}, err
		}
	}
	return v.take(ctx, tx, found, holder, amount, ttl)
}

// lookFirst looks for tokens of owner matching f that cover amount before the general
// path's transaction begins, where that transaction takes the database's one writer
// (SQLite: a dialect without row locks, see readQueries): a refusal, ErrInsufficientFunds
// or ErrLocked, is then told without the writer, so that callers refused over and over
// (paying more than a large wallet holds, say) do not keep other payers, of this
// process or another, from writing. (Held by refusals back to back, SQLite's writer
// went to the other processes' waiting payers only by chance: one waited more than a
// minute.) It returns nil where the dialect locks rows: the transaction looks itself.
func (v *Vault) lookFirst(ctx context.Context, owner string, amount int64, f Filter) ([]Token, error) {
	if !v.oneWriter {
		return nil, nil
	}
	return v.look(ctx, refset.Reader(ctx, v.db), owner, amount, f)
}

// look reads, through q, candidate tokens of owner matching f that no live lock holds,
// shuffled, covering amount (twice over where the owner has that much), or tells why
// there are not enough: ErrInsufficientFunds or ErrLocked.
func (v *Vault) look(ctx context.Context, q refset.Querier, owner string, amount int64, f Filter) ([]Token, error) {
	where, args := []string{"t.owner = ?"}, []any{owner}
	for _, c := range []struct{ col, val string }{
		{"t.token_type", f.Type}, {"t.identifier", f.Identifier}, {"t.issuer", f.Issuer}, {"t.notary", f.Notary},
	} {
		if c.val != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.val)
		}
	}
	cond := strings.Join(where, " AND ")
	// The candidates: matching tokens no live lock holds, a page at a time from a
	// random point of the owner's tokens in ID order, wrapping around. Selectors start
	// apart, so they rarely want the same tokens, and the cost follows the amount
	// asked, not the size of the wallet.
	base := `SELECT t.id, t.owner, t.token_type, t.identifier, t.issuer, t.notary, t.amount
		FROM tokens t WHERE ` + cond + ` AND NOT EXISTS (SELECT 1 FROM token_locks l
		WHERE l.token_id = t.id AND l.expires_at > ` + v.clock() + `)`
	const page = 64
	pivot := NewID()
	var candidates []Token
	var available int64
	asked := false                             // whether the wallet's sum was checked (below)
	spares := min(amount, math.MaxInt64/2) * 2 // twice the amount, without overflowing
	for _, segment := range []string{"t.id >= ?", "t.id < ?"} {
		cursor := ""
		for available < spares {
			sq, qargs := base+" AND "+segment, append(append([]any(nil), args...), pivot)
			if cursor != "" {
				sq, qargs = sq+" AND t.id > ?", append(qargs, cursor)
			}
			got, err := v.query(ctx, q, sq+fmt.Sprintf(" ORDER BY t.id LIMIT %d", page), qargs...)
			if err != nil {
				return nil, err
			}
			for _, t := range keep(got, f.Predicate) {
				candidates = append(candidates, t)
				available += t.Amount
			}
			if len(got) < page {
				break
			}
			cursor = got[len(got)-1].TokenID
			if !asked && available < amount {
				// A page read and still short: ask once, in one aggregate, whether the
				// owner has the amount at all, rather than reading the whole wallet
				// (twice) to find out. The filter's fields are a superset of what a Predicate
				// keeps, so a sum short of the amount is short for it too.
				asked = true
				// Rows, not a row: q translates the errors of their reading (those of a
				// row's Scan it cannot), outside a unit of work as in one.
				var total int64
				rows, err := q.QueryContext(ctx, v.sql(`SELECT COALESCE(SUM(t.amount), 0) FROM tokens t WHERE `+cond), args...)
				if err := eachRow(rows, err, func(r *sql.Rows) error { return r.Scan(&total) }); err != nil {
					return nil, err
				}
				if total < amount {
					return nil, fmt.Errorf("%w: %s has at most %d, %d asked", ErrInsufficientFunds, owner, total, amount)
				}
			}
		}
	}
	mrand.Shuffle(len(candidates), func(i, j int) { candidates[i], candidates[j] = candidates[j], candidates[i] })
	if available < amount {
		// The verdict is read in one statement, so from one snapshot. The pages were
		// read one by one (before any transaction on SQLite; in statements of their
		// own on PostgreSQL), and a payment that committed between two of them could
		// move tokens past the scan: short there, the owner may have the amount
		// unlocked all the same, which is a race to look again, not funds locked.
		type seen struct {
			Token
			locked bool
		}
		var all []seen
		rows, err := q.QueryContext(ctx, v.sql(`SELECT t.id, t.owner, t.token_type, t.identifier, t.issuer, t.notary, t.amount,
			EXISTS (SELECT 1 FROM token_locks l WHERE l.token_id = t.id AND l.expires_at > `+v.clock()+`)
			FROM tokens t WHERE `+cond), args...)
		if err := eachRow(rows, err, func(r *sql.Rows) error {
			var t seen
			err := r.Scan(&t.TokenID, &t.Owner, &t.Type, &t.Identifier, &t.Issuer, &t.Notary, &t.Amount, &t.locked)
			all = append(all, t)
			return err
		}); err != nil {
			return nil, err
		}
		var total, unlocked int64
		for _, t := range all { // the Predicate runs with no rows open
			if f.Predicate == nil || f.Predicate(t.Token) {
				total += t.Amount
				if !t.locked {
					unlocked += t.Amount
				}
			}
		}
		switch {
		case total < amount:
			return nil, fmt.Errorf("%w: %s has %d, %d asked", ErrInsufficientFunds, owner, total, amount)
		case unlocked >= amount:
			return nil, fmt.Errorf("%w: tokens moved while the wallet was read", errRace)
		}
		return nil, fmt.Errorf("%w: %s has %d, %d of it unlocked, %d asked", ErrLocked, owner, total, unlocked, amount)
	}

	return candidates, nil
}

// take locks, in tx, candidates (look's) that cover amount, for holder, each lock
// expiring ttl after it is written. It fails with errRace when candidates run out
// before amount is covered: other transactions took them meanwhile.
func (v *Vault) take(ctx context.Context, tx refset.Tx, candidates []Token, holder string, amount int64, ttl time.Duration) ([]Token, time.Time, error) {
	// Take candidates until they cover the amount; on Postgres, lock their rows,
	// skipping those another transaction is locking right now and taking others.
	var chosen []Token
	var sum int64
	next := 0
	for sum < amount {
		var want []Token
		for need := amount - sum; need > 0 && next < len(candidates); next++ {
			want = append(want, candidates[next])
			need -= candidates[next].Amount
		}
		if len(want) == 0 {
			return nil, time.Time{}, errRace
		}
		got, err := v.lockRows(ctx, tx, want)
		if err != nil {
			return nil, time.Time{}, err
		}
		for _, t := range got {
			chosen = append(chosen, t)
			sum += t.Amount
		}
	}

	ids := make([]any, len(chosen))
	for i, t := range chosen {
		ids[i] = t.TokenID
	}
	// Expired locks on them are taken over: deleted here, replaced below, in this
	// transaction, which holds the tokens' rows (Postgres) or the one writer (SQLite),
	// so no other selector can take them in between.
	if _, err := tx.ExecContext(ctx, v.sql(`DELETE FROM token_locks WHERE expires_at <= `+
		v.clock()+` AND token_id IN (`+list(len(ids))+`)`), ids...); err != nil {
		return nil, time.Time{}, err
	}
	// The locks. The unique index refuses a second lock on a token (ErrDuplicate):
	// another transaction won the race. The dialect's Expiry reads the clock as the
	// rows are written, so the ttl starts now, not when the transaction began.
	expiry := v.drv.Expiry(strconv.FormatInt(lockMillis(ttl), 10))
	lockArgs := make([]any, 0, 2*len(chosen))
	values := make([]string, len(chosen))
	for i, t := range chosen {
		lockArgs = append(lockArgs, t.TokenID, holder)
		values[i] = "(?, ?, " + expiry + ")"
	}
	var expires time.Time
	rows, err := tx.QueryContext(ctx, v.sql(`INSERT INTO token_locks (token_id, holder, expires_at) VALUES `+
		strings.Join(values, ", ")+` RETURNING expires_at`), lockArgs...)
	err = eachRow(rows, err, func(r *sql.Rows) error {
		dest, read := v.drv.Clock().Scan()
		if err := r.Scan(dest); err != nil {
			return err
		}
		if at := read(); expires.IsZero() || at.Before(expires) {
			expires = at
		}
		return nil
	})
	if errors.Is(err, refset.ErrDuplicate) { // another transaction locked one first
		return nil, time.Time{}, fmt.Errorf("%w: %v", errRace, err)
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	return chosen, expires, nil
}

// lockRows takes the rows of want against other selectors and returns those it took:
// with the dialect's lock_rows.sql (Postgres: FOR UPDATE SKIP LOCKED), those it
// locked; without one (SQLite, whose transaction holds the one writer), those still
// unspent and free of live locks (see readQueries).
func (v *Vault) lockRows(ctx context.Context, tx refset.Tx, want []Token) ([]Token, error) {
	ids := make([]string, len(want))
	for i, t := range want {
		ids[i] = t.TokenID
	}
	rows, err := tx.QueryContext(ctx, v.lockRowsSQL, v.drv.StringList(ids))
	locked := map[string]bool{}
	if err := eachRow(rows, err, func(r *sql.Rows) error {
		var id string
		err := r.Scan(&id)
		locked[id] = true
		return err
	}); err != nil {
		return nil, err
	}
	var got []Token
	for _, t := range want {
		if locked[t.TokenID] {
			got = append(got, t)
		}
	}
	return got, nil
}

// keep is the tokens pred accepts.
func keep(toks []Token, pred func(Token) bool) []Token {
	if pred == nil {
		return toks
	}
	var out []Token
	for _, t := range toks {
		if pred(t) {
			out = append(out, t)
		}
	}
	return out
}

func (v *Vault) query(ctx context.Context, q refset.Querier, query string, args ...any) ([]Token, error) {
	rows, err := q.QueryContext(ctx, v.sql(query), args...)
	var out []Token
	err = eachRow(rows, err, func(r *sql.Rows) error {
		var t Token
		err := r.Scan(&t.TokenID, &t.Owner, &t.Type, &t.Identifier, &t.Issuer, &t.Notary, &t.Amount)
		out = append(out, t)
		return err
	})
	return out, err
}

// eachRow calls row on each of rows, the result of a query that failed if err is not
// nil, and closes them.
func eachRow(rows *sql.Rows, err error, row func(*sql.Rows) error) error {
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Release drops every lock txID holds and returns how many, counting those that have
// expired and that no other transaction has taken over yet (no locks any more, but
// still txID's rows). A lock another transaction has taken over since (after it
// expired) is not txID's any more and is left alone.
func (v *Vault) Release(ctx context.Context, txID string) (int64, error) {
	if err := checkText("transaction ID", txID); err != nil {
		return 0, err
	}
	return v.exec(ctx, `DELETE FROM token_locks WHERE holder = ?`, lockHolder(txID))
}

// exec runs one statement in a transaction of its own and returns the rows it changed.
func (v *Vault) exec(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = refset.InTx(ctx, v.db, func(ctx context.Context, tx refset.Tx) error {
		res, err := tx.ExecContext(ctx, v.sql(query), args...)
		if err == nil {
			n, err = res.RowsAffected()
		}
		return err
	})
	return n, err
}

// Spend spends the tokens txID has locked: in one transaction it removes the locks
// and the tokens, records them spent by txID, and creates outputs (change included),
// each held by its owner. The outputs must balance the inputs for every kind of token
// (type, identifier, issuer, notary), or it fails with ErrUnbalanced and changes
// nothing. An output whose ID another token has fails with ErrInvalid (beside
// refset.ErrDuplicate) and changes nothing. It returns the spent tokens and the
// outputs as created.
//
// Only live locks are spent: a lock whose time-to-live has passed by the database's
// clock is no lock, whether or not another transaction has taken its token over yet.
// The clock is read as the Spend runs, not when its transaction began: a Spend in a
// unit of work (refset.InTx) begun while the locks lived, or one that waited for a
// token's row until past their expiry, is refused as one begun after it.
// A Spend whose locks have all expired fails with ErrNothingLocked, one with some
// expired with ErrUnbalanced (the live ones do not cover the outputs), on every
// database alike, and changes nothing; the expired locks stay until a Select takes
// their tokens, Release drops them or Collect removes them. A transaction that may
// run late selects again first (SelectUntil says until when its locks hold).
//
// A connection lost once PostgreSQL's fast path sent its statement is settled as
// Pay's is, by what this very call did (never by another spend or payment of txID);
// the spent tokens are then read back from the history, which keeps no type, issuer
// or notary: those are the outputs' of the same identifier (empty where outputs of
// one identifier are of several kinds).
func (v *Vault) Spend(ctx context.Context, txID string, outputs []Token) (spent, created []Token, err error) {
	if created, err = prepare(txID, outputs); err != nil {
		return nil, nil, err
	}
	if v.fast {
		spent, err = v.spendFast(ctx, txID, created)
	} else {
		err = refset.InTx(ctx, v.db, func(ctx context.Context, tx refset.Tx) error {
			spent, err = v.spendStepwise(ctx, tx, lockHolder(txID), txID, created)
			return err
		})
	}
	if err != nil {
		return nil, nil, takenID(err)
	}
	return spent, created, nil
}

type kind struct{ typ, identifier, issuer, notary string }

func kindOf(t Token) kind { return kind{t.Type, t.Identifier, t.Issuer, t.Notary} }

// balanced checks that outputs add up to inputs, per kind of token. Sums that
// overflow int64 do not balance: wrapped around, outputs of huge amounts could
// otherwise add up to the inputs and create value.
func balanced(inputs, outputs []Token) error {
	balance := map[kind]int64{}
	for _, t := range inputs {
		k := kindOf(t)
		b := balance[k] + t.Amount
		if b < balance[k] { // amounts are positive: the sum wrapped around
			return fmt.Errorf("%w: %s %s inputs overflow", ErrUnbalanced, k.identifier, k.typ)
		}
		balance[k] = b
	}
	for _, t := range outputs {
		k := kindOf(t)
		b := balance[k] - t.Amount
		if b > balance[k] {
			return fmt.Errorf("%w: %s %s outputs overflow", ErrUnbalanced, k.identifier, k.typ)
		}
		balance[k] = b
	}
	for k, b := range balance {
		if b != 0 {
			return fmt.Errorf("%w: %s %s differs by %d", ErrUnbalanced, k.identifier, k.typ, b)
		}
	}
	return nil
}

// spendStepwise spends statement by statement (SQLite) the tokens holder has locked,
// for txID: the locks, then the owners' holds and the tokens, the history, then the
// outputs.
func (v *Vault) spendStepwise(ctx context.Context, tx refset.Tx, holder, txID string, outputs []Token) ([]Token, error) {
	// The live locks go first: what this returns is exactly what holder still holds.
	// A lock past its time-to-live is none: it stays, for a Select to take over, a
	// Release to drop or clean-up to remove.
	rows, err := tx.QueryContext(ctx, v.sql(`DELETE FROM token_locks WHERE holder = ? AND expires_at > `+
		v.clock()+` RETURNING token_id`), holder)
	var ids []any
	if err := eachRow(rows, err, func(r *sql.Rows) error {
		var id string
		err := r.Scan(&id)
		ids = append(ids, id)
		return err
	}); err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: %s%s", ErrNothingLocked, txID, v.lapsed(ctx, tx, holder))
	}
	inputs, err := v.query(ctx, tx, `SELECT t.id, t.owner, t.token_type, t.identifier, t.issuer, t.notary, t.amount
		FROM tokens t WHERE t.id IN (`+list(len(ids))+`)`, ids...)
	if err != nil {
		return nil, err
	}
	// Unbalanced outputs fail before anything else is written.
	if err := balanced(inputs, outputs); err != nil {
		return nil, fmt.Errorf("%w%s", err, v.lapsed(ctx, tx, holder))
	}
	if _, err := tx.ExecContext(ctx, v.sql(`DELETE FROM token_owners WHERE token_id IN (`+list(len(ids))+`)`), ids...); err != nil {
		return nil, err
	}
	res, err := tx.ExecContext(ctx, v.sql(`DELETE FROM tokens WHERE id IN (`+list(len(ids))+`)`), ids...)
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(inputs)) {
		return nil, errors.Join(err, fmt.Errorf("tokens: spending %d tokens deleted %d", len(inputs), n))
	}
	// A token is spent once: the history row of each must still be unspent.
	res, err = tx.ExecContext(ctx, v.sql(`UPDATE token_history SET spent_by = ? WHERE spent_by IS NULL AND token_id IN (`+
		list(len(ids))+`)`), append([]any{txID}, ids...)...)
	if err != nil {
		return nil, err
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(inputs)) {
		return nil, errors.Join(err, fmt.Errorf("tokens: %d of %d tokens were spent already", int64(len(inputs))-n, len(inputs)))
	}
	if _, err := v.create(ctx, tx, txID, outputs, false); err != nil {
		return nil, err
	}
	return inputs, nil
}

// lapsed says, for a refused spend's error, how many of holder's locks have expired
// (and so were not spent), if any; empty otherwise, or if it cannot tell.
func (v *Vault) lapsed(ctx context.Context, tx refset.Tx, holder string) string {
	var n int64
	if err := tx.QueryRowContext(ctx, v.sql(`SELECT COUNT(*) FROM token_locks WHERE holder = ? AND expires_at <= `+
		v.clock()), holder).Scan(&n); err != nil || n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d of its locks had expired and were not spent)", n)
}

// Balance is what an owner has of an identifier: in all, and not locked.
func (v *Vault) Balance(ctx context.Context, owner, identifier string) (total, unlocked int64, err error) {
	if err := checkTexts("owner", owner, "identifier", identifier); err != nil {
		return 0, 0, err
	}
	err = refset.Reader(ctx, v.db).QueryRowContext(ctx, v.sql(`SELECT COALESCE(SUM(t.amount), 0),
		COALESCE(SUM(CASE WHEN EXISTS (SELECT 1 FROM token_locks l WHERE l.token_id = t.id
			AND l.expires_at > `+v.clock()+`) THEN 0 ELSE t.amount END), 0)
		FROM tokens t WHERE t.owner = ? AND t.identifier = ?`), owner, identifier).Scan(&total, &unlocked)
	return total, unlocked, err
}

// Audit is the state of the books. Amounts are summed over every identifier; the
// per-identifier check is Unconserved.
type Audit struct {
	Issued    int64 // put into circulation by Issue
	Created   int64 // every token ever created: the issued ones and spends' outputs
	Spent     int64 // of Created, what has been spent
	Remaining int64 // what is unspent
	Tokens    int64 // unspent tokens
	// Unconserved counts identifiers of which what remains differs from what was
	// issued (spends only move value): must be 0.
	Unconserved     int64
	SpentButPresent int64 // tokens recorded spent yet still unspent: must be 0
	LockedTwice     int64 // tokens with more than one lock: must be 0
	Unheld          int64 // unspent tokens their owner does not hold: must be 0
}

// Balanced reports conservation, per identifier (what remains is what was issued) and
// per token (every token created is spent or remains), and every other invariant.
func (a Audit) Balanced() bool {
	return a.Created == a.Spent+a.Remaining && a.Issued == a.Remaining && a.Unconserved == 0 &&
		a.SpentButPresent == 0 && a.LockedTwice == 0 && a.Unheld == 0
}

// Audit reads the books in one statement, so from one snapshot.
func (v *Vault) Audit(ctx context.Context) (Audit, error) {
	var a Audit
	err := refset.Reader(ctx, v.db).QueryRowContext(ctx, `SELECT
		COALESCE((SELECT SUM(amount) FROM token_history WHERE issued), 0),
		COALESCE((SELECT SUM(amount) FROM token_history), 0),
		COALESCE((SELECT SUM(amount) FROM token_history WHERE spent_by IS NOT NULL), 0),
		COALESCE((SELECT SUM(amount) FROM tokens), 0),
		(SELECT COUNT(*) FROM tokens),
		(SELECT COUNT(*) FROM (
			SELECT identifier FROM (
				SELECT identifier, amount FROM token_history WHERE issued
				UNION ALL
				SELECT identifier, -amount FROM tokens) flows
			GROUP BY identifier HAVING SUM(amount) <> 0) x),
		(SELECT COUNT(*) FROM token_history h WHERE h.spent_by IS NOT NULL AND EXISTS (SELECT 1 FROM tokens t WHERE t.id = h.token_id)),
		(SELECT COUNT(*) FROM (SELECT token_id FROM token_locks GROUP BY token_id HAVING COUNT(*) > 1) x),
		(SELECT COUNT(*) FROM tokens t WHERE NOT EXISTS (SELECT 1 FROM token_owners o WHERE o.token_id = t.id))`).
		Scan(&a.Issued, &a.Created, &a.Spent, &a.Remaining, &a.Tokens, &a.Unconserved, &a.SpentButPresent, &a.LockedTwice, &a.Unheld)
	return a, err
}

// LockStats counts the attempts of Select and Pay to take tokens, the attempts that
// lost a race for a token to another transaction (on Postgres, where a claim cannot
// lose one, those that found every token they could use being taken by others, and
// gave up: see custody_claim), the attempts that took the general path (on Postgres
// those of a Select with a Predicate; on SQLite all), and on Postgres the selects that
// took over an expired lock.
type LockStats struct{ Attempts, LostRaces, General, Takeovers int64 }

// Stats are this vault's lock attempts so far.
func (v *Vault) Stats() LockStats {
	return LockStats{Attempts: v.attempts.Load(), LostRaces: v.lost.Load(), General: v.general.Load(),
		Takeovers: v.takeovers.Load()}
}
