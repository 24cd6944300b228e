package config

import (
	"slices"
	"strings"

	"github.com/acme/outboxpair/labeling"
)

// ConsumerTypesVar is the variable of the types labeling makes durable n of
// NATS_CONSUMERS with: NATS_CONSUMER_<n>_TYPES, n exactly as NATS_CONSUMERS
// spells it (a durable's name is case-sensitive).
func ConsumerTypesVar(n string) string { return "NATS_CONSUMER_" + n + "_TYPES" }

// labelingTypes are the event types labeling publishes (labeling.Events).
func labelingTypes() []string {
	var out []string
	for _, s := range labeling.Subscribers(labeling.Events(), nil) {
		out = append(out, s.Tag)
	}
	return out
}

// consumerTypes reads NATS_CONSUMER_<n>_TYPES for each durable n of durables,
// looked up by its name (the environment is never scanned): a comma list of
// the types labeling publishes. A durable whose variable is unset (or empty)
// is absent from the map: its durable takes every type.
func (r *reader) consumerTypes(durables []string) map[string][]string {
	known := labelingTypes()
	var out map[string][]string
	for _, n := range durables {
		name := ConsumerTypesVar(n)
		v := r.str(name, "")
		if v == "" { // unset or empty, as every variable: every type
			continue
		}
		var types []string
		for _, part := range strings.Split(v, ",") {
			part = strings.TrimSpace(part)
			switch {
			case part == "":
				r.fail(name, "%q is not a list of event types separated by commas (%s)", v, strings.Join(known, ", "))
				return nil
			case !slices.Contains(known, part):
				r.fail(name, "%q is not an event type labeling publishes (%s)", part, strings.Join(known, ", "))
				return nil
			case slices.Contains(types, part):
				r.fail(name, "%q is listed twice", part)
				return nil
			}
			types = append(types, part)
		}
		if out == nil {
			out = map[string][]string{}
		}
		out[n] = types
	}
	return out
}

// matches reports whether name is v's: v's name itself, or, for a name with
// <N> in it (NATS_CONSUMER_<N>_TYPES), that name with a non-empty N.
func (v Var) matches(name string) bool {
	prefix, suffix, pattern := strings.Cut(v.Name, "<N>")
	if !pattern {
		return name == v.Name
	}
	return len(name) > len(prefix)+len(suffix) && strings.HasPrefix(name, prefix) && strings.HasSuffix(name, suffix)
}

// Declared is the name in Vars of the variable name: name itself, or the
// pattern it is an instance of (NATS_CONSUMER_billing_TYPES is
// NATS_CONSUMER_<N>_TYPES); name itself when Vars has none.
func Declared(name string) string {
	for _, v := range Vars {
		if v.matches(name) {
			return v.Name
		}
	}
	return name
}
