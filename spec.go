// Package lockgate holds the HTTP contract of the lock gateway: the OpenAPI
// document in openapi.yaml, embedded here because Go cannot embed a file from
// a parent directory. The gateway serves it at GET /openapi.yaml and enforces
// it on every request.
package lockgate

import _ "embed"

// OpenAPI is the contents of openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
