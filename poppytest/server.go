package poppytest

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
)

// Options configures a [Server]. The zero value (or nil) gives the defaults
// described on each field. New and NewServer copy the options.
//
// The fields that name the Company are at the top; everything else is
// grouped by area, as the Server's run-time knobs are: Discovery
// (poppy.json and the metadata), Clients (which agents the Company
// accepts), Tokens (Session Tokens and DPoP), SignIn (accounts, the three
// sign-in types, Account Tokens, sign-out), API, Operations, Conversations,
// Web, MCP, and Load (the fake's own bounds). Misconfig holds the switches
// that make the Company break a rule; everything else keeps it
// conformant.
type Options struct {
	// Domains are the Company's domains, each serving its own poppy.json
	// (also on www.{domain}). All name one issuer, so they are one Company
	// (spec 3.2). The first is the primary domain: the API is served on
	// api.{first}, the reserved MCP server on mcp.{first}.
	// Default ["example.test"].
	Domains []string
	// Issuer is the OAuth issuer (auth.issuer), an HTTPS URL, optionally
	// with a path. Default "https://auth.example.test".
	Issuer string
	// AgentHosts are the hosts of the Personal Agents under test, served
	// from the same listener by the handlers given to HandleAgent.
	// Default ["agent.test"].
	AgentHosts []string
	// Noise adds an "x_unknown" member to every JSON object the fake
	// returns, except /echo bodies (PA-3.3-05).
	Noise bool

	// Discovery shapes poppy.json and the RFC 8414 metadata (spec 3).
	Discovery DiscoveryOptions
	// Clients says which Personal Agents the Company accepts (spec 4.1).
	Clients ClientOptions
	// Tokens shapes Sessions, Session Tokens and DPoP (spec 4.2, 4.3).
	Tokens TokenPolicy
	// SignIn configures the accounts, the three sign-in types, Account
	// Tokens and sign-out (spec 4.4–4.9; see signin.go).
	SignIn SignInPolicy
	// API configures the OpenAPI resource server (spec 6).
	API OpenAPIServerOptions
	// Operations configures the operations extension's endpoint and the
	// operations the API proposes (see OperationsOptions).
	Operations OperationsOptions
	// Conversations configures the conversation endpoint (spec 7).
	Conversations ConversationOptions
	// Web configures the Company's website and its browser-session
	// endpoint (spec 5; see web.go).
	Web WebOptions
	// MCP configures the MCP server (mcp.go).
	MCP MCPServingOptions
	// Load bounds what the fake keeps for long load tests: the request
	// log, violations, Session Tokens (see LoadOptions).
	Load LoadOptions

	// Misconfig holds the negative-test switches: each makes the Company
	// break the rule it names, for a test that the client refuses it. The
	// zero value breaks nothing.
	Misconfig Misconfig
}

// DiscoveryOptions shapes poppy.json and the metadata (spec 3, 3.2).
// Misconfig holds the variations that break a rule.
type DiscoveryOptions struct {
	// PoppyCacheControl and MetadataCacheControl are the Cache-Control
	// values of poppy.json and the RFC 8414 metadata. Defaults
	// "max-age=300" and "max-age=600". An ETag is always sent and
	// If-None-Match is answered with 304.
	PoppyCacheControl, MetadataCacheControl string
	// ProtocolVersion replaces "0.1": a newer minor (PA-3-05), another
	// major (PA-3-06), or a value that isn't major.minor, which breaks
	// CO-3-04 (the validator then lets that rule pass).
	ProtocolVersion string
	// DropAgent, DropAPIs, DropWeb and DropBrowserSession leave out agent,
	// apis, web, or web.browser_session_endpoint. DropAuth leaves out auth:
	// together with DropAgent, DropAPIs and DropBrowserSession that is a
	// valid browse-only document; alone it breaks CO-3-07.
	DropAgent, DropAPIs, DropWeb, DropBrowserSession, DropAuth bool
	// RedirectWellKnown makes https://{primary}/.well-known/poppy.json (and
	// its www. twin) redirect through this chain of URLs; the last one
	// serves the document. Hosts that aren't Company hosts are served too
	// (e.g. provider.test). Targets must be https unless
	// Misconfig.InsecureRedirect is set (CO-3-03).
	RedirectWellKnown []string
	// RedirectStatuses are the statuses of the hops, cycled. Default [308]
	// for a one-hop chain, else [301, 307, 308].
	RedirectStatuses []int
	// Extensions are merged into poppy.json "extensions"; a nil value
	// removes an entry. Default {"operations": {"version": "1", "endpoint":
	// "https://api.{primary}/poppy/operations"}}.
	Extensions map[string]any
	// DocumentFields are merged into the top level of every poppy.json. An
	// unknown member (e.g. "x_future") keeps the document valid; replacing
	// a member the protocol defines turns the validator off for the
	// document: the test owns its validity.
	DocumentFields map[string]any
}

