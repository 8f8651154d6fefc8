package poppycheck

// The prober: every request of a run goes through start (and send, which
// reads the whole answer), which bounds it (a budget of requests per run,
// a timeout per request, a stop for a step whose requests time out again
// and again, a cap on every answer read), refuses what the SDK's address
// rule refuses, never follows a redirect, and records the exchange for the
// report. The report's text is cleaned of secrets once, at the end
// (scrub), when every secret the run handled is known.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/poppyproto/poppy/internal/netguard"
	"github.com/poppyproto/poppy/internal/redact"
)

const (
	defaultMaxRequests = 400
	defaultTimeout     = 20 * time.Second
	maxBody            = 1 << 20 // the most of any answer read
	maxShownBody       = 2048    // the most of a body shown in a report
	keptBody           = 4096    // the most of a body kept until the report is cleaned
	// maxStepTimeouts is how many requests of one step may time out
	// before the step stops.
	maxStepTimeouts = 2
)

var (
	// errBudget ends a run whose request budget ran out.
	errBudget = errors.New("poppycheck: the run's request budget is spent")
	// errStepStopped refuses the requests of a step whose requests timed
	// out maxStepTimeouts times.
	errStepStopped = errors.New("poppycheck: the step stopped after repeated timeouts")
	// errNotDialled refuses a URL the address rule refuses (the step that
	// read it from a document reports the rule that names it).
	errNotDialled = errors.New("poppycheck: the URL is at an address the check doesn't connect to")
)

