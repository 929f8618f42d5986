package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/refsetdb/refset/cleanup"
	"github.com/refsetdb/refset/refset"
	"github.com/refsetdb/refset/refsetdriver"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed static
var staticFiles embed.FS

// Defaults for the zero Config.
const (
	DefaultSampleEvery = 5 * time.Second
	DefaultSamples     = 720 // an hour at DefaultSampleEvery
	DefaultDepth       = 30
)

// minSampleEvery is the shortest interval between samples: each one counts every
// set (up to the cap), which an operator's page must not turn into a load of its own.
const minSampleEvery = time.Second

// Config configures a Console. The zero value is a sane default for a console on
// loopback.
type Config struct {
	// Token, when not "", is what every request must carry: as an Authorization
	// Bearer header, or in the cookie that /login?token=... sets. Compared in
	// constant time. Without a Token the console answers only requests addressed
	// to a loopback host (the Host header, with its port or without: localhost in
	// any case, with the trailing dot of a fully qualified name or without,
	// 127.0.0.0/8, [::1]), so that a web page whose name was rebound to 127.0.0.1
	// reads nothing; serve it anywhere else with a Token.
	Token string
	// SampleEvery is how often the sampler counts every set for the clean-up page,
	// one statement each time; zero means DefaultSampleEvery, and less than a second
	// is refused.
	SampleEvery time.Duration
	// Samples is how many samples the clean-up page keeps; zero means
	// DefaultSamples.
	Samples int
	// CountCap is how many rows of a table each count of the Sets page and the
	// sampler reads at most, past which it shows the database's estimate
	// (cleanup.StatusOptions.Cap); zero means cleanup.DefaultCountCap.
	CountCap int64
	// Depth is how many blocks below a chain's head the chain page draws, and how
	// many levels of holders the object page follows; zero means DefaultDepth.
	Depth int
	// Logger receives the sampler's failures and the pages' server errors. Nil
	// means the database's logger (the stores' Options.Logger), or none.
	Logger *slog.Logger
}

// Console is the operators' web console on one database: an http.Handler whose
// pages only read. Close stops its sampler.
type Console struct {
	db      refset.Database
	cfg     Config
	log     *slog.Logger
	mux     *http.ServeMux
	pages   map[string]*template.Template
	samples *sampler
	stop    context.CancelFunc
	stopped sync.WaitGroup

	// tokenDigest is what /login's cookie holds: the hex of the token's SHA-256.
	tokenDigest string
	// checking holds the one check that may run at a time (mayCheck).
	checking chan struct{}
}

// New returns the console of db (a database of store/sqlite or store/postgres) and
// starts its sampler, which runs until Close or until ctx ends. Errors:
// refset.ErrInvalidConfig for a bad Config or a database of no store.
func New(ctx context.Context, db refset.Database, cfg Config) (*Console, error) {
	if _, err := refsetdriver.Of(db); err != nil {
		return nil, fmt.Errorf("refset/console: %w", err)
	}
	switch {
	case cfg.SampleEvery == 0:
		cfg.SampleEvery = DefaultSampleEvery
	case cfg.SampleEvery < minSampleEvery:
		return nil, fmt.Errorf("%w: refset/console: SampleEvery %v is below %v", refset.ErrInvalidConfig, cfg.SampleEvery, minSampleEvery)
	}
	if cfg.Samples < 0 || cfg.Depth < 0 || cfg.CountCap < 0 {
		return nil, fmt.Errorf("%w: refset/console: Samples, Depth and CountCap must not be negative", refset.ErrInvalidConfig)
	}
	if cfg.CountCap == 0 {
		cfg.CountCap = cleanup.DefaultCountCap
	}
	if cfg.Samples == 0 {
		cfg.Samples = DefaultSamples
	}
	if cfg.Depth == 0 {
		cfg.Depth = DefaultDepth
	}
	log := cfg.Logger
	if log == nil {
		log = db.Driver().Logger()
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	c := &Console{db: db, cfg: cfg, log: log, pages: pages, samples: newSampler(cfg.Samples), checking: make(chan struct{}, 1)}
	if cfg.Token != "" {
		digest := sha256.Sum256([]byte(cfg.Token))
		c.tokenDigest = hex.EncodeToString(digest[:])
	}
	c.routes()
	ctx, c.stop = context.WithCancel(ctx)
	c.stopped.Add(1)
	go func() {
		defer c.stopped.Done()
		c.samples.run(ctx, cleanup.NewCounter(db, c.counting()), cfg.SampleEvery, log)
	}()
	return c, nil
}

// Close stops the sampler and waits for it. The handler still serves pages after,
// with the samples it took.
func (c *Console) Close() error {
	c.stop()
	c.stopped.Wait()
	return nil
}

// CheckAddr refuses to serve on addr without a token unless addr is a loopback
// address (127.0.0.1, ::1, localhost): anyone who reaches the console reads every
// set. Errors: refset.ErrInvalidConfig.
func CheckAddr(addr, token string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%w: refset/console: address %q: %v", refset.ErrInvalidConfig, addr, err)
	}
	if token != "" || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("%w: refset/console: %q is not a loopback address: give a token, which every request must then carry",
		refset.ErrInvalidConfig, addr)
}

