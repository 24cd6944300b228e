package outbox

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the Prometheus series of one outbox table. Each table has its
// own metric names, so two services' relays (labeling's outbox_events,
// billing's billing_outbox_events) stay apart when scraped, even by one
// Prometheus job, and both can live in one process (a test, a benchmark):
// the default table's names are the ones labeling has always exported
// (outbox_events_processed_total, outbox_failed_rows, ...); another table's
// start with its own prefix (metricPrefix: billing_outbox_events_processed_total,
// billing_outbox_failed_rows, ...). A label would have done the same, but
// would have changed every series labeling already exports and its alerts.
//
// Each series also carries the subscriber of its rows (fan-out, Route): ""
// for the default subscriber, which Prometheus stores as no label, so the
// series of a one-subscriber setup are the ones it always exported, and a
// further subscriber's are told apart by subscriber="NAME".
type metrics struct {
	appended, claimed, processed, retried, dead, fenced *prometheus.CounterVec
	dispatchSeconds                                     *prometheus.HistogramVec
	ticksFailed                                         prometheus.Counter
	oldestPendingDesc, failedRowsDesc, pendingRowsDesc  *prometheus.Desc
}

// metricPrefix is the prefix of table's metric names: the table name without
// its "_events" suffix (outbox_events → outbox, billing_outbox_events →
// billing_outbox).
func metricPrefix(table string) string { return strings.TrimSuffix(table, "_events") }

func newMetrics(table string) *metrics {
	p := metricPrefix(table)
	byTag := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"tag", "subscriber"})
	}
	return &metrics{
		appended:  byTag(p+"_events_appended_total", "Outbox rows appended (counted when the INSERT succeeds; a rolled-back transaction still counts)."),
		claimed:   byTag(p+"_events_claimed_total", "Outbox rows claimed by a relay (each claim is one attempt)."),
		processed: byTag(p+"_events_processed_total", "Outbox rows settled as processed."),
		retried:   byTag(p+"_events_retried_total", "Failed attempts settled with a durable retry delay."),
		dead:      byTag(p+"_events_dead_lettered_total", "Outbox rows that got failed_at (attempts exhausted or a permanent error)."),
		fenced:    byTag(p+"_settles_fenced_total", "Settles that changed nothing because the row had been reclaimed elsewhere (a lease ran out)."),
		dispatchSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    p + "_dispatch_duration_seconds",
			Help:    "Duration of one row's dispatch through its handlers, by outcome (ok, error, abandoned).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10), // 1ms .. ~4.4min
		}, []string{"tag", "outcome", "subscriber"}),
		ticksFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: p + "_relay_failed_ticks_total",
			Help: "Relay ticks whose claim failed (database unreachable); the relay backs off and retries.",
		}),
		oldestPendingDesc: prometheus.NewDesc(p+"_oldest_pending_age_seconds",
			"Age of the oldest row neither processed nor failed (0 when there is none).", nil, nil),
		failedRowsDesc: prometheus.NewDesc(p+"_failed_rows",
			"Rows in the dead letter (failed_at set), waiting for an operator.", nil, nil),
		pendingRowsDesc: prometheus.NewDesc(p+"_pending_rows",
			"Rows neither processed nor failed, counted up to "+pendingRowsCapSQL+" (a larger backlog reads "+pendingRowsCapSQL+").", nil, nil),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.appended, m.claimed, m.processed, m.retried, m.dead, m.fenced, m.dispatchSeconds, m.ticksFailed}
}

var (
	metricsMu      sync.Mutex
	metricsByTable sync.Map // table → *metrics
)

// metricsFor returns table's metrics, registered with the default registry
// the first time they are asked for (once per process, whatever the number of
// stores). Every Append asks: the lookup takes no lock once they exist.
func metricsFor(table string) *metrics {
	if m, ok := metricsByTable.Load(table); ok {
		return m.(*metrics)
	}
	metricsMu.Lock()
	defer metricsMu.Unlock()
	if m, ok := metricsByTable.Load(table); ok {
		return m.(*metrics)
	}
	m := newMetrics(table)
	prometheus.MustRegister(m.collectors()...)
	metricsByTable.Store(table, m)
	return m
}

// The default table's counters are registered at start, as they always were:
// labeling's /metrics shows them (outbox_relay_failed_ticks_total 0) whether
// or not a store was built yet.
func init() { metricsFor(DefaultTable) }

// PendingRowsCap is the most pending rows the PREFIX_pending_rows gauge
// counts: a scrape reads at most this many entries of the pending index (tens
// of milliseconds), and a larger backlog reads as the cap, while
// PREFIX_oldest_pending_age_seconds still says how far behind it is.
const PendingRowsCap = 100000

// pendingRowsCapSQL is PendingRowsCap in the backlog statements (a constant,
// never input).
const pendingRowsCapSQL = "100000"

// backlog is what the backlog gauges show: the oldest pending row's
// created_at (nil when none), the failed rows, and the pending rows up to
// PendingRowsCap.
type backlog struct {
	oldest          *int64
	failed, pending int64
}

// backlogReader is a store whose backlog read also counts the pending rows
// (both dialects' stores).
type backlogReader interface {
	backlog(ctx context.Context) (backlog, error)
}

// backlogCollector reads the backlog at scrape time.
type backlogCollector struct {
	store Store
	m     *metrics
	now   func() time.Time
}

// NewBacklogCollector returns a collector of store's backlog gauges,
// outbox_oldest_pending_age_seconds and outbox_failed_rows for the default
// table (PREFIX_oldest_pending_age_seconds and PREFIX_failed_rows for another,
// PREFIX its name without "_events"), read from store at each scrape through
// the partial indexes (a min over the pending index, a count over the failed
// one), so a scrape costs the same however many processed rows the table
// holds. When the database does not answer within 2s the scrape omits both
// rather than failing /metrics.
func NewBacklogCollector(store Store) prometheus.Collector {
	return &backlogCollector{store: store, m: metricsFor(store.Table()), now: time.Now}
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.m.oldestPendingDesc
	ch <- c.m.failedRowsDesc
	ch <- c.m.pendingRowsDesc
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var b backlog
	var err error
	r, counts := c.store.(backlogReader) // a Store of another package has no pending count
	if counts {
		b, err = r.backlog(ctx)
	} else {
		b.oldest, b.failed, err = c.store.Backlog(ctx)
	}
	if err != nil {
		return
	}
	age := 0.0
	if b.oldest != nil {
		age = max(0, float64(c.now().UnixMilli()-*b.oldest)/1000)
	}
	ch <- prometheus.MustNewConstMetric(c.m.oldestPendingDesc, prometheus.GaugeValue, age)
	ch <- prometheus.MustNewConstMetric(c.m.failedRowsDesc, prometheus.GaugeValue, float64(b.failed))
	if counts {
		ch <- prometheus.MustNewConstMetric(c.m.pendingRowsDesc, prometheus.GaugeValue, float64(b.pending))
	}
}
