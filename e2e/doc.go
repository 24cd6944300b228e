// Package e2e is the end-to-end crash suite of the Labeling / Billing pair. Its
// tests build both binaries with -tags failpoints, run them as real processes on
// fresh databases, kill them at every dangerous point (failpoints, kill -9, SIGTERM,
// cut database connections, a crash of the database and a partition to it, a
// billing outage, several relays on one table) and
// check one invariant after each: nothing lost, nothing applied twice. Every
// scenario runs over both transports, HTTP and NATS JetStream (nats-server run as
// real processes, one or a three-node cluster), and the NATS-only ones freeze and
// kill the broker and its stream's leader.
//
// The package holds no code that ships: everything is in _test.go files. Run it
// with `go test -v ./e2e/` to see the summary it prints at the end.
package e2e
