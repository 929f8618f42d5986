// Package console is refset's web console for operators: what the refset command
// prints (status, check, why, holds ls), as pages a browser shows, with the charts and
// graphs text cannot draw. It is an http.Handler a program mounts where it likes, or
// that `refset ui` serves.
//
// The pages, all server-rendered HTML with embedded CSS, usable without JavaScript
// (they carry none):
//
//   - / (Sets): every set's objects, holds and review queue (due now, waiting, oldest
//     due), the objects clean-up collected, and the schema versions, as
//     cleanup.StatusWith reads them (counts past Config.CountCap are estimates, and
//     say so); ?check=TABLE adds Check's report on that set.
//   - /cleanup: each set's review queue depth and objects collected per minute (the
//     rise of the count clean-up keeps where it deletes), as SVG charts of the
//     samples the console's sampler takes while it runs (a cleanup.Counter every
//     Config.SampleEvery: one statement a sample).
//   - /object?table=T&id=ID: the object's row, the rows that keep it alive (the
//     first 100 of each table, Collector.WhyUpTo), drawn as a graph up to the roots,
//     and its holds with their expiry by the database's clock (the first 100); a list
//     cut short says so. ID is the object's ID as text, read as the set's id
//     column's type (a cleanup.TextID): id=42 names the object 42 of a set of
//     integer IDs.
//   - /chain?table=blocks: a blockmanager chain's tip (blockmanager.ReadTip): the
//     committed head, the forks and the blocks waiting for a predecessor, drawn as a
//     tree whose every block links to its object page; a table that is not the
//     database's blockmanager chain is 404.
//   - /holds?table=T[&holder=H]: the set's holders, the holds expiring soonest, the
//     expired ones clean-up has not removed yet, and one holder's holds.
//
// A page's table parameter (table, check) names a set's object table with its schema
// or without, whichever way its store registered it, as refset --table does
// (public.notes or notes on PostgreSQL, main.notes or notes on SQLite). A parameter
// the console cannot use is the visitor's mistake, answered 400 (an id the set's id
// column cannot hold among them: id=abc for integer IDs, on each store); a table that is no set's, an object that is not
// there, 404; what the database refuses otherwise (a role that may not read a table,
// or log in), or a database that is closed or gone, is the operator's to hear of:
// 500, and a line in the log. A request that ended before its page was read is no
// server error, whatever the database's driver said of it: one whose deadline passed
// (a deadline a server or a handler around the console sets) is 503, with a warning
// in the log for the operator whose pages overrun it; one its client gave up on (the
// browser closed, a request cancelled) is 503 for a connection still open, and a
// debug line alone.
//
// Without Config.Token the console answers only a request addressed to a loopback
// host (its Host header, with a port or without): localhost, in any case and with the
// trailing dot of a fully qualified name or without, 127.0.0.0/8 or [::1]; any other
// name (one under localhost. too) is 403, so that a page of another site whose name
// was rebound to 127.0.0.1 (DNS rebinding) reads nothing.
//
// The console only reads: it serves GET and HEAD alone, runs no statement that
// writes, installs nothing, and runs on a database role that may only SELECT. Its
// reads are the library's reports, on the database's replica first where it has one
// (postgres.Options.ReplicaDSN). Every value a page shows goes through html/template's
// escaping, and its Content-Security-Policy lets no script run.
//
// A value read from the database (an object's id, a holder, a row's field) is shown as
// it is when every character of it prints, and quoted with Go's escapes
// (strconv.Quote) otherwise, or when it begins with a quote, as the refset command's
// text output prints it: a control character, a bidirectional override or a byte that
// is not UTF-8 (SQLite keeps whatever bytes were written) is seen for what it is, and
// every page is UTF-8. The links and forms carry a value as the page shows it, and a
// page's id and holder parameters read it back: one that begins with a quote is the
// value it spells quoted (strconv.Unquote; 400 if it spells none), any other the value
// itself, which must then be UTF-8 without NUL characters. So each object and holder,
// whatever its bytes, links to its own page; a value the database cannot hold
// (PostgreSQL: a NUL, bytes that are not UTF-8, spelled quoted) is the visitor's
// mistake, 400.
//
// With Config.Token set, every request must carry the token, as an Authorization
// Bearer header or in the cookie /login?token=... sets (scoped to the console's path,
// wherever it is mounted); CheckAddr refuses to serve a console on an address other
// than loopback without one. ?check=TABLE, which reads the set whole, runs one at a
// time (429 for another) and never for a request a browser says another site made
// (Sec-Fetch-Site: 403).
//
// No page and no sample reads a table whole: the counts of the Sets page and the
// sampler stop at Config.CountCap rows of a table (a LIMIT) and take the database's
// estimate past it, and the other pages read by key and by index alone, so their cost
// follows what they show, not the size of the set. Check, on demand, is the audit
// that reads everything.
package console
