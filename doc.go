// Package poppy is the Personal Agent side of the Personal Agent Protocol
// (Poppy) draft 0.1: a typed client with which an agent product, a script or
// an LLM tool runtime acts for a person (the User) at a Company.
//
// An [Agent] holds the agent's identity (its client_id and signing keys), a
// keystore and an HTTP client. [Agent.Company] resolves a Company from its
// domain (spec 3), [Company.Session] starts or resumes a Session for one local
// User (spec 4.2), and [Session.HTTPClient] returns an *http.Client whose
// requests carry the Session Token and a fresh DPoP proof (spec 4.3), with
// nonces, renewal and rate limits handled:
//
//	agent, _ := poppy.NewAgent(identity, &poppy.AgentOptions{Store: store})
//	company, _ := agent.Company(ctx, "example.com")
//	sess, _ := company.Session(ctx, "local-user-42", nil)
//	resp, _ := sess.HTTPClient().Get("https://api.example.com/orders")
//
// The examples are the best way in; package poppytest is a strict fake
// Company to run them, and your own tests, against (package
// poppytest/agenttest sets an Agent up for it in one call).
//
// # Answers and errors
//
// The Session's client returns the Company's answer as a response whatever
// its status, as an http.RoundTripper must, so that a generated OpenAPI
// client reads the body it was written for. [ResponseError] turns an answer
// of 400 and above into an [*Error] with the OAuth or protocol code, the
// HTTP status, the WWW-Authenticate scope, Retry-After and the sign-in types
// that would help; it matches a sentinel such as [ErrSignInRequired] with
// errors.Is. A request the Company refused without acting on it (a DPoP
// nonce, an expired token, a 429 within [AgentOptions.MaxRetryWait]) is
// sent again by the transport; nothing else is. Tokens, proofs, keys and
// credentials redact themselves when formatted or logged, and no error the
// SDK makes holds one.
//
// # Signing in
//
// Package signin runs the three sign-in flows (Direct, Device, Mediated)
// with the User. Their token-endpoint steps live here, beside the Session
// whose grant they complete: [Session.ExchangeCode], [Session.AuthorizeDevice]
// and [Session.PollDevice], [Session.SendMediatedCredentials] and
// [Session.SendMediatedCode]. [Session.UseAccountToken] signs in with a
// stored Account Token, and [Session.SignOut] revokes one.
//
// # Rules and decisions
//
// The documentation cites the protocol's rules by ID (PA-4.3-02: a rule for
// a Personal Agent; CO-…: one for a Company) and its open points by number
// . docs/conformance.md in this module describes every rule and lists
// the tests that show it (go generate keeps it current); docs/decisions.md
// gives every decision on an open point, and where the specification is
// unclear the SDK chooses what works with every reading it can. The most
// visible ones: a token is sent only to the Company's own origins
// (ErrForeignHost) and never in a URL (ErrTokenInURL); a rotated Account
// Token is stored before the Session Token that came with it is used
// a 429 without Retry-After is retried 1 s, 2 s and 4 s later, and
// one with a Retry-After longer than MaxRetryWait not at all; every
// duration a Company sends is clamped; every signature is ES256
// . docs/layout.md says which file owns what.
package poppy