// ClientOptions says which Personal Agents (client_ids) the Company
// accepts (spec 4.1). Refused clients get 401 invalid_client.
type ClientOptions struct {
	// RequireRegistration accepts only the client_ids in Registered
	// (CO-4.1-05). Allowlist, when non-nil, accepts only those client_ids
	// (CO-4.1-06); Blocklist refuses those (CO-4.1-06). MaxNew > 0 accepts
	// at most that many distinct client_ids (CO-4.1-09).
	RequireRegistration bool
	Registered          []string
	Allowlist           []string
	Blocklist           []string
	MaxNew              int
	// SessionStartsPerMinute > 0 limits new Sessions per client_id per
	// minute of Clock time: the next start gets 429 rate_limited with
	// Retry-After (CO-4.1-08).
	SessionStartsPerMinute int
}

// TokenPolicy shapes Sessions, Session Tokens and DPoP (spec 4.2, 4.3).
type TokenPolicy struct {
	// TTL is the Session Token lifetime. Default 1h; a negative value is a
	// configuration error (CO-4.2-06).
	TTL time.Duration
	// SessionLifetime is how long a Session lasts from its start (spec
	// 4.2: "The Company decides how long a Session lasts"). Then it ends
	// as with Sessions().End: its tokens stop working, renewing it returns
	// invalid_session, and the website's cookies for it stop, having
	// been set with a Max-Age no longer than the Session's remaining life
	// (CO-5-15). Default 0: a Session lasts until it is ended.
	SessionLifetime time.Duration
	// RequireNonce makes the token endpoint and the API require a DPoP
	// nonce (RFC 9449 section 8 and 9). Each host has its own nonce.
	RequireNonce bool
	// RotateNonce sends a fresh DPoP-Nonce on every response of the token
	// endpoint and the API host. A nonce stays acceptable until 4 newer
	// ones have been issued on its host, so concurrent requests don't
	// fail. Nonces are checked only with RequireNonce.
	RotateNonce bool
	// EmbedCredentials puts an encrypted backend session blob in every
	// Session Token (CO-4.2-12, CO-4.2-13); see Tokens().EmbeddedCredentials.
	EmbedCredentials bool
	// JWT issues JWT-shaped Session Tokens whose payload claims an exp 1 s
	// after issue, while the server honours expires_in (PA-4.2-20).
	JWT bool
	// RevokeOnReissue revokes a Session's previous token of the same type
	// and resource whenever a new one is issued (PA-4.3-25).
	RevokeOnReissue bool
}

