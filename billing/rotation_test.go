package billing_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/apitest"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// The rotation of docs/authentication.md, step by step, on one database: billing
// runs with EVENTS_TOKEN=old, then with EVENTS_TOKEN=new and
// EVENTS_TOKEN_PREVIOUS=old while labeling still sends old and then moves to
// new, then with new alone. Every event is applied once at its first delivery
// (none refused, so none retried), and only after the previous token is dropped
// is the old one refused.
const (
	oldToken = "old-events-token"
	newToken = "new-events-token"
)

// rotationHTTP is billing's events endpoint keyed with current and previous.
func (b *bundle) rotationHTTP(t *testing.T, current, previous string) *echo.Echo {
	t.Helper()
	h, err := billing.NewHandler(b.svc, billing.Config{EventsToken: current, EventsTokenPrevious: previous})
	require.NoError(t, err)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	e := web.New(logger, b.db.DB)
	h.Register(e, b.iss.Guard(t, nil))
	return e
}

func (b *bundle) rotationNATS(t *testing.T, current, previous string) stream.Handler {
	t.Helper()
	h, err := b.svc.NATSHandler(billing.NATSConfig{Key: []byte(current), PreviousKey: []byte(previous)})
	require.NoError(t, err)
	return h
}

func signedWith(key string, seq uint64, ev event) stream.Message {
	m := natsMsg(seq, ev.ID, ev.body())
	m.Signature = stream.Sign([]byte(key), m.Subject, m.MsgID, m.Data)
	return m
}

func TestRotation(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("over HTTP, old and new tokens both apply during the overlap and the old is refused after it", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			send := func(e *echo.Echo, tok string) int {
				ev := newEvent(billing.RuleActivated, org)
				return apitest.Do(t, e, eventRequest(ev.body(), func(r *http.Request) {
					r.Header.Set("Authorization", "Bearer "+tok)
				})).Code
			}
			before := b.rotationHTTP(t, oldToken, "")
			require.Equal(t, http.StatusNoContent, send(before, oldToken))

			overlap := b.rotationHTTP(t, newToken, oldToken)
			require.Equal(t, http.StatusNoContent, send(overlap, oldToken), "labeling has not moved yet")
			require.Equal(t, http.StatusNoContent, send(overlap, newToken), "labeling moved")
			require.Equal(t, http.StatusUnauthorized, send(overlap, "neither-token"))

			after := b.rotationHTTP(t, newToken, "")
			require.Equal(t, http.StatusNoContent, send(after, newToken))
			require.Equal(t, http.StatusUnauthorized, send(after, oldToken), "the previous token is dropped")

			require.EqualValues(t, 4, *b.activeRules(t, org), "every accepted event applied once")
			require.Equal(t, 4, b.count(t, "billing_receipts"))
		})

		t.Run("over NATS, old- and new-signed both apply during the overlap and the old is refused after it", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			ctx := context.Background()
			org := uuid.New()
			var seq uint64
			deliver := func(h stream.Handler, key string) error {
				seq++
				return h(ctx, signedWith(key, seq, newEvent(billing.RuleActivated, org)))
			}
			require.NoError(t, deliver(b.rotationNATS(t, oldToken, ""), oldToken))

			overlap := b.rotationNATS(t, newToken, oldToken)
			require.NoError(t, deliver(overlap, oldToken), "signed before labeling moved")
			require.NoError(t, deliver(overlap, newToken), "signed after")
			require.True(t, terminated(deliver(overlap, "neither-token")))

			after := b.rotationNATS(t, newToken, "")
			require.NoError(t, deliver(after, newToken))
			require.True(t, terminated(deliver(after, oldToken)), "the previous key is dropped")

			require.EqualValues(t, 4, *b.activeRules(t, org), "every verified message applied once, at its first delivery")
			rows, err := billing.ListNATSFailed(ctx, b.db.DB)
			require.NoError(t, err)
			require.Len(t, rows, 2, "only the unsigned-by-either and the late old-signed are recorded")
			for _, r := range rows {
				require.Contains(t, r.Reason, "signature")
			}
		})
	})
}

func TestVerifyAny(t *testing.T) {
	t.Parallel()
	body := []byte(`{}`)
	sig := stream.Sign([]byte(oldToken), natsSubject, "id", body)

	t.Run("verifies with the previous key of the set", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, stream.VerifyAny([][]byte{[]byte(newToken), []byte(oldToken)}, natsSubject, "id", body, sig))
	})
	t.Run("refuses a signature of no key in the set", func(t *testing.T) {
		t.Parallel()
		require.ErrorIs(t, stream.VerifyAny([][]byte{[]byte(newToken)}, natsSubject, "id", body, sig), stream.ErrSignatureInvalid)
	})
	t.Run("an empty key never verifies, not even an HMAC keyed with nothing", func(t *testing.T) {
		t.Parallel()
		empty := stream.Sign(nil, natsSubject, "id", body)
		require.ErrorIs(t, stream.VerifyAny([][]byte{[]byte(newToken), nil}, natsSubject, "id", body, empty), stream.ErrSignatureInvalid)
	})
	t.Run("a missing signature says so", func(t *testing.T) {
		t.Parallel()
		require.ErrorIs(t, stream.VerifyAny([][]byte{[]byte(newToken)}, natsSubject, "id", body, ""), stream.ErrSignatureMissing)
	})
}
