package labeling

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

func TestCreateRule(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		shared := setup(t, d)

		t.Run("a new rule answers 201 with the stored rule", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			id := uuid.NewString()
			before := time.Now().UTC().Truncate(time.Millisecond)

			rec := b.do(t, http.MethodPost, rulesPath(b.org), createJSON(t, id, "invoices", `^INV-\d+$`, "finance"))

			require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
			require.Equal(t, rulePath(b.org, id), rec.Header().Get("Location"))
			got := decode[RuleJSON](t, rec)
			require.Equal(t, id, got.ID)
			require.Equal(t, b.org, got.OrgID)
			require.Equal(t, "invoices", got.Name)
			require.Equal(t, `^INV-\d+$`, got.Pattern)
			require.Equal(t, "finance", got.Label)
			require.False(t, got.Active)
			require.Equal(t, got.CreatedAt, got.UpdatedAt)
			created, err := time.Parse(time.RFC3339, got.CreatedAt)
			require.NoError(t, err)
			require.Equal(t, time.UTC, created.Location())
			require.False(t, created.Before(before))
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM labeling_rules WHERE id = $1 AND org_id = $2`, id, b.org))
			require.Zero(t, b.count(t, `SELECT count(*) FROM outbox_events WHERE payload->>'orgId' = $1`, b.org), "a create appends no event")
		})

		t.Run("lengths are counted in characters, not bytes", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			name := strings.Repeat("界", MaxNameLen)   // 600 bytes
			label := strings.Repeat("é", MaxLabelLen) // 200 bytes

			rec := b.do(t, http.MethodPost, rulesPath(b.org), createJSON(t, uuid.NewString(), name, "é+", label))

			require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
			got := decode[RuleJSON](t, rec)
			require.Equal(t, name, got.Name)
			require.Equal(t, label, got.Label)
		})

		t.Run("a replay answers 200 with a body equal byte for byte", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			body := createJSON(t, uuid.NewString(), "invoices", `^INV-\d+$`, "finance")

			first := b.do(t, http.MethodPost, rulesPath(b.org), body)
			require.Equal(t, http.StatusCreated, first.Code, first.Body.String())
			second := b.do(t, http.MethodPost, rulesPath(b.org), body)

			require.Equal(t, http.StatusOK, second.Code, second.Body.String())
			require.Equal(t, first.Body.String(), second.Body.String())
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM labeling_rules WHERE org_id = $1`, b.org))
		})

		t.Run("a replay answers the stored row, not the request rebuilt", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			id := uuid.NewString()
			b.create(t, b.org, id)
			b.db.Exec(t, `UPDATE labeling_rules SET created_at = 1000, updated_at = 2001, active = true WHERE id = $1`, id)

			rec := b.do(t, http.MethodPost, rulesPath(b.org), createJSON(t, id, "invoices", `^INV-\d+$`, "finance"))

			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			got := decode[RuleJSON](t, rec)
			require.Equal(t, "1970-01-01T00:00:01.000Z", got.CreatedAt)
			require.Equal(t, "1970-01-01T00:00:02.001Z", got.UpdatedAt)
			require.True(t, got.Active)
		})

		t.Run("the same id with another body answers 409 and changes nothing", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			id := uuid.NewString()
			stored := b.create(t, b.org, id)
			for _, body := range []string{
				createJSON(t, id, "other name", `^INV-\d+$`, "finance"),
				createJSON(t, id, "invoices", `^INV-\d*$`, "finance"),
				createJSON(t, id, "invoices", `^INV-\d+$`, "other label"),
			} {
				rec := b.do(t, http.MethodPost, rulesPath(b.org), body)
				requireError(t, rec, http.StatusConflict, "rule_id_conflict")
			}
			rec := b.do(t, http.MethodGet, rulePath(b.org, id), "")
			require.Equal(t, stored, decode[RuleJSON](t, rec))
		})

		t.Run("the same id under another org answers 409 and changes nothing", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			id := uuid.NewString()
			stored := b.create(t, b.org, id)
			other := uuid.NewString()

			rec := b.do(t, http.MethodPost, rulesPath(other), createJSON(t, id, "invoices", `^INV-\d+$`, "finance"))

			requireError(t, rec, http.StatusConflict, "rule_id_conflict")
			require.Equal(t, stored, decode[RuleJSON](t, b.do(t, http.MethodGet, rulePath(b.org, id), "")))
			require.Zero(t, b.count(t, `SELECT count(*) FROM labeling_rules WHERE org_id = $1`, other))
		})

		t.Run("bad input answers 400 and stores nothing", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			id := uuid.NewString()
			ok := func(mutate func(*CreateJSON)) string {
				c := CreateJSON{ID: id, Name: "invoices", Pattern: `^INV-\d+$`, Label: "finance"}
				mutate(&c)
				return createJSON(t, c.ID, c.Name, c.Pattern, c.Label)
			}
			cases := []struct {
				name, path, body string
			}{
				{"missing id", rulesPath(b.org), `{"name":"n","pattern":"a","label":"l"}`},
				{"null id", rulesPath(b.org), `{"id":null,"name":"n","pattern":"a","label":"l"}`},
				{"id not a UUID", rulesPath(b.org), ok(func(c *CreateJSON) { c.ID = "rule-1" })},
				{"id as bare hex", rulesPath(b.org), ok(func(c *CreateJSON) { c.ID = strings.ReplaceAll(id, "-", "") })},
				{"id in braces", rulesPath(b.org), ok(func(c *CreateJSON) { c.ID = "{" + id + "}" })},
				{"id is the nil UUID", rulesPath(b.org), ok(func(c *CreateJSON) { c.ID = uuid.Nil.String() })},
				{"id a number", rulesPath(b.org), `{"id":7,"name":"n","pattern":"a","label":"l"}`},
				{"empty name", rulesPath(b.org), ok(func(c *CreateJSON) { c.Name = "" })},
				{"name of 201 characters", rulesPath(b.org), ok(func(c *CreateJSON) { c.Name = strings.Repeat("界", MaxNameLen+1) })},
				{"name with NUL", rulesPath(b.org), ok(func(c *CreateJSON) { c.Name = "a\x00b" })},
				{"empty label", rulesPath(b.org), ok(func(c *CreateJSON) { c.Label = "" })},
				{"label of 101 characters", rulesPath(b.org), ok(func(c *CreateJSON) { c.Label = strings.Repeat("é", MaxLabelLen+1) })},
				{"empty pattern", rulesPath(b.org), ok(func(c *CreateJSON) { c.Pattern = "" })},
				{"pattern unbalanced", rulesPath(b.org), ok(func(c *CreateJSON) { c.Pattern = "(a" })},
				{"pattern with lookbehind (not RE2)", rulesPath(b.org), ok(func(c *CreateJSON) { c.Pattern = "(?<=a)b" })},
				{"pattern with backreference (not RE2)", rulesPath(b.org), ok(func(c *CreateJSON) { c.Pattern = `(a)\1` })},
				{"malformed JSON", rulesPath(b.org), `{"id":"` + id + `",`},
				{"unknown field", rulesPath(b.org), `{"id":"` + id + `","name":"n","pattern":"a","label":"l","active":true}`},
				{"two JSON values", rulesPath(b.org), ok(func(*CreateJSON) {}) + `{}`},
				{"a JSON array", rulesPath(b.org), `[]`},
				{"empty body", rulesPath(b.org), ``},
				{"orgId not a UUID", rulesPath("acme"), ok(func(*CreateJSON) {})},
				{"unknown query parameter", rulesPath(b.org) + "?dryRun=true", ok(func(*CreateJSON) {})},
			}
			for _, tc := range cases {
				rec := b.do(t, http.MethodPost, tc.path, tc.body)
				require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", tc.name, rec.Body.String())
				requireError(t, rec, http.StatusBadRequest, "invalid")
			}
			require.Zero(t, b.count(t, `SELECT count(*) FROM labeling_rules WHERE org_id = $1`, b.org))
		})

		t.Run("a body over 64 KiB answers 413 and stores nothing", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			body := createJSON(t, uuid.NewString(), strings.Repeat("a", 70_000), "a", "l")

			rec := b.do(t, http.MethodPost, rulesPath(b.org), body)

			requireError(t, rec, http.StatusRequestEntityTooLarge, "too_large")
			require.Zero(t, b.count(t, `SELECT count(*) FROM labeling_rules WHERE org_id = $1`, b.org))
		})
	})
}