// SignInPolicy configures the Company's accounts, the three sign-in
// types, Account Tokens and sign-out (spec 4.4–4.9; see signin.go and the
// package doc).
type SignInPolicy struct {
	// Accounts are the Company's accounts that Users sign in to. Default:
	// one account "acct_1" whose credentials are "user@example.test"
	// (email), "correct horse" (password), "4071" (pin) and
	// "{name}-acct_1" for any other field of MediatedFields. While
	// Mediated Sign-In is offered, each account must have a value for
	// every field of MediatedFields.
	Accounts []Account
	// MediatedFields are auth.mediated.fields, the credentials Mediated
	// Sign-In takes. Default email (Email) and password (Password,
	// secret).
	MediatedFields []CredentialField
	// Scopes replaces the scopes a sign-in type lists, keyed by "direct",
	// "device" or "mediated". Defaults: direct poppy:read, poppy:write and
	// every custom scope; device poppy:read and poppy:write; mediated
	// poppy:read. Each must be a protocol scope or a custom scope
	// (CO-3-11).
	Scopes map[string][]string
	// CustomScopes are the Company's own scopes (auth.custom_scopes), also
	// grantable by Direct Sign-In. Default {"addresses": "Manage saved
	// shipping addresses"}. A name starting with "poppy:" is a
	// configuration error (CO-4.4-04).
	CustomScopes map[string]string
	// Disable leaves out these sign-in types from auth: "direct",
	// "device", "mediated".
	Disable []string
	// NarrowScopesOnly offers only the Company's own narrow scopes
	// orders:read and orders:write instead of poppy:read and poppy:write
	// (CO-4.4-05): they become custom scopes (added to CustomScopes, which
	// then defaults to none), every type lists them (mediated only
	// orders:read), and the API requires them where it would require the
	// broad ones.
	NarrowScopesOnly bool
	// AccountTokenTTL is the lifetime of Account Tokens, sent as
	// refresh_token_expires_in. Default 30 days; negative: no lifetime,
	// and refresh_token_expires_in is left out.
	AccountTokenTTL time.Duration
	// RotateAccountTokens returns a new Account Token on every use of one
	// (CO-4.8-09). The old token stops working at once, unless
	// RotationGrace is set: it then keeps working for that long after the
	// rotation, and a use within the grace returns the current token
	// without rotating again.
	RotateAccountTokens bool
	RotationGrace       time.Duration
	// StrictResourceIndicators makes the Company hold each Account Token
	// to the resources its authorization request (Direct) or device
	// authorization request (Device) named, as an OAuth server does that
	// reads RFC 8707 section 2.2 strictly; oidc-provider does by default.
	// Every token request of that sign-in (the code exchange, the device
	// poll, every refresh with the Account Token) may then name only one
	// of them: one that names several, or none when several were named,
	// or one that was not named, is refused with invalid_target; one that
	// names none when exactly one was named gets that resource's token.
	// Like oidc-provider, the refusal comes after the grant was used: the
	// authorization or device code is used up, and with
	// RotateAccountTokens the Account Token sent has been rotated away
	// without the new value reaching the client. Mediated Sign-In names no
	// resource and is not held to any.
	StrictResourceIndicators bool
	// DeviceCodeTTL is expires_in of Device Sign-In requests. Default
	// 10 min. DeviceInterval is their interval. Default 5 s; OmitInterval
	// leaves interval out of the response, and the fake then expects the
	// RFC 8628 default of 5 s (PA-4.6-05).
	DeviceCodeTTL  time.Duration
	DeviceInterval time.Duration
	OmitInterval   bool
	// RequireCode makes every Mediated Sign-In ask for a one-time code
	// (CO-4.7-02); Account.RequireCode does it for one account, and
	// UnusualOnNewKey for the first sign-in of an account with a DPoP key
	// it hasn't seen complete one (CO-4.7-08).
	RequireCode     bool
	UnusualOnNewKey bool
	// CodeTTL is how long a Mediated Sign-In waits for its one-time code
	// (expires_at). Default 5 min. CodeAttempts is how many wrong codes
	// end it with failed. Default 3.
	CodeTTL      time.Duration
	CodeAttempts int
	// MediatedFailuresPerMinute limits failed Mediated Sign-In attempts
	// (wrong credentials or wrong codes) per client_id and account per
	// minute of Clock time: once reached, further attempts get 429
	// rate_limited with Retry-After until the oldest failure is a minute
	// old (CO-4.7-06). Default 5; negative: no limit (negative test).
	MediatedFailuresPerMinute int
	// EndSessionsOnSignOut ends, instead of signing out, the Sessions a
	// revocation or Disconnect signs out (CO-4.9-02): their tokens stop
	// working and renewal returns invalid_session.
	EndSessionsOnSignOut bool
	// NoLiveSignInCheck makes a signed-in Session Token act signed in
	// until it expires, even after its Session is signed out; Tokens.TTL
	// then defaults to, and may not exceed, 5 minutes (CO-4.9-04).
	NoLiveSignInCheck bool
}

