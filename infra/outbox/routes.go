package outbox

import (
	"fmt"
	"regexp"
	"slices"
)

// DefaultSubscriber is the subscriber column of a row for the table's own
// subscriber (labeling: billing at BILLING_URL; billing: its provider): every
// row appended before fan-out, and the first row of every event since. It
// receives every tag, and its metrics carry subscriber="" (which Prometheus
// stores as no label at all, so its series are the ones it always had).
const DefaultSubscriber = ""

// Route is one further subscriber of a table's events (fan-out): the tags it
// receives, each appended event of which gets a row of its own for it. The
// row is claimed only by that subscriber's relay (a Lane of the same name), so
// a subscriber that is down or failing retries, backs off and dead-letters its
// own rows and no other's.
type Route struct {
	Subscriber string   // its name: a lowercase identifier, never DefaultSubscriber
	Tags       []string // the tags it receives, at least one
}

// subscriberName is what a further subscriber's name must be: what an
// environment variable's part can hold (SUBSCRIBER_<NAME>_URL) in lower case.
var subscriberName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// CheckSubscriber reports whether name can name a further subscriber.
func CheckSubscriber(name string) error {
	if !subscriberName.MatchString(name) {
		return fmt.Errorf("subscriber name %q is not a lowercase identifier of at most 32 characters (%s)", name, subscriberName)
	}
	return nil
}

// WithRoutes makes a store's Append fan out: an event whose tag a route lists
// gets, beside the default subscriber's row, one row per such route, in the
// same transaction. Without it (today's setup) Append writes one row, as it
// always did. The routes must name distinct, valid subscribers, each with at
// least one tag: a store built with others panics (they are the program's
// settings, checked where they are read).
func WithRoutes(routes ...Route) StoreOption {
	return func(o *storeOptions) { o.routes = append(o.routes, routes...) }
}

// fanout maps a tag to its further subscribers, nil when none.
type fanout map[string][]string

// fanoutOf checks routes and indexes them by tag.
func fanoutOf(routes []Route) fanout {
	if len(routes) == 0 {
		return nil
	}
	f := make(fanout)
	var seen []string
	for _, r := range routes {
		if err := CheckSubscriber(r.Subscriber); err != nil {
			panic("outbox: WithRoutes: " + err.Error())
		}
		if slices.Contains(seen, r.Subscriber) || len(r.Tags) == 0 {
			panic(fmt.Sprintf("outbox: WithRoutes: subscriber %q is repeated or has no tag", r.Subscriber))
		}
		seen = append(seen, r.Subscriber)
		for _, tag := range r.Tags {
			if !slices.Contains(f[tag], r.Subscriber) {
				f[tag] = append(f[tag], r.Subscriber)
			}
		}
	}
	return f
}

// router is a store that fans out (both dialects' stores).
type router interface {
	subscribersOf(tag string) []string
}
