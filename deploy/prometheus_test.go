package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/natstest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

const (
	alertsFile     = "deploy/prometheus/alerts.yml"
	alertTestsFile = "deploy/prometheus/alerts_test.yml"
	dashboardFile  = "deploy/grafana/outboxpair.json"
	// runbookPrefix is where every alert's runbook_url points: a section of
	// docs/operations.md.
	runbookPrefix = "https://github.com/acme/outboxpair/blob/main/docs/operations.md#"
)

// promtool returns the path of Prometheus's promtool, failing t without it:
// the rules are only as good as the tool that checks them.
func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool is missing: install Debian's prometheus package (apt-get install prometheus)")
	return path
}

// runPromtool runs promtool in the module root with stdin and returns its
// combined output, failing t when it exits non-zero.
func runPromtool(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(promtool(t), args...)
	cmd.Dir = root
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
	return string(out)
}

// alertRule is one alerting rule of alerts.yml.
type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func alertRules(t *testing.T) []alertRule {
	t.Helper()
	var file struct {
		Groups []struct {
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(read(t, alertsFile)), &file))
	var rules []alertRule
	for _, g := range file.Groups {
		rules = append(rules, g.Rules...)
	}
	require.NotEmpty(t, rules)
	return rules
}

// ruleTests is alerts_test.yml, as promtool reads it.
type ruleTests struct {
	RuleFiles []string `yaml:"rule_files"`
	Tests     []struct {
		Name        string `yaml:"name"`
		InputSeries []struct {
			Series string `yaml:"series"`
		} `yaml:"input_series"`
		AlertRuleTest []struct {
			Alertname string `yaml:"alertname"`
			ExpAlerts []any  `yaml:"exp_alerts"`
		} `yaml:"alert_rule_test"`
	} `yaml:"tests"`
}

func alertTests(t *testing.T) ruleTests {
	t.Helper()
	var tests ruleTests
	require.NoError(t, yaml.Unmarshal([]byte(read(t, alertTestsFile)), &tests))
	require.NotEmpty(t, tests.Tests)
	return tests
}

// runbookCommand is what a runbook section must name: an operator command
// of either binary or a console page.
var runbookCommand = regexp.MustCompile("`(labeling|billing) [a-z]|`/console/")

// markdownSection is text's part under the heading whose slug is anchor, up
// to the next heading of any level.
func markdownSection(text, anchor string) string {
	lines := strings.Split(text, "\n")
	for i, line := range lines {
		if !strings.HasPrefix(line, "#") || !headingSlugs(line)[anchor] {
			continue
		}
		var body []string
		for _, l := range lines[i+1:] {
			if strings.HasPrefix(l, "#") {
				break
			}
			body = append(body, l)
		}
		return strings.Join(body, "\n")
	}
	return ""
}