// OpenAPIServerOptions configures the OpenAPI resource server (spec 6; see the
// package doc for its endpoints).
type OpenAPIServerOptions struct {
	// Resource, if set, is the OpenAPI entry's "resource" in poppy.json,
	// and the API then accepts only tokens issued for it (CO-3-13,
	// CO-4.3-18).
	Resource string
}

// Misconfig lists the ways a [Server] can be told to break a rule a
// Company must keep (negative tests). The document validator lets exactly
// the broken rule pass and still checks every other one.
type Misconfig struct {
	// OrganizationDomain replaces organization.domain in every document
	// (CO-3-06).
	OrganizationDomain string
	// DropOrganization leaves out organization (CO-3-05).
	DropOrganization bool
	// IssuerInDocument replaces auth.issuer in poppy.json, e.g. with an
	// "http://" URL (CO-3-07) or with a trailing slash.
	IssuerInDocument string
	// MetadataIssuer replaces issuer in the metadata (PA-3.2-03).
	MetadataIssuer string
	// PoppyDomains replaces poppy_domains in the metadata (CO-3.2-03).
	PoppyDomains []string
	// OmitMetadata leaves these members out of the metadata, e.g.
	// "revocation_endpoint" (CO-3.2-04, CO-3.2-05).
	OmitMetadata []string
	// InsecureRedirect allows http:// targets in Discovery.RedirectWellKnown
	// (CO-3-03). They are served on the plain-HTTP listener.
	InsecureRedirect bool
	// ProviderDomain is organization.domain of the document served at the
	// end of the redirect chain (CO-3-06 when it differs).
	ProviderDomain string
}

// Server is a strict in-process fake Company. See the package doc.
type Server struct {
	t     TB // the test of NewServer; nil for New (misuse)
	opts  Options
	clock OffsetClock

	primary   string
	issuer    string // Options.Issuer, canonical
	authHost  string
	authBase  string // issuer without trailing slash: endpoint prefix
	apiHost   string
	mcpHost   string
	mcp2Host  string
	apiOrigin string // "https://api.{primary}/": the API's default resource identifier

	tls       *tlsMaterial
	ln        net.Listener
	plainLn   net.Listener
	srv       *http.Server
	plainSrv  *http.Server
	transport *http.Transport
	client    *http.Client
	internal  *http.Client

	docs         map[string]*servedDoc // by domain (without www.)
	chain        []chainHop
	chainDoc     *servedDoc
	metadata     *servedDoc
	metaPaths    map[string]bool
	openapi      []byte
	mcpHandlers  map[string]http.Handler // by host
	grants       map[string]grantFunc
	tokenCrypter *tokenCrypter

	hostsMu sync.RWMutex
	hosts   map[string]bool // every host the fake serves
	agents  map[string]http.Handler

	logMu    sync.Mutex
	log      []*Request // a queue: s.log[logHead:] (load.go)
	logHead  int
	logBytes int // Request.footprint of the requests in the log
	inflight map[int]*Request
	counts   Counts
	// earlyRenewals, sessionsStarted and signIns are Counts' fields of
	// those names.
	earlyRenewals, sessionsStarted, signIns atomic.Int64

	violations []Violation
	// violationsGen counts TakeViolations calls: positions in violations
	// an exchange remembers are stale once it changes.
	violationsGen int
	// exchanges are the requests in flight, by Request.Index.
	exchanges map[int]*exchange

	mu           sync.Mutex
	sessions     map[string]*session
	tokens       map[string]*token
	tokenSeq     uint64 // the last token.seq
	faults       map[EndpointKind][]*fault
	tokenTypes   []string
	expiresIn    int
	expiresTimes int
	revoked      map[string]bool // client_ids revoked with RevokeClient
	accepted     map[string]bool // client_ids that authenticated successfully
	starts       map[string][]time.Time
	proofJTIs    jtiSet
	assertJTIs   jtiSet
	clientJTIs   jtiSet
	forget       []tokenExpiry // Session Tokens to forget (LoadOptions.ForgetTokensAfter)
	forgetHead   int
	nonces       map[string]*nonceState
	jktOwner     map[string]string // DPoP key thumbprint -> client_id + " " + sub
	signin       signinState       // sign-in records and knobs (signin.go)
	ops          opsState          // operations and the performer (operations.go)
	web          webState          // the website (web.go)

	clientMu   sync.Mutex
	clients    map[string]*clientInfo
	clientDocs map[string][]byte
	published  map[string]string // JWKS thumbprint -> client_id (PA-4.1-10)
	keyCacheMu sync.Mutex
	keyCache   map[string]cachedKey
	closeOnce  sync.Once
	proxyOnce  sync.Once // proxy.go
	proxy      *proxy
	proxyErr   error

	cstate convState // the conversation endpoint (conversation.go)

	areas areas // the run-time knobs, by area
}

