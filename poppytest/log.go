package poppytest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// EndpointKind classifies a request by the part of the Company it reached.
type EndpointKind string

// The endpoints of the fake. Reserved ones answer 404 until the package
// implements them.
const (
	EndpointPoppyJSON    EndpointKind = "poppy.json"   // GET https://{domain}/.well-known/poppy.json (and www.{domain})
	EndpointMetadata     EndpointKind = "metadata"     // RFC 8414 metadata on the issuer host
	EndpointToken        EndpointKind = "token"        // token_endpoint
	EndpointRevoke       EndpointKind = "revoke"       // revocation_endpoint
	EndpointAuthorize    EndpointKind = "authorize"    // authorization_endpoint and its consent form (Direct Sign-In)
	EndpointDevice       EndpointKind = "device"       // device_authorization_endpoint (Device Sign-In)
	EndpointVerification EndpointKind = "verification" // verification_uri, the Device Sign-In page
	EndpointSignIn       EndpointKind = "sign-in"      // auth.mediated.endpoint and {endpoint}/{sign_in_id}
	EndpointAPI          EndpointKind = "api"          // the OpenAPI resource server (api.{domain})
	EndpointMCP          EndpointKind = "mcp"          // the MCP server (mcp.{domain}) and its RFC 9728 metadata
	EndpointConversation EndpointKind = "conversation" // the poppy conversation endpoint (spec 7)
	EndpointOperations   EndpointKind = "operations"   // reserved: the operations extension endpoint
	EndpointAgent        EndpointKind = "agent"        // requests to an agent host (HandleAgent)
	EndpointProvider     EndpointKind = "provider"     // a hop of the Discovery.RedirectWellKnown chain
	EndpointOther        EndpointKind = "other"        // anything else on a host the fake serves
)

// A Request is one HTTP request the fake received, as recorded in
// [Server.Requests]. The log is for tests: it holds tokens, proofs and
// assertions verbatim.
type Request struct {
	Index    int       // position in Requests()
	Time     time.Time // fake Clock time at arrival
	Method   string
	URL      string // full URL with scheme and query, without a port: "https://api.example.test/orders?x=1"
	Host     string // lower-cased, without port
	Path     string
	Endpoint EndpointKind
	Header   http.Header // clone of the request headers
	Form     url.Values  // form fields of a form-encoded POST body, nil otherwise
	Body     []byte      // copy of the body, capped at 64 KiB

	Status    int    // response status
	ErrorCode string // the OAuth/DPoP/protocol error the fake answered with, if any

	// Internal marks the fake's own outbound fetches (client metadata and
	// JWKS); they carry User-Agent [InternalUserAgent].
	Internal bool
	// Browser marks the requests of the User's browser, sent by
	// [Server.Browse] with User-Agent [BrowserUserAgent].
	Browser bool
	// User marks the requests the User made, not the agent: Browse's, and
	// every request to a page the User uses (the authorization endpoint
	// and its consent form, the Device Sign-In page and its form) that
	// carries nothing only the agent holds (a DPoP proof, an Authorization
	// header, an assertion). A person approving in a real browser or with
	// curl is the User; no rule of the agent is checked on their requests.
	User bool

	AuthScheme  string // scheme of the Authorization header as sent ("DPoP", "Bearer", …)
	AccessToken string // the token in the Authorization header
	SessionID   string // Session the request acted on: from its token, or the token response

	Proof           *JWT // decoded DPoP header, nil if absent or not a JWS
	Assertion       *JWT // decoded "assertion" form field (JWT bearer grant)
	ClientAssertion *JWT // decoded "client_assertion" form field

	Violations []string // rule IDs this request broke (see Violation)

	logBytes int // its footprint, while in the log (load.go)
}

// JWT is a decoded JWS as the client sent it: a DPoP proof
// (Request.Proof), a client assertion or a Session assertion. RawClaims
// lets a test check the JSON type of a claim, e.g. that aud is a string
// rather than an array.
type JWT struct {
	Compact   string
	Header    map[string]any // numbers are json.Number
	Claims    map[string]any // numbers are json.Number
	RawHeader json.RawMessage
	RawClaims json.RawMessage
	// JKT is, for a DPoP proof, the RFC 7638 SHA-256 thumbprint of the
	// header jwk, base64url; "" if the jwk is unusable.
	JKT string
	// AudienceMatch says which value a client assertion's aud matched:
	// "token_endpoint", "issuer" or "endpoint" (the URL it was sent to), or
	// "" when it matched none.
	AudienceMatch string
}

