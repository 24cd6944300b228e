package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/delivery"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/labeling"
	"github.com/acme/outboxpair/migrations"
)

// exporter holds every span this test binary ends. The SDK provider is
// installed globally before any test runs (tracing on, as Start does when
// OTEL_EXPORTER_OTLP_ENDPOINT is set), so the pools the tests open are traced
// too; each test keeps only the spans of its own traces.
var exporter = tracetest.NewInMemoryExporter()

func TestMain(m *testing.M) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(telemetry.Propagator)
	code := m.Run()
	_ = tp.Shutdown(context.Background())
	os.Exit(code)
}

const token = "trace-test-token"

// logBuffer is a concurrency-safe sink for JSON log lines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the decoded log lines whose msg is msg.
func (b *logBuffer) lines(t *testing.T, msg string) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// traced is the pair in one process, traced: labeling's HTTP API and relay, and
// billing's Apply behind its HTTP intake or its JetStream consumer.
type traced struct {
	lab, bil *pgtest.DB
	rules    *labeling.Service
	api      string // labeling's base URL
	logs     *logBuffer
}

// MaxAttempts covers the test's whole wait: the NATS publisher refuses until it
// has seen the stream and billing's durable (on a busy machine that took more
// than the 10 attempts × 200ms this once allowed, and the row was dead-lettered).
func relayConfig() outbox.Config {
	return outbox.Config{
		PollInterval: 20 * time.Millisecond, ClaimSize: 4, HandlerTimeout: 5 * time.Second, Lease: 30 * time.Second,
		MaxAttempts: 100, RetryBase: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, ProcessedRetention: time.Hour,
	}
}

// setup starts billing (over HTTP, or consuming from a JetStream server when
// natsURL is set) and labeling with its relay delivering there.
func setup(t *testing.T, natsURL string) traced {
	t.Helper()
	logs := &logBuffer{}
	logger := slog.New(telemetry.LogHandler(slog.NewJSONHandler(logs, nil)))
	p := traced{lab: pgtest.New(t, migrations.Labeling), bil: pgtest.New(t, migrations.Billing), logs: logs}

	svc := billing.NewService(postgres.NewDB(p.bil.Pool), logger)
	var subs []outbox.Subscriber
	if natsURL == "" {
		h, err := billing.NewHandler(svc, billing.Config{EventsToken: token, ReceiptsRetention: time.Hour})
		require.NoError(t, err)
		e := web.New(logger, p.bil.Pool, web.Traced(telemetry.Enabled()))
		h.Register(e, auth.Disabled())
		srv := httptest.NewServer(e)
		t.Cleanup(srv.Close)
		client, err := delivery.New(delivery.Config{BaseURL: srv.URL, Token: token, Timeout: 5 * time.Second}, logger)
		require.NoError(t, err)
		subs = []outbox.Subscriber{delivery.Subscriber[labeling.RuleActivated](client)}
	} else {
		pub, err := stream.NewPublisher(stream.PublisherConfig{URL: natsURL, Replicas: 1, DuplicateWindow: time.Minute,
			Key: []byte(token), Consumers: []string{billing.Durable}}, logger)
		require.NoError(t, err)
		require.NoError(t, pub.Start(context.Background()))
		t.Cleanup(func() { _ = pub.Stop(context.Background()) })
		handle, err := svc.NATSHandler(billing.NATSConfig{Key: []byte(token)})
		require.NoError(t, err)
		cons, err := stream.NewConsumer(stream.ConsumerConfig{URL: natsURL, Durable: billing.Durable}, handle, logger)
		require.NoError(t, err)
		require.NoError(t, cons.Start(context.Background()))
		t.Cleanup(func() { _ = cons.Stop(context.Background()) })
		subs = []outbox.Subscriber{stream.Subscriber[labeling.RuleActivated](pub)}
	}

	relay, err := outbox.NewRelay(outbox.NewPostgresStore(p.lab.Pool), relayConfig(), subs, logger)
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, relay.Stop(ctx))
	})
	p.rules = labeling.NewService(postgres.NewDB(p.lab.Pool), relay)
	e := web.New(logger, p.lab.Pool, web.Traced(telemetry.Enabled()))
	labeling.NewHandler(p.rules).Register(e, auth.Disabled())
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	p.api = srv.URL
	return p
}

