package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/standin"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

func TestServeCatchesUpAnUpgradedBilling(t *testing.T) {
	t.Parallel()

	t.Run("two replicas starting on orgs a billing older than its outbox counted: the provider ends with billing's count for every org, each told once", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
			db := dbtest.New(t, d, migrations.Billing)
			// As an upgrade finds them: counts applied before migration 00006,
			// version 0, no QuotaChanged row.
			const orgs = 40
			for i := range orgs {
				db.Exec(t, `INSERT INTO billing_quota (org_id, active_rules, updated_at, version) VALUES ($1, $2, 1, 0)`, uuid.NewString(), int64(i%5+1))
			}
			provider := standIn(t)
			environ := env("DATABASE_URL="+db.URL, "EVENTS_TOKEN=cmd-test-token", "HTTP_ADDR=127.0.0.1:0", "AUTH_DISABLED=true",
				"PROVIDER_URL="+provider.URL+standin.Path, "PROVIDER_SECRET="+providerSecret)
			replicas := []*server{startServer(t, environ), startServer(t, environ)}

			want := quotas(t, db)
			require.Len(t, want, orgs)
			require.Eventually(t, func() bool { return len(appliedAt(t, provider.URL).ByOrg) == orgs }, 30*time.Second, 20*time.Millisecond,
				"every org reaches the provider")
			a := appliedAt(t, provider.URL)
			require.Equal(t, want, a.ByOrg, "the provider has billing's count for every org")
			for org, v := range a.Versions {
				require.EqualValues(t, 1, v, org)
			}
			require.EqualValues(t, orgs, a.Applied, "one call per org, whichever replica caught it up")
			require.Zero(t, a.Rejected)
			require.EqualValues(t, orgs, db.Count(t, `SELECT count(*) FROM billing_outbox_events`), "one row per org between the two replicas")

			caught := 0
			for _, s := range replicas {
				require.Equal(t, 0, s.stop(t), s.Stderr.String())
				for _, l := range strings.Split(s.Stdout.String()+s.Stderr.String(), "\n") {
					if strings.Contains(l, "catch-up of unversioned orgs") {
						var rec struct {
							Level    string `json:"level"`
							Appended int    `json:"appended"`
						}
						require.NoError(t, json.Unmarshal([]byte(l), &rec), l)
						require.Equal(t, "INFO", rec.Level, l)
						caught += rec.Appended
					}
				}
			}
			require.Equal(t, orgs, caught, "the replicas' INFO lines count every org once")
		})
	})
}