// internalUserAgent is the User-Agent of the fake's own outbound requests.
const internalUserAgent = "poppytest-company"

const (
	maxBody    = 1 << 20 // largest request body the fake reads
	maxLogBody = 64 << 10
)

// Requests returns the requests received so far that the log keeps, in
// order of arrival: every request, unless Options.Load bounds the log (by
// default to the latest DefaultLogSize). Request.Index numbers every
// request received, so it equals the position in Requests only while
// nothing was dropped. Status and ErrorCode of a request still in flight
// are zero.
func (s *Server) Requests() []Request {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	logged := s.loggedLocked()
	out := make([]Request, len(logged))
	for i, r := range logged {
		out[i] = *r
		out[i].Violations = slices.Clone(r.Violations)
	}
	return out
}

// RequestsTo returns the requests to any of the given endpoints, excluding
// the fake's own internal fetches.
func (s *Server) RequestsTo(eps ...EndpointKind) []Request {
	var out []Request
	for _, r := range s.Requests() {
		if !r.Internal && slices.Contains(eps, r.Endpoint) {
			out = append(out, r)
		}
	}
	return out
}

// exchange is the per-request state a handler fills in; the middleware copies
// it into the log when the handler returns.
type exchange struct {
	idx      int
	scheme   string
	host     string
	endpoint EndpointKind
	body     []byte
	form     url.Values

	errorCode       string
	sessionID       string
	authScheme      string
	accessToken     string
	proof           *JWT
	assertion       *JWT
	clientAssertion *JWT

	// violations are the positions in Server.violations of the ones this
	// request broke, as of violationsGen (nameAgent). Under s.logMu.
	violations    []int
	violationsGen int
}

type exchangeKey struct{}

func exchangeOf(r *http.Request) *exchange {
	x, _ := r.Context().Value(exchangeKey{}).(*exchange)
	return x
}

// statusWriter records the status code written by a handler.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		if w.status == 0 {
			w.status = http.StatusOK
		}
		f.Flush()
	}
}

func (w *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.ResponseWriter.(http.Hijacker); ok {
		return h.Hijack()
	}
	return nil, nil, errors.New("poppytest: hijack not supported")
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// record wraps the router: it logs the request, reads its body, applies the
// generic fault knobs and scans the URL for tokens.
func (s *Server) record(scheme string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := canonicalHost(r.Host)
		ep := s.classify(scheme, host, r.URL.Path)
		body, readErr := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		r.Body.Close()
		tooLarge := readErr == nil && len(body) > maxBody
		if tooLarge {
			body = body[:maxBody]
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		rec := &Request{
			Time:     s.clock.Now(),
			Method:   r.Method,
			URL:      scheme + "://" + host + r.URL.RequestURI(),
			Host:     host,
			Path:     r.URL.Path,
			Endpoint: ep,
			Header:   r.Header.Clone(),
			Internal: r.Header.Get("User-Agent") == internalUserAgent,
			Browser:  r.Header.Get("User-Agent") == BrowserUserAgent,
		}
		rec.User = rec.Browser || (userPage(ep) && !agentMarked(r, body))
		if n := min(len(body), s.bodyLogBytes()); n > 0 {
			rec.Body = bytes.Clone(body[:n])
		}
		x := &exchange{scheme: scheme, host: host, endpoint: ep, body: body}
		if r.Method == http.MethodPost && isForm(r.Header.Get("Content-Type")) {
			if f, err := url.ParseQuery(string(body)); err == nil {
				x.form = f
				rec.Form = f
			}
		}
		if h := r.Header.Values("DPoP"); len(h) == 1 {
			rec.Proof = decodeProofForLog(h[0])
		}
		if x.form != nil {
			rec.Assertion = decodeJWTForLog(x.form.Get("assertion"))
			rec.ClientAssertion = decodeJWTForLog(x.form.Get("client_assertion"))
		}
		if scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok {
			rec.AuthScheme, rec.AccessToken = scheme, strings.TrimSpace(tok)
		}
		s.logMu.Lock()
		s.logStartLocked(rec)
		x.idx = rec.Index
		s.exchanges[x.idx] = x
		s.logMu.Unlock()

		sw := &statusWriter{ResponseWriter: w}
		sw.Header().Set("Date", s.clock.Now().UTC().Format(http.TimeFormat))
		if !rec.Internal && readErr == nil {
			// A token in the URL the User opens was put there by the
			// agent, which built the URL: its violation, whoever sends it.
			s.scanURLForTokens(x.idx, r)
			// What the User types (an account on the consent form) is
			// theirs: the User's own requests are never the agent's
			// violations.
			if !rec.User {
				s.scanForCredentials(x.idx, r, x)
			}
		}
		r = r.WithContext(context.WithValue(r.Context(), exchangeKey{}, x))
		switch {
		case readErr != nil:
			// The body did not arrive whole (the agent died, or its
			// connection broke, after the headers): act on nothing a
			// partial request says (CO-OPS4-02: no operation for an action
			// that was never asked for whole).
			x.errorCode = "invalid_request"
			s.writeJSON(sw, r, http.StatusBadRequest, oauthError("invalid_request", "the request body did not arrive whole"))
		case tooLarge:
			x.errorCode = "invalid_request"
			s.writeJSON(sw, r, http.StatusRequestEntityTooLarge, oauthError("invalid_request", "body too large"))
		case s.applyFaults(sw, r, x):
		default:
			next.ServeHTTP(sw, r)
		}

		s.logMu.Lock()
		rec.Status = sw.status
		if rec.Status == 0 {
			rec.Status = http.StatusOK
		}
		rec.ErrorCode = x.errorCode
		rec.SessionID = x.sessionID
		if x.authScheme != "" {
			rec.AuthScheme, rec.AccessToken = x.authScheme, x.accessToken
		}
		if x.proof != nil {
			rec.Proof = x.proof
		}
		if x.assertion != nil {
			rec.Assertion = x.assertion
		}
		if x.clientAssertion != nil {
			rec.ClientAssertion = x.clientAssertion
		}
		delete(s.exchanges, x.idx)
		s.logEndLocked(rec)
		s.logMu.Unlock()
		s.nameAgent(x, rec)
	})
}

