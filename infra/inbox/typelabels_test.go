package inbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/example/ledger"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/inboxtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// unknownTypes reads NAME_events_total{outcome="unknown_type"}, by type label.
func unknownTypes(t testing.TB, name string) map[string]float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name+"_events_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["outcome"] == inbox.OutcomeUnknownType {
				got[labels["type"]] += m.GetCounter().GetValue()
			}
		}
	}
	return got
}

func TestUnhandledTypeLabels(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("a well-formed type without a handler is counted and logged under its name, up to 32; the 33rd and a malformed one are other", func(t *testing.T) {
			t.Parallel()
			name := "ledger_types_" + string(d)
			db := dbtest.New(t, d, ledger.Migrations)
			ledgerTables(t, db)
			var logs proctest.Buffer
			ib := inbox.New(db.DB, slog.New(slog.NewJSONHandler(&logs, nil)), ledgerConsumer(name))
			in, err := inbox.NewIntake(ib, inboxtest.Token, "")
			require.NoError(t, err)
			e := web.New(slog.New(slog.DiscardHandler), db.DB)
			e.POST(inboxtest.Path, in.Deliver)
			deliver := func(typ string) {
				t.Helper()
				quoted, err := json.Marshal(typ) // JSON's escapes, not Go's
				require.NoError(t, err)
				body := fmt.Sprintf(`{"id":%q,"type":%s,"occurredAt":%d,"payload":{}}`, uuid.Must(uuid.NewV7()), quoted, time.Now().UnixMilli())
				rec := httptest.NewRecorder()
				e.ServeHTTP(rec, inboxtest.Request(body))
				require.Equal(t, http.StatusNotImplemented, rec.Code, rec.Body.String())
			}

			want := map[string]float64{}
			for i := range inbox.MaxTypeLabels {
				typ := fmt.Sprintf("Later.Type_%02d-v2", i)
				deliver(typ)
				want[typ] = 1
			}
			deliver("Later.Type_00-v2") // a name already labeled keeps its label
			want["Later.Type_00-v2"] = 2
			deliver("Later.Type_32") // the 33rd distinct name
			// Not well-formed: a space, a leading digit, a control, 65 characters.
			malformed := []string{"Rule Renamed", "1Rule", "Rule\x1b[2J", "R" + strings.Repeat("x", 64)}
			for _, typ := range malformed {
				deliver(typ)
			}
			want[inbox.TypeOther] = float64(1 + len(malformed))
			require.Equal(t, want, unknownTypes(t, name))

			// Over NATS the same labels: a name labeled before keeps it, a new one is other.
			handle, err := ib.NATSHandler(inbox.NATSConfig{Key: []byte(inboxtest.Token), MaxDeliveries: 10})
			require.NoError(t, err)
			for i, typ := range []string{"Later.Type_05-v2", "Later.Type_33"} {
				id := uuid.Must(uuid.NewV7())
				err := handle(context.Background(), signed(inboxtest.Token, uint64(i+1), id, inboxtest.Envelope(id, typ, `{}`)))
				require.Error(t, err)
				require.False(t, stream.IsTerminal(err), "naked: a billing with the handler applies it later")
			}
			want["Later.Type_05-v2"]++
			want[inbox.TypeOther]++
			require.Equal(t, want, unknownTypes(t, name))

			// Each refusal is logged with the type's name, quoted and clipped.
			out := logs.String()
			require.Contains(t, out, `"type":"\"Later.Type_32\""`)
			require.Contains(t, out, `"type":"\"Later.Type_33\""`)
			require.Contains(t, out, `"type":"\"Rule\\x1b[2J\""`, "a control is escaped, never written")
			require.Contains(t, out, `"type":"\"R`+strings.Repeat("x", 63)+`…\""`, "a long name is clipped")
			require.NotContains(t, out, "\x1b")
			// MaxTypeLabels names, one again, the 33rd, the malformed ones, two over NATS.
			require.Equal(t, inbox.MaxTypeLabels+2+len(malformed)+2, strings.Count(out, "event type not handled"), "one line per refusal")
		})
	})
}
