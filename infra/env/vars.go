package env

import (
	"slices"
	"strings"
)

// Service is a set of the two binaries, for saying which of them reads a
// variable.
type Service uint8

// The binaries.
const (
	LabelingService Service = 1 << iota
	BillingService

	bothServices = LabelingService | BillingService
)

// ReadBy is the code that reads a variable. The tests of this package and of
// the binaries' loaders run each reader that takes a lookup under a recording
// one and require it to look up exactly the variables declared for it,
// service by service.
type ReadBy uint8

// The readers.
const (
	// ReadBySettings: the service's loader (cmd/labeling/config,
	// cmd/billing/config), and LoadCommand and LoadHTTPAddr, which read a
	// subset of the same.
	ReadBySettings ReadBy = iota
	// ReadByAuth: LoadAuth, which serve alone calls.
	ReadByAuth
	// ReadByTelemetry: infra/telemetry, through the lookup the service gives it.
	ReadByTelemetry
	// ReadBySDK: the OpenTelemetry SDK, from the process environment (no lookup
	// sees it), so only an OTEL_* variable may be declared with it.
	ReadBySDK
)

// Var declares one environment variable: who reads it and how the usage text
// shows it.
type Var struct {
	Name     string
	Services Service
	ReadBy   ReadBy
	// Note follows the name in the usage text, in parentheses.
	Note string
	// Required: serve stops without it (Required lists these).
	Required bool
	// Standard: one of the standard OTEL_* variables that CONTRACT.md leaves to
	// the SDK's documentation ("the other standard OTEL_* variables"), so it is
	// in the usage text but not in LabelingVars or BillingVars, the lists the
	// contract's tables must match.
	Standard bool
}

