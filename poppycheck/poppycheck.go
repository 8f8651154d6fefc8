package poppycheck

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/jose"
	"github.com/poppyproto/poppy/internal/rules"
)

// Status is what a check found for one rule.
type Status string

const (
	// Passed: every observation of the rule kept it.
	Passed Status = "passed"
	// Failed: at least one observation broke it; Result.Evidence holds
	// the request and the answer.
	Failed Status = "failed"
	// NotObserved: the run saw nothing that shows the rule, either
	// because no agent can see it from outside (Result.Reason says why)
	// or because the Company doesn't offer what it is about.
	NotObserved Status = "not observed"
)

// Agent is the identity the check acts as: a fresh client_id with a key
// of its own, never a production agent's. Its documents (client metadata,
// JWKS and the Direct Sign-In callback) must be reachable by the Company
// at BaseURL: serve Handler there.
type Agent struct {
	base     string
	identity *poppy.Identity
	key      *ecdsa.PrivateKey
	kid      string
	signer   *jose.Signer // client and Session assertions, as the SDK signs them
	callback chan url.Values

	metaFetches, jwksFetches atomic.Int64
}

type fetchCounts struct{ metadata, jwks int64 }

func (a *Agent) fetches() fetchCounts {
	return fetchCounts{a.metaFetches.Load(), a.jwksFetches.Load()}
}

// NewAgent makes a fresh agent identity whose documents live under a path
// of its own below baseURL: baseURL+"run-…/agent.json" is the client_id,
// "run-…/jwks.json" the keys and "run-…/callback" the redirect URI, the
// "run-…" segment new for every agent. So each run is a client_id no
// Company has seen, whose metadata no Company has cached: a Company must
// fetch it (CO-4.1-01) in every run, and two runs see the same. baseURL
// must be an https URL (the protocol requires it); an http:// one is
// accepted only on a loopback host, for a Company under development on the
// same machine that accepts one. Handler serves every path below baseURL.
func NewAgent(baseURL string) (*Agent, error) {
	u, err := url.Parse(baseURL)
	if err != nil || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("poppycheck: agent base URL %q is not an absolute URL", baseURL)
	}
	if u.Scheme != "https" && !(u.Scheme == "http" && isLoopback(u.Hostname())) {
		return nil, fmt.Errorf("poppycheck: agent base URL %q must be https (http only on a loopback host)", baseURL)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	u.Path += "run-" + strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(jose.RandomID(9))) + "/"
	base := u.String()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("poppycheck: %w", err)
	}
	kid, err := jose.Thumbprint(&priv.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("poppycheck: %w", err)
	}
	sk, err := poppy.NewSigningKey(priv, kid)
	if err != nil {
		return nil, fmt.Errorf("poppycheck: %w", err)
	}
	signer, err := jose.NewSigner(priv, jose.AssertionHeader(kid, "JWT"))
	if err != nil {
		return nil, fmt.Errorf("poppycheck: %w", err)
	}
	id, err := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID:     base + "agent.json",
		ClientName:   "poppy check",
		JWKSURI:      base + "jwks.json",
		RedirectURIs: []string{base + "callback"},
		Keys:         []*poppy.SigningKey{sk},
		Extensions:   map[string]string{"operations": "1", probeExtension: "1"},
	})
	if err != nil {
		return nil, fmt.Errorf("poppycheck: %w", err)
	}
	return &Agent{base: base, identity: id, key: priv, kid: kid, signer: signer, callback: make(chan url.Values, 1)}, nil
}

// probeExtension is an extension no Company knows, listed in the check's
// client metadata: a Company must ignore it (CO-3.3-02).
const probeExtension = "poppycheck.invalid/probe"

// ClientID returns the agent's client_id.
func (a *Agent) ClientID() string { return a.identity.ClientID() }

// RedirectURI returns the agent's Direct Sign-In redirect URI.
func (a *Agent) RedirectURI() string { return a.base + "callback" }

// Handler serves the client metadata document, the JWKS and the Direct
// Sign-In callback (which only an interactive run waits for).
func (a *Agent) Handler() http.Handler {
	cb := "/callback"
	if u, err := url.Parse(a.base); err == nil {
		cb = u.Path + "callback"
	}
	meta, jwks := "/agent.json", "/jwks.json"
	if u, err := url.Parse(a.ClientID()); err == nil {
		meta = u.Path
	}
	if u, err := url.Parse(a.identity.JWKSURI()); err == nil {
		jwks = u.Path
	}
	h := a.identity.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != cb || r.Method != http.MethodGet {
			http.NotFound(w, r)
			return
		}
		select {
		case a.callback <- r.URL.Query():
		default:
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "poppy check received the sign-in. You can close this page.")
	}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case meta:
			a.metaFetches.Add(1)
		case jwks:
			a.jwksFetches.Add(1)
		}
		h.ServeHTTP(w, r)
	})
}

