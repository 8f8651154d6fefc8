// Package oidcprovider runs oidc-provider, a standard OAuth server the
// project did not write, as a Poppy Company with the least glue it needs
// (testdata/provider.mjs), for tests: the SDK's interoperability test in
// this package, and poppycheck's TestOIDCProviderCompany, which runs
// poppy check against it and wants failed exactly the rules oidc-provider
// itself breaks (docs/check.md).
//
// [Start] starts node with the glue, makes a test CA and the certificates
// of every host, serves the agents' own hosts ([Options.Agents]) on
// loopback, where the Company fetches each agent's client metadata
// document and keys (spec 4.1: no client is registered beforehand), and
// returns clients that reach every host by its name. .ci/run installs the
// npm package (npm ci in testdata); on a machine without node or the
// package a test that starts the Company skips, and fails under
// POPPY_TEST_REAL=1 (package realtest).
//
// The package runs node only: it adds no requirement to the root module.
package oidcprovider
