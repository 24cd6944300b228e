package db

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/infra/sqlite"
)

// Querier is what the probes and the clocks read of a database, in either
// dialect.
type Querier interface {
	// One scans the query's first row into dest; ErrNoRow when it has none.
	One(ctx context.Context, query string, dest ...any) error
	// At reads the one time value the query returns (NULL: nil): a timestamptz
	// on PostgreSQL, epoch milliseconds on SQLite.
	At(ctx context.Context, query string) (*time.Time, error)
	// Clock is the time now on the clock the database's stamps use.
	Clock(ctx context.Context) (time.Time, error)
	// Stamps reads bench_stamp (StampSQL): event id to the stamp its
	// trigger took.
	Stamps(ctx context.Context) (map[uuid.UUID]time.Time, error)
}

// ErrNoRow is One on a query that returned no row, in either dialect.
var ErrNoRow = errors.New("no row")

// PG is a Querier on a PostgreSQL pool: the server's clock.
type PG struct{ *pgxpool.Pool }

// One implements Querier.
func (p PG) One(ctx context.Context, query string, dest ...any) error {
	return noRowAs(p.QueryRow(ctx, query).Scan(dest...), pgx.ErrNoRows)
}

// noRowAs is err, with none (a driver's "no rows") as ErrNoRow.
func noRowAs(err, none error) error {
	if errors.Is(err, none) {
		return ErrNoRow
	}
	return err
}

// At implements Querier.
func (p PG) At(ctx context.Context, query string) (*time.Time, error) {
	var at *time.Time
	err := p.QueryRow(ctx, query).Scan(&at)
	return at, err
}

// Clock implements Querier: the server's clock_timestamp().
func (p PG) Clock(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := p.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now)
	return now, err
}

// Stamps implements Querier.
func (p PG) Stamps(ctx context.Context) (map[uuid.UUID]time.Time, error) {
	rows, err := p.Query(ctx, `SELECT id, at FROM bench_stamp`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectStamps(rows, func(scan func(...any) error) (id uuid.UUID, at time.Time, err error) {
		err = scan(&id, &at)
		return id, at, err
	})
}

// collectStamps reads bench_stamp's rows, each scanned by row.
func collectStamps(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
}, row func(scan func(...any) error) (uuid.UUID, time.Time, error)) (map[uuid.UUID]time.Time, error) {
	m := map[uuid.UUID]time.Time{}
	for rows.Next() {
		id, at, err := row(rows.Scan)
		if err != nil {
			return nil, err
		}
		m[id] = at
	}
	return m, rows.Err()
}

// Lite is a Querier on read-only connections to a SQLite file. Its clock is
// this host's, which every stamp in the file was taken with.
type Lite struct{ *sql.DB }

// One implements Querier.
func (l Lite) One(ctx context.Context, query string, dest ...any) error {
	return noRowAs(l.QueryRowContext(ctx, query).Scan(dest...), sql.ErrNoRows)
}

// At implements Querier.
func (l Lite) At(ctx context.Context, query string) (*time.Time, error) {
	var ms sql.NullInt64
	if err := l.QueryRowContext(ctx, query).Scan(&ms); err != nil || !ms.Valid {
		return nil, err
	}
	at := time.UnixMilli(ms.Int64)
	return &at, nil
}

// Clock implements Querier: this host's clock.
func (Lite) Clock(context.Context) (time.Time, error) { return time.Now(), nil }

// Stamps implements Querier.
func (l Lite) Stamps(ctx context.Context) (map[uuid.UUID]time.Time, error) {
	rows, err := l.QueryContext(ctx, `SELECT id, at FROM bench_stamp`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectStamps(rows, func(scan func(...any) error) (uuid.UUID, time.Time, error) {
		var (
			id string
			ms int64
		)
		if err := scan(&id, &ms); err != nil {
			return uuid.Nil, time.Time{}, err
		}
		u, err := uuid.Parse(id)
		return u, time.UnixMilli(ms), err
	})
}

// OpenProbe opens read-only connections to path for the probes, so that they
// take nothing from River's one connection or the pair's pools.
func OpenProbe(path string) (Lite, error) {
	d, err := sql.Open("sqlite", sqlite.DSN(path, 0, false, true))
	if err != nil {
		return Lite{}, err
	}
	d.SetMaxOpenConns(2)
	return Lite{d}, nil
}
