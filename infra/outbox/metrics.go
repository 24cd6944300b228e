package outbox

import "github.com/prometheus/client_golang/prometheus"

var (
	appended = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "outbox_events_appended_total",
		Help: "Outbox rows appended (counted when the INSERT succeeds; a rolled-back transaction still counts).",
	}, []string{"tag"})
)

func init() {
	prometheus.MustRegister(appended)
}
