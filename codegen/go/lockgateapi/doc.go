// Package lockgateapi is the Go client oapi-codegen generates from the
// repository's openapi.yaml (lockgateapi.gen.go, made by codegen/check and
// not committed). It is not a library to import: its test shows that a
// third-party generator's client, typed only by the contract, drives the
// gateway.
package lockgateapi
