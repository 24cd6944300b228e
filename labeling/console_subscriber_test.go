package labeling

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// The failed list and a row's page say whose delivery a row is: billing's
// (the default subscriber, column ""), or a subscriber's of SUBSCRIBERS.
func TestConsoleShowsTheSubscriber(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("the failed list has a subscriber column and the row page a subscriber field", func(t *testing.T) {
			t.Parallel()
			b := consoleSetup(t, d, true)
			billing := b.insert(t, TagRuleActivated, `{}`, true, "billing answered 500")
			ledger := b.insert(t, TagRuleActivated, `{}`, true, "ledger answered 500")
			b.db.Exec(t, `UPDATE outbox_events SET subscriber = 'ledger', event_id = $2 WHERE id = $1`, ledger.String(), billing.String())

			list := b.send(t, http.MethodGet, "/console/failed", nil, nil, loopback).Body.String()
			require.Contains(t, list, `<th scope="col">Subscriber</th>`)
			require.Regexp(t, `ledger answered 500</td>\s*<td>ledger</td>`, list)
			require.Regexp(t, `billing answered 500</td>\s*<td>billing</td>`, list)

			rec := b.send(t, http.MethodGet, "/console/rows/"+ledger.String(), nil, nil, loopback)
			require.Equal(t, http.StatusOK, rec.Code)
			require.Contains(t, rec.Body.String(), `<th scope="row">Subscriber</th><td>ledger</td>`)
			rec = b.send(t, http.MethodGet, "/console/rows/"+billing.String(), nil, nil, loopback)
			require.Contains(t, rec.Body.String(), `<th scope="row">Subscriber</th><td>billing</td>`)
		})
	})
}