// String names the agent by its client_id; no key is shown.
func (a *Agent) String() string { return "poppycheck.Agent(" + a.ClientID() + ")" }

// Options configures a check. Agent is required.
type Options struct {
	// Agent is the identity the check acts as (NewAgent), served where
	// the Company can fetch it.
	Agent *Agent
	// HTTPClient sends every request. Nil means a client with the SDK's
	// own address rule (that of poppy.DefaultHTTPClient: public addresses
	// only), relaxed by UnsafeAllowLoopbackHTTP and AllowNetworks, that
	// trusts RootCAs. The check never follows a redirect with it: it
	// follows the well-known URL's redirects itself, one hop at a time.
	HTTPClient *http.Client
	// UnsafeAllowLoopbackHTTP lets the check reach a Company under
	// development on this machine: loopback addresses (127.0.0.1:7790,
	// localhost), over https, or over http:// where the Company's
	// documents say so (as poppy.AgentOptions.UnsafeAllowLoopbackHTTP
	// allows the SDK). A deployed Company must use https everywhere.
	UnsafeAllowLoopbackHTTP bool
	// AllowNetworks lists networks the check may connect to although
	// they are not public, such as a Company on a private network
	// (poppy.AgentOptions.AllowNetworks).
	AllowNetworks []netip.Prefix
	// RootCAs are the certificate authorities the check trusts, when
	// HTTPClient is nil: a Company under development with a CA of its
	// own. Nil means the system's.
	RootCAs *x509.CertPool
	// Person, if set, makes the run interactive: it walks a person
	// through one sign-in of each type the Company offers, then checks
	// Account Token use, rotation and sign-out (see Person).
	Person Person
	// FailedSignIns lets the check see that a Company offering Mediated
	// Sign-In rate-limits attempts (CO-4.7-06, spec 4.7): at the end of
	// the run it posts, on one Session, up to MediatedAttempts attempts
	// within a minute with credentials it makes up (random values, an
	// email field under the reserved .invalid domain, so they can belong
	// to no account), and wants the last one, or an earlier one, refused
	// with 429 and a Retry-After it can read. Off by default: a Company
	// may count the failures against the address the check runs from, or
	// alert on them, and a correct agent never repeats a failed sign-in
	// by itself; without it CO-4.7-06 is not observed. The made-up values
	// never appear in the report.
	FailedSignIns bool
	// Propose, in an interactive run whose Person also implements
	// Approver, is an action the check may propose and, once the person
	// approves its summary, confirm and follow, to see what only a
	// confirmed operation shows (CO-OPS6-01: Retry-After on every
	// in_progress answer). It acts on the account the person signed in
	// to: name a harmless action on a test account. Nil (the default)
	// proposes nothing, and those rules are not observed.
	Propose *Proposal
	// Only, if set, keeps in the report only these rules: rule IDs
	// (CO-4.3-02) or sections (4.3, CO-4.3, OPS6). The run still takes
	// every step, since later rules need what earlier steps learn.
	Only []string
	// MaxRequests bounds the requests one run sends. Zero means 400.
	MaxRequests int
	// RequestTimeout bounds each request, its answer included. Zero means
	// 20 s. A step whose requests time out twice stops there.
	RequestTimeout time.Duration
	// MaxDuration bounds the whole run. Zero means DefaultMaxDuration, or
	// DefaultMaxInteractiveDuration with a Person (who signs in at the
	// pace of a person).
	MaxDuration time.Duration
	// Clock tells the time for proofs and assertions. Nil means the
	// system clock.
	Clock interface{ Now() time.Time }
	// Logger receives a debug record per request (method, URL without
	// query, status). Nil discards. No record holds a secret.
	Logger *slog.Logger
}

// The default bounds of a whole run (Options.MaxDuration): a Company that
// answers each request slowly can't hold a run for longer.
const (
	DefaultMaxDuration            = 5 * time.Minute
	DefaultMaxInteractiveDuration = 30 * time.Minute
)

