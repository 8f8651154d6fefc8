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
// # Rules and decisions
//
// The documentation cites the protocol's rules by ID (PA-4.3-02: a rule for
// a Personal Agent; CO-…: one for a Company) and its open points by number
// . docs/conformance.md in this module describes every rule and lists
// the tests that show it (go generate keeps it current); docs/decisions.md
// gives every decision on an open point.
//
// # Decisions on the specification's open points
//
// Where this package decides one, it chooses what works with every reading
// it can:
//
//   - A-01 (host matching): organization.domain and the requested host are
//     compared lower-cased, without port or trailing dot, after removing one
//     leading "www." from each.
//   - A-02 ("same domain" as client_id): jwks_uri and redirect_uris must have
//     exactly the client_id's host. That satisfies both readings.
//   - A-03 (client assertion aud): the token_endpoint URL as a single string,
//     at every endpoint the assertion is sent to (token, device authorization,
//     revocation). RFC 7523 allows it and deployed servers accept it; the
//     Session assertion is pinned to the same value by spec 4.2.
//   - A-04 (assertion lifetimes): client and Session assertions live 60 s and
//     carry a 128-bit random jti; their header has typ "JWT", the value
//     RFC 7519 section 5.1 recommends, which servers that check typ
//     accept and the others ignore.
//   - A-05 (issuer matching): the metadata issuer must equal auth.issuer byte
//     for byte; a trailing "/" is a difference. The metadata is fetched from
//     the RFC 8414 path-inserted location and may redirect only to HTTPS.
//   - A-06 (proofs at device authorization and revocation): none are sent.
//   - A-07 (DPoP failures at resources): any 401 or 400 whose WWW-Authenticate
//     DPoP challenge names invalid_dpop_proof or use_dpop_nonce is handled the
//     same way, whatever the status.
//   - A-08 (one token per Session): tokens are kept per (Session, token type,
//     resource, scope); a new token replaces only the one with the same key.
//   - A-10 (renewing a signed-in Session): always with its Account Token;
//     only when the Account Token is gone or refused does the Session renew
//     signed out, with the assertion. A Company may refuse that (it still
//     holds the Session signed in, e.g. after a rotation another replica
//     lost): invalid_grant then starts a new, signed-out Session, reported
//     to OnSessionReplaced, so the User ends signed out and asked to sign
//     in again (sign_in_required), never stuck.
//   - Resources at sign-in (RFC 8707): Direct and Device Sign-In name every
//     resource the Company lists (Company.Resources: each "resource", and
//     each MCP url) in the authorization request, and every token request
//     after it names exactly one: the code exchange and the device poll
//     name the first listed resource that is not an MCP server's (whose
//     token the sign-in gets), and the token of each other resource comes
//     from a refresh that names it. An OAuth server that holds the Account
//     Token to the resources named at authorization (RFC 8707 section 2.2)
//     may refuse a token request that names several, or none of several,
//     and oidc-provider does by default (invalid_target, after using the
//     code up); a Company that reads spec 4.3 alone accepts a request that
//     names one. Naming none at the exchange is what only the second
//     reading accepts, so it is never done. A Session's default token
//     (Session.Token with no Resource, for services without a "resource")
//     is asked for without one; such a server issues it while the sign-in
//     named one resource, and a Company that names several lists a
//     resource for every service. Mediated Sign-In's request has no such
//     member and names none.
//   - A-11 (token_type): compared case-insensitively; DPoP is required for a
//     request sent with a proof, Bearer for one sent without.
//   - A-16 (rotation): refreshes of one Account Token are serialised across
//     processes by the keystore lock, and a rotated token is stored before
//     the Session Token that came with it is used.
//   - A-17 (failed revocation): the Account Token is deleted locally all the
//     same, and SignOut reports ErrRevocationFailed.
//   - A-21 (insufficient_scope): Error.Scope holds what the Company named;
//     Error.SignInTypes lists the types whose scopes cover all of it.
//   - A-33 (extension version): a string ("1") or a number (1) is accepted.
//   - A-40 (429 without Retry-After): up to three retries 1 s, 2 s and 4 s
//     apart, then ErrRateLimited; with Retry-After, the wait is at least that
//     long and no wait is longer than AgentOptions.MaxRetryWait.
//   - A-45 (invalid_grant on a refresh): the Account Token is deleted and
//     the Session carries on signed out.
//   - A-44 (User ID format): "usr_" followed by 128 random bits, base64url.
//   - A-46 (algorithms): every signature the SDK makes is ES256. A DPoP
//     challenge whose algs attribute leaves ES256 out is an *Error that
//     matches ErrUnsupportedDPoPAlgorithm (PA-6-04): no retry can help.
//   - DPoP proofs carry a 128-bit jti, like assertions (RFC 9449 allows
//     96 bits; some Companies demand 128).
//   - Durations a Company sends are clamped (durations.go): expires_in to
//     at most 30 days (a missing or non-positive one is still a protocol
//     error, PA-4.2-13), refresh_token_expires_in to 10 years, Retry-After
//     to a day (any run of digits is a wait, so a value too large for an
//     integer is "longer than MaxRetryWait"; one that reaches a day is
//     never waited out), max-age to a day.
//   - Token requests whose replay is harmless (jwt-bearer, device_code,
//     revocation, device authorization) are sent again once, with a fresh
//     assertion and proof, when a pooled connection closed before any
//     answer; a refresh or an authorization code is resent only by
//     net/http, when it provably was not written.
package poppy

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/poppyproto/poppy/internal/retry"
	"github.com/poppyproto/poppy/keystore"
)

