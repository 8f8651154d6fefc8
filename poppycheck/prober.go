package poppycheck

// The prober: every request of a run goes through send, which bounds it
// (a budget of requests per run, a timeout per request, a cap on every
// answer read), records it for the report with its secrets replaced by
// fingerprints, and never follows a redirect.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/poppyproto/poppy"
)

const (
	defaultMaxRequests = 400
	defaultTimeout     = 20 * time.Second
	maxBody            = 1 << 20 // the most of any answer read
	maxShownBody       = 2048    // the most of a body shown in a report
)

// errBudget ends a run whose request budget ran out.
var errBudget = errors.New("poppycheck: the run's request budget is spent")

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
	clock   interface{ Now() time.Time }
	log     *slog.Logger
	max     int
	timeout time.Duration

	mu      sync.Mutex
	sent    int
	secrets map[string]bool
	obs     map[string][]observation
	why     map[string]string
	notes   []string
	aborted string
	step    string

	// What the run learnt, step by step.
	c          *company
	openURL    string // a GET a signed-out Session may make
	openClosed string // a GET that needs scopes
}

func newProber(opts *Options) *prober {
	p := &prober{opts: opts, secrets: map[string]bool{}, obs: map[string][]observation{}, why: map[string]string{},
		max: opts.MaxRequests, timeout: opts.RequestTimeout, clock: opts.Clock, log: opts.Logger}
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
		base = poppy.DefaultHTTPClient()
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
	p.obs[rule] = append(p.obs[rule], observation{ok: ok, step: p.step, detail: p.redactLocked(fmt.Sprintf(format, args...)), ex: ex})
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
	p.notes = append(p.notes, p.redactLocked(fmt.Sprintf(format, args...)))
	p.mu.Unlock()
}

// secret registers values that must never appear in the report.
func (p *prober) secret(vs ...string) {
	p.mu.Lock()
	for _, v := range vs {
		if len(v) >= 8 {
			p.secrets[v] = true
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

func (p *prober) redact(s string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.redactLocked(s)
}

// redactLocked replaces every registered secret in s, and its
// URL-encoded form, by its fingerprint; longest first, so a secret that
// contains another is replaced whole.
func (p *prober) redactLocked(s string) string {
	if len(p.secrets) == 0 {
		return s
	}
	vs := make([]string, 0, len(p.secrets))
	for v := range p.secrets {
		vs = append(vs, v)
	}
	sort.Slice(vs, func(i, j int) bool { return len(vs[i]) > len(vs[j]) })
	for _, v := range vs {
		if strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, Fingerprint(v))
		}
		if q := url.QueryEscape(v); q != v && strings.Contains(s, q) {
			s = strings.ReplaceAll(s, q, Fingerprint(v))
		}
	}
	return s
}

// reply is an answer as the run reads it.
type reply struct {
	status int
	header http.Header
	body   []byte
	ex     *Exchange
}

// header returns the named response header.
func (r *reply) get(name string) string { return r.header.Get(name) }

// send sends req, bounded, and returns the answer read in full (at most
// maxBody bytes). A transport error is returned with the exchange
// recorded in the reply.
func (p *prober) send(ctx context.Context, req *http.Request, reqBody []byte) (*reply, error) {
	p.mu.Lock()
	if p.sent >= p.max {
		p.mu.Unlock()
		return nil, errBudget
	}
	p.sent++
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req = req.WithContext(ctx)
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "poppy-check")
	}
	if reqBody != nil {
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
		req.ContentLength = int64(len(reqBody))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(reqBody)), nil }
	}
	ex := &Exchange{Method: req.Method, URL: p.redact(req.URL.String()), RequestHeader: p.headers(req.Header), RequestBody: p.showBody(reqBody)}
	resp, err := p.hc.Do(req)
	if err != nil {
		ex.Error = p.redact(err.Error())
		p.log.Debug("poppycheck: request failed", "method", req.Method, "url", safeURL(req.URL), "err", ex.Error)
		return &reply{ex: ex}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if len(body) > maxBody {
		body = body[:maxBody]
		err = fmt.Errorf("poppycheck: answer over %d bytes", maxBody)
	}
	ex.Status = resp.StatusCode
	ex.ResponseHeader = p.headers(resp.Header)
	ex.ResponseBody = p.showBody(body)
	p.log.Debug("poppycheck: request", "method", req.Method, "url", safeURL(req.URL), "status", resp.StatusCode)
	if resp.StatusCode == http.StatusTooManyRequests {
		// spec 4.3: a rate limit answers 429 with Retry-After, on any
		// endpoint (CO-4.3-21).
		ra := resp.Header.Get("Retry-After")
		_, ok := parseRetryAfter(ra, p.clock.Now())
		p.check("CO-4.3-21", ok, ex, "429 with Retry-After %q", ra)
	}
	return &reply{status: resp.StatusCode, header: resp.Header, body: body, ex: ex}, err
}

// refresh re-redacts an exchange recorded before a secret in its answer
// (an access token) was registered.
func (p *prober) refresh(ex *Exchange) {
	if ex == nil {
		return
	}
	ex.URL = p.redact(ex.URL)
	ex.RequestBody = p.redact(ex.RequestBody)
	ex.ResponseBody = p.redact(ex.ResponseBody)
	for k, v := range ex.RequestHeader {
		ex.RequestHeader[k] = p.redact(v)
	}
	for k, v := range ex.ResponseHeader {
		ex.ResponseHeader[k] = p.redact(v)
	}
}

// headers copies the headers a report shows. Authorization, DPoP and
// cookies are always fingerprinted, whatever they hold.
func (p *prober) headers(h http.Header) map[string]string {
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
		default:
			v = p.redact(v)
		}
		out[k] = v
	}
	return out
}

func (p *prober) showBody(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	s := string(b)
	cut := len(s) > maxShownBody
	if cut {
		s = s[:maxShownBody]
	}
	s = p.redact(s)
	s = strings.ToValidUTF8(s, "\uFFFD")
	if cut {
		s += "…"
	}
	return s
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
	return err == nil && ip.IsLoopback()
}

// isTimeout reports a request that got no answer in time.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
