package e2e

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// otlpSpan is one exported span, with the service.name of its resource.
type otlpSpan struct {
	service, name string
	trace, span   string // hex
	parent        string // hex, "" for a root
	linkedTraces  []string
	linkedSpans   []string
}

// otlpReceiver is a minimal OTLP/HTTP trace receiver: it decodes every export
// request (protobuf) the binaries send to /v1/traces and keeps the spans.
type otlpReceiver struct {
	url   string
	mu    sync.Mutex
	spans []otlpSpan
}

func startOTLP(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var export collector.ExportTraceServiceRequest
		if err != nil || req.URL.Path != "/v1/traces" || proto.Unmarshal(body, &export) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.GetResourceSpans() {
			service := ""
			for _, a := range rs.GetResource().GetAttributes() {
				if a.GetKey() == "service.name" {
					service = a.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					o := otlpSpan{service: service, name: s.GetName(), trace: hex.EncodeToString(s.GetTraceId()),
						span: hex.EncodeToString(s.GetSpanId()), parent: hex.EncodeToString(s.GetParentSpanId())}
					for _, l := range s.GetLinks() {
						o.linkedTraces = append(o.linkedTraces, hex.EncodeToString(l.GetTraceId()))
						o.linkedSpans = append(o.linkedSpans, hex.EncodeToString(l.GetSpanId()))
					}
					r.spans = append(r.spans, o)
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.url = srv.URL
	return r
}

// find returns the first span that matches.
func (r *otlpReceiver) find(match func(otlpSpan) bool) (otlpSpan, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.spans {
		if match(s) {
			return s, true
		}
	}
	return otlpSpan{}, false
}

// TestTraceCrossesTheProcesses runs the binaries with tracing on, exporting to
// an OTLP receiver in the test, and follows one activation: labeling's request
// span, the relay's process span linked to it, and billing's spans (its intake
// over HTTP or its JetStream consumer, Apply, its commit) in the process span's
// trace: the traceparent crossed the process boundary, over either transport.
func TestTraceCrossesTheProcesses(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{transportHTTP, transportNATS} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			otlp := startOTLP(t)
			c := setup(t, config{transport: transport, env: map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
				"OTEL_BSP_SCHEDULE_DELAY":     "100", // ms: export at once, not after 5s
			}})
			ctx := context.Background()
			org, id := uuid.New(), uuid.New()
			status, _, err := c.sendUntil(ctx, c.lab, http.MethodPost, rulesPath(org), newRuleBody(id), http.StatusCreated)
			require.NoError(t, err)
			require.Equal(t, http.StatusCreated, status)
			status, _, err = c.send(ctx, c.lab().url(), http.MethodPost, rulePath(org, id, "activate"), nil)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, status)

			var request, process, apply otlpSpan
			waitFor(t, convergeTimeout, func() bool {
				var ok bool
				request, ok = otlp.find(func(s otlpSpan) bool {
					return s.service == "labeling" && s.name == "POST /v1/orgs/:orgId/rules/:ruleId/activate"
				})
				return ok
			}, "labeling exports the activation's request span")
			waitFor(t, convergeTimeout, func() bool {
				var ok bool
				process, ok = otlp.find(func(s otlpSpan) bool {
					return s.service == "labeling" && s.name == "outbox process RuleActivated" &&
						len(s.linkedTraces) == 1 && s.linkedTraces[0] == request.trace
				})
				return ok
			}, "labeling's relay exports a process span linked to the request's trace")
			require.Equal(t, request.span, process.linkedSpans[0], "the link names the request span")
			require.Empty(t, process.parent, "the process span is a root")
			waitFor(t, convergeTimeout, func() bool {
				var ok bool
				apply, ok = otlp.find(func(s otlpSpan) bool {
					return s.service == "billing" && s.name == "billing apply RuleActivated" && s.trace == process.trace
				})
				return ok
			}, "billing's Apply is in the process span's trace: the traceparent crossed to the billing process")
			// Billing's write is a database span under Apply: on PostgreSQL's
			// fast path one statement on the pool (no BEGIN or COMMIT, in a
			// failpoints build as in a normal one unless a point is armed).
			waitFor(t, convergeTimeout, func() bool {
				_, ok := otlp.find(func(s otlpSpan) bool {
					return s.service == "billing" && s.parent == apply.span
				})
				return ok
			}, "billing's database work is a span under Apply")
			c.requireConverged(t)
			t.Logf("request trace %s, delivery trace %s (linked), billing's Apply %s", request.trace, process.trace, apply.span)
		})
	}
}