func TestGetRule(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		b := setup(t, d)
		id := uuid.NewString()
		created := b.create(t, b.org, id)

		t.Run("the owner's rule answers 200 with the rule", func(t *testing.T) {
			t.Parallel()
			rec := b.do(t, http.MethodGet, rulePath(b.org, id), "")
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.Equal(t, created, decode[RuleJSON](t, rec))
		})

		t.Run("an upper-case id names the same rule", func(t *testing.T) {
			t.Parallel()
			rec := b.do(t, http.MethodGet, rulePath(strings.ToUpper(b.org), strings.ToUpper(id)), "")
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.Equal(t, created, decode[RuleJSON](t, rec))
		})

		t.Run("an unknown rule answers 404", func(t *testing.T) {
			t.Parallel()
			requireError(t, b.do(t, http.MethodGet, rulePath(b.org, uuid.NewString()), ""), http.StatusNotFound, "not_found")
		})

		t.Run("another org's rule answers 404", func(t *testing.T) {
			t.Parallel()
			requireError(t, b.do(t, http.MethodGet, rulePath(uuid.NewString(), id), ""), http.StatusNotFound, "not_found")
		})

		t.Run("bad ids and unknown query parameters answer 400", func(t *testing.T) {
			t.Parallel()
			for _, path := range []string{
				rulePath("acme", id),
				rulePath(b.org, "rule-1"),
				rulePath(b.org, uuid.Nil.String()),
				rulePath(b.org, id) + "?fields=name",
			} {
				requireError(t, b.do(t, http.MethodGet, path, ""), http.StatusBadRequest, "invalid")
			}
		})
	})
}