// MediatedAttempts is the most Mediated Sign-In attempts the
// FailedSignIns probe makes: the 6th attempt within a minute is the one
// REQUIREMENTS.md's reading of CO-4.7-06 wants refused (a limit of 5).
const MediatedAttempts = 6

// Proposal is a request to one of the Company's APIs that proposes an
// operation (operations extension, section 4.1: 202 with
// {"operation": …}). The check sends it with the DPoP token of the first
// interactive sign-in's Session.
type Proposal struct {
	// Method is the request's method, such as "POST".
	Method string
	// URL is the endpoint, an https URL of an API the Company lists.
	URL string
	// Body is the JSON body, if any.
	Body []byte
}

// Approver is a Person that approves operations: the check asks it
// before it confirms the operation Options.Propose proposed (a Personal
// Agent must have the User's approval, operations section 5.1).
type Approver interface {
	// Approve shows the person the Company's name and the revision's
	// summary (untrusted text) and returns their answer.
	Approve(ctx context.Context, a Approval) (bool, error)
}

// Approval is what the person is asked to approve.
type Approval struct {
	Company     string // organization.name (untrusted text)
	OperationID string
	Revision    int
	Summary     string // the revision's summary (untrusted text)
}

// Report is the outcome of a check.
type Report struct {
	// Domain is the domain checked.
	Domain string `json:"domain"`
	// ClientID is the check's agent identity.
	ClientID string `json:"client_id"`
	// Interactive says whether a person signed in during the run.
	Interactive bool `json:"interactive"`
	// Started and Duration time the run.
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	// Requests counts the requests sent.
	Requests int `json:"requests"`
	// Results has one entry per Company rule, in the rules' order:
	// every CO rule of the protocol and its operations extension.
	Results []Result `json:"results"`
	// Notes are observations that no Company rule governs but that
	// decide how agents behave, such as the caching headers of the
	// discovery documents.
	Notes []string `json:"notes,omitempty"`
	// Aborted is set when the run stopped early (the request budget or
	// the time ran out, ctx ended, or discovery failed so badly nothing
	// else could run); the rules not reached are NotObserved.
	Aborted string `json:"aborted,omitempty"`
	// OtherVersion is the protocol_version of a poppy.json whose major
	// version is not this check's (0.1): a Personal Agent of 0.1 must not
	// use that document (spec 3.1), so the run checked nothing else and
	// every rule is NotObserved. A newer minor version (0.2) is checked
	// by the rules of 0.1, which it keeps, with a note.
	OtherVersion string `json:"other_version,omitempty"`
	// IdentityRefused is set when the Company answered the first Session
	// start with invalid_client: it could not fetch or accept the check's
	// identity (ClientID), which must be reachable where the Company
	// fetches it (Agent.Handler served at the agent's base URL).
	IdentityRefused bool `json:"identity_refused,omitempty"`
}

// Result is what the run found for one Company rule.
type Result struct {
	Rule    string `json:"rule"`
	Section string `json:"section"`
	// Text is the rule, in the module's words (docs/conformance.md).
	Text   string `json:"text"`
	Status Status `json:"status"`
	// Step is the step of the run that decided the status: the first
	// failing observation, or the first passing one.
	Step string `json:"step,omitempty"`
	// Detail says what was seen (for Failed, what was wrong).
	Detail string `json:"detail,omitempty"`
	// Reason says why a NotObserved rule was not observed.
	Reason string `json:"reason,omitempty"`
	// Observations counts how often the run checked the rule.
	Observations int `json:"observations"`
	// Evidence is the request and answer of a failure, secrets replaced
	// by fingerprints.
	Evidence *Exchange `json:"evidence,omitempty"`
}

// Exchange is one request the check sent and the answer, as shown in a
// report: every token, proof, assertion, code and credential the run
// handled is replaced by a short fingerprint, «sha256:0123abcd».
type Exchange struct {
	Method         string            `json:"method"`
	URL            string            `json:"url"`
	RequestHeader  map[string]string `json:"request_header,omitempty"`
	RequestBody    string            `json:"request_body,omitempty"`
	Status         int               `json:"status,omitempty"`
	ResponseHeader map[string]string `json:"response_header,omitempty"`
	ResponseBody   string            `json:"response_body,omitempty"`
	// Error is the transport error, if the request got no answer.
	Error string `json:"error,omitempty"`
	// Signed are the JWTs the request carried (client and Session
	// assertions, browser assertions, DPoP proofs), decoded, so that the
	// Company's engineer sees what was sent; the JWTs themselves are not
	// shown.
	Signed []Signed `json:"signed,omitempty"`
}

