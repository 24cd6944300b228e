package main

import (
	"io"

	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/service"
)

// healthcheck is `billing healthcheck`: nil when the server on HTTP_ADDR answers
// /readyz with 200. HTTP_ADDR only: a health check needs no secret and no
// database.
func healthcheck(lookup config.Lookup, _ io.Writer) error {
	return service.Healthcheck(config.LoadHTTPAddr(lookup, ":8081"))
}