// areas are the Server's run-time knobs, grouped by area; each points
// back at the Server.
type areas struct {
	signIn        SignIn
	faults        Faults
	conversations Conversations
	operations    Operations
	sessions      Sessions
	tokens        Tokens
}

// misuse reports a call the API can't answer with an error: it fails the
// test of NewServer (fatal: at once), or panics for New.
func (s *Server) misuse(fatal bool, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if s.t == nil {
		panic(msg)
	}
	s.t.Helper()
	if fatal {
		s.t.Fatalf("%s", msg)
		return
	}
	s.t.Errorf("%s", msg)
}

// configure applies defaults, derives hosts and builds and validates the
// documents. It starts nothing.
func (s *Server) configure() error {
	o := &s.opts
	o.Domains = slices.Clone(o.Domains)
	if len(o.Domains) == 0 {
		o.Domains = []string{"example.test"}
	}
	for i, d := range o.Domains {
		d = canonicalHost(d)
		if d == "" || strings.ContainsAny(d, "/:@ ") || strings.HasPrefix(d, "www.") {
			return fmt.Errorf("poppytest: bad domain %q: a bare host name without www. is required", o.Domains[i])
		}
		o.Domains[i] = d
	}
	if o.Issuer == "" {
		o.Issuer = "https://auth.example.test"
	}
	iu, err := url.Parse(o.Issuer)
	if err != nil || iu.Scheme != "https" || iu.Host == "" || iu.Port() != "" || iu.RawQuery != "" || iu.Fragment != "" {
		return fmt.Errorf("poppytest: Issuer %q must be an https URL without port, query or fragment (CO-3-07)", o.Issuer)
	}
	if len(o.AgentHosts) == 0 {
		o.AgentHosts = []string{"agent.test"}
	}
	if o.Tokens.SessionLifetime < 0 {
		return fmt.Errorf("poppytest: Tokens.SessionLifetime %v must not be negative", o.Tokens.SessionLifetime)
	}
	if o.Tokens.TTL < 0 {
		return fmt.Errorf("poppytest: Tokens.TTL %v must be positive: expires_in MUST be greater than 0 (CO-4.2-06)", o.Tokens.TTL)
	}
	if o.Tokens.TTL == 0 {
		o.Tokens.TTL = time.Hour
		if o.SignIn.NoLiveSignInCheck {
			o.Tokens.TTL = noLiveCheckTTL
		}
	}
	if o.SignIn.NoLiveSignInCheck && o.Tokens.TTL > noLiveCheckTTL {
		return fmt.Errorf("poppytest: Tokens.TTL %v with SignIn.NoLiveSignInCheck: a Company that doesn't check sign-in live uses Session Tokens of a few minutes, at most %v (CO-4.9-04)", o.Tokens.TTL, noLiveCheckTTL)
	}
	if o.Tokens.TTL < time.Second {
		return fmt.Errorf("poppytest: Tokens.TTL %v is under 1 s: expires_in would be 0 (CO-4.2-06)", o.Tokens.TTL)
	}
	if o.Discovery.PoppyCacheControl == "" {
		o.Discovery.PoppyCacheControl = "max-age=300"
	}
	if o.Discovery.MetadataCacheControl == "" {
		o.Discovery.MetadataCacheControl = "max-age=600"
	}
	if o.SignIn.CustomScopes == nil && !o.SignIn.NarrowScopesOnly {
		o.SignIn.CustomScopes = map[string]string{"addresses": "Manage saved shipping addresses"}
	}
	if o.Clients.MaxNew < 0 || o.Clients.SessionStartsPerMinute < 0 {
		return errors.New("poppytest: Clients.MaxNew and Clients.SessionStartsPerMinute must not be negative")
	}
	for _, typ := range o.SignIn.Disable {
		if typ != "direct" && typ != "device" && typ != "mediated" {
			return fmt.Errorf("poppytest: SignIn.Disable: unknown sign-in type %q", typ)
		}
	}

	s.primary = o.Domains[0]
	s.issuer = o.Issuer
	s.authHost = canonicalHost(iu.Host)
	s.authBase = strings.TrimSuffix(o.Issuer, "/")
	s.apiHost = "api." + s.primary
	s.mcpHost = "mcp." + s.primary
	s.mcp2Host = "mcp2." + s.primary
	s.apiOrigin = "https://" + s.apiHost + "/"

	s.hosts = map[string]bool{s.authHost: true, s.apiHost: true, s.mcpHost: true, s.mcp2Host: true, "provider.test": true}
	for _, d := range o.Domains {
		s.hosts[d] = true
		s.hosts["www."+d] = true
	}
	s.agents = map[string]http.Handler{}
	for _, h := range o.AgentHosts {
		h = canonicalHost(h)
		if h == "" || strings.ContainsAny(h, "/:@ ") {
			return fmt.Errorf("poppytest: bad agent host %q", h)
		}
		s.hosts[h] = true
	}
	if err := s.configureWeb(); err != nil {
		return err
	}
	if err := s.configureChain(); err != nil {
		return err
	}
	if err := s.configureSignIn(); err != nil {
		return err
	}
	if err := s.configureOperations(); err != nil {
		return err
	}
	if err := s.buildDiscovery(); err != nil {
		return err
	}
	s.openapi = openAPIDescription(s.apiOrigin, s.signin.read, s.signin.write, s.hasAddressScope())
	s.mcpHandlers = map[string]http.Handler{s.mcpHostName(): s.mcpHandler(s.mcpURL())}
	if s.opts.MCP.SecondServer {
		s.mcpHandlers[s.mcp2Host] = s.mcpHandler(s.mcp2URL())
	}
	s.grants = map[string]grantFunc{
		grantJWTBearer:    (*Server).grantJWTBearer,
		grantAuthCode:     (*Server).grantAuthorizationCode,
		grantRefreshToken: (*Server).grantRefreshToken,
		grantDeviceCode:   (*Server).grantDeviceCode,
	}
	c, err := newTokenCrypter()
	if err != nil {
		return err
	}
	s.tokenCrypter = c
	s.sessions = map[string]*session{}
	s.tokens = map[string]*token{}
	s.faults = map[EndpointKind][]*fault{}
	s.revoked = map[string]bool{}
	s.accepted = map[string]bool{}
	s.starts = map[string][]time.Time{}
	s.proofJTIs = newJTISet()
	s.assertJTIs = newJTISet()
	s.clientJTIs = newJTISet()
	s.inflight = map[int]*Request{}
	s.exchanges = map[int]*exchange{}
	s.nonces = map[string]*nonceState{}
	s.jktOwner = map[string]string{}
	s.clients = map[string]*clientInfo{}
	s.clientDocs = map[string][]byte{}
	s.published = map[string]string{}
	s.keyCache = map[string]cachedKey{}
	return nil
}