// hostOf is the host of a request's Host header, without its port if it has one:
// localhost:8080, localhost, [::1]:8080 and [::1] are localhost, localhost, ::1 and
// ::1. A Host that is neither (an unbalanced bracket) is returned as it is, which
// isLoopback refuses.
func hostOf(hostport string) string {
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		return host
	}
	if inner, ok := strings.CutPrefix(hostport, "["); ok {
		if inner, ok := strings.CutSuffix(inner, "]"); ok {
			return inner
		}
	}
	return hostport
}

// isLoopback says whether host names this machine: the name localhost, which DNS
// compares without regard to case (RFC 4343) and which may end in the root's dot
// (localhost., the same name fully qualified), or a loopback IP address (127.0.0.0/8,
// ::1, and 127.0.0.0/8 mapped into IPv6). No other name is, not even one under
// localhost. (RFC 6761 reserves them, but a resolver need not keep to it), nor an
// address with an IPv6 zone, which no browser sends.
func isLoopback(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tokenCookie is the cookie /login sets.
const tokenCookie = "refset_console_token"

// ServeHTTP serves the console's pages. Only GET and HEAD are served: the console
// changes nothing.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Nothing the console serves runs a script or loads from elsewhere; a value
	// that escaped its escaping would still not run.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "the console only reads: GET or HEAD", http.StatusMethodNotAllowed)
		return
	}
	if c.cfg.Token == "" && !isLoopback(hostOf(r.Host)) {
		// Without a token the console is for this machine alone: a request named for
		// another host came through a proxy, or from a page whose name was rebound to
		// 127.0.0.1 (DNS rebinding), and reads nothing.
		http.Error(w, "without a token the console answers requests to a loopback host only (localhost, 127.0.0.1, [::1])", http.StatusForbidden)
		return
	}
	if c.cfg.Token != "" && !c.authorized(w, r) {
		return
	}
	c.mux.ServeHTTP(w, r)
}

