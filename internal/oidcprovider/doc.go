// Package oidcprovider holds a test only: the SDK against oidc-provider, a
// standard OAuth server the project did not write, made into a Poppy
// Company with the least glue it needs (testdata/provider.mjs). .ci/run
// installs the npm package (npm ci in testdata); on a machine without node
// or the package the test skips, and fails under POPPY_TEST_REAL=1.
package oidcprovider
