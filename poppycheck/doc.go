// Package poppycheck checks a Company's side of the Personal Agent
// Protocol (Poppy) draft 0.1 and its operations extension from the
// outside, as an agent sees it: it runs every step an agent can take
// without a User, and with a person at hand ([Options.Person]) one
// sign-in of each type the Company offers, and reports each Company rule
// (the CO rules of docs/conformance.md) as passed, failed (with the
// request, the answer and the rule's text) or not observed (with why).
//
// The poppy check command runs it from a terminal or CI; a Company
// written in Go can run it from its own tests against its server:
//
//	agent, _ := poppycheck.NewAgent("https://agent.example/check/")
//	// serve agent.Handler() at https://agent.example/check/
//	rep, err := poppycheck.Run(ctx, "example.com", &poppycheck.Options{Agent: agent})
//	for _, r := range rep.Failed() { … }
//
// # What it sends
//
// Only what a correct Personal Agent sends: it keeps every PA rule (the
// tests run it against package poppytest, which records any it breaks,
// and require none). Among those requests are the mistakes agents make
// that a Company must refuse in a set way: a token the Company never
// issued, a DPoP proof ten minutes old (a clock off), one for another URL,
// one by another key, one whose signature doesn't verify, a Session the
// Company doesn't have, a scope a signed-out Session lacks, a device
// authorization with no, an unknown or an unoffered scope, a read with a
// cursor the conversation never had. It never sends a request a correct
// agent never sends (a replayed proof or assertion, a token in a URL, a
// Bearer token to a DPoP API), never guesses a credential, never proposes
// or confirms an operation, never asks for a person at the Company, and
// never opens a sign-in page itself. Two probes run only when asked:
// Options.FailedSignIns makes up to MediatedAttempts Mediated Sign-In
// attempts with made-up credentials that name no account, to see the
// rate limit (CO-4.7-06); Options.Propose, in an interactive run, proposes
// an action the caller names and confirms it once the person approves,
// to see Retry-After while it is in_progress (CO-OPS6-01).
//
// # Bounds
//
// A run sends at most Options.MaxRequests requests (400), each bounded by
// Options.RequestTimeout (20 s) and reading at most 1 MiB of any answer,
// the whole run by Options.MaxDuration (5 minutes, 30 with a person); a
// step whose requests time out twice stops there. Redirects of the
// well-known URL are followed one hop at a time, at most five, and only to
// https; streams are read for at most 3 s; a Retry-After is waited out
// only up to 10 s; a Device Sign-In polls at most 120 times and an
// interactive sign-in waits at most [SignInTimeout].
//
// # Where it connects
//
// Only where an agent of the SDK would: it signs with the SDK's code
// (client assertions for the token endpoint wherever they go, A-03) and
// holds to the SDK's address rule, whatever client it is given. A URL in
// the Company's documents at an address that isn't public
// (169.254.169.254, 10.0.0.7, [::ffff:127.0.0.1]) fails the rule that
// names it and is never asked anything; the Company's own domain at one,
// or a certificate from an authority the client doesn't trust, is a
// [*NotReachedError] for the caller to allow
// (Options.UnsafeAllowLoopbackHTTP, Options.AllowNetworks,
// Options.RootCAs), not a failure of the Company.
//
// # Secrets
//
// The report never holds a token, proof, assertion, code or credential:
// every one the run sent or received is replaced, wherever it appears, by
// its [Fingerprint], and what a person typed, whatever its length, by
// "[redacted]". A failure shows the decoded claims of the JWTs its request
// carried ([Signed]), never the JWTs. Text from the Company is escaped
// when WriteTable prints it.
//
// # In a CI
//
// [Report.WriteJUnit] writes JUnit XML; a [Baseline] of expected failures
// turns a listed failure into an expected one and a listed rule that
// passes into a failure ([Report.Judge]), so a baseline only shrinks;
// Options.Only keeps some rules or sections.
//
// docs/check.md lists the rules the check sees and, for each it can't,
// why.
package poppycheck