type observation struct {
	ok     bool
	step   string
	detail string
	ex     *Exchange
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

type prober struct {
	opts    *Options
	hc      *http.Client
	guard   *netguard.Guard
	clock   interface{ Now() time.Time }
	log     *slog.Logger
	max     int
	timeout time.Duration

	mu       sync.Mutex
	sent     int
	secrets  map[string]bool // tokens, proofs, assertions, codes: shown as fingerprints
	typed    map[string]bool // what a person typed: never shown, not even as a fingerprint
	obs      map[string][]observation
	why      map[string]string
	notes    []string
	aborted  string
	step     string
	timeouts map[string]int // by step group
	stop     *NotReachedError

	otherVersion    string
	identityRefused bool

	// What the run learnt, step by step.
	c          *company
	openURL    string // a GET a signed-out Session may make
	openClosed string // a GET that needs a sign-in
}

func newProber(opts *Options) *prober {
	p := &prober{opts: opts, secrets: map[string]bool{}, typed: map[string]bool{}, obs: map[string][]observation{}, why: map[string]string{},
		timeouts: map[string]int{}, max: opts.MaxRequests, timeout: opts.RequestTimeout, clock: opts.Clock, log: opts.Logger,
		guard: &netguard.Guard{AllowLoopback: opts.UnsafeAllowLoopbackHTTP, Allow: slices.Clone(opts.AllowNetworks)}}
	if p.max <= 0 {
		p.max = defaultMaxRequests
	}
	if p.timeout <= 0 {
		p.timeout = defaultTimeout
	}
	if p.clock == nil {
		p.clock = systemClock{}
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	base := opts.HTTPClient
	if base == nil {
		// The SDK's address rule and transport (internal/netguard), with
		// the relaxations and roots the caller gave.
		g := &netguard.Guard{AllowLoopback: opts.UnsafeAllowLoopbackHTTP, Allow: slices.Clone(opts.AllowNetworks), Roots: opts.RootCAs}
		base = &http.Client{Transport: netguard.NewTransport(g, 4*time.Second, 64<<10)}
	}
	hc := *base
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	hc.Jar = nil
	p.hc = &hc
	return p
}

// check records one observation of rule.
func (p *prober) check(rule string, ok bool, ex *Exchange, format string, args ...any) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.obs[rule] = append(p.obs[rule], observation{ok: ok, step: p.step, detail: fmt.Sprintf(format, args...), ex: ex})
	return ok
}

// pass and fail are check with a fixed outcome.
func (p *prober) pass(rule string, ex *Exchange, format string, args ...any) {
	p.check(rule, true, ex, format, args...)
}

func (p *prober) fail(rule string, ex *Exchange, format string, args ...any) {
	p.check(rule, false, ex, format, args...)
}

// notObserved says why rules were not observed in this run, unless an
// earlier step already said.
func (p *prober) notObserved(reason string, ids ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, id := range ids {
		if p.why[id] == "" {
			p.why[id] = reason
		}
	}
}

func (p *prober) note(format string, args ...any) {
	p.mu.Lock()
	p.notes = append(p.notes, fmt.Sprintf(format, args...))
	p.mu.Unlock()
}

// secret registers values that must never appear in the report: tokens,
// proofs, assertions, codes. They are random and long, so the report
// shows each as its fingerprint; shorter values aren't registered (a
// value of a few bytes would match ordinary text).
func (p *prober) secret(vs ...string) {
	p.mu.Lock()
	for _, v := range vs {
		if len(v) >= 8 {
			p.secrets[v] = true
		}
	}
	p.mu.Unlock()
}

// typedSecret registers what a person typed (a credential, a one-time
// code), whatever its length: the report never shows it, not even as a
// fingerprint, which would give away a short value (a 4-digit PIN has
// 10,000 fingerprints to try).
func (p *prober) typedSecret(vs ...string) {
	p.mu.Lock()
	for _, v := range vs {
		if v != "" {
			p.typed[v] = true
		}
	}
	p.mu.Unlock()
}

// Fingerprint returns the short fingerprint a report shows for a secret:
// «sha256:» and the first 8 hex digits of its SHA-256.
func Fingerprint(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return "«sha256:" + hex.EncodeToString(sum[:4]) + "»"
}

// redactNow cleans a text leaving the run now (a log record): each
// registered secret, whole, becomes its fingerprint, and what a person
// typed becomes redact.Mark.
func (p *prober) redactNow(s string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s = replaceForms(s, longestFirst(p.secrets), Fingerprint)
	return replaceForms(s, longestFirst(p.typed), typedMark)
}

func typedMark(string) string { return redact.Mark }

// longestFirst lists a set of secrets, longest first.
func longestFirst(set map[string]bool) []string {
	vs := mapKeys(set)
	sort.Slice(vs, func(i, j int) bool { return len(vs[i]) > len(vs[j]) })
	return vs
}

func mapKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// replaceForms replaces each secret in s, and its URL-encoded and
// JSON-escaped forms, by mark(secret); secrets longest first, so a secret
// that contains another is replaced whole.
func replaceForms(s string, secrets []string, mark func(string) string) string {
	for _, v := range secrets {
		forms := []string{v, url.QueryEscape(v), url.PathEscape(v)}
		if b, err := json.Marshal(v); err == nil {
			forms = append(forms, string(b[1:len(b)-1]))
		}
		for i, f := range forms {
			if (i == 0 || f != v) && strings.Contains(s, f) {
				s = strings.ReplaceAll(s, f, mark(v))
			}
		}
	}
	return s
}

// scrub cleans every text of the report, once, when every secret of the
// run is known: each secret, whole or URL-encoded or JSON-escaped, becomes
// its fingerprint, and what a person typed redact.Mark; then any stretch
// of a secret the Company cut short (redact.Secrets, the SDK's scrubber).
// What a person typed is only ever matched whole: a stretch of an email
// address would be the Company's own domain. The texts are cleaned as one
// (NUL-separated), so that the secrets are indexed once. Bodies are cut to
// maxShownBody only after they are cleaned, so a cut never splits a
// secret.
func (p *prober) scrub(rep *Report) {
	var texts []*string
	add := func(s *string) {
		if *s != "" {
			texts = append(texts, s)
		}
	}
	add(&rep.Aborted)
	for i := range rep.Notes {
		add(&rep.Notes[i])
	}
	seen := map[*Exchange]bool{}
	var exs []*Exchange
	var back []func() // header values and JWTs are copies: written back once cleaned
	for i := range rep.Results {
		r := &rep.Results[i]
		add(&r.Detail)
		add(&r.Reason)
		if e := r.Evidence; e != nil && !seen[e] {
			seen[e] = true
			exs = append(exs, e)
			add(&e.URL)
			add(&e.RequestBody)
			add(&e.ResponseBody)
			add(&e.Error)
			for _, h := range []map[string]string{e.RequestHeader, e.ResponseHeader} {
				for k, v := range h {
					v := v
					texts = append(texts, &v)
					back = append(back, func() { h[k] = v })
				}
			}
			// The decoded JWTs are cleaned as JSON text, and read
			// back.
			for j := range e.Signed {
				sj := &e.Signed[j]
				for _, m := range []*map[string]any{&sj.Header, &sj.Claims} {
					b, _ := json.Marshal(*m)
					text := string(b)
					texts = append(texts, &text)
					back = append(back, func() {
						var clean map[string]any
						d := json.NewDecoder(strings.NewReader(text))
						d.UseNumber()
						if d.Decode(&clean) != nil {
							clean = map[string]any{"cleaned": "unreadable once cleaned"}
						}
						*m = clean
					})
				}
			}
		}
	}
	p.mu.Lock()
	secrets, typed := longestFirst(p.secrets), longestFirst(p.typed)
	p.mu.Unlock()
	parts := make([]string, len(texts))
	for i, t := range texts {
		parts[i] = strings.ToValidUTF8(strings.ReplaceAll(*t, "\x00", ""), "\uFFFD")
	}
	joined := replaceForms(strings.Join(parts, "\x00"), secrets, Fingerprint)
	joined = redact.Secrets(replaceForms(joined, typed, typedMark), secrets)
	for i, s := range strings.Split(joined, "\x00") {
		if i < len(texts) {
			*texts[i] = s
		}
	}
	for _, f := range back {
		f()
	}
	for _, e := range exs {
		e.RequestBody = cutBody(e.RequestBody)
		e.ResponseBody = cutBody(e.ResponseBody)
	}
}

func cutBody(s string) string {
	if len(s) <= maxShownBody {
		return s
	}
	return strings.ToValidUTF8(s[:maxShownBody], "") + redact.Ellipsis
}

// reply is an answer as the run reads it.
type reply struct {
	status int
	header http.Header
	body   []byte
	ex     *Exchange
}

// get returns the named response header.
func (r *reply) get(name string) string { return r.header.Get(name) }

// stepGroup is the part of a step name the timeout count goes by: the
// steps of one area ("conversation start", "conversation read") stop
// together.
func stepGroup(step string) string {
	g, _, _ := strings.Cut(step, " ")
	return g
}

// start sends req, bounded by the run's budget, the step's timeouts and
// the address rule, with a timeout of d (the request timeout when 0), and
// returns the response with the exchange recorded so far; the caller reads
// and closes the body and calls cancel. A transport error is returned with
// the exchange.
func (p *prober) start(ctx context.Context, req *http.Request, reqBody []byte, d time.Duration) (*http.Response, *Exchange, context.CancelFunc, error) {
	p.mu.Lock()
	switch {
	case p.stop != nil:
		p.mu.Unlock()
		return nil, nil, nil, p.stop
	case p.sent >= p.max:
		p.mu.Unlock()
		return nil, nil, nil, errBudget
	case p.timeouts[stepGroup(p.step)] >= maxStepTimeouts:
		p.mu.Unlock()
		return nil, nil, nil, errStepStopped
	}
	p.mu.Unlock()
	if !p.dialable(req.URL) {
		return nil, nil, nil, errNotDialled
	}
	p.mu.Lock()
	p.sent++
	p.mu.Unlock()
	if d <= 0 {
		d = p.timeout
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	req = req.WithContext(ctx)
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "poppy-check")
	}
	if reqBody != nil {
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
		req.ContentLength = int64(len(reqBody))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(reqBody)), nil }
	}
	ex := &Exchange{Method: req.Method, URL: req.URL.String(), RequestHeader: headers(req.Header), RequestBody: keep(reqBody), Signed: signedJWTs(req, reqBody)}
	resp, err := p.hc.Do(req)
	if err != nil {
		cancel()
		ex.Error = err.Error()
		p.log.Debug("poppycheck: request failed", "method", req.Method, "url", safeURL(req.URL), "err", p.redactNow(ex.Error))
		p.failed(req.URL, err)
		return nil, ex, nil, err
	}
	ex.Status = resp.StatusCode
	ex.ResponseHeader = headers(resp.Header)
	p.log.Debug("poppycheck: request", "method", req.Method, "url", safeURL(req.URL), "status", resp.StatusCode)
	if resp.StatusCode == http.StatusTooManyRequests {
		// spec 4.3: a rate limit answers 429 with Retry-After, on any
		// endpoint (CO-4.3-21).
		ra := resp.Header.Get("Retry-After")
		_, ok := parseRetryAfter(ra, p.clock.Now())
		p.check("CO-4.3-21", ok, ex, "429 with Retry-After %q", ra)
	}
	return resp, ex, cancel, nil
}

