package auth

import "github.com/prometheus/client_golang/prometheus"

// The reasons a request is refused; the only values of the metric's label.
const (
	reasonMissing     = "missing"     // no Bearer credentials: 401
	reasonInvalid     = "invalid"     // a token that does not verify: 401
	reasonExpired     = "expired"     // a token past exp: 401
	reasonOrg         = "org"         // a valid token without the path's org: 404
	reasonUnavailable = "unavailable" // the issuer's keys could not be fetched: 503
)

var refused = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "auth_requests_refused_total",
	Help: "Requests refused by authentication, by reason: missing, invalid, expired, org, unavailable.",
}, []string{"reason"})

func init() {
	prometheus.MustRegister(refused)
	for _, r := range []string{reasonMissing, reasonInvalid, reasonExpired, reasonOrg, reasonUnavailable} {
		refused.WithLabelValues(r) // every series exists from the start, at 0
	}
}
