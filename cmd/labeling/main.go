// Command labeling runs the labeling service (contract section 1): serve (the
// default), migrate, healthcheck, and the outbox dead-letter commands. It reads
// its configuration from the environment only.
package main

import "os"

func main() {
	os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr))
}