// TestAlertRules holds deploy/prometheus/alerts.yml to promtool, to its unit
// tests and to the runbook: promtool finds nothing wrong with the rules and
// their tests pass; every alert has a case that fires it and one that leaves
// it quiet; every alert has a severity, a summary, a description and a
// runbook_url naming a section of docs/operations.md that says which command
// or console page fixes it. That the metrics they name exist is
// TestExportedMetrics's.
func TestAlertRules(t *testing.T) {
	t.Parallel()

	t.Run("promtool check rules finds nothing wrong", func(t *testing.T) {
		t.Parallel()
		out := runPromtool(t, "", "check", "rules", alertsFile)
		require.Contains(t, out, "SUCCESS")
		require.NotContains(t, out, "WARNING", "promtool's warnings are findings too")
	})

	t.Run("promtool test rules passes", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, []string{"alerts.yml"}, alertTests(t).RuleFiles, "the tests load the rules beside them")
		require.Contains(t, runPromtool(t, "", "test", "rules", alertTestsFile), "SUCCESS")
	})

	t.Run("every alert has a case that fires it and one that leaves it quiet, and every case names an alert", func(t *testing.T) {
		t.Parallel()
		fires, quiet := map[string]bool{}, map[string]bool{}
		alerts := map[string]bool{}
		for _, r := range alertRules(t) {
			require.NotEmpty(t, r.Alert, "alerts.yml holds alerting rules only: %q", r.Expr)
			require.False(t, alerts[r.Alert], "two alerts named %s", r.Alert)
			alerts[r.Alert] = true
		}
		for _, tc := range alertTests(t).Tests {
			require.NotEmpty(t, tc.AlertRuleTest, "%s checks no alert", tc.Name)
			for _, a := range tc.AlertRuleTest {
				require.True(t, alerts[a.Alertname], "%s: %s is not an alert of %s", tc.Name, a.Alertname, alertsFile)
				if len(a.ExpAlerts) > 0 {
					fires[a.Alertname] = true
				} else {
					quiet[a.Alertname] = true
				}
			}
		}
		for alert := range alerts {
			require.True(t, fires[alert], "%s: no case of %s expects it to fire", alert, alertTestsFile)
			require.True(t, quiet[alert], "%s: no case of %s expects it to stay quiet", alert, alertTestsFile)
		}
	})

	t.Run("every alert has a severity, a summary, a description and a runbook section that names the command or page that fixes it", func(t *testing.T) {
		t.Parallel()
		ops := read(t, "docs/operations.md")
		slugs := headingSlugs(ops)
		for _, r := range alertRules(t) {
			require.Contains(t, []string{"critical", "warning"}, r.Labels["severity"], "%s: severity critical or warning", r.Alert)
			require.NotEmpty(t, r.Annotations["summary"], "%s: a summary", r.Alert)
			require.NotEmpty(t, r.Annotations["description"], "%s: a description", r.Alert)
			anchor, ok := strings.CutPrefix(r.Annotations["runbook_url"], runbookPrefix)
			require.True(t, ok, "%s: runbook_url starts with %s", r.Alert, runbookPrefix)
			require.Equal(t, strings.ToLower(r.Alert), anchor, "%s: its runbook section is headed with its name", r.Alert)
			require.True(t, slugs[anchor], "%s: docs/operations.md has no heading #%s", r.Alert, anchor)
			require.Regexp(t, runbookCommand, markdownSection(ops, anchor),
				"%s: its runbook section names the command (`labeling outbox failed`, ...) or the console page (`/console/...`) that fixes it", r.Alert)
		}
	})
}

