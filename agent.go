package poppy

// The Agent: an identity, a keystore and an HTTP client, shared by every
// Company and Session it acts at (spec 1, 2).

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/poppyproto/poppy/internal/netguard"
	"github.com/poppyproto/poppy/internal/retry"
	"github.com/poppyproto/poppy/keystore"
)

// Clock tells the time and waits. The SDK uses it for token expiry, proof
// and assertion times, HTTP caching and Retry-After waits, so that tests can
// run against a fake clock (poppytest.OffsetClock).
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
		base = newDefaultClient(&netguard.Guard{AllowLoopback: o.UnsafeAllowLoopbackHTTP, Allow: slices.Clone(o.AllowNetworks)})
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