// start creates the TLS material and the listeners and starts serving.
func (s *Server) start() error {
	hosts := make([]string, 0, len(s.hosts))
	for h := range s.hosts {
		hosts = append(hosts, h)
	}
	slices.Sort(hosts)
	tm, err := newTLSMaterial(hosts)
	if err != nil {
		return err
	}
	s.tls = tm
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	plain, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		return err
	}
	s.ln, s.plainLn = ln, plain
	s.transport = newTransport(tm.pool, ln.Addr().String(), plain.Addr().String(), s.knownHost)
	s.client = &http.Client{Transport: s.transport}
	s.internal = &http.Client{
		Transport: userAgentTransport{s.transport, internalUserAgent},
		Timeout:   10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	s.srv = &http.Server{
		Handler:           s.record("https", http.HandlerFunc(s.route)),
		TLSConfig:         &tls.Config{GetCertificate: tm.getCertificate, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          discardLogger(),
	}
	s.plainSrv = &http.Server{
		Handler:           s.record("http", http.HandlerFunc(s.routePlain)),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          discardLogger(),
	}
	go s.srv.ServeTLS(ln, "", "")
	go s.plainSrv.Serve(plain)
	return nil
}

// URL returns the primary domain's base URL, "https://example.test".
func (s *Server) URL() string { return "https://" + s.primary }

// Issuer returns the OAuth issuer, "https://auth.example.test".
func (s *Server) Issuer() string { return s.issuer }

// tokenEndpoint returns the token endpoint URL.
func (s *Server) tokenEndpoint() string { return s.authBase + "/oauth/token" }

// revocationEndpoint returns the revocation endpoint URL.
func (s *Server) revocationEndpoint() string { return s.authBase + "/oauth/revoke" }

// apiURL returns the base URL of the API, "https://api.example.test".
func (s *Server) apiURL() string { return "https://" + s.apiHost }

// mcpURL returns the MCP server's url from poppy.json, the resource a
// Bearer Session Token must be requested for.
func (s *Server) mcpURL() string { return "https://" + s.mcpHostName() + "/mcp" }

// Clock returns the fake's clock.
func (s *Server) Clock() *OffsetClock { return &s.clock }

// Client returns an HTTP client that trusts the fake's CA and dials every
// host the fake serves (Company hosts, www. twins, provider.test, agent
// hosts) to the fake's listeners; other hosts fail to dial. It follows
// redirects like http.DefaultClient. Every call returns the same client.
func (s *Server) Client() *http.Client { return s.client }

// Transport returns the transport of Client, for wrapping.
func (s *Server) Transport() *http.Transport { return s.transport }

// HandleAgent serves requests for https://{host}/… with h: the agent's
// client metadata document, JWKS, sign-in callback. A host that isn't in
// Options.AgentHosts is added.
func (s *Server) HandleAgent(host string, h http.Handler) {
	host = canonicalHost(host)
	s.hostsMu.Lock()
	s.hosts[host] = true
	s.agents[host] = h
	s.hostsMu.Unlock()
}

func (s *Server) knownHost(h string) bool {
	s.hostsMu.RLock()
	defer s.hostsMu.RUnlock()
	return s.hosts[h]
}

func (s *Server) isAgentHost(h string) bool {
	if slices.Contains(s.opts.AgentHosts, h) {
		return true
	}
	s.hostsMu.RLock()
	defer s.hostsMu.RUnlock()
	_, ok := s.agents[h]
	return ok
}

// Close shuts the fake down, waiting for requests in flight. It is safe to
// call more than once.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// Closing the clients' idle connections first lets HTTP/2
		// connections end at once instead of after a GOAWAY timeout.
		s.transport.CloseIdleConnections()
		s.waitTurns()
		s.srv.Shutdown(ctx)
		s.plainSrv.Shutdown(ctx)
		s.transport.CloseIdleConnections()
		s.proxyOnce.Do(func() {}) // no proxy starts after Close
		if s.proxy != nil {
			s.proxy.close()
		}
	})
}

