package main

import "github.com/acme/outboxpair/infra/outbox"

// parseDelete reads `labeling outbox delete ID...`. The rows must be failed or
// processed: outbox.Delete refuses a pending row and then deletes nothing.
var parseDelete = onIDs("delete", "deleted", outbox.Delete)
