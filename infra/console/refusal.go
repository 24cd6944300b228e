package console

import (
	"html/template"
	"strings"
)

// Refusal is why a failed row was failed by an answer no retry changes: the
// relay dead-letters such a row at once (outbox.Permanent, whose text starts
// its last_error with "permanent: "), and a requeue sends the same bytes to
// the same consumer, so it fails again unless the consumer changed.
type Refusal struct {
	// Kind is "too old" (billing's 400 event_too_old), "invalid payload"
	// (the payload does not decode or validate: no request was made), or
	// "refused" (any other 4xx that is final: a 400, a 410).
	Kind string
	// Why says so in a sentence.
	Why string
}

// Refusal kinds.
const (
	RefusedTooOld         = "too old"
	RefusedInvalidPayload = "invalid payload"
	RefusedRequest        = "refused"
)

// permanentPrefix starts the text of an outbox.Permanent error, so the
// last_error of every row the relay failed at once.
const permanentPrefix = "permanent: "

// RefusalOf reads a failed row's last_error: ok is false when a retry may
// still succeed (the row used up its attempts, or an operator failed it),
// so a requeue is the fix once the cause is.
func RefusalOf(lastError string) (Refusal, bool) {
	if !strings.HasPrefix(lastError, permanentPrefix) {
		return Refusal{}, false
	}
	switch {
	case strings.Contains(lastError, "answered 400") && strings.Contains(lastError, "event_too_old"):
		return Refusal{Kind: RefusedTooOld, Why: "The consumer refused this event as too old (400 event_too_old): it is older than its RECEIPTS_RETENTION less a tenth, so it may already have been applied and its receipt deleted. It never applies it, however often it is sent."}, true
	case strings.HasPrefix(lastError, permanentPrefix+"decode "), strings.HasPrefix(lastError, permanentPrefix+"invalid "),
		strings.HasPrefix(lastError, permanentPrefix+"encode "):
		// outbox.Subscribe's and the senders' own refusals, before any request.
		return Refusal{Kind: RefusedInvalidPayload, Why: "The payload does not decode or validate as its event type, so the relay failed it without sending it. A requeue fails it again at once."}, true
	default:
		return Refusal{Kind: RefusedRequest, Why: "The consumer refused this request with an answer no retry changes (a 4xx such as 400). A requeue sends the same request and is refused again."}, true
	}
}

// Remedy is what to do instead of a futile requeue of a refused row: a
// sentence, and a link where the fix is (such as the org's quota page).
type Remedy struct {
	Text string
	// Link and LinkText: none when Link is empty. Link is built by the
	// service from its settings and escaped values (template.URL).
	Link     template.URL
	LinkText string
}

// defaultRemedy is the remedy of a refusal when the service has none of its own.
func defaultRemedy(r Refusal) Remedy {
	switch r.Kind {
	case RefusedTooOld:
		return Remedy{Text: "Check whether the event was applied (the org's quota on the consumer), apply any missing change by hand, then delete this row."}
	case RefusedInvalidPayload:
		return Remedy{Text: "Delete this row, and fix what wrote the payload: no consumer is ever sent it."}
	default:
		return Remedy{Text: "Deploy a consumer that accepts this request (docs/events.md says what may change and in which order), then requeue; or delete this row if the fact is no longer wanted."}
	}
}
