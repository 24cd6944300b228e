package main

import (
	"fmt"
	"io"

	"github.com/acme/outboxpair/cmd/billing/config"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/service"
)

// healthcheck is `billing healthcheck`: nil when the server on HTTP_ADDR answers
// /readyz with 200. HTTP_ADDR only: a health check needs no secret and no
// database.
func healthcheck(lookup envvar.Lookup, stdout, _ io.Writer) error {
	addr := envvar.LoadHTTPAddr(lookup, config.DefaultAddr)
	if err := service.Healthcheck(addr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ready: the server on %s answered /readyz with 200\n", addr)
	return nil
}
