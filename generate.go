package poppy

// docs/conformance.md lists every rule of the protocol and the tests that
// show it.
//go:generate go run ./internal/cmd/conformance