// classify names the endpoint a request reached.
func (s *Server) classify(scheme, host, path string) EndpointKind {
	if s.chainIndex(scheme, host, path) >= 0 {
		return EndpointProvider
	}
	if path == "/.well-known/poppy.json" && s.domainOf(host) != "" {
		return EndpointPoppyJSON
	}
	if host == s.authHost {
		switch {
		case s.metaPaths[path]:
			return EndpointMetadata
		case path == strings.TrimPrefix(s.tokenEndpoint(), "https://"+s.authHost):
			return EndpointToken
		case path == strings.TrimPrefix(s.revocationEndpoint(), "https://"+s.authHost):
			return EndpointRevoke
		}
		if ep := s.classifySignIn(path); ep != "" {
			return ep
		}
	}
	if s.opts.MCP.OnAPIHost && host == s.apiHost && (path == "/mcp" || path == mcpResourceMetadataPath) {
		return EndpointMCP
	}
	switch host {
	case s.apiHost:
		switch {
		case path == "/poppy/conversations" || strings.HasPrefix(path, "/poppy/conversations/"):
			return EndpointConversation
		case path == "/poppy/operations" || strings.HasPrefix(path, "/poppy/operations/"):
			return EndpointOperations
		}
		return EndpointAPI
	case s.mcpHost, s.mcp2Host:
		return EndpointMCP
	}
	if ep := s.classifyWeb(host, path); ep != "" {
		return ep
	}
	if s.isAgentHost(host) {
		return EndpointAgent
	}
	return EndpointOther
}