// Signed is a JWT the check sent, decoded: its header and claims. None of
// them is a secret (ath is a hash; the signature, which could let it be
// replayed, is left out).
type Signed struct {
	// Where says where the request carried it: "DPoP" (the header),
	// "client_assertion" or "assertion" (form fields).
	Where  string         `json:"where"`
	Header map[string]any `json:"header"`
	Claims map[string]any `json:"claims"`
}

// Failed returns the failed results.
func (r *Report) Failed() []Result {
	var out []Result
	for _, x := range r.Results {
		if x.Status == Failed {
			out = append(out, x)
		}
	}
	return out
}

// Result returns the result for rule id.
func (r *Report) Result(id string) (Result, bool) {
	for _, x := range r.Results {
		if x.Rule == id {
			return x, true
		}
	}
	return Result{}, false
}

// Count returns how many results have status st.
func (r *Report) Count(st Status) int {
	n := 0
	for _, x := range r.Results {
		if x.Status == st {
			n++
		}
	}
	return n
}

// errNoAgent is returned by Run without Options.Agent.
var errNoAgent = errors.New("poppycheck: Options.Agent is required")

// NotReachedError is returned by Run, with the report of what ran before,
// when the check's own client would not reach the Company: its address
// rule (the SDK's) refused the Company's domain, or a name the Company's
// documents give that resolved to an address that isn't public; or, on the
// first request, the Company's certificate is signed by an authority the
// client doesn't trust. Neither is the Company's failure: the caller
// allows the address (Options.UnsafeAllowLoopbackHTTP for loopback,
// Options.AllowNetworks) or names the authority (Options.RootCAs).
type NotReachedError struct {
	// URL is the URL the check did not reach (without query).
	URL string
	// Refused says the address rule refused it; Addr is the address when
	// known, Loopback whether it is this machine's.
	Refused  bool
	Addr     netip.Addr
	Loopback bool
	// UnknownAuthority says the certificate's authority isn't trusted.
	UnknownAuthority bool
	// Err is the client's error.
	Err error
}

func (e *NotReachedError) Error() string {
	switch {
	case e.UnknownAuthority:
		return "poppycheck: " + e.URL + ": the certificate is signed by an authority the check doesn't trust"
	case e.Loopback:
		return "poppycheck: " + e.URL + " is on this machine (loopback), which the check, like the SDK, doesn't connect to unless allowed"
	case e.Addr.IsValid():
		return "poppycheck: " + e.URL + " is at " + e.Addr.String() + ", not a public address, which the check, like the SDK, doesn't connect to unless allowed"
	}
	return "poppycheck: " + e.URL + " is not at a public address, which the check, like the SDK, doesn't connect to unless allowed"
}

func (e *NotReachedError) Unwrap() error { return e.Err }

// Run checks the Company at domain from outside, as an agent without a
// User would see it, and, with Options.Person, through one sign-in of each
// type. domain is a host name such as "example.com", with a port when the
// Company's well-known URL has one ("example.test:8443",
// "127.0.0.1:7790"), or that as an https:// URL; an http:// URL on a
// loopback host with Options.UnsafeAllowLoopbackHTTP.
//
// It returns a report even when the Company fails every rule. The error is
// for a run that could not be made at all (bad options, ctx ended before
// the first request), or a *NotReachedError, returned with the report of
// what ran before it.
func Run(ctx context.Context, domain string, opts *Options) (*Report, error) {
	if opts == nil || opts.Agent == nil {
		return nil, errNoAgent
	}
	target, err := parseTarget(domain, opts.UnsafeAllowLoopbackHTTP)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := newProber(opts)
	if err := p.guard.CheckHost(target.Hostname()); err != nil {
		return nil, p.notReached(target, err)
	}
	limit := opts.MaxDuration
	if limit <= 0 {
		limit = DefaultMaxDuration
		if opts.Person != nil {
			limit = DefaultMaxInteractiveDuration
		}
	}
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	rep := &Report{Domain: target.Host, ClientID: opts.Agent.ClientID(), Interactive: opts.Person != nil, Started: time.Now()}
	p.run(rctx, target)
	// The time limit, or the caller's ctx, is why the run stopped, whatever
	// the step it stopped in made of the requests it cut.
	switch {
	case ctx.Err() != nil:
		p.aborted = "stopped: " + ctx.Err().Error()
	case rctx.Err() != nil:
		p.aborted = fmt.Sprintf("the run's time limit (%v) ran out", limit)
	}
	rep.Duration = time.Since(rep.Started)
	rep.Requests = p.sent
	rep.Notes = p.notes
	rep.Aborted = p.aborted
	rep.OtherVersion = p.otherVersion
	rep.IdentityRefused = p.identityRefused
	rep.Results = p.results()
	p.scrub(rep)
	if p.stop != nil {
		return rep, p.stop
	}
	return rep, nil
}