// send sends req with start and returns the answer read in full (at most
// maxBody bytes). A transport error is returned with the exchange recorded
// in the reply.
func (p *prober) send(ctx context.Context, req *http.Request, reqBody []byte) (*reply, error) {
	return p.sendWithin(ctx, req, reqBody, 0)
}

// sendWithin is send with a timeout of its own (a long poll's).
func (p *prober) sendWithin(ctx context.Context, req *http.Request, reqBody []byte, d time.Duration) (*reply, error) {
	resp, ex, cancel, err := p.start(ctx, req, reqBody, d)
	if err != nil {
		if ex == nil {
			ex = &Exchange{Method: req.Method, URL: req.URL.String(), Error: err.Error()}
		}
		return &reply{ex: ex}, err
	}
	defer cancel()
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		ex.Error = "the answer was cut: " + err.Error()
		p.failed(req.URL, err)
	}
	if len(body) > maxBody {
		body = body[:maxBody]
		err = fmt.Errorf("poppycheck: answer over %d bytes", maxBody)
	}
	ex.ResponseBody = keep(body)
	return &reply{status: resp.StatusCode, header: resp.Header, body: body, ex: ex}, err
}

// failed looks at a request that got no (whole) answer: the address rule's
// refusal and an unknown certificate authority stop the run (the caller's
// to allow, not the Company's failure); a timeout counts against the step.
func (p *prober) failed(u *url.URL, err error) {
	var rf *netguard.Refused
	var ua x509.UnknownAuthorityError
	switch {
	case errors.As(err, &rf), errors.As(err, &ua):
		p.mu.Lock()
		if p.stop == nil {
			p.stop = p.notReached(u, err)
			p.aborted = p.stop.Error()
		}
		p.mu.Unlock()
	case isTimeout(err):
		p.mu.Lock()
		g := stepGroup(p.step)
		p.timeouts[g]++
		n := p.timeouts[g]
		p.mu.Unlock()
		if n == maxStepTimeouts {
			p.note("the step %q stopped: %d of its requests got no answer within %v", g, n, p.timeout)
		}
	}
}