// dashboard is what the tests read of the Grafana dashboard's JSON model.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query string `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Title      string `json:"title"`
	Type       string `json:"type"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	require.NoError(t, json.Unmarshal([]byte(read(t, dashboardFile)), &d))
	return d
}

// allPanels is d's panels, those of collapsed rows included, rows excluded.
func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type != "row" {
				out = append(out, p)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// grafanaVars are Grafana's interval variables: PromQL reads them as durations
// once Grafana has put one in.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// TestDashboard checks the Grafana dashboard's shape: every panel queries the
// datasource variable DS_PROMETHEUS (a Prometheus datasource the importer or
// provisioner picks), and every metric an alert reads has a panel. That the
// metrics exist is TestExportedMetrics's.
func TestDashboard(t *testing.T) {
	t.Parallel()
	d := readDashboard(t)
	require.NotEmpty(t, d.Title)
	require.NotEmpty(t, d.UID, "a fixed uid, so that links to the dashboard survive a re-import")
	hasVar := slices.ContainsFunc(d.Templating.List, func(v struct {
		Name  string `json:"name"`
		Type  string `json:"type"`
		Query string `json:"query"`
	},
	) bool {
		return v.Name == "DS_PROMETHEUS" && v.Type == "datasource" && v.Query == "prometheus"
	})
	require.True(t, hasVar, "a datasource variable DS_PROMETHEUS of type prometheus")
	panels := d.allPanels()
	require.NotEmpty(t, panels)
	var exprs []string
	for _, p := range panels {
		require.NotNil(t, p.Datasource, "%s: a datasource", p.Title)
		require.Equal(t, "${DS_PROMETHEUS}", p.Datasource.UID, "%s: the datasource is the variable", p.Title)
		require.NotEmpty(t, p.Targets, "%s: a query", p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "%s: every target is a PromQL expression", p.Title)
			exprs = append(exprs, grafanaVars.Replace(tg.Expr))
		}
	}
	var alertExprs []string
	for _, r := range alertRules(t) {
		alertExprs = append(alertExprs, r.Expr)
	}
	onPanels := map[string]bool{}
	for _, names := range promqlNames(t, exprs, nil) {
		for _, n := range names {
			onPanels[n] = true
		}
	}
	for i, names := range promqlNames(t, alertExprs, nil) {
		for _, n := range names {
			require.True(t, onPanels[n], "%s reads %s, which no panel of %s shows", alertRules(t)[i].Alert, n, dashboardFile)
		}
	}
}

// The PromQL module's own tests pass: the README's test command reaches them
// only through this package, as deploy/workflow's through TestCIWorkflow.
func TestPromQLModule(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("go", "test", "-count=1", "./...")
	cmd.Dir = filepath.Join(root, "deploy", "promql")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
}

// promqlNames returns the metric names of each expression and each series,
// read by Prometheus's own parser (deploy/promql, a module of its own), in the
// order given: exprs first, then series. An expression that does not parse, or
// selects a metric without naming it, fails t.
func promqlNames(t *testing.T, exprs, series []string) [][]string {
	t.Helper()
	type query struct {
		Expr   string `json:"expr,omitempty"`
		Series string `json:"series,omitempty"`
	}
	var queries []query
	for _, e := range exprs {
		queries = append(queries, query{Expr: e})
	}
	for _, s := range series {
		queries = append(queries, query{Series: s})
	}
	in, err := json.Marshal(queries)
	require.NoError(t, err)
	cmd := exec.Command("go", "run", ".")
	cmd.Dir = filepath.Join(root, "deploy", "promql")
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go run ./deploy/promql: %s", stderr.String())
	var answers []struct {
		Names []string `json:"names"`
		Error string   `json:"error"`
	}
	require.NoError(t, json.Unmarshal(out, &answers))
	require.Len(t, answers, len(queries))
	names := make([][]string, len(answers))
	for i, a := range answers {
		require.Empty(t, a.Error, "%+v", queries[i])
		names[i] = a.Names
	}
	return names
}

// knownLint are the findings of promtool check metrics that stay, each with
// why: a metric's name is contract (docs/operations.md lists them, alerts and
// dashboards read them), so a finding that only a rename would fix is kept.
var knownLint = map[string]string{
	"nats_consumer_gauge_reads_total metric name should not include type 'gauge'": "it counts reads of the backlog gauges, not a gauge; renaming it would break the alerts that read it",
}

// exportedNames are the names of the series a /metrics body holds: a histogram
// x shows as x_bucket, x_sum and x_count.
func exportedNames(body string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if i := strings.IndexAny(line, "{ "); i > 0 {
			names[line[:i]] = true
		}
	}
	return names
}

// TestExportedMetrics starts both services as real processes with traffic
// that makes their series appear (see scrapeServices) and holds what reads
// their /metrics to it: every metric the alerts, the alerts' unit tests (their
// input series) and the dashboard's panels name is one a service exports, so
// a rule test cannot pass on a metric that does not exist; and promtool check
// metrics finds nothing wrong with either service's /metrics.
func TestExportedMetrics(t *testing.T) {
	t.Parallel()
	bodies := scrapeServices(t)
	exported := map[string]bool{}
	for _, body := range bodies {
		for n := range exportedNames(body) {
			exported[n] = true
		}
	}
	requireExported := func(t *testing.T, what []string, names [][]string, file string) {
		t.Helper()
		for i, ns := range names {
			for _, n := range ns {
				require.True(t, exported[n], "%s: %s names %s, which neither service exports", file, what[i], n)
			}
		}
	}

	t.Run("every metric an alert reads is exported", func(t *testing.T) {
		t.Parallel()
		var exprs []string
		for _, r := range alertRules(t) {
			exprs = append(exprs, r.Expr)
		}
		requireExported(t, exprs, promqlNames(t, exprs, nil), alertsFile)
	})

	t.Run("every series of the alerts' unit tests is one of an exported metric", func(t *testing.T) {
		t.Parallel()
		var series []string
		for _, tc := range alertTests(t).Tests {
			for _, s := range tc.InputSeries {
				series = append(series, s.Series)
			}
		}
		require.NotEmpty(t, series)
		requireExported(t, series, promqlNames(t, nil, series), alertTestsFile)
	})

	t.Run("every metric a dashboard panel queries is exported", func(t *testing.T) {
		t.Parallel()
		var exprs []string
		for _, p := range readDashboard(t).allPanels() {
			for _, tg := range p.Targets {
				exprs = append(exprs, grafanaVars.Replace(tg.Expr))
			}
		}
		requireExported(t, exprs, promqlNames(t, exprs, nil), dashboardFile)
	})

	for _, name := range []string{"labeling", "billing"} {
		t.Run("promtool check metrics finds no error and no lint but the known ones in "+name+"'s /metrics", func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(promtool(t), "check", "metrics")
			cmd.Stdin = strings.NewReader(bodies[name])
			out, err := cmd.CombinedOutput()
			if err != nil {
				// Exit 3 is lint findings alone; any other failure is an error.
				require.Equal(t, 3, cmd.ProcessState.ExitCode(), "promtool check metrics: %v\n%s", err, out)
			}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if line != "" {
					_, known := knownLint[line]
					require.True(t, known, "promtool check metrics on %s's /metrics: %s", name, line)
				}
			}
		})
	}
}

// scrapeServices runs the pair as production does, on PostgreSQL: billing
// consuming a NATS JetStream stream (a server of the test's own) and calling a
// provider; labeling delivering over HTTP to billing and to one more
// subscriber, flaky. Its traffic makes every series family appear that only
// appears once it counts something: a rule created, activated and
// deactivated (billing applies both events and calls the provider twice), a
// signed and an unsigned message on the stream (one applied, one terminated),
// flaky failing every delivery and the provider the first call (each
// dead-lettered after OUTBOX_MAX_ATTEMPTS=2, so retried first). It returns
// each service's /metrics once all of that has shown.
func scrapeServices(t *testing.T) map[string]string {
	t.Helper()
	bins := builtBinaries(t)
	const token = "metrics-test-token"

	ns := natstest.Start(t)
	js := natstest.StreamWithDurable(t, ns, "billing")
	ctx := context.Background()

	// The provider refuses every call for the first key it sees (503, retried,
	// then dead-lettered) and accepts the others.
	var mu sync.Mutex
	refused := ""
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		if refused == "" {
			refused = r.Header.Get("Idempotency-Key")
		}
		refuse := refused == r.Header.Get("Idempotency-Key")
		mu.Unlock()
		if refuse {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(provider.Close)
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(flaky.Close)

	common := func(db string) map[string]string {
		return map[string]string{
			"DATABASE_URL": db, "EVENTS_TOKEN": token, "HTTP_ADDR": "127.0.0.1:0", "AUTH_DISABLED": "true",
			"OUTBOX_POLL_INTERVAL": "50ms", "OUTBOX_MAX_ATTEMPTS": "2", "OUTBOX_RETRY_BASE": "10ms", "OUTBOX_RETRY_MAX": "50ms",
		}
	}
	benv := common(pgtest.Empty(t).URL)
	benv["NATS_URL"] = ns.ClientURL()
	benv["PROVIDER_URL"] = provider.URL + "/webhook"
	benv["PROVIDER_SECRET"] = "whsec_ZGV2LXByb3ZpZGVyLXNlY3JldC1jaGFuZ2UtbWUhISE="
	b := proctest.Start(t, bins["billing"], benv, "serve")
	billing := "http://" + b.ListenAddr(t)
	lenv := common(pgtest.Empty(t).URL)
	lenv["BILLING_URL"] = billing
	lenv["SUBSCRIBERS"] = "flaky"
	lenv["SUBSCRIBER_FLAKY_URL"] = flaky.URL
	lenv["SUBSCRIBER_FLAKY_TOKEN"] = "flaky-token"
	lenv["SUBSCRIBER_FLAKY_TYPES"] = "RuleActivated"
	l := proctest.Start(t, bins["labeling"], lenv, "serve")
	labeling := "http://" + l.ListenAddr(t)

	client := &http.Client{Timeout: 10 * time.Second}
	get := func(url string) (int, string) {
		resp, err := client.Get(url)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, base := range []string{labeling, billing} {
		require.Eventually(t, func() bool { code, _ := get(base + "/readyz"); return code == http.StatusOK },
			time.Minute, 20*time.Millisecond, "%s never became ready", base)
	}
	post := func(path, body string, want int) {
		resp, err := client.Post(labeling+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "POST %s", path)
	}
	org, rule := uuid.NewString(), uuid.NewString()
	post("/v1/orgs/"+org+"/rules", fmt.Sprintf(`{"id":%q,"name":"n","pattern":"p","label":"l"}`, rule), http.StatusCreated)
	post("/v1/orgs/"+org+"/rules/"+rule+"/activate", "", http.StatusOK)
	post("/v1/orgs/"+org+"/rules/"+rule+"/deactivate", "", http.StatusOK)

	publish := func(sign bool) {
		id := uuid.NewString()
		body := fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":%d,"payload":{"orgId":%q,"ruleId":%q}}`,
			id, time.Now().UnixMilli(), uuid.New(), uuid.New())
		msg := nats.NewMsg(stream.Subject("RuleActivated"))
		msg.Data = []byte(body)
		if sign {
			msg.Header.Set(stream.SignatureHeader, stream.Sign([]byte(token), msg.Subject, id, msg.Data))
		}
		_, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(id))
		require.NoError(t, err)
	}
	publish(true)
	publish(false)

	// What each service's /metrics shows once the traffic above has settled.
	settled := map[string][]string{
		"labeling": {
			`outbox_events_processed_total{subscriber="",tag="RuleDeactivated"} 1`,
			`outbox_events_dead_lettered_total{subscriber="flaky",tag="RuleActivated"} 1`,
			`outbox_events_retried_total{subscriber="flaky",tag="RuleActivated"} 1`,
			"outbox_failed_rows 1",
		},
		"billing": {
			`billing_outbox_events_dead_lettered_total{subscriber="",tag="QuotaChanged"} 1`,
			`billing_outbox_events_processed_total{subscriber="",tag="QuotaChanged"} `,
			`nats_consumed_total{consumer="billing",outcome="acked"} 1`,
			`nats_consumed_total{consumer="billing",outcome="terminated"} 1`,
			"billing_outbox_failed_rows 1",
		},
	}
	bases := map[string]string{"labeling": labeling, "billing": billing}
	bodies := map[string]string{}
	for name, wants := range settled {
		deadline := time.Now().Add(time.Minute)
		for {
			code, body := get(bases[name] + "/metrics")
			bodies[name] = body
			missing := slices.DeleteFunc(slices.Clone(wants), func(w string) bool { return strings.Contains(body, w) })
			if code == http.StatusOK && len(missing) == 0 {
				break
			}
			require.True(t, time.Now().Before(deadline), "%s's /metrics never showed %q:\n%s", name, missing, body)
			time.Sleep(50 * time.Millisecond) // the next poll
		}
	}
	return bodies
}