func TestListRules(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		shared := setup(t, d)

		t.Run("an org without rules answers an empty page", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			b.create(t, uuid.NewString(), uuid.NewString()) // another org's rule is not listed

			rec := b.do(t, http.MethodGet, rulesPath(b.org), "")

			require.Equal(t, http.StatusOK, rec.Code)
			require.JSONEq(t, `{"rules":[],"next":null}`, rec.Body.String())
		})

		t.Run("pages walk the org's rules in id order", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			var ids []string
			for range 5 {
				id := uuid.NewString() // random (v4): creation order is not id order
				ids = append(ids, id)
				b.create(t, b.org, id)
			}
			b.create(t, uuid.NewString(), uuid.NewString())
			sort.Strings(ids)

			var seen []string
			var nexts []*string
			path := rulesPath(b.org) + "?limit=2"
			for range 3 {
				rec := b.do(t, http.MethodGet, path, "")
				require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
				page := decode[PageJSON](t, rec)
				for _, r := range page.Rules {
					require.Equal(t, b.org, r.OrgID)
					seen = append(seen, r.ID)
				}
				nexts = append(nexts, page.Next)
				if page.Next != nil {
					path = rulesPath(b.org) + "?limit=2&after=" + *page.Next
				}
			}
			require.Equal(t, ids, seen)
			require.Equal(t, []*string{&ids[1], &ids[3], nil}, nexts)
		})

		t.Run("a full last page has no next", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			b.create(t, b.org, uuid.NewString())
			b.create(t, b.org, uuid.NewString())

			page := decode[PageJSON](t, b.do(t, http.MethodGet, rulesPath(b.org)+"?limit=2", ""))

			require.Len(t, page.Rules, 2)
			require.Nil(t, page.Next)
		})

		t.Run("the default page is 50 rules and the largest 500", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			org, err := ParseOrgID(b.org)
			require.NoError(t, err)
			for range DefaultPageSize + 1 {
				n, err := NewRuleFrom(uuid.NewString(), "n", "p", "l")
				require.NoError(t, err)
				_, _, err = b.svc.Create(context.Background(), org, n)
				require.NoError(t, err)
			}

			page := decode[PageJSON](t, b.do(t, http.MethodGet, rulesPath(b.org), ""))
			require.Len(t, page.Rules, DefaultPageSize)
			require.NotNil(t, page.Next)
			require.Equal(t, page.Rules[DefaultPageSize-1].ID, *page.Next)

			page = decode[PageJSON](t, b.do(t, http.MethodGet, rulesPath(b.org)+"?limit=500", ""))
			require.Len(t, page.Rules, DefaultPageSize+1)
			require.Nil(t, page.Next)
		})

		t.Run("bad query values answer 400", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			for _, query := range []string{
				"limit=0", "limit=501", "limit=abc", "limit=-1", "limit=", "limit=1.5",
				"after=abc", "after=", "after=" + uuid.Nil.String(),
				"limit=1&limit=2", "page=2",
			} {
				rec := b.do(t, http.MethodGet, rulesPath(b.org)+"?"+query, "")
				require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", query, rec.Body.String())
				requireError(t, rec, http.StatusBadRequest, "invalid")
			}
			requireError(t, b.do(t, http.MethodGet, rulesPath("acme"), ""), http.StatusBadRequest, "invalid")
		})

		// Each site that repeats client input in a 400 clips it (the README's 64).
		long := strings.Repeat("x", 5000)
		for site, query := range map[string]string{
			"a long limit value":            "limit=" + long,
			"a long unknown parameter name": long + "=1",
		} {
			t.Run("a 400 for "+site+" repeats at most 64 of its characters", func(t *testing.T) {
				t.Parallel()
				b := shared.withOrg()
				rec := b.do(t, http.MethodGet, rulesPath(b.org)+"?"+query, "")
				body := rec.Body.String() // requireError consumes the body
				requireError(t, rec, http.StatusBadRequest, "invalid")
				require.Less(t, len(body), 300, body)
				require.Contains(t, body, strings.Repeat("x", 64)+"…")
				require.NotContains(t, body, strings.Repeat("x", 65))
			})
		}
	})
}

