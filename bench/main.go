// Command bench measures the project's outbox beside River (the queue a Go team
// would pick instead) and beside pgbench running the same transactions, in one
// run of interleaved rounds, and prints the medians in one table. It creates its
// own databases on the -db server and drops them at the end (also on Ctrl-C).
// bench/README.md explains every figure; BENCHMARKS.md holds the current ones.
//
//	cd bench && go run . -rounds 3
//
// This package reads the flags and runs the rounds; each workload is a package
// under internal/.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		}
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}
