package sitting

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/acme/outboxpair/bench/internal/report"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/migrations"
)

// Schema names a set of tables a benchmark database starts with.
type Schema string

// The schemas a database or file starts with (SchemaPair on PostgreSQL only).
const (
	SchemaLabeling Schema = "labeling" // the project's labeling migrations
	SchemaBilling  Schema = "billing"  // the project's billing migrations
	SchemaRiver    Schema = "river"    // River's migrations
	// SchemaPair is labeling's migrations and billing's (in schema billing) in
	// one database: the pgbench pair reference's.
	SchemaPair  Schema = "pair"
	schemaEmpty Schema = "empty" // nothing: the binaries migrate it themselves
)

// Env owns every database the run creates on the server of admin, so that they
// are all dropped at the end, on an error and on Ctrl-C alike. It is safe for
// concurrent use.
type Env struct {
	adminURL string
	admin    *pgxpool.Pool
	prefix   string

	mu        sync.Mutex
	n         int
	created   []string
	templates map[Schema]string
}

// NewEnv connects to the loopback server of adminURL (any other host is an
// error: the benchmark creates and drops databases) and owns the databases it
// then creates there.
func NewEnv(ctx context.Context, adminURL string) (*Env, error) {
	if err := loopbackOnly(adminURL); err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(ctx, adminURL)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", redact(adminURL), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect %s: %w", redact(adminURL), err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return &Env{
		adminURL:  adminURL,
		admin:     pool,
		prefix:    fmt.Sprintf("bench_%d_%s", time.Now().Unix(), hex.EncodeToString(b[:])),
		templates: map[Schema]string{},
	}, nil
}

// loopbackOnly refuses a database that is not on this machine: the benchmark
// creates and drops databases and must never do it on a shared server.
func loopbackOnly(raw string) error {
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		return fmt.Errorf("-db: %w", err)
	}
	switch h := cfg.Host; {
	case h == "localhost", strings.HasPrefix(h, "127."), h == "::1", strings.HasPrefix(h, "/"):
		return nil
	default:
		return fmt.Errorf("-db: host %q is not a loopback address", h)
	}
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(database url)"
	}
	return u.Redacted()
}

// urlFor is the admin URL pointed at database name.
func (e *Env) urlFor(name string) string {
	u, err := url.Parse(e.adminURL)
	if err != nil {
		panic(err) // parsed in NewEnv
	}
	u.Path = "/" + name
	return u.String()
}

// Create makes a fresh database with schema s, cloned from a template migrated
// once per run, and returns its URL.
func (e *Env) Create(ctx context.Context, s Schema) (string, error) {
	tmpl := ""
	if s != schemaEmpty {
		var err error
		if tmpl, err = e.template(ctx, s); err != nil {
			return "", err
		}
	}
	e.mu.Lock()
	e.n++
	name := fmt.Sprintf("%s_%d_%s", e.prefix, e.n, s)
	e.created = append(e.created, name)
	e.mu.Unlock()
	stmt := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if tmpl != "" {
		stmt += " TEMPLATE " + pgx.Identifier{tmpl}.Sanitize()
	}
	if _, err := e.admin.Exec(ctx, stmt); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return e.urlFor(name), nil
}

func (e *Env) template(ctx context.Context, s Schema) (string, error) {
	e.mu.Lock()
	name, ok := e.templates[s]
	e.mu.Unlock()
	if ok {
		return name, nil
	}
	name = fmt.Sprintf("%s_tmpl_%s", e.prefix, s)
	e.mu.Lock()
	e.created = append(e.created, name)
	e.mu.Unlock()
	if _, err := e.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create template %s: %w", name, err)
	}
	var err error
	switch s {
	case SchemaLabeling:
		err = migrateProject(ctx, e.urlFor(name), migrations.Labeling)
	case SchemaBilling:
		err = migrateProject(ctx, e.urlFor(name), migrations.Billing)
	case SchemaRiver:
		err = migrateRiver(ctx, e.urlFor(name))
	case SchemaPair:
		err = migratePair(ctx, e.urlFor(name))
	}
	if err != nil {
		return "", fmt.Errorf("migrate template %s: %w", name, err)
	}
	e.mu.Lock()
	e.templates[s] = name
	e.mu.Unlock()
	return name, nil
}

func migrateProject(ctx context.Context, dbURL string, set migrations.Set) error {
	return postgres.MigrateURL(ctx, dbURL, set, nil)
}

func migrateRiver(ctx context.Context, dbURL string) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	return migrateRiverWith(ctx, riverpgxv5.New(pool))
}

// migrateRiverWith applies River's migrations through driver.
func migrateRiverWith[TTx any](ctx context.Context, driver riverdriver.Driver[TTx]) error {
	m, err := rivermigrate.New(driver, nil)
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// Open returns a pool on dbURL with pgx's defaults (what the services use).
func Open(ctx context.Context, dbURL string) (*pgxpool.Pool, error) {
	return postgres.Open(ctx, dbURL)
}

// Drop drops one database the run created, closing any session still on it.
func (e *Env) Drop(ctx context.Context, dbURL string) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return
	}
	name := strings.TrimPrefix(u.Path, "/")
	e.dropName(ctx, name)
	e.mu.Lock()
	for i, n := range e.created {
		if n == name {
			e.created = append(e.created[:i], e.created[i+1:]...)
			break
		}
	}
	e.mu.Unlock()
}

func (e *Env) dropName(ctx context.Context, name string) {
	if _, err := e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		fmt.Fprintf(os.Stderr, "bench: drop database %s: %v\n", name, err)
	}
}

// Close drops every database the run created and closes the admin pool. It
// uses a context of its own so that it also runs after Ctrl-C.
func (e *Env) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e.mu.Lock()
	names := append([]string(nil), e.created...)
	e.created = nil
	e.mu.Unlock()
	for i := len(names) - 1; i >= 0; i-- { // clones before their templates
		e.dropName(ctx, names[i])
	}
	e.admin.Close()
}

// Machine describes the server: PostgreSQL's version and the settings that
// bear on the figures.
func (e *Env) Machine(ctx context.Context) report.Machine {
	m := report.Host()
	m.DBName = "PostgreSQL"
	_ = e.admin.QueryRow(ctx, `SHOW server_version`).Scan(&m.DBVersion)
	for _, s := range []string{"synchronous_commit", "fsync", "shared_buffers", "max_connections",
		"wal_level", "checkpoint_timeout", "max_wal_size", "autovacuum", "work_mem"} {
		var v string
		if err := e.admin.QueryRow(ctx, "SELECT current_setting($1)", s).Scan(&v); err == nil {
			m.Settings = append(m.Settings, [2]string{s, v})
		}
	}
	return m
}

// PairURL is dbURL with billing's schema first on the search path, for
// pgbench (libpq's options, with libpq) and for pgx (a startup parameter).
func PairURL(dbURL string, libpq bool) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", err
	}
	q := u.Query()
	if libpq {
		q.Set("options", "-csearch_path=billing,public") // no space: url.Values encodes it as "+", which libpq keeps
	} else {
		q.Set("search_path", "billing")
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// migratePair migrates a template: labeling's tables in public, billing's in
// schema billing (its goose version table there too).
func migratePair(ctx context.Context, dbURL string) error {
	if err := migrateProject(ctx, dbURL, migrations.Labeling); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `CREATE SCHEMA billing`)
	pool.Close()
	if err != nil {
		return err
	}
	bil, err := PairURL(dbURL, false)
	if err != nil {
		return err
	}
	return migrateProject(ctx, bil, migrations.Billing)
}