func TestActivateRule(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		shared := setup(t, d)

		t.Run("activating an inactive rule answers 200 active and appends one RuleActivated", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			id := uuid.NewString()
			created := b.create(t, b.org, id)

			rec := b.do(t, http.MethodPost, rulePath(b.org, id)+"/activate", "")

			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			got := decode[RuleJSON](t, rec)
			require.True(t, got.Active)
			require.Equal(t, created.CreatedAt, got.CreatedAt)
			require.GreaterOrEqual(t, got.UpdatedAt, created.UpdatedAt)
			require.Equal(t, []outboxRow{{
				Tag:       "RuleActivated",
				Payload:   map[string]string{"orgId": b.org, "ruleId": id},
				CreatedAt: b.events(t)[0].CreatedAt,
			}}, b.events(t))
			require.Equal(t, got, decode[RuleJSON](t, b.do(t, http.MethodGet, rulePath(b.org, id), "")))
		})

		t.Run("activating an active rule changes nothing and appends nothing", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			id := uuid.NewString()
			b.create(t, b.org, id)
			first := b.do(t, http.MethodPost, rulePath(b.org, id)+"/activate", "")
			require.Equal(t, http.StatusOK, first.Code)

			again := b.do(t, http.MethodPost, rulePath(b.org, id)+"/activate", "{}")

			require.Equal(t, http.StatusOK, again.Code, again.Body.String())
			require.Equal(t, first.Body.String(), again.Body.String())
			require.Len(t, b.events(t), 1)
		})

		t.Run("an unknown rule or another org's answers 404 and appends nothing", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			id := uuid.NewString()
			b.create(t, b.org, id)

			requireError(t, b.do(t, http.MethodPost, rulePath(b.org, uuid.NewString())+"/activate", ""), http.StatusNotFound, "not_found")
			requireError(t, b.do(t, http.MethodPost, rulePath(uuid.NewString(), id)+"/activate", ""), http.StatusNotFound, "not_found")

			require.False(t, decode[RuleJSON](t, b.do(t, http.MethodGet, rulePath(b.org, id), "")).Active)
			require.Empty(t, b.events(t))
		})

		t.Run("bad input answers 400 or 413 and changes nothing", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			id := uuid.NewString()
			b.create(t, b.org, id)
			for _, tc := range []struct{ path, body string }{
				{rulePath("acme", id) + "/activate", ""},
				{rulePath(b.org, "rule-1") + "/activate", ""},
				{rulePath(b.org, id) + "/activate?force=true", ""},
				{rulePath(b.org, id) + "/activate", `{"active":true}`},
				{rulePath(b.org, id) + "/activate", `[]`},
				{rulePath(b.org, id) + "/activate", `{`},
			} {
				requireError(t, b.do(t, http.MethodPost, tc.path, tc.body), http.StatusBadRequest, "invalid")
			}
			requireError(t, b.do(t, http.MethodPost, rulePath(b.org, id)+"/activate", `{"x":"`+strings.Repeat("a", 70_000)+`"}`),
				http.StatusRequestEntityTooLarge, "too_large")
			require.False(t, decode[RuleJSON](t, b.do(t, http.MethodGet, rulePath(b.org, id), "")).Active)
			require.Empty(t, b.events(t))
		})
	})
}

