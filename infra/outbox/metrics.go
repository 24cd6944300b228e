package outbox

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	appended = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_events_appended_total",
		Help: "Outbox rows appended (counted when the INSERT succeeds; a rolled-back transaction still counts).",
	}, []string{"tag"})
	claimedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_events_claimed_total",
		Help: "Outbox rows claimed by a relay (each claim is one attempt).",
	}, []string{"tag"})
	processedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_events_processed_total",
		Help: "Outbox rows settled as processed.",
	}, []string{"tag"})
	retriedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_events_retried_total",
		Help: "Failed attempts settled with a durable retry delay.",
	}, []string{"tag"})
	deadTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_events_dead_lettered_total",
		Help: "Outbox rows that got failed_at (attempts exhausted or a permanent error).",
	}, []string{"tag"})
	fencedTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_settles_fenced_total",
		Help: "Settles that changed nothing because the row had been reclaimed elsewhere (a lease ran out).",
	}, []string{"tag"})
	dispatchSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "outbox_dispatch_duration_seconds",
		Help:    "Duration of one row's dispatch through its handlers, by outcome (ok, error, abandoned).",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10), // 1ms .. ~4.4min
	}, []string{"tag", "outcome"})
	ticksFailed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "outbox_relay_failed_ticks_total",
		Help: "Relay ticks whose claim failed (database unreachable); the relay backs off and retries.",
	})
)

func init() {
	prometheus.MustRegister(appended, claimedTotal, processedTotal, retriedTotal, deadTotal,
		fencedTotal, dispatchSeconds, ticksFailed)
}

var (
	oldestPendingDesc = prometheus.NewDesc("outbox_oldest_pending_age_seconds",
		"Age of the oldest row neither processed nor failed (0 when there is none).", nil, nil)
	failedRowsDesc = prometheus.NewDesc("outbox_failed_rows",
		"Rows in the dead letter (failed_at set), waiting for an operator.", nil, nil)
)

// backlogCollector reads the backlog at scrape time.
type backlogCollector struct {
	store Store
	now   func() time.Time
}

// NewBacklogCollector returns a collector of outbox_oldest_pending_age_seconds and
// outbox_failed_rows, read from store at each scrape through the partial indexes
// (a min over the pending index, a count over the failed one), so a scrape costs
// the same however many processed rows the table holds. When the database does
// not answer within 2s the scrape omits both rather than failing /metrics.
func NewBacklogCollector(store Store) prometheus.Collector {
	return &backlogCollector{store: store, now: time.Now}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- oldestPendingDesc
	ch <- failedRowsDesc
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	oldest, failed, err := c.store.Backlog(ctx)
	if err != nil {
		return
	}
	age := 0.0
	if oldest != nil {
		age = max(0, float64(c.now().UnixMilli()-*oldest)/1000)
	}
	ch <- prometheus.MustNewConstMetric(oldestPendingDesc, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(failedRowsDesc, prometheus.GaugeValue, float64(failed))
}