// authorized checks the request's token, and serves /login, which takes it from the
// query and keeps it in a cookie. It answers a request it refuses.
func (c *Console) authorized(w http.ResponseWriter, r *http.Request) bool {
	if r.URL.Path == "/login" {
		if !c.validToken(r.URL.Query().Get("token")) {
			http.Error(w, "wrong token", http.StatusUnauthorized)
			return false
		}
		// The cookie holds the token's digest, not the token: a cookie carries only
		// some characters (net/http drops the others, and a token with them could
		// never log in), and the token itself stays out of the browser's store. No
		// Path: the browser scopes the cookie to the directory of this URL, which is
		// the console's, wherever it is mounted.
		http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: c.tokenDigest,
			HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
		// Relative, for the browser to resolve against the URL it asked for: under a
		// prefix a handler never sees (http.StripPrefix), http.Redirect would resolve
		// it against the stripped path, and send the browser to the host's root.
		w.Header().Set("Location", "./")
		w.WriteHeader(http.StatusSeeOther)
		return false
	}
	// The scheme's name is case-insensitive (RFC 7235).
	if scheme, bearer, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && strings.EqualFold(scheme, "Bearer") &&
		c.validToken(strings.TrimSpace(bearer)) {
		return true
	}
	if ck, err := r.Cookie(tokenCookie); err == nil &&
		subtle.ConstantTimeCompare([]byte(ck.Value), []byte(c.tokenDigest)) == 1 {
		return true
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="refset console"`)
	http.Error(w, "a token is required: send it as Authorization: Bearer, or open /login?token=...", http.StatusUnauthorized)
	return false
}

// validToken compares the digests of the tokens, which are as long as each other
// whatever the tokens' lengths: subtle.ConstantTimeCompare returns at once for inputs
// of different lengths, which would tell the token's length to whoever times it.
func (c *Console) validToken(got string) bool {
	digest := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare([]byte(hex.EncodeToString(digest[:])), []byte(c.tokenDigest)) == 1
}

func (c *Console) routes() {
	c.mux = http.NewServeMux()
	static, _ := fs.Sub(staticFiles, "static")
	c.mux.Handle("GET /static/", http.StripPrefix("/static/", filesOnly(http.FileServerFS(static))))
	c.mux.HandleFunc("GET /{$}", c.page("sets", c.setsPage))
	c.mux.HandleFunc("GET /cleanup", c.page("cleanup", c.cleanupPage))
	c.mux.HandleFunc("GET /object", c.page("object", c.objectPage))
	c.mux.HandleFunc("GET /chain", c.page("chain", c.chainPage))
	c.mux.HandleFunc("GET /holds", c.page("holds", c.holdsPage))
}

// filesOnly serves the files of h, and no listing of its folders: 404.
func filesOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "" || strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// page serves one page: read gathers its data, which the page's template renders.
func (c *Console) page(name string, read func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		data, err := read(r)
		if err != nil {
			c.fail(w, r, name, err)
			return
		}
		c.render(w, name, http.StatusOK, data)
	}
}

// errBadRequest is a request the console cannot answer as asked (a parameter
// missing): 400. errForbidden is one it will not answer: 403.
var (
	errBadRequest = errors.New("bad request")
	errForbidden  = errors.New("forbidden")
)

// fail answers a page's error: the error's text (refset's errors name no
// password), with the status it calls for.
//
// A request whose context ended before its page was read failed for that, whatever
// error the database's driver made of it (a driver's own word for a cancelled
// statement need not wrap the context's error): it is no server error, and not
// logged as one.
// Its deadline passed (one a server or a handler around the console set): 503, and
// a warning in the log, for the operator whose deadline pages overrun. The client
// went away (or whoever made the context cancelled it): 503 for a connection still
// open, and a debug line alone.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, page string, err error) {
	if ended := r.Context().Err(); ended != nil {
		level, said := slog.LevelDebug, "the request was cancelled before its page was read"
		if errors.Is(ended, context.DeadlineExceeded) {
			level, said = slog.LevelWarn, "the page was not read within the request's deadline: try again, or ask the operator to allow it longer"
		}
		c.log.Log(r.Context(), level, "refset console: "+said, "page", page, "path", r.URL.Path, "error", err)
		c.render(w, "error", http.StatusServiceUnavailable, errorPage{Page: page, Status: http.StatusServiceUnavailable, Err: said})
		return
	}
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, errBadRequest), errors.Is(err, refset.ErrInvalidIdentifier):
		// Not refset.ErrInvalidConfig: no request makes one. It is the database's
		// word for a setting that cannot work (a read-only file written), which the
		// operator must hear of (500, logged), not the visitor's mistake.
		status = http.StatusBadRequest
	case errors.Is(err, refset.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, errForbidden):
		status = http.StatusForbidden
	case errors.Is(err, errBusy):
		status = http.StatusTooManyRequests
	}
	if status == http.StatusInternalServerError {
		c.log.Error("refset console: page failed", "page", page, "path", r.URL.Path, "error", err)
	}
	c.render(w, "error", status, errorPage{Page: page, Status: status, Err: err.Error()})
}

type errorPage struct {
	Nav    string
	Page   string
	Status int
	Err    string
}

func (c *Console) render(w http.ResponseWriter, name string, status int, data any) {
	var buf strings.Builder
	if err := c.pages[name].ExecuteTemplate(&buf, "layout", data); err != nil {
		c.log.Error("refset console: rendering failed", "page", name, "error", err)
		http.Error(w, "rendering the page failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(buf.String()))
}

// parsePages parses each page's template with the layout.
func parsePages() (map[string]*template.Template, error) {
	layout, err := template.New("").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html")
	if err != nil {
		return nil, err
	}
	pages := map[string]*template.Template{}
	for _, name := range []string{"sets", "cleanup", "object", "chain", "holds", "error"} {
		t, err := template.Must(layout.Clone()).ParseFS(templateFiles, "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		pages[name] = t
	}
	return pages, nil
}

var funcs = template.FuncMap{
	"amount": amount,
	"shown":  shown,
	"digits": digits,
	"count":  countText,
	"cell": func(class string, c cleanup.Count) countCell {
		return countCell{Class: class, Count: c, Note: countNote(c)}
	},
	"graphOf": func(id, label, table string, g graph) graphView {
		return graphView{ID: id, Label: label, Table: table, G: g}
	},
	"holdsOf": func(id, table string, now time.Time, holds []refsetdriver.Hold, cut bool) holdsView {
		return holdsView{ID: id, Table: table, Now: now, Holds: holds, Cut: cut}
	},
	"holdersShown": func() int { return objectHolders },
	"holdsShown":   func() int { return objectHolds },
	"clock": func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.UTC().Format(time.RFC3339)
	},
	"since": func(now, t time.Time) string {
		if t.IsZero() {
			return ""
		}
		d := now.Sub(t).Round(time.Second)
		if d >= 0 {
			return d.String() + " ago"
		}
		return "in " + (-d).String()
	},
}

// counting is how the Sets page and the sampler count.
func (c *Console) counting() cleanup.StatusOptions { return cleanup.StatusOptions{Cap: c.cfg.CountCap} }

// countCell is a table cell of a count, as the template "count" writes it.
type countCell struct {
	Class string
	Count cleanup.Count
	Note  string // what an inexact count is, as a tooltip
}

// digits writes n with its thousands apart: 1,000,000.
func digits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}

// countText is a count as the pages show it: "1,234", "≈ 1,000,000" (the database's
// estimate), "more than 10,000" (no statistics to estimate from).
func countText(c cleanup.Count) string { return about(c) + digits(c.N) }

// countNote says why a count is not exact, "" for one that is.
func countNote(c cleanup.Count) string {
	_, note := accuracy(c)
	return note
}

// about is what a count that is not exact is written after ("≈ ", "more than ").
func about(c cleanup.Count) string {
	before, _ := accuracy(c)
	return before
}

// accuracy is what a count that is not exact is written after, and why it is not.
func accuracy(c cleanup.Count) (before, note string) {
	switch c.Accuracy {
	case cleanup.Estimated:
		return "≈ ", "the database's estimate from its statistics: refset status --exact counts every row"
	case cleanup.MoreThan:
		return "more than ", "the database has no statistics to estimate from (ANALYZE makes them): refset status --exact counts every row"
	}
	return "", ""
}

// graphView and holdsView are what the templates "graph" and "holds" draw.
type (
	graphView struct {
		ID, Label, Table string
		G                graph
	}
	holdsView struct {
		ID, Table string
		Now       time.Time
		Holds     []refsetdriver.Hold
		Cut       bool // there are more than Holds
	}
)