// TestPromtoolInCI: both ways CI runs the tests install promtool, which the
// tests above fail without, and leave no Prometheus server running.
func TestPromtoolInCI(t *testing.T) {
	t.Parallel()

	t.Run(".ci/run installs Debian's prometheus package when promtool is missing and keeps its server stopped", func(t *testing.T) {
		t.Parallel()
		cmds := shellCommands(read(t, ".ci/run"))
		require.Contains(t, cmds, "if ! command -v promtool >/dev/null 2>&1; then")
		require.Contains(t, cmds, "apt-get install -y -qq --no-install-recommends prometheus >/dev/null")
		require.Contains(t, cmds, "systemctl disable --now prometheus")
	})

	t.Run("the workflow's test job installs it before the tests and stops its server", func(t *testing.T) {
		t.Parallel()
		var cmds []string
		for _, run := range workflowRuns(t)["test"] {
			cmds = append(cmds, shellCommands(run)...)
		}
		install := slices.Index(cmds, "sudo apt-get install -y -qq --no-install-recommends prometheus")
		require.GreaterOrEqual(t, install, 0, "the test job installs prometheus")
		require.Contains(t, cmds[install:], "sudo systemctl disable --now prometheus")
		require.Less(t, install, slices.Index(cmds, readmeTestCommand(t)), "before the README's test command")
	})
}