// Vars is every environment variable the services read, the one declaration
// that LabelingVars, BillingVars, AuthVars, Required and each binary's usage
// text (Service.Usage) are built from, in the order the usage lists them. A
// variable a loader looks up but this table leaves out fails the loaders'
// tests (and this package's), so no usage text can leave one out.
var Vars = []Var{
	{Name: "DATABASE_URL", Services: bothServices},
	{Name: "HTTP_ADDR", Services: bothServices},
	{Name: "EVENTS_TOKEN", Services: bothServices, Note: "required by serve", Required: true},
	{Name: "BILLING_URL", Services: LabelingService},
	{Name: "CONSOLE_BILLING_URL", Services: LabelingService},
	{Name: "CONSOLE_TRACE_URL", Services: LabelingService},
	{Name: "SUBSCRIBERS", Services: LabelingService},
	{Name: "SUBSCRIBER_<NAME>_URL", Services: LabelingService, Note: "required for each name of SUBSCRIBERS"},
	{Name: "SUBSCRIBER_<NAME>_TOKEN", Services: LabelingService, Note: "required for each name of SUBSCRIBERS"},
	{Name: "SUBSCRIBER_<NAME>_TYPES", Services: LabelingService, Note: "required for each name of SUBSCRIBERS"},
	{Name: "CONSOLE_SECURE_COOKIES", Services: bothServices},
	{Name: "OUTBOX_POLL_INTERVAL", Services: bothServices},
	{Name: "OUTBOX_CLAIM_SIZE", Services: bothServices},
	{Name: "OUTBOX_WORKERS", Services: bothServices},
	{Name: "OUTBOX_HANDLER_TIMEOUT", Services: bothServices},
	{Name: "OUTBOX_LEASE", Services: bothServices},
	{Name: "OUTBOX_MAX_ATTEMPTS", Services: bothServices},
	{Name: "OUTBOX_RETRY_BASE", Services: bothServices},
	{Name: "OUTBOX_RETRY_MAX", Services: bothServices},
	{Name: "OUTBOX_PROCESSED_RETENTION", Services: bothServices},
	{Name: "OUTBOX_NOTIFY", Services: bothServices},
	{Name: "EVENTS_TOKEN_PREVIOUS", Services: BillingService},
	{Name: "RECEIPTS_RETENTION", Services: BillingService},
	{Name: "CONSOLE_LABELING_URL", Services: BillingService},
	{Name: "BILLING_APPLY_GROUP_MAX", Services: BillingService},
	{Name: "PROVIDER_URL", Services: BillingService},
	{Name: "PROVIDER_SECRET", Services: BillingService, Note: "required with PROVIDER_URL"},
	{Name: "CLEANUP_INTERVAL", Services: bothServices},
	{Name: "HTTP_REQUEST_TIMEOUT", Services: bothServices},
	{Name: "DB_STATEMENT_TIMEOUT", Services: bothServices},
	{Name: "DB_LOCK_TIMEOUT", Services: bothServices},
	{Name: "EVENTS_TRANSPORT", Services: LabelingService},
	{Name: "EVENTS_FORMAT", Services: LabelingService},
	{Name: "NATS_URL", Services: bothServices},
	{Name: "NATS_CREDS", Services: bothServices},
	{Name: "NATS_REPLICAS", Services: LabelingService},
	{Name: "NATS_DUPLICATE_WINDOW", Services: LabelingService},
	{Name: "NATS_CONSUMERS", Services: LabelingService},
	{Name: "NATS_CONSUMER_<NAME>_TYPES", Services: LabelingService, Note: "NAME a durable of NATS_CONSUMERS, in capitals"},
	{Name: "NATS_ACK_WAIT", Services: BillingService},
	{Name: "NATS_MAX_DELIVERIES", Services: BillingService},
	{Name: "NATS_FAILED_MAX_ROWS", Services: BillingService},
	{Name: "NATS_FAILED_MAX_BYTES", Services: BillingService},

	{Name: "AUTH_JWKS_URL", Services: bothServices, ReadBy: ReadByAuth},
	{Name: "AUTH_ISSUER", Services: bothServices, ReadBy: ReadByAuth},
	{Name: "AUTH_AUDIENCE", Services: bothServices, ReadBy: ReadByAuth},
	{Name: "AUTH_DISABLED", Services: bothServices, ReadBy: ReadByAuth},

	{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Services: bothServices, ReadBy: ReadByTelemetry},
	{Name: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", Services: bothServices, ReadBy: ReadByTelemetry, Standard: true},
	{Name: "OTEL_EXPORTER_OTLP_PROTOCOL", Services: bothServices, ReadBy: ReadByTelemetry, Standard: true},
	{Name: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", Services: bothServices, ReadBy: ReadByTelemetry, Standard: true},
	{Name: "OTEL_SDK_DISABLED", Services: bothServices, ReadBy: ReadByTelemetry, Standard: true},
	{Name: "OTEL_SERVICE_NAME", Services: bothServices, ReadBy: ReadBySDK},
}

// IsTemplate reports whether a declared name is a template (Declared): a
// family of variables named after a value of another (SUBSCRIBER_<NAME>_URL,
// a name of SUBSCRIBERS), never set as such.
func IsTemplate(name string) bool { return strings.Contains(name, "<NAME>") }

// LabelingVars and BillingVars name every variable each service reads but the
// standard OTEL_* ones the contract leaves to the SDK (Var.Standard). CONTRACT.md
// (sections 1, 7 and 8) lists the same, service by service, with their
// defaults: deploy/contract_test.go fails when the two differ.
var (
	LabelingVars = names(func(v Var) bool { return v.Services&LabelingService != 0 && !v.Standard })
	BillingVars  = names(func(v Var) bool { return v.Services&BillingService != 0 && !v.Standard })
	// AuthVars names the variables LoadAuth reads; both services read them, and
	// only serve does (the operator commands need none of them).
	AuthVars = names(func(v Var) bool { return v.ReadBy == ReadByAuth })
	// Required names the variables that have no default (serve needs it; the
	// operator commands and healthcheck never read it). DATABASE_URL defaults
	// to a SQLite file (each loader's DefaultDatabase).
	Required = names(func(v Var) bool { return v.Required })
)

// Names returns, in Vars' order, every variable s reads, the standard OTEL_*
// ones included: the variables s's usage text names.
func (s Service) Names() []string {
	return names(func(v Var) bool { return v.Services&s != 0 })
}

// NamesReadBy returns, in Vars' order, the variables s reads through by: the
// ones a test that records what that reader looks up must find.
func (s Service) NamesReadBy(by ReadBy) []string {
	return names(func(v Var) bool { return v.Services&s != 0 && v.ReadBy == by })
}

// Usage is the configuration section of s's usage text, one paragraph a
// reader: every variable s reads (those of Names, each once), so the usage
// cannot leave one out.
func (s Service) Usage() []string {
	var out []string
	for _, p := range []struct {
		heading string
		readers []ReadBy
		after   string
	}{
		{"", []ReadBy{ReadBySettings}, ""},
		{"authentication (serve needs the first three together, or AUTH_DISABLED=true): ", []ReadBy{ReadByAuth}, ""},
		{"tracing: ", []ReadBy{ReadByTelemetry, ReadBySDK}, ", and the OpenTelemetry SDK's other standard OTEL_* variables"},
	} {
		var listed []string
		for _, v := range Vars {
			if v.Services&s == 0 || !slices.Contains(p.readers, v.ReadBy) {
				continue
			}
			if v.Note != "" {
				listed = append(listed, v.Name+" ("+v.Note+")")
			} else {
				listed = append(listed, v.Name)
			}
		}
		if len(listed) > 0 {
			out = append(out, p.heading+strings.Join(listed, ", ")+p.after)
		}
	}
	return out
}

func names(keep func(Var) bool) []string {
	var out []string
	for _, v := range Vars {
		if keep(v) {
			out = append(out, v.Name)
		}
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
