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
// Options.RequestTimeout (20 s) and reading at most 1 MiB of any answer;
// redirects of the well-known URL are followed one hop at a time, at most
// five, and only to https; streams are read for at most 3 s; a Retry-After
// is waited out only up to 10 s; a Device Sign-In polls at most 120 times
// and an interactive sign-in waits at most [SignInTimeout].
//
// # Secrets
//
// The report never holds a token, proof, assertion, code or credential:
// every one the run sent or received is replaced, wherever it appears, by
// its [Fingerprint]. Text from the Company is escaped when WriteTable
// prints it.
//
// docs/check.md lists the rules the check sees and, for each it can't,
// why.
package poppycheck
