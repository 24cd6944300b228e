// Package pgtest gives every test its own fresh PostgreSQL database, migrated
// (New) or empty (Empty).
//
// With TEST_DATABASE_URL set (any database on the server; the role must be allowed
// to create databases) the databases are created on that server. Without it, one
// server per test binary is started: a throwaway cluster from the installed
// PostgreSQL server binaries (initdb, postgres; fsync off) when there are any,
// else a container with testcontainers-go. Each
// migration set is applied once, to a template database named after a hash of its
// files; every test then gets a cheap clone of that template, dropped when it ends.
// When none of the three is available the test fails with a message
// saying how to fix it: it never skips.
package pgtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/migrations"
)

// EnvURL names the variable that points the tests at a PostgreSQL server.
const EnvURL = "TEST_DATABASE_URL"

// DB is one test's database.
type DB struct {
	Name string        // database name, unique to the test
	URL  string        // connection URL of this database
	Pool *pgxpool.Pool // a pool on it, closed when the test ends
}

var (
	serverOnce sync.Once
	serverURL  string
	serverErr  error

	templates sync.Map // hash -> *templateState
)

type templateState struct {
	once sync.Once
	name string
	err  error
}

// New returns a fresh database with every migration of set applied. It is dropped
// when t ends.
func New(t testing.TB, set migrations.Set) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin := ServerURL(t)
	tmpl, err := template(ctx, admin, set)
	if err != nil {
		t.Fatalf("pgtest: prepare template database: %v", err)
	}
	return create(ctx, t, admin, tmpl)
}

// Empty returns a fresh database with no tables at all, for tests of code that
// migrates it itself. It is dropped when t ends.
func Empty(t testing.TB) *DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return create(ctx, t, ServerURL(t), "")
}

// create makes a database cloned from tmpl (the server's default when empty),
// opens a pool on it, and drops it when t ends.
func create(ctx context.Context, t testing.TB, admin, tmpl string) *DB {
	t.Helper()
	sweepOnce.Do(func() { sweep(ctx, admin) })
	// The creation time in the name lets a later run drop what a killed run left.
	name := fmt.Sprintf("pgtest_%d_%s", time.Now().Unix(), randomHex(6))
	sql := "CREATE DATABASE " + ident(name)
	if tmpl != "" {
		sql += " TEMPLATE " + ident(tmpl)
	}
	if err := exec(ctx, admin, sql); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	dbURL := withDatabase(admin, name)
	pool, err := postgres.Open(ctx, dbURL, postgres.Traced(telemetry.Enabled()))
	if err != nil {
		t.Fatalf("pgtest: open %s: %v", name, err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := exec(ctx, admin, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
		}
	})
	return &DB{Name: name, URL: dbURL, Pool: pool}
}

var sweepOnce sync.Once

// staleAfter is the age past which a test database is a leftover: no test run
// lives this long (the test command's -timeout is shorter).
const staleAfter = time.Hour

var testDBName = regexp.MustCompile(`^pgtest_([0-9]+)_[0-9a-f]+$`)