// TestComposeMonitoring holds docker-compose.yml's prometheus and grafana to
// the files they run: Prometheus reads deploy/prometheus's configuration and
// rules (promtool check config passes) and scrapes each service on its port
// under its binary's name (the job the alerts' tests and the dashboard's
// legends use); Grafana's default datasource is that Prometheus and it loads
// the dashboard from the folder it is mounted in.
func TestComposeMonitoring(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// mounts is svc's bind mounts: the repository file each target is.
	mounts := func(t *testing.T, svc string) map[string]string {
		t.Helper()
		s, ok := b.project.Services[svc]
		require.True(t, ok, "docker-compose.yml runs %s", svc)
		out := map[string]string{}
		for _, v := range s.Volumes {
			if v.Type == types.VolumeTypeBind {
				out[v.Target] = v.Source
			}
		}
		return out
	}
	abs := func(t *testing.T, rel string) string {
		t.Helper()
		p, err := filepath.Abs(filepath.Join(root, rel))
		require.NoError(t, err)
		return p
	}
	const promConfig = "deploy/prometheus/prometheus.yml"
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(read(t, promConfig)), &cfg))

	t.Run("prometheus runs deploy/prometheus's configuration and rules, which promtool checks", func(t *testing.T) {
		t.Parallel()
		m := mounts(t, "prometheus")
		require.Equal(t, abs(t, promConfig), m["/etc/prometheus/prometheus.yml"], "the image's default configuration path")
		require.Equal(t, []string{"alerts.yml"}, cfg.RuleFiles, "the rules, beside the configuration in the repository and in the container")
		require.Equal(t, abs(t, alertsFile), m["/etc/prometheus/alerts.yml"])
		require.Contains(t, runPromtool(t, "", "check", "config", promConfig), "SUCCESS")
	})

	t.Run("prometheus scrapes each service on its port, under its binary's name as job", func(t *testing.T) {
		t.Parallel()
		jobs := map[string][]string{}
		for _, sc := range cfg.ScrapeConfigs {
			for _, st := range sc.StaticConfigs {
				jobs[sc.JobName] = append(jobs[sc.JobName], st.Targets...)
			}
		}
		apps := b.apps(t)
		require.Len(t, jobs, len(apps), "one job per service")
		for bin, svc := range apps {
			require.Equal(t, []string{svc.Name + ":" + listenPort(t, svc)}, jobs[bin], "job %s scrapes the %s service on its HTTP_ADDR port", bin, svc.Name)
		}
	})

	t.Run("grafana's default datasource is that prometheus, and it loads the dashboard from the folder it is mounted in", func(t *testing.T) {
		t.Parallel()
		m := mounts(t, "grafana")
		var ds struct {
			Datasources []struct {
				Type      string `yaml:"type"`
				URL       string `yaml:"url"`
				IsDefault bool   `yaml:"isDefault"`
			} `yaml:"datasources"`
		}
		var dash struct {
			Providers []struct {
				Options struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		for target, source := range m {
			rel, err := filepath.Rel(abs(t, "."), source)
			require.NoError(t, err)
			switch {
			case strings.HasPrefix(target, "/etc/grafana/provisioning/datasources/"):
				require.NoError(t, yaml.Unmarshal([]byte(read(t, rel)), &ds))
			case strings.HasPrefix(target, "/etc/grafana/provisioning/dashboards/"):
				require.NoError(t, yaml.Unmarshal([]byte(read(t, rel)), &dash))
			}
		}
		require.Len(t, ds.Datasources, 1)
		require.Equal(t, "prometheus", ds.Datasources[0].Type)
		require.True(t, ds.Datasources[0].IsDefault, "the default, which the dashboard's DS_PROMETHEUS picks")
		require.Equal(t, "http://prometheus:9090", ds.Datasources[0].URL)
		require.Len(t, dash.Providers, 1)
		require.Equal(t, abs(t, dashboardFile), m[dash.Providers[0].Options.Path+"/"+filepath.Base(dashboardFile)])
	})
}
