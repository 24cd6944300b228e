package config

import (
	"slices"
	"strings"

	"github.com/acme/outboxpair/labeling"
)

// ConsumerTypesVar is the variable of the types labeling makes durable n of
// NATS_CONSUMERS with: NATS_CONSUMER_<NAME>_TYPES, NAME the name in capitals
// as SUBSCRIBER_<NAME>_* spell a subscriber's (billing:
// NATS_CONSUMER_BILLING_TYPES), so a deployment file's variables look alike.
func ConsumerTypesVar(n string) string { return "NATS_CONSUMER_" + strings.ToUpper(n) + "_TYPES" }

// labelingTypes are the event types labeling publishes (labeling.Events).
func labelingTypes() []string {
	var out []string
	for _, s := range labeling.Subscribers(labeling.Events(), nil) {
		out = append(out, s.Tag)
	}
	return out
}

// consumerTypes reads NATS_CONSUMER_<NAME>_TYPES for each durable n of
// durables, looked up by its name (the environment is never scanned): a comma
// list of the types labeling publishes. A durable whose variable is unset (or
// empty) is absent from the map: its durable takes every type. Two durables
// whose names differ only in case share a variable, which then cannot say
// whose types it gives: refused when set.
func (r *reader) consumerTypes(durables []string) map[string][]string {
	known := labelingTypes()
	var out map[string][]string
	owner := map[string]string{}
	for _, n := range durables {
		name := ConsumerTypesVar(n)
		v := r.str(name, "")
		if v == "" { // unset or empty, as every variable: every type
			continue
		}
		if other, ok := owner[name]; ok && other != n {
			r.fail(name, "names both %s and %s of NATS_CONSUMERS; rename one of them", other, n)
			return nil
		}
		owner[name] = n
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
// <NAME> in it (NATS_CONSUMER_<NAME>_TYPES), that name with a non-empty NAME.
func (v Var) matches(name string) bool {
	prefix, suffix, pattern := strings.Cut(v.Name, "<NAME>")
	if !pattern {
		return name == v.Name
	}
	return len(name) > len(prefix)+len(suffix) && strings.HasPrefix(name, prefix) && strings.HasSuffix(name, suffix)
}

// Declared is the name in Vars of the variable name: name itself, or the
// pattern it is an instance of (NATS_CONSUMER_BILLING_TYPES is
// NATS_CONSUMER_<NAME>_TYPES); name itself when Vars has none.
func Declared(name string) string {
	for _, v := range Vars {
		if v.matches(name) {
			return v.Name
		}
	}
	return name
}