// userPage reports whether ep is a page the User uses: the authorization
// endpoint with its consent form (Direct Sign-In) and the verification
// page with its form (Device Sign-In). Decision (docs/decisions.md, "Whose
// request is it"): a request to one of them is the User's unless it
// carries what only the agent holds (agentMarked), whatever its
// User-Agent: a person approves in any browser, or with curl.
func userPage(ep EndpointKind) bool {
	return ep == EndpointAuthorize || ep == EndpointVerification
}

// agentMarked reports whether r carries what only the agent holds and a
// person's browser never sends: a DPoP proof, an Authorization header, or
// a Session or client assertion in its query or form body.
func agentMarked(r *http.Request, body []byte) bool {
	if len(r.Header.Values("DPoP")) > 0 || len(r.Header.Values("Authorization")) > 0 {
		return true
	}
	q := r.URL.Query()
	if q.Has("assertion") || q.Has("client_assertion") {
		return true
	}
	if f, err := url.ParseQuery(string(body)); err == nil && (f.Has("assertion") || f.Has("client_assertion")) {
		return true
	}
	return false
}

func isForm(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/x-www-form-urlencoded")
}

// canonicalHost lower-cases host and strips a port and a trailing dot.
func canonicalHost(h string) string {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// scanURLForTokens records PA-4.3-26 when the path or query of r carries a
// token the fake issued.
func (s *Server) scanURLForTokens(idx int, r *http.Request) {
	var pieces []string
	split := func(v string) {
		pieces = append(pieces, strings.FieldsFunc(v, func(c rune) bool { return strings.ContainsRune("/?&=;,+ ", c) })...)
	}
	split(r.URL.Path)
	if q, err := url.ParseQuery(r.URL.RawQuery); err == nil {
		for k, vs := range q {
			split(k)
			for _, v := range vs {
				split(v)
			}
		}
	}
	split(r.URL.RawQuery)
	s.mu.Lock()
	found, rule := "", "PA-4.3-26"
	for _, p := range pieces {
		if t, ok := s.tokens[p]; ok {
			found = t.typ + " Session Token"
			break
		}
		if _, ok := s.signin.acctTokens[p]; ok {
			found, rule = "Account Token", "PA-4.8-11"
			break
		}
		if _, ok := s.signin.devices[p]; ok {
			found, rule = "device_code", "PA-4.6-03"
			break
		}
	}
	s.mu.Unlock()
	if found != "" {
		s.violate(idx, rule, "a %s the fake issued was sent in the URL", found)
	}
}