func TestDeactivateRule(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		shared := setup(t, d)

		t.Run("deactivating an active rule answers 200 inactive and appends one RuleDeactivated", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			id := uuid.NewString()
			b.create(t, b.org, id)
			require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, rulePath(b.org, id)+"/activate", "").Code)

			rec := b.do(t, http.MethodPost, rulePath(b.org, id)+"/deactivate", "")

			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.False(t, decode[RuleJSON](t, rec).Active)
			events := b.events(t)
			require.Len(t, events, 2)
			require.Equal(t, "RuleDeactivated", events[1].Tag)
			require.Equal(t, map[string]string{"orgId": b.org, "ruleId": id}, events[1].Payload)
		})

		t.Run("deactivating an inactive rule changes nothing and appends nothing", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			id := uuid.NewString()
			created := b.create(t, b.org, id)

			rec := b.do(t, http.MethodPost, rulePath(b.org, id)+"/deactivate", "")

			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.Equal(t, created, decode[RuleJSON](t, rec))
			require.Empty(t, b.events(t))
		})

		t.Run("another org's rule answers 404 and stays active", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			id := uuid.NewString()
			b.create(t, b.org, id)
			require.Equal(t, http.StatusOK, b.do(t, http.MethodPost, rulePath(b.org, id)+"/activate", "").Code)

			requireError(t, b.do(t, http.MethodPost, rulePath(uuid.NewString(), id)+"/deactivate", ""), http.StatusNotFound, "not_found")
			requireError(t, b.do(t, http.MethodPost, rulePath(b.org, uuid.NewString())+"/deactivate", ""), http.StatusNotFound, "not_found")
			requireError(t, b.do(t, http.MethodPost, rulePath(b.org, "x")+"/deactivate", ""), http.StatusBadRequest, "invalid")

			require.True(t, decode[RuleJSON](t, b.do(t, http.MethodGet, rulePath(b.org, id), "")).Active)
			require.Len(t, b.events(t), 1)
		})
	})
}