// parseTarget reads the domain Run was given: a host, host:port, or an
// https:// URL of either (http:// on loopback when allowed), and returns
// the origin to ask.
func parseTarget(domain string, allowLoopback bool) (*url.URL, error) {
	d := strings.TrimSpace(domain)
	bad := fmt.Errorf("poppycheck: %q is not a domain (a host name such as example.com, host:port, or an https:// URL of one)", domain)
	raw := d
	if !strings.Contains(d, "://") {
		raw = "https://" + d
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Trim(u.Path, "/") != "" || strings.ContainsAny(u.Host, " ") {
		return nil, bad
	}
	if p := u.Port(); p != "" {
		if n, err := netip.ParseAddrPort("0.0.0.0:" + p); err != nil || n.Port() == 0 {
			return nil, bad
		}
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && allowLoopback && isLoopback(u.Hostname()):
	case u.Scheme == "http" && isLoopback(u.Hostname()):
		return nil, fmt.Errorf("poppycheck: %q is http://, which the check uses only on a loopback host when allowed (Options.UnsafeAllowLoopbackHTTP)", domain)
	default:
		return nil, fmt.Errorf("poppycheck: %q: the protocol is https only (spec 3)", domain)
	}
	return &url.URL{Scheme: u.Scheme, Host: strings.ToLower(u.Host)}, nil
}

// coRules returns the Company rules, withdrawn ones left out.
func coRules() []rules.Rule {
	var out []rules.Rule
	for _, r := range rules.All() {
		if strings.HasPrefix(r.ID, "CO-") && !r.Withdrawn {
			out = append(out, r)
		}
	}
	return out
}

// results turns the observations into one Result per Company rule (those
// Options.Only names, when set).
func (p *prober) results() []Result {
	var out []Result
	for _, r := range coRules() {
		if !selected(r, p.opts.Only) {
			continue
		}
		res := Result{Rule: r.ID, Section: r.Section, Text: r.Text, Status: NotObserved}
		if p.otherVersion != "" {
			res.Reason = "the Company's poppy.json follows protocol version " + p.otherVersion + ", which the check doesn't know"
			out = append(out, res)
			continue
		}
		obs := p.obs[r.ID]
		res.Observations = len(obs)
		if i := slices.IndexFunc(obs, func(o observation) bool { return !o.ok }); i >= 0 {
			res.Status, res.Step, res.Detail, res.Evidence = Failed, obs[i].step, obs[i].detail, obs[i].ex
		} else if len(obs) > 0 {
			res.Status, res.Step, res.Detail = Passed, obs[0].step, obs[0].detail
		} else if why := p.why[r.ID]; why != "" {
			res.Reason = why
		} else {
			res.Reason = unobservable[r.ID]
			if res.Reason == "" {
				res.Reason = conditional[r.ID]
			}
			if res.Reason == "" {
				res.Reason = "not reached in this run"
				if p.aborted != "" {
					res.Reason = "not reached: the run stopped early"
				}
			}
		}
		out = append(out, res)
	}
	return out
}

// selected reports whether rule r is one of only: rule IDs, or sections
// ("4.3", "CO-4.3" and "OPS6" select CO-4.3-… and CO-OPS6-…); none
// means every rule.
func selected(r rules.Rule, only []string) bool {
	if len(only) == 0 {
		return true
	}
	id := strings.ToUpper(r.ID)
	for _, o := range only {
		o = strings.ToUpper(strings.TrimSpace(o))
		sec := strings.TrimPrefix(o, "CO-")
		if o == id || sec != "" && strings.HasPrefix(id, "CO-"+sec+"-") {
			return true
		}
	}
	return false
}

// CheckOnly reports an entry of Options.Only that names no Company rule or
// section, so that a typo doesn't select nothing in silence.
func CheckOnly(only []string) error {
	for _, o := range only {
		found := false
		for _, r := range coRules() {
			if selected(r, []string{o}) {
				found = true
				break
			}
		}
		if !found {
			return fmt.Errorf("poppycheck: %q names no Company rule or section (such as CO-4.3-02, 4.3 or OPS6)", o)
		}
	}
	return nil
}