// Clock tells the time and waits. The SDK uses it for token expiry, proof
// and assertion times, HTTP caching and Retry-After waits, so that tests can
// run against a fake clock (poppytest.Clock).
type Clock interface {
	Now() time.Time
	// Sleep waits for d or until ctx is done, returning ctx.Err() then.
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// AgentOptions configures an Agent. The zero value is valid.
type AgentOptions struct {
	// Store keeps User IDs, DPoP keys, Sessions and Account Tokens. Nil means
	// a fresh in-memory store, which forgets everything when the process
	// ends; use package keystore/sqlitestore to keep state on disk.
	Store keystore.Store
	// HTTPClient sends every request. Nil means the SDK's own client (see
	// DefaultHTTPClient): it connects only to public addresses (relaxed by
	// UnsafeAllowLoopbackHTTP and AllowNetworks), waits at most 30 s for a
	// response to begin (WithResponseHeaderTimeout changes that for one
	// ctx, as long polls and event streams need) and caps response headers
	// at 64 KiB. A client given here keeps its own policy for all of that:
	// the SDK neither guards its dials nor adds timeouts, so an agent that
	// supplies one and talks to Companies it doesn't trust must guard it
	// itself. The SDK copies it and adds a redirect policy that refuses
	// non-HTTPS targets; it never changes the caller's client.
	HTTPClient *http.Client
	// Logger receives debug and warning records. Nil discards. No record
	// holds a token, proof, key, credential or code.
	Logger *slog.Logger
	// Clock tells the time. Nil means the system clock.
	Clock Clock
	// KeyPerSession makes each Session use its own DPoP key, instead of one
	// key per User per Company (spec 4.3 allows either).
	KeyPerSession bool
	// MaxResponseBytes caps every document and token response the SDK reads
	// from a Company. Zero means 1 MiB.
	MaxResponseBytes int64
	// MaxRetryWait caps how long one Retry-After wait may be. A Company that
	// asks for longer gets ErrRateLimited at once, with its RetryAfter, so the
	// caller decides. Zero means 2 minutes. Waits always end with ctx.
	MaxRetryWait time.Duration
	// OnSessionReplaced is called when a Session has ended at the Company
	// (invalid_session) and the SDK started a new one in its place
	// (spec 4.2). It gets the old and the new session_id.
	OnSessionReplaced func(oldID, newID string)
	// UnsafeAllowLoopbackHTTP allows http:// URLs whose host is a loopback
	// address (127.0.0.0/8, ::1, localhost), for working against a Company or
	// an agent identity under development on the same machine. The protocol
	// requires HTTPS everywhere: never set this in production. Nothing else
	// relaxes HTTPS.
	//
	// It also lets the SDK's own client (HTTPClient nil) connect to loopback
	// addresses, which it otherwise refuses (see DefaultHTTPClient).
	UnsafeAllowLoopbackHTTP bool
	// AllowNetworks lists networks the SDK's own client (HTTPClient nil)
	// may connect to although they are not public, such as a Company
	// reached over a private network or a VPN: by default it refuses
	// loopback, private, link-local (cloud metadata), CGNAT and other
	// special-purpose addresses, so that a Company's documents can't aim
	// the agent's requests into the network it runs in. It has no effect on
	// a caller-supplied HTTPClient.
	AllowNetworks []netip.Prefix
}

// Agent is a Personal Agent: an identity, a keystore and an HTTP client. It
// is safe for concurrent use and meant to be shared; it caches discovery
// documents, DPoP nonces and Session state across calls.
type Agent struct {
	id     *Identity
	store  keystore.Store
	client *http.Client
	// direct is client without redirects, for requests that carry
	// credentials in their body (token, revocation, device authorization):
	// a redirect would send them to another URL.
	direct *http.Client
	log    *slog.Logger
	clock  Clock
	opts   AgentOptions

	cache  *docCache
	nonces nonceCache

	mu        sync.Mutex
	companies map[string]*issuerState // by auth.issuer (spec 3.2)
	resolved  map[string]*resolved    // by host: the last Company resolved (discovery.go)
}

const (
	defaultMaxResponse  = 1 << 20
	defaultMaxRetryWait = retry.DefaultMaxWait
	requestTimeout      = 30 * time.Second
)

// NewAgent returns an Agent acting with identity. opts may be nil.
func NewAgent(identity *Identity, opts *AgentOptions) (*Agent, error) {
	if identity == nil {
		return nil, configError("NewAgent: nil identity")
	}
	var o AgentOptions
	if opts != nil {
		o = *opts
	}
	if o.Store == nil {
		o.Store = keystore.NewMemory()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	if o.MaxResponseBytes <= 0 {
		o.MaxResponseBytes = defaultMaxResponse
	}
	if o.MaxRetryWait <= 0 {
		o.MaxRetryWait = defaultMaxRetryWait
	}
	if err := identity.checkURLs(o.UnsafeAllowLoopbackHTTP); err != nil {
		return nil, err
	}
	a := &Agent{
		id:        identity,
		store:     o.Store,
		log:       o.Logger,
		clock:     o.Clock,
		opts:      o,
		companies: map[string]*issuerState{},
	}
	base := o.HTTPClient
	if base == nil {
		base = newDefaultClient(&dialGuard{allowLoopback: o.UnsafeAllowLoopbackHTTP, allow: slices.Clone(o.AllowNetworks)})
	}
	a.client = a.secureClient(base)
	direct := *a.client
	direct.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	a.direct = &direct
	a.cache = newDocCache()
	return a, nil
}

// Identity returns the agent's identity.
func (a *Agent) Identity() *Identity { return a.id }

// Store returns the agent's keystore.
func (a *Agent) Store() keystore.Store { return a.store }

// HTTPClient returns the client the Agent sends unauthenticated requests
// with (discovery documents, protected resource metadata): a copy of
// AgentOptions.HTTPClient that refuses redirects to non-HTTPS URLs.
// Requests in a Session use Session.HTTPClient instead.
func (a *Agent) HTTPClient() *http.Client {
	c := *a.client
	return &c
}

// Logger returns the agent's logger.
func (a *Agent) Logger() *slog.Logger { return a.log }

// Clock returns the agent's clock.
func (a *Agent) Clock() Clock { return a.clock }

// secureClient copies c (or the default client) and refuses redirects to
// URLs that are not HTTPS.
func (a *Agent) secureClient(c *http.Client) *http.Client {
	if c == nil {
		c = DefaultHTTPClient()
	}
	cp := *c
	next := c.CheckRedirect
	cp.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if err := a.checkURL(req.URL); err != nil {
			return ErrInsecureRedirect
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return ErrTooManyRedirects
		}
		return nil
	}
	return &cp
}

// checkURL requires HTTPS, or http:// on a loopback host when the unsafe
// development option is set.
func (a *Agent) checkURL(u *url.URL) error {
	return checkURL(u, a.opts.UnsafeAllowLoopbackHTTP)
}

func checkURL(u *url.URL, allowLoopback bool) error {
	if u == nil || u.Host == "" {
		return fmt.Errorf("%w: no host", ErrInsecureURL)
	}
	switch u.Scheme {
	case "https":
		return nil
	case "http":
		if allowLoopback && isLoopback(u.Hostname()) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s://%s", ErrInsecureURL, u.Scheme, u.Host)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ParseURL parses raw, a URL a Company sent, with the one check the whole
// module applies to Company URLs: an absolute https:// URL with a host, or
// http:// on a loopback host when the Agent was made with
// UnsafeAllowLoopbackHTTP, without user information, which could make a
// URL shown to the User look like another host's. Its errors match
// ErrInsecureURL. Use it for a URL from a Company's document before
// showing it, opening it or sending anything to it.
func (a *Agent) ParseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: unparseable URL", ErrInsecureURL)
	}
	if err := a.checkURL(u); err != nil {
		return nil, err
	}
	if u.Opaque != "" || u.User != nil {
		return nil, fmt.Errorf("%w: %s://%s is not a plain absolute URL", ErrInsecureURL, u.Scheme, u.Host)
	}
	return u, nil
}

// endpointOf returns scheme://host/path of u, without query or fragment:
// what errors and logs may show of a URL.
func endpointOf(u *url.URL) string {
	if u == nil {
		return ""
	}
	return u.Scheme + "://" + u.Host + u.EscapedPath()
}

// RetryWait is the Agent's retry policy for a request to a Company that
// may be sent again, the one the Session transport follows (spec 4.3,
// PA-4.3-27..29, A-40): before retry number attempt+1 (attempt counts from
// 0), wait retryAfter, the Company's Retry-After, or 1 s, 2 s, 4 s without
// one (retryAfter 0). It returns false when the request must not be sent
// again: three retries are used up, or the wait is longer than
// AgentOptions.MaxRetryWait. Packages conversation and api retry by it; a
// caller that repeats requests of its own can too.
func (a *Agent) RetryWait(retryAfter time.Duration, attempt int) (time.Duration, bool) {
	return retry.Wait(retryAfter, attempt, a.opts.MaxRetryWait)
}

// withTimeout bounds a short request (discovery, token) by requestTimeout
// on top of ctx.
func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, requestTimeout)
}

// String describes the Agent by its client_id. Neither it nor any other
// verb of fmt or slog shows the keystore, keys or tokens the Agent holds.
func (a *Agent) String() string {
	if a == nil {
		return "poppy.Agent(nil)"
	}
	return "poppy.Agent(" + a.id.clientID + ")"
}

// GoString is String.
func (a *Agent) GoString() string { return a.String() }

// Format writes String for every verb.
func (a *Agent) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(a.String())) }

// LogValue logs String.
func (a *Agent) LogValue() slog.Value { return slog.StringValue(a.String()) }