// activate creates a rule (untraced, through the use case) and activates it
// through labeling's HTTP API, as a client would; it returns the org.
func (p traced) activate(t *testing.T) labeling.OrgID {
	t.Helper()
	org, err := labeling.ParseOrgID(uuid.NewString())
	require.NoError(t, err)
	nr, err := labeling.NewRuleFrom(uuid.NewString(), "Invoices", "(?i)invoice", "finance")
	require.NoError(t, err)
	r, _, err := p.rules.Create(context.Background(), org, nr)
	require.NoError(t, err)
	resp, err := http.Post(fmt.Sprintf("%s/v1/orgs/%s/rules/%s/activate", p.api, org, r.ID), "application/json", nil)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return org
}

// spanNamed waits until a span called name has ended in one of traces (any
// trace when none is given) and returns it.
func spanNamed(t *testing.T, name string, traces ...trace.TraceID) tracetest.SpanStub {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		for _, s := range exporter.GetSpans() {
			if s.Name != name {
				continue
			}
			if len(traces) == 0 {
				return s
			}
			for _, id := range traces {
				if s.SpanContext.TraceID() == id {
					return s
				}
			}
		}
		require.True(t, time.Now().Before(deadline), "no span %q ended in time", name)
		time.Sleep(10 * time.Millisecond)
	}
}

// inTrace returns the ended spans of trace id.
func inTrace(id trace.TraceID) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exporter.GetSpans() {
		if s.SpanContext.TraceID() == id {
			out = append(out, s)
		}
	}
	return out
}