// sweep drops the test databases of runs that were killed before their cleanup,
// once per test binary. Templates (pgtest_tmpl_*) are kept: they are named by
// content and shared across runs. Failures are ignored: sweeping is hygiene.
func sweep(ctx context.Context, admin string) {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database WHERE datname LIKE 'pgtest\_%'`)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	cutoff := time.Now().Add(-staleAfter).Unix()
	for _, name := range names {
		m := testDBName.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		if created, err := strconv.ParseInt(m[1], 10, 64); err == nil && created < cutoff {
			_, _ = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)")
		}
	}
}

// ServerURL returns a URL of the test server's maintenance database. With
// TEST_DATABASE_URL unset it starts, on first use, one server for the test
// binary: a throwaway cluster from the installed PostgreSQL server binaries when
// there are any (preferred to a container: no Docker, no image to pull, up in a
// second or two), else a container with testcontainers-go. It says which on
// stderr, once.
func ServerURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvURL); u != "" {
		if _, err := url.Parse(u); err != nil {
			t.Fatalf("pgtest: %s is not a URL: %v", EnvURL, err)
		}
		return u
	}
	serverOnce.Do(func() { serverURL, serverErr = startServer() })
	if serverErr != nil {
		t.Fatal(noServer(serverErr))
	}
	return serverURL
}

// noServer is the failure when the binary has no server: what was tried, and
// the three ways to get one.
func noServer(err error) string {
	return fmt.Sprintf("pgtest: no PostgreSQL for the tests: %v.\n"+
		"Fix, any one of:\n"+
		"  - point the tests at a server: export %s='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable'\n"+
		"  - install PostgreSQL's server binaries (apt-get install postgresql), or set %s to the directory holding initdb and postgres\n"+
		"  - start Docker, for a container from testcontainers-go", err, EnvURL, EnvPGBin)
}

// startServer starts the binary's own server: a cluster from the server
// binaries, else a container.
func startServer() (string, error) {
	bin, err := BinDir()
	if err == nil {
		return startCluster(bin)
	}
	if !errors.Is(err, errNoBinaries) {
		return "", err // E2E_PG_BIN set wrong: say so rather than fall through
	}
	u, cerr := containerStart()
	if cerr != nil {
		return "", fmt.Errorf("%s is unset, %w, and testcontainers could not start a container (%w)", EnvURL, err, cerr)
	}
	fmt.Fprintf(os.Stderr, "pgtest: %s unset; started a PostgreSQL container with testcontainers-go, removed when the tests end\n", EnvURL)
	return u, nil
}

// containerStart is startContainer; a test stands for a machine without Docker
// by replacing it.
var containerStart = startContainer

func startContainer() (u string, err error) {
	defer func() {
		// testcontainers panics on some hosts without a Docker socket.
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := tcpostgres.Run(ctx, "postgres:17-alpine",
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		return "", err
	}
	// The container is removed by testcontainers' reaper when the test binary exits.
	return c.ConnectionString(ctx, "sslmode=disable")
}

// template returns the name of a database holding exactly the migrations of set,
// creating it once per server. Its name is a hash of the files, so a changed
// migration gets a new template and no run depends on what an earlier one left.
func template(ctx context.Context, admin string, set migrations.Set) (string, error) {
	hash, err := hashSet(set)
	if err != nil {
		return "", err
	}
	v, _ := templates.LoadOrStore(hash, &templateState{})
	st := v.(*templateState)
	st.once.Do(func() { st.name, st.err = createTemplate(ctx, admin, hash, set) })
	return st.name, st.err
}

func createTemplate(ctx context.Context, admin, hash string, set migrations.Set) (string, error) {
	name := "pgtest_tmpl_" + hash[:16]
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	// Test binaries of several packages run at once: one of them builds the template.
	lockKey := int64(binary.BigEndian.Uint64(mustDecodeHex(hash[:16])))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return "", err
	}
	defer conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1)", lockKey) //nolint:errcheck
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	// Build under a temporary name and rename, so a run killed half-way leaves no
	// half-migrated template behind under the real name.
	building := name + "_" + randomHex(4)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident(building)); err != nil {
		return "", err
	}
	if err := postgres.MigrateURL(ctx, withDatabase(admin, building), set, nil); err != nil {
		conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+ident(building)+" WITH (FORCE)") //nolint:errcheck
		return "", err
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(building)+" RENAME TO "+ident(name)); err != nil {
		return "", err
	}
	return name, nil
}

// hashSet covers the version table's name too: a template migrated before the
// set had a table of its own must not be reused.
func hashSet(set migrations.Set) (string, error) {
	fsys := fs.FS(set)
	var names []string
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			names = append(names, path)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	h := sha256.New()
	fmt.Fprintf(h, "table\x00%s\x00", set.Table)
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func exec(ctx context.Context, admin, sql string) error {
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase returns u with its database replaced by name.
func withDatabase(u, name string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		panic(err) // ServerURL checked it
	}
	parsed.Path = "/" + name
	return parsed.String()
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func mustDecodeHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}
