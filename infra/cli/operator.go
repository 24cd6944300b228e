package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/sqldb"
)

// Bounded runs fn, an operator command's work, with a context that ends at
// timeout or at the first SIGINT or SIGTERM, whichever comes first: every
// operator command of both binaries is bounded and stoppable the same way
// (contract section 1), and a signal cancels its statement instead of
// killing the process in the middle of it.
func Bounded(timeout time.Duration, fn func(ctx context.Context) error) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return fn(ctx)
}

// OpenDatabase opens an operator command's database, url (DATABASE_URL)
// with bounds b, and names it on stderr before the command's output, one
// line: "database: " and database.Name ("database: sqlite
// path=/srv/data/labeling.db", "database: postgres host=db port=5432
// database=app"; never the password). A command run with DATABASE_URL
// forgotten would otherwise read the default file and answer "no failed rows"
// without saying from where; the line goes to stderr so stdout stays the
// output a script reads (contract section 1). It opens an existing database
// only (database.OpenExisting: a missing SQLite file is an error naming its
// path, a PostgreSQL database is reached first), so the line names a
// database that answered; an error names DATABASE_URL.
func OpenDatabase(ctx context.Context, url string, b sqldb.Bounds, stderr io.Writer) (database.DB, error) {
	db, err := database.OpenExisting(ctx, url, b)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	fmt.Fprintln(stderr, "database: "+database.Name(db))
	return db, nil
}

// Listing writes an operator command's listing: one record a line, its fields
// tab-separated, each escaped by Field, so every listing of both binaries
// reads the same way in a script (cut -f, awk -F'\t').
type Listing struct {
	out   io.Writer
	rows  int
	empty string
	note  io.Writer
}

// NewListing returns a listing on stdout; a listing with no record says
// empty ("no failed rows") on stderr when it is closed, so stdout stays the
// (empty) listing a script reads while the person at the terminal is told.
func NewListing(stdout, stderr io.Writer, empty string) *Listing {
	return &Listing{out: stdout, note: stderr, empty: empty}
}

// Row writes one record; each field is escaped (Field).
func (l *Listing) Row(fields ...string) {
	for i, f := range fields {
		fields[i] = Field(f)
	}
	l.rows++
	fmt.Fprintln(l.out, strings.Join(fields, "\t"))
}

// Close says the empty note when no record was written.
func (l *Listing) Close() {
	if l.rows == 0 {
		fmt.Fprintln(l.note, l.empty)
	}
}

// Field writes s on one line and apart from its neighbours, losslessly: `\`,
// tab, newline and carriage return as `\\`, `\t`, `\n`, `\r`, and each byte
// that is not part of valid UTF-8 as `\xNN` (lowercase hex, as Go's %q);
// every other rune as it is.
func Field(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Time is an epoch-milliseconds time as every listing prints it: RFC 3339
// UTC with milliseconds, as the API writes times.
func Time(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}