// domainOf returns the Company domain that host is or is the www. twin of.
func (s *Server) domainOf(host string) string {
	d := strings.TrimPrefix(host, "www.")
	if slices.Contains(s.opts.Domains, d) {
		return d
	}
	return ""
}

// route dispatches a request received over TLS.
func (s *Server) route(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	switch x.endpoint {
	case EndpointProvider:
		s.serveChain(w, r)
	case EndpointPoppyJSON:
		s.servePoppyJSON(w, r)
	case EndpointMetadata:
		s.serveMetadata(w, r)
	case EndpointToken:
		s.serveToken(w, r)
	case EndpointRevoke:
		s.serveRevoke(w, r)
	case EndpointAuthorize:
		s.serveAuthorize(w, r)
	case EndpointDevice:
		s.serveDeviceAuthorization(w, r)
	case EndpointVerification:
		s.serveVerification(w, r)
	case EndpointSignIn:
		s.serveMediated(w, r)
	case EndpointAPI:
		s.serveAPI(w, r)
	case EndpointConversation:
		s.serveConversation(w, r)
	case EndpointOperations:
		s.serveOperations(w, r)
	case EndpointBrowserSession:
		s.serveBrowserSession(w, r)
	case EndpointWeb:
		s.serveWeb(w, r)
	case EndpointMCP:
		s.serveMCP(w, r)
	case EndpointAgent:
		s.hostsMu.RLock()
		h := s.agents[x.host]
		s.hostsMu.RUnlock()
		if h == nil {
			s.notFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	default: // reserved endpoints and unknown paths
		s.notFound(w, r)
	}
}

// routePlain answers the plain-HTTP listener: it serves only http:// hops of
// an InsecureRedirect chain (recording PA-3-03: a correct client never
// follows them). Anything else, including poppy.json, gets 404 (CO-3-01),
// and a Company request over plain HTTP is recorded as a PA-3-01 violation.
func (s *Server) routePlain(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	if x.endpoint == EndpointProvider {
		s.violate(x.idx, "PA-3-03", "followed a redirect of the well-known URL to a non-HTTPS URL")
		s.serveChain(w, r)
		return
	}
	if x.endpoint != EndpointAgent && r.Header.Get("User-Agent") != internalUserAgent {
		s.violate(x.idx, "PA-3-01", "request to the Company over plain HTTP: %s %s", r.Method, r.URL.Path)
	}
	x.errorCode = "not_found"
	http.Error(w, "poppytest: plain HTTP is not served", http.StatusNotFound)
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	x.errorCode = "not_found"
	s.writeJSON(w, r, http.StatusNotFound, map[string]any{"error": "not_found"})
}

// newID returns prefix followed by n random bytes, base64url.
func newID(prefix string, n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return prefix + b64.EncodeToString(b)
}

// clientMetadata returns the client metadata document the fake last fetched
// for clientID, as served.
func (s *Server) clientMetadata(clientID string) ([]byte, bool) {
	s.clientMu.Lock()
	defer s.clientMu.Unlock()
	b, ok := s.clientDocs[clientID]
	return slices.Clone(b), ok
}

// keyCache entries: parsed DPoP proof keys by their canonical JSON.
type cachedKey struct {
	key jwk.Key
	jkt string
}

type userAgentTransport struct {
	base http.RoundTripper
	ua   string
}

func (t userAgentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("User-Agent", t.ua)
	return t.base.RoundTrip(r)
}
