// Package api holds the machine-readable descriptions of the pair: the
// OpenAPI description of both services' HTTP surface (openapi.yaml) and the
// AsyncAPI description of their events as they travel (asyncapi.yaml). They
// are embedded so that tests in any package validate against the same bytes,
// whatever their working directory.
package api

import _ "embed"

// Spec is api/openapi.yaml, OpenAPI 3.0.3: every endpoint of labeling and billing
// with its request, response and error bodies.
//
//go:embed openapi.yaml
var Spec []byte

// AsyncAPI is api/asyncapi.yaml, AsyncAPI 3.0.0: every event type labeling
// publishes and billing handles, and billing's QuotaChanged, as a message per
// transport (HTTP, NATS, the provider call) and format (the envelope,
// CloudEvents), with a schema per payload. api/asyncapi_test.go holds it to
// the code in both directions.
//
//go:embed asyncapi.yaml
var AsyncAPI []byte