// notReached describes err, the client's refusal to reach u.
func (p *prober) notReached(u *url.URL, err error) *NotReachedError {
	e := &NotReachedError{URL: safeURL(u), Err: err}
	var rf *netguard.Refused
	var ua x509.UnknownAuthorityError
	switch {
	case errors.As(err, &ua):
		e.UnknownAuthority = true
	case errors.As(err, &rf):
		e.Refused, e.Addr, e.Loopback = true, rf.Addr, rf.Loopback
	}
	return e
}

// dialable reports whether u's host passes the address rule before any
// lookup (a Company's documents naming 169.254.169.254, 10.0.0.7 or
// [::ffff:127.0.0.1] are refused here, never dialled).
func (p *prober) dialable(u *url.URL) bool {
	return p.guard.CheckHost(u.Hostname()) == nil
}

// okURL judges a URL a Company's document gives: https (http:// on
// loopback only with Options.UnsafeAllowLoopbackHTTP), with a host and no
// user information, at an address the SDK's rule lets an agent connect to.
// why says what is wrong, "" when nothing is.
func (p *prober) okURL(raw string) (ok bool, why string) {
	u, err := url.Parse(raw)
	switch {
	case raw == "":
		return false, "absent"
	case err != nil || u.Host == "" || u.User != nil || u.Opaque != "":
		return false, "not an absolute URL with a host"
	case u.Scheme == "http" && p.opts.UnsafeAllowLoopbackHTTP && isLoopback(u.Hostname()):
	case u.Scheme != "https":
		return false, "not https"
	}
	var rf *netguard.Refused
	if err := p.guard.CheckHost(u.Hostname()); errors.As(err, &rf) {
		return false, "at " + rf.Detail + ", an address that isn't public, which agents don't connect to (the check neither)"
	}
	return true, ""
}

