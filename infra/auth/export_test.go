package auth

import "github.com/prometheus/client_golang/prometheus"

// RefusedCounter is the series of auth_requests_refused_total for reason.
func RefusedCounter(reason string) (prometheus.Counter, error) {
	return refused.GetMetricWithLabelValues(reason)
}
