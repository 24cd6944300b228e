// Package api holds the OpenAPI description of both services' HTTP surface
// (openapi.yaml). It is embedded so that tests in any package validate against the
// same bytes, whatever their working directory.
package api

import _ "embed"

// Spec is api/openapi.yaml, OpenAPI 3.0.3: every endpoint of labeling and billing
// with its request, response and error bodies.
//
//go:embed openapi.yaml
var Spec []byte
