// Package poppytest is a strict in-process fake Company for testing
// Personal Agents that speak the Personal Agent Protocol (Poppy) draft 0.1,
// in the manner of net/http/httptest.
//
// It speaks only the wire protocol and enforces the Company-side rules of
// the specification (the CO rules listed in docs/conformance.md). A test
// starts one with [NewServer], gives the agent under test [Server.Client]
// and [Server.Clock], points it at the Company's domain ("example.test";
// [Server.URL] is its base URL), serves the agent's own client metadata,
// JWKS and callback with [Server.HandleAgent], and then inspects
// [Server.Requests] and the areas below. Package poppytest/agenttest does
// the agent's part in one call for agents built with this SDK:
//
//	srv := poppytest.NewServer(t, nil)
//	agent, identity := agenttest.New(t, srv, nil)
//	// the code under test uses agent; then inspect srv.Requests()
//
// Anything the agent does that a correct Personal Agent never does is
// recorded as a [Violation] and fails the test at cleanup unless the test
// takes it with [Server.TakeViolations]. Missing or stale nonces, expired
// tokens, wrong passwords, declined consents and rate limits are ordinary
// protocol flow and never violations.
//
// [NewServer] is the test helper; a program (the poppy fake command) or an
// Example starts the same fake with [New], which returns configuration
// errors, and calls Close and reads Violations itself. The package imports
// neither package testing nor its flags: NewServer takes a [TB].
//
// # Hosts
//
// One TLS listener on 127.0.0.1 serves every host, routed by the Host
// header, with certificates from a CA the fake generates; URLs carry no
// port. [Server.Client] trusts that CA (never InsecureSkipVerify) and
// dials the fake's hosts to it; other hosts fail to dial.
// [Server.EndpointURL] gives each endpoint's URL by its [EndpointKind]
// (the token endpoint is https://auth.example.test/oauth/token, the API
// https://api.example.test, the MCP server https://mcp.example.test/mcp).
// A child process reaches the same fake with [Server.Env]: through
// HTTPS_PROXY and SSL_CERT_FILE unchanged, or with [ClientFromEnv] and
// [ClockFromEnv] as a test hook.
//
// # Areas
//
// [Options] set the Company's behaviour for a whole run, grouped by area;
// Options.Misconfig holds the switches that make the Company break a rule,
// and everything else keeps it conformant. At run time the Server's knobs
// and records are grouped the same way:
//
//   - [Server.SignIn]: the User's side of sign-in (consent pages, Device
//     Sign-In polls, one-time codes);
//   - [Server.Sessions]: Sessions and the agents that start them;
//   - [Server.Tokens]: Session Tokens, Account Tokens and DPoP nonces;
//   - [Server.Faults]: error answers injected at any endpoint;
//   - [Server.Operations]: the operations extension;
//   - [Server.Conversations]: conversations and the scripted Company Agent.
//
// Time-bound rules use [Server.Clock], real time plus an offset that
// tests advance; give it to the agent under test so that polls and
// renewals need no real waiting. Every response's Date header is Clock
// time.
//
// # More
//
// docs/poppytest.md in the repository is the whole guide: every host and
// endpoint, recipes for child processes and shells, the API, MCP server,
// operations, sign-in, website and conversation behaviour, load testing,
// the decisions the fake takes where the specification is ambiguous, and
// the full list of violations it records. Errors the fake itself returns
// never contain a token, proof or assertion; the request log does, because
// it is for tests.
package poppytest
