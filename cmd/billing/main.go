// Command billing runs the billing service (contract section 1): it applies the
// events Labeling delivers to POST /internal/v1/events (or through JetStream),
// once each, and answers quota reads.
//
//	billing [serve]      migrate, then serve until SIGINT/SIGTERM
//	billing migrate      apply pending migrations and exit
//	billing healthcheck  exit 0 when the server on HTTP_ADDR is ready
//	billing nats failed  print the JetStream messages billing terminated
package main

import "os"

func main() { os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)) }