// headers copies the headers a report shows. Authorization, DPoP and
// cookies are always fingerprinted, whatever they hold.
func headers(h http.Header) map[string]string {
	if len(h) == 0 {
		return nil
	}
	out := map[string]string{}
	for k, vs := range h {
		v := strings.Join(vs, ", ")
		switch http.CanonicalHeaderKey(k) {
		case "Authorization":
			scheme, cred, _ := strings.Cut(v, " ")
			v = scheme + " " + Fingerprint(cred)
		case "Dpop", "Cookie":
			v = Fingerprint(v)
		case "Set-Cookie":
			var parts []string
			for _, c := range vs {
				nameVal, attrs, _ := strings.Cut(c, ";")
				name, val, _ := strings.Cut(nameVal, "=")
				parts = append(parts, name+"="+Fingerprint(val)+";"+attrs)
			}
			v = strings.Join(parts, ", ")
		}
		out[k] = v
	}
	return out
}

// keep is what of a body the report may show, before it is cleaned: at
// most keptBody bytes. A JSON body with \u or \/ escapes is shown decoded
// (encoded again without them), so that a secret a Company wrote back
// escaped is found and redacted like any other.
func keep(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if (bytes.Contains(b, []byte(`\u`)) || bytes.Contains(b, []byte(`\/`))) && json.Valid(b) {
		var v any
		if json.Unmarshal(b, &v) == nil {
			var out bytes.Buffer
			enc := json.NewEncoder(&out)
			enc.SetEscapeHTML(false)
			if enc.Encode(v) == nil {
				b = bytes.TrimSpace(out.Bytes())
			}
		}
	}
	if len(b) > keptBody {
		b = b[:keptBody]
	}
	return string(b)
}

// signedJWTs decodes the JWTs a request carries: its DPoP proof and the
// assertions of its form.
func signedJWTs(req *http.Request, body []byte) []Signed {
	var out []Signed
	if v := req.Header.Get("DPoP"); v != "" {
		if s, ok := decodeJWT("DPoP", v); ok {
			out = append(out, s)
		}
	}
	if ct, _, _ := strings.Cut(req.Header.Get("Content-Type"), ";"); strings.EqualFold(strings.TrimSpace(ct), "application/x-www-form-urlencoded") {
		if f, err := url.ParseQuery(string(body)); err == nil {
			for _, k := range []string{"client_assertion", "assertion"} {
				if s, ok := decodeJWT(k, f.Get(k)); ok {
					out = append(out, s)
				}
			}
		}
	}
	return out
}

// decodeJWT decodes a compact JWT's header and claims, not its signature.
func decodeJWT(where, jwt string) (Signed, bool) {
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 || len(jwt) > 16<<10 {
		return Signed{}, false
	}
	var ms [2]map[string]any
	for i := range ms {
		b, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			return Signed{}, false
		}
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		if d.Decode(&ms[i]) != nil {
			return Signed{}, false
		}
	}
	return Signed{Where: where, Header: ms[0], Claims: ms[1]}, true
}

// safeURL is a URL for a log line: no query, no fragment.
func safeURL(u *url.URL) string {
	c := *u
	c.RawQuery, c.Fragment, c.User = "", "", nil
	return c.String()
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && ip.Unmap().IsLoopback()
}

// isTimeout reports a request that got no answer in time.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
