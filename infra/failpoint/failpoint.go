// Package failpoint marks the places where a crash test may kill, fail or delay the
// process. Points are armed only in a binary built with -tags failpoints, through
// FAILPOINTS="name=action;name=action" where action is exit (SIGKILL at once),
// error (the step fails as if its I/O failed) or sleep(DURATION), optionally with a
// count prefix: "2*exit" passes the point twice and acts the third time.
//
// In a normal build Inject is an empty function the compiler removes.
package failpoint

// Names of every point, so that a caller cannot misspell one. CONTRACT.md section 6
// lists the same names (deploy/contract_test.go checks it).
const (
	LabelingActivateAfterCommit = "labeling.activate.after-commit"
	RelayAfterClaim             = "outbox.relay.after-claim"
	RelayAfterDispatch          = "outbox.relay.after-dispatch"
	BillingEventsBeforeCommit   = "billing.events.before-commit"
	BillingEventsAfterCommit    = "billing.events.after-commit"
	BillingNATSAfterCommit      = "billing.nats.after-commit" // committed, before the JetStream ack
)