// tree draws the spans of one trace, children indented under their parent, in
// start order: the span tree the README shows.
func tree(spans []tracetest.SpanStub) string {
	children := map[trace.SpanID][]tracetest.SpanStub{}
	ids := map[trace.SpanID]bool{}
	for _, s := range spans {
		ids[s.SpanContext.SpanID()] = true
	}
	var roots []tracetest.SpanStub
	for _, s := range spans {
		if p := s.Parent.SpanID(); s.Parent.IsValid() && ids[p] {
			children[p] = append(children[p], s)
		} else {
			roots = append(roots, s)
		}
	}
	var b strings.Builder
	var walk func(s tracetest.SpanStub, depth int)
	walk = func(s tracetest.SpanStub, depth int) {
		fmt.Fprintf(&b, "%s%s [%s]", strings.Repeat("  ", depth), s.Name, s.SpanKind)
		for _, l := range s.Links {
			fmt.Fprintf(&b, " (link: trace %s span %s)", l.SpanContext.TraceID(), l.SpanContext.SpanID())
		}
		b.WriteString("\n")
		kids := children[s.SpanContext.SpanID()]
		sort.Slice(kids, func(i, j int) bool { return kids[i].StartTime.Before(kids[j].StartTime) })
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	sort.Slice(roots, func(i, j int) bool { return roots[i].StartTime.Before(roots[j].StartTime) })
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}

// parentChain reports whether ancestor is s or one of its ancestors in spans.
func descends(spans []tracetest.SpanStub, s tracetest.SpanStub, ancestor trace.SpanID) bool {
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, x := range spans {
		byID[x.SpanContext.SpanID()] = x
	}
	for cur, ok := s, true; ok; cur, ok = byID[cur.Parent.SpanID()] {
		if cur.SpanContext.SpanID() == ancestor {
			return true
		}
	}
	return false
}

// checkActivation follows one activation from labeling's request span to
// billing's Apply and its statements; between is the chain of spans expected
// between the relay's process span and billing's Apply.
func checkActivation(t *testing.T, p traced, between []string) {
	org := p.activate(t)
	ctx := context.Background()

	// 1. The append stored the request's trace context with the row (the
	// activation committed before its 200).
	var rowID uuid.UUID
	var stored map[string]string
	require.NoError(t, p.lab.Pool.QueryRow(ctx, `SELECT id, trace_context FROM outbox_events WHERE payload->>'orgId' = $1`,
		org.String()).Scan(&rowID, &stored))
	parent := telemetry.Propagator.Extract(ctx, propagation.MapCarrier(stored))
	named := trace.SpanContextFromContext(parent)
	require.True(t, named.IsValid(), "trace_context holds a valid traceparent: %v", stored)

	// 2. It names labeling's request span: a server span by route, a root (the
	// client sent no traceparent).
	var request tracetest.SpanStub
	require.Eventually(t, func() bool {
		for _, s := range exporter.GetSpans() {
			if s.SpanContext.SpanID() == named.SpanID() {
				request = s
				return true
			}
		}
		return false
	}, 15*time.Second, 10*time.Millisecond, "the span the row names has ended")
	require.Equal(t, "POST /v1/orgs/:orgId/rules/:ruleId/activate", request.Name)
	require.Equal(t, trace.SpanKindServer, request.SpanKind)
	require.False(t, request.Parent.IsValid())
	reqTrace := request.SpanContext.TraceID()
	require.Equal(t, reqTrace, named.TraceID())
	require.Equal(t, fmt.Sprintf("00-%s-%s-01", reqTrace, request.SpanContext.SpanID()), stored["traceparent"])

	// 3. The relay's process span: a new root, kind consumer, linked to the request.
	var process tracetest.SpanStub
	require.Eventually(t, func() bool {
		for _, s := range exporter.GetSpans() {
			for _, l := range s.Links {
				if s.Name == "outbox process RuleActivated" && l.SpanContext.TraceID() == reqTrace {
					process = s
					return true
				}
			}
		}
		return false
	}, 15*time.Second, 10*time.Millisecond, "a process span linked to the request")
	require.Equal(t, trace.SpanKindConsumer, process.SpanKind)
	require.False(t, process.Parent.IsValid(), "the process span is a root, not a child of the ended request")
	require.NotEqual(t, reqTrace, process.SpanContext.TraceID())
	require.Equal(t, request.SpanContext.SpanID(), process.Links[0].SpanContext.SpanID())
	attrs := map[string]string{}
	for _, a := range process.Attributes {
		attrs[string(a.Key)] = a.Value.String()
	}
	require.Equal(t, "outbox", attrs["messaging.system"])
	require.Equal(t, "process", attrs["messaging.operation"])
	require.Equal(t, rowID.String(), attrs["messaging.message.id"])

	// 4. Billing continued the process span's trace, down to Apply's statements.
	procTrace := process.SpanContext.TraceID()
	apply := spanNamed(t, "billing apply RuleActivated", procTrace)
	var spans []tracetest.SpanStub
	require.Eventually(t, func() bool {
		spans = inTrace(procTrace)
		for _, s := range spans {
			if s.Name == "WITH" && descends(spans, s, apply.SpanContext.SpanID()) {
				return true
			}
		}
		return false
	}, 15*time.Second, 10*time.Millisecond, "billing's one statement (receipt, change, commit) is a span under Apply")
	// A span is recorded when it ends: the spans between the process span and
	// Apply (the NATS consumer's, the HTTP intake's) end after Apply returns,
	// so the chain is whole only once they have.
	require.Eventually(t, func() bool {
		spans = inTrace(procTrace)
		return descends(spans, apply, process.SpanContext.SpanID())
	}, 15*time.Second, 10*time.Millisecond, "Apply descends from the process span")
	for _, name := range between {
		s := spanNamed(t, name, procTrace)
		require.True(t, descends(spans, apply, s.SpanContext.SpanID()), "Apply descends from %q", name)
		require.True(t, descends(spans, s, process.SpanContext.SpanID()), "%q descends from the process span", name)
	}
	t.Logf("request trace %s:\n%s", reqTrace, tree(inTrace(reqTrace)))
	t.Logf("delivery trace %s:\n%s", procTrace, tree(spans))
	var statements []string
	for _, s := range spans {
		// The nested ones are their prepares; a fresh pool connects first.
		if s.Parent.SpanID() == apply.SpanContext.SpanID() && s.Name != "connect" {
			statements = append(statements, s.Name)
		}
	}
	require.Equal(t, []string{"WITH"}, statements, "the receipt and the quota change are one statement under Apply, with no BEGIN or COMMIT")

	// 5. Log lines written inside the request's span carry its ids.
	var found bool
	for _, l := range p.logs.lines(t, "request") {
		if l["trace_id"] == reqTrace.String() && l["span_id"] == request.SpanContext.SpanID().String() {
			found = true
		}
	}
	require.True(t, found, "the request log line carries trace_id and span_id")

}

func natsServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats server ready")
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

func TestOneActivationIsOneTracedPath(t *testing.T) {
	t.Parallel()

	t.Run("over HTTP, billing's intake and Apply continue the relay's process span, linked to the request", func(t *testing.T) {
		t.Parallel()
		checkActivation(t, setup(t, ""), []string{"HTTP POST", "POST /internal/v1/events"})
	})

	t.Run("over NATS, the consumer and Apply continue the publish, linked to the request", func(t *testing.T) {
		t.Parallel()
		checkActivation(t, setup(t, natsServer(t)), []string{"publish labeling.events.RuleActivated", "process labeling.events.RuleActivated"})
	})
}
