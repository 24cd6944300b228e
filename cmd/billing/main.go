// Command billing runs the billing service (contract section 1): it applies the
// events Labeling delivers to POST /internal/v1/events (or through JetStream),
// once each, and answers quota reads. Its commands are the table in cli.go;
// `billing help` prints them.
package main

import "os"

func main() { os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)) }
