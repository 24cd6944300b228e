package outbox

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/stretchr/testify/require"
)

type internalEvent struct{}

func (internalEvent) EventTag() string { return "Internal" }

func TestStopReleasesUndispatchedClaims(t *testing.T) {
	t.Parallel()
	// Claimed as a tick would, but never dispatched: the state a tick is in when
	// it is stuck between its claim and its dispatch (say at a failpoint) as the
	// relay stops.
	r, db, _ := claimRows(t, 2)
	ctx := t.Context()
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Stop(ctx))

	var leased int
	require.NoError(t, db.Pool.QueryRow(ctx,
		`SELECT count(*) FROM outbox_events WHERE claimed_until IS NOT NULL`).Scan(&leased))
	require.Zero(t, leased, "Stop released the claims it never dispatched")
}

func TestDurableDelay(t *testing.T) {
	t.Parallel()
	base, maxDelay := time.Second, time.Minute

	t.Run("grows from base, never shrinks, and stays under the cap", func(t *testing.T) {
		t.Parallel()
		for range 200 {
			prev := time.Duration(0)
			for attempt := 1; attempt <= 40; attempt++ {
				d := durableDelay(attempt, base, maxDelay)
				require.GreaterOrEqual(t, d, prev, "attempt %d", attempt)
				require.LessOrEqual(t, d, maxDelay)
				if attempt == 1 {
					require.GreaterOrEqual(t, d, base/2)
					require.LessOrEqual(t, d, base)
				}
				prev = d
			}
			require.Equal(t, maxDelay, prev, "capped at max once the doubling passes it")
		}
	})

	t.Run("huge attempt counts do not overflow", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 365*24*time.Hour, durableDelay(1<<30, time.Hour, 365*24*time.Hour))
	})
}

func TestErrorText(t *testing.T) {
	t.Parallel()

	t.Run("bounds a long error without splitting a rune", func(t *testing.T) {
		t.Parallel()
		// "x" first, so that the byte at maxErrorLen falls inside an "é".
		got := errorText(errString("x" + strings.Repeat("é", 3000)))
		require.LessOrEqual(t, len(got), maxErrorLen+len("…"))
		require.True(t, strings.HasSuffix(got, "é…"))
		require.NotContains(t, got, string(utf8.RuneError), "no rune was split")
	})

	t.Run("drops NUL bytes a text column refuses", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "ab", errorText(errString("a\x00b")))
	})
}

type errString string

func (e errString) Error() string { return string(e) }

// TestJobFitsInAMapSlot keeps a claimed row's job within 128 bytes: a larger map
// value is stored out of line, so every r.held insert would allocate (measured:
// about 1.8 allocations a row more in BenchmarkRelayThroughput when the trace
// context was a []byte field).
func TestJobFitsInAMapSlot(t *testing.T) {
	t.Parallel()
	require.LessOrEqual(t, unsafe.Sizeof(job{}), uintptr(128))
}

func TestStopReleaseCommitsSynchronously(t *testing.T) {
	t.Parallel()
	// The relay's connections commit with synchronous_commit off; Stop's
	// release must not, or a database crash just after the exit loses it and
	// the rows wait out their lease. A trigger records the setting each
	// UPDATE of the outbox ran under, on the database's side.
	r, db, _ := claimRows(t, 2)
	ctx := t.Context()
	_, err := db.Pool.Exec(ctx, `
CREATE TABLE seen_sync (setting text NOT NULL);
CREATE FUNCTION record_sync() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO seen_sync VALUES (current_setting('synchronous_commit'));
	RETURN NEW;
END $$;
CREATE TRIGGER record_sync AFTER UPDATE ON outbox_events FOR EACH ROW EXECUTE FUNCTION record_sync();`)
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Stop(ctx))

	var settings []string
	rows, err := db.Pool.Query(ctx, `SELECT setting FROM seen_sync`)
	require.NoError(t, err)
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		settings = append(settings, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"on", "on"}, settings, "both releases committed synchronously")
}
