package poppy

// Discovery (spec 3, 3.1, 3.2, 3.3).
//
// agent.Company(ctx, domain) fetches https://{domain}/.well-known/poppy.json,
// following redirects only to HTTPS, checks it speaks for the requested
// domain, then fetches the issuer's RFC 8414 metadata and checks issuer and
// poppy_domains. Both documents go through docCache, which honours
// Cache-Control (max-age, no-cache, no-store), Expires and ETag revalidation,
// so resolving a Company again within max-age sends no request at all.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/poppyproto/poppy/internal/bounded"
)

// Document is a Company's poppy.json (spec 3.1). Fields the SDK doesn't know
// are ignored (spec 3.3).
type Document struct {
	ProtocolVersion string                    `json:"protocol_version"`
	Organization    *Organization             `json:"organization"`
	Auth            *Auth                     `json:"auth,omitempty"`
	Agent           *AgentInfo                `json:"agent,omitempty"`
	Web             *Web                      `json:"web,omitempty"`
	APIs            []API                     `json:"apis,omitempty"`
	Extensions      map[string]ExtensionEntry `json:"extensions,omitempty"`
}

// Organization is the Company's display name and domain.
type Organization struct {
	Name   string `json:"name"`
	Domain string `json:"domain"`
}

// Auth is the Company's auth section: its issuer and sign-in types.
type Auth struct {
	Issuer       string            `json:"issuer"`
	Direct       *SignInType       `json:"direct,omitempty"`
	Device       *SignInType       `json:"device,omitempty"`
	Mediated     *MediatedSignIn   `json:"mediated,omitempty"`
	CustomScopes ScopeDescriptions `json:"custom_scopes,omitempty"`
}

// ScopeDescriptions maps the Company's own scopes to their descriptions
// (auth.custom_scopes). An entry whose description isn't a string is
// ignored, like any member the SDK doesn't recognise (spec 3.3).
type ScopeDescriptions map[string]string

// UnmarshalJSON keeps the entries whose value is a string.
func (d *ScopeDescriptions) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	*d = ScopeDescriptions{}
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) == nil {
			(*d)[k] = s
		}
	}
	return nil
}

// SignInType lists the scopes a sign-in type can grant.
type SignInType struct {
	Scopes []string `json:"scopes"`
}

// MediatedSignIn describes Mediated Sign-In (spec 4.7).
type MediatedSignIn struct {
	Endpoint string          `json:"endpoint"`
	Fields   []MediatedField `json:"fields"`
	Scopes   []string        `json:"scopes"`
}

// MediatedField is one credential Mediated Sign-In asks for.
type MediatedField struct {
	Name   string `json:"name"`
	Label  string `json:"label"`
	Secret bool   `json:"secret"`
}

// AgentInfo describes the Company Agent.
type AgentInfo struct {
	Protocols []Protocol `json:"protocols"`
}

// Protocol is one conversation protocol the Company Agent speaks.
type Protocol struct {
	Type     string `json:"type"`
	Endpoint string `json:"endpoint"`
	Resource string `json:"resource,omitempty"`
}

// Web describes the Company's website.
type Web struct {
	BrowserSessionEndpoint string `json:"browser_session_endpoint,omitempty"`
}

// API is one API the Company lists (spec 6).
type API struct {
	// Type is "openapi" or "mcp".
	Type string `json:"type"`
	// URL is where the API is described, not where its calls go: for
	// "openapi" the URL of the OpenAPI description, whose servers[0].url
	// is the base URL of the calls (package api's LoadOpenAPI reads it:
	// OpenAPI.ServerURL); for "mcp" the MCP server's endpoint itself.
	URL         string `json:"url"`
	Description string `json:"description"`
	// Resource is the RFC 8707 resource a Session Token for this API must
	// be issued for, when the Company names one (spec 4.3). The Session
	// transport asks for it by itself.
	Resource string `json:"resource,omitempty"`
}

// ExtensionEntry is one extension the Company supports (spec 3.3). Version
// is the extension's major version; Raw holds the whole entry so that the
// package implementing the extension can read its other fields.
type ExtensionEntry struct {
	Version string
	Raw     json.RawMessage
}

// UnmarshalJSON accepts version as a string or a number.
func (e *ExtensionEntry) UnmarshalJSON(b []byte) error {
	var v struct {
		Version json.RawMessage `json:"version"`
	}
	e.Raw = append(json.RawMessage(nil), b...)
	e.Version = ""
	if json.Unmarshal(b, &v) != nil {
		return nil // not an object: an entry the SDK can't use, ignored
	}
	var s string
	if json.Unmarshal(v.Version, &s) == nil {
		e.Version = s
	} else {
		var n json.Number
		if json.Unmarshal(v.Version, &n) == nil {
			e.Version = n.String()
		}
	}
	return nil
}

// MarshalJSON returns the entry as the Company sent it.
func (e ExtensionEntry) MarshalJSON() ([]byte, error) {
	if len(e.Raw) > 0 {
		return e.Raw, nil
	}
	return json.Marshal(map[string]string{"version": e.Version})
}

// Metadata is the issuer's OAuth Authorization Server Metadata (RFC 8414),
// with the fields the protocol uses (spec 3.2).
type Metadata struct {
	Issuer                      string   `json:"issuer"`
	TokenEndpoint               string   `json:"token_endpoint"`
	RevocationEndpoint          string   `json:"revocation_endpoint"`
	AuthorizationEndpoint       string   `json:"authorization_endpoint,omitempty"`
	DeviceAuthorizationEndpoint string   `json:"device_authorization_endpoint,omitempty"`
	PoppyDomains                []string `json:"poppy_domains"`
}

// Company resolves the Company at domain (spec 3): a host name such as
// "example.com", without scheme or path. Documents are cached by their
// HTTP caching headers, so calling it again is cheap.
func (a *Agent) Company(ctx context.Context, domain string) (*Company, error) {
	host, err := a.discoveryHost(domain)
	if err != nil {
		return nil, err
	}
	wellKnown := "https://" + host + "/.well-known/poppy.json"
	if a.opts.UnsafeAllowLoopbackHTTP && isLoopback(hostOnly(host)) {
		wellKnown = "http://" + host + "/.well-known/poppy.json"
	}
	docBody, err := a.cache.get(ctx, a, wellKnown, "poppy.json", a.opts.MaxResponseBytes)
	if err != nil {
		return nil, err
	}
	// A Company resolved before from the very bytes the cache still holds
	// fresh is that Company again: no parsing, no checks, no allocation.
	if r := a.resolvedCompany(host); r != nil && sameBytes(r.doc, docBody) {
		if r.c.meta == nil {
			return r.c, nil
		}
		metaBody, err := a.cache.get(ctx, a, r.metaURL, "metadata", a.opts.MaxResponseBytes)
		if err != nil {
			return nil, err
		}
		if sameBytes(r.meta, metaBody) {
			return r.c, nil
		}
	}
	var doc Document
	if err := decodeJSON(docBody, "poppy.json", &doc); err != nil {
		return nil, err
	}
	if err := a.checkDocument(host, &doc); err != nil {
		return nil, err
	}
	c := &Company{agent: a, domain: host, doc: &doc}
	if doc.Auth == nil {
		a.remember(host, &resolved{c: c, doc: docBody})
		return c, nil // browse only (spec 3.1): no metadata, no Sessions
	}
	metaURL, err := metadataURL(doc.Auth.Issuer)
	if err != nil {
		return nil, err
	}
	metaBody, err := a.cache.get(ctx, a, metaURL, "metadata", a.opts.MaxResponseBytes)
	if err != nil {
		return nil, err
	}
	var meta Metadata
	if err := decodeJSON(metaBody, "metadata", &meta); err != nil {
		return nil, err
	}
	if err := a.checkMetadata(&doc, &meta); err != nil {
		return nil, err
	}
	c.meta = &meta
	c.st = a.issuer(doc.Auth.Issuer)
	a.remember(host, &resolved{c: c, doc: docBody, meta: metaBody, metaURL: metaURL})
	return c, nil
}

// resolved is a Company as last resolved for a host, with the cached
// document bodies it was built from.
type resolved struct {
	c         *Company
	doc, meta []byte
	metaURL   string
}

func (a *Agent) resolvedCompany(host string) *resolved {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.resolved[host]
}

func (a *Agent) remember(host string, r *resolved) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.resolved == nil {
		a.resolved = map[string]*resolved{}
	}
	a.resolved[host] = r
}

// sameBytes reports whether a and b are the same slice of the same array:
// the cache returns the very body it stored until it fetches another.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && len(a) > 0 && &a[0] == &b[0]
}

// discoveryHost validates the caller's domain: a bare host, optionally with
// a port; a scheme other than https is refused before any request (PA-3-01).
func (a *Agent) discoveryHost(domain string) (string, error) {
	d := strings.TrimSpace(domain)
	if strings.Contains(d, "://") {
		u, err := url.Parse(d)
		if err != nil {
			return "", configError("Company: invalid domain")
		}
		if err := a.checkURL(u); err != nil {
			return "", err
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return "", configError("Company: domain %q must be a host name", u.Host)
		}
		d = u.Host
	}
	d = strings.TrimSuffix(d, "/") // "example.test/" as "https://example.test/" is
	if d == "" || strings.ContainsAny(d, "/?#@ \\") {
		return "", configError("Company: domain must be a host name")
	}
	return strings.ToLower(strings.TrimSuffix(d, ".")), nil
}

var versionRE = regexp.MustCompile(`^([0-9]+)\.([0-9]+)$`)

// supportedMajor is the protocol major version this SDK implements.
const supportedMajor = 0

func (a *Agent) checkDocument(requestedHost string, d *Document) error {
	m := versionRE.FindStringSubmatch(d.ProtocolVersion)
	if m == nil {
		return fmt.Errorf("%w: protocol_version %q is not major.minor", ErrInvalidDocument, cleanText(d.ProtocolVersion))
	}
	// PA-3-06: never use a document of an unsupported major version.
	if major, err := strconv.Atoi(m[1]); err != nil || major != supportedMajor {
		return fmt.Errorf("%w: %s", ErrUnsupportedProtocolVersion, d.ProtocolVersion)
	}
	if d.Organization == nil || d.Organization.Domain == "" {
		return fmt.Errorf("%w: no organization.domain", ErrInvalidDocument)
	}
	// PA-3-08, PA-3-09: the document speaks for the host requested, whatever
	// host served it after redirects.
	if normHost(d.Organization.Domain) != normHost(requestedHost) {
		return fmt.Errorf("%w: document is for %q, requested %q", ErrDomainMismatch,
			cleanText(d.Organization.Domain), normHost(requestedHost))
	}
	needsAuth := d.Agent != nil || len(d.APIs) > 0 || (d.Web != nil && d.Web.BrowserSessionEndpoint != "")
	if d.Auth == nil {
		if needsAuth {
			return fmt.Errorf("%w: agent, apis or web.browser_session_endpoint without auth", ErrInvalidDocument)
		}
		return nil
	}
	iss, err := url.Parse(d.Auth.Issuer)
	if err != nil || a.checkURL(iss) != nil || iss.RawQuery != "" || iss.Fragment != "" {
		return fmt.Errorf("%w: auth.issuer is not an HTTPS URL", ErrInvalidDocument)
	}
	if d.Auth.Mediated != nil && d.Auth.Mediated.Endpoint != "" {
		if _, err := a.ParseURL(d.Auth.Mediated.Endpoint); err != nil {
			return fmt.Errorf("%w: auth.mediated.endpoint is not an HTTPS URL", ErrInvalidDocument)
		}
	}
	return nil
}

// metadataURL derives the RFC 8414 location from the issuer, inserting the
// well-known segment before an issuer path (PA-3.2-02).
func metadataURL(issuer string) (string, error) {
	u, err := url.Parse(issuer)
	if err != nil {
		return "", fmt.Errorf("%w: auth.issuer", ErrInvalidDocument)
	}
	path := strings.TrimSuffix(u.EscapedPath(), "/")
	return u.Scheme + "://" + u.Host + "/.well-known/oauth-authorization-server" + path, nil
}

func (a *Agent) checkMetadata(d *Document, m *Metadata) error {
	// PA-3.2-03: exact match, byte for byte.
	if m.Issuer != d.Auth.Issuer {
		return fmt.Errorf("%w: metadata issuer %q, auth.issuer %q", ErrIssuerMismatch, cleanText(m.Issuer), d.Auth.Issuer)
	}
	// PA-3.2-04
	listed := false
	for _, pd := range m.PoppyDomains {
		if normHost(pd) == normHost(d.Organization.Domain) {
			listed = true
			break
		}
	}
	if !listed {
		return fmt.Errorf("%w: %q", ErrDomainNotListed, d.Organization.Domain)
	}
	// PA-3.2-05
	for name, v := range map[string]string{"token_endpoint": m.TokenEndpoint, "revocation_endpoint": m.RevocationEndpoint} {
		if v == "" {
			return fmt.Errorf("%w: no %s", ErrInvalidMetadata, name)
		}
		if _, err := a.ParseURL(v); err != nil {
			return fmt.Errorf("%w: %s is not an HTTPS URL", ErrInvalidMetadata, name)
		}
	}
	// PA-3.2-06: an optional endpoint that isn't HTTPS is treated as absent.
	for _, p := range []*string{&m.AuthorizationEndpoint, &m.DeviceAuthorizationEndpoint} {
		if *p != "" {
			if _, err := a.ParseURL(*p); err != nil {
				*p = ""
			}
		}
	}
	return nil
}

// fetchJSON GETs rawURL through the document cache and decodes it into v.
func decodeJSON(body []byte, what string, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		switch what {
		case "metadata":
			return fmt.Errorf("%w: not a JSON object", ErrInvalidMetadata)
		default:
			return fmt.Errorf("%w: not a JSON object", ErrInvalidDocument)
		}
	}
	return nil
}

// DocumentOptions configures Agent.FetchDocument. The zero value is valid.
type DocumentOptions struct {
	// Name names the document in errors and logs, such as "OpenAPI
	// description". "" means "document".
	Name string
	// MaxBytes caps the document's size. Zero means
	// AgentOptions.MaxResponseBytes.
	MaxBytes int64
}

// FetchDocument GETs a public document of a Company, such as an OpenAPI
// description or an MCP server's protected resource metadata, through the
// Agent's document cache, as discovery documents are fetched (spec 3):
// rawURL must pass ParseURL, redirects go to HTTPS only, HTTP caching
// headers are honoured (a fresh document is not fetched again), the body
// is at most MaxBytes (else ErrResponseTooLarge), and a 429 is waited out
// by RetryWait. No token is sent: for a document behind a Session, use
// Session.HTTPClient. Package api fetches the documents it reads with it.
// opts may be nil.
func (a *Agent) FetchDocument(ctx context.Context, rawURL string, opts *DocumentOptions) ([]byte, error) {
	what, limit := "document", a.opts.MaxResponseBytes
	if opts != nil {
		if opts.Name != "" {
			what = opts.Name
		}
		if opts.MaxBytes > 0 {
			limit = opts.MaxBytes
		}
	}
	b, err := a.cache.get(ctx, a, rawURL, what, limit)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		// Cached for a caller that allowed more.
		return nil, fmt.Errorf("poppy: %s: %w", what, ErrResponseTooLarge)
	}
	return slices.Clone(b), nil // the cache's copy stays the cache's
}

// docCache is a small private HTTP cache for discovery documents.
type docCache struct {
	mu      sync.Mutex
	entries map[string]*cacheEntry
	flight  map[string]*flight
}

type cacheEntry struct {
	body    []byte
	etag    string
	lastURL string // the URL that served the body, after redirects
	expires time.Time
}

type flight struct {
	done chan struct{}
	body []byte
	err  error
	// callerGone: the ctx of the caller that fetched had ended, so err
	// may be that ctx's and not the Company's answer.
	callerGone bool
}

func newDocCache() *docCache {
	return &docCache{entries: map[string]*cacheEntry{}, flight: map[string]*flight{}}
}

// get returns the body for rawURL: from the cache while fresh, else by a
// request (revalidating with If-None-Match when the cache has an ETag).
// Concurrent callers for one URL share one request, sent with the ctx of
// the caller that started it; if that caller's ctx ends first, each
// waiter whose own ctx is still alive tries again itself, so one caller's
// cancellation or deadline never becomes another's error (as token
// renewal does, session.go).
func (c *docCache) get(ctx context.Context, a *Agent, rawURL, what string, limit int64) ([]byte, error) {
	for {
		now := a.clock.Now()
		c.mu.Lock()
		if e, ok := c.entries[rawURL]; ok && now.Before(e.expires) {
			c.mu.Unlock()
			return e.body, nil
		}
		if f, ok := c.flight[rawURL]; ok {
			c.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if f.err != nil && f.callerGone && ctx.Err() == nil {
				continue // the fetching caller gave up; try ourselves
			}
			return f.body, f.err
		}
		f := &flight{done: make(chan struct{})}
		c.flight[rawURL] = f
		stale := c.entries[rawURL]
		c.mu.Unlock()

		f.body, f.err = c.fetch(ctx, a, rawURL, what, stale, limit)
		f.callerGone = ctx.Err() != nil
		c.mu.Lock()
		delete(c.flight, rawURL)
		c.mu.Unlock()
		close(f.done)
		return f.body, f.err
	}
}

const maxRedirects = 10

func (c *docCache) fetch(ctx context.Context, a *Agent, rawURL, what string, stale *cacheEntry, limit int64) ([]byte, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	u, err := a.ParseURL(rawURL)
	if err != nil {
		return nil, err
	}
	client := *a.client
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	rateRetries := 0
	for hop := 0; ; hop++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, fmt.Errorf("poppy: %s: %w", what, err)
		}
		req.Header.Set("Accept", "application/json")
		if stale != nil && stale.etag != "" && stale.lastURL == u.String() {
			req.Header.Set("If-None-Match", stale.etag)
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("poppy: fetching %s %s: %w", what, endpointOf(u), unwrapURLError(err))
		}
		a.log.DebugContext(ctx, "poppy: fetched", "what", what, "url", endpointOf(u), "status", resp.StatusCode)
		switch {
		case resp.StatusCode == http.StatusNotModified && stale != nil:
			resp.Body.Close()
			c.store(rawURL, stale.body, stale.etag, stale.lastURL, resp, a.clock.Now())
			return stale.body, nil
		case isRedirect(resp.StatusCode):
			loc := resp.Header.Get("Location")
			resp.Body.Close()
			if hop >= maxRedirects {
				return nil, ErrTooManyRedirects
			}
			next, err := u.Parse(loc)
			if err != nil || loc == "" {
				return nil, fmt.Errorf("poppy: %s: invalid redirect", what)
			}
			// PA-3-03: every redirect must be to HTTPS; the http URL is never requested.
			if err := a.checkURL(next); err != nil {
				return nil, fmt.Errorf("%w: %s redirected to %s://%s", ErrInsecureRedirect, what, next.Scheme, next.Host)
			}
			u = next
			continue
		case resp.StatusCode == http.StatusTooManyRequests:
			// Spec 4.3: wait at least Retry-After, then ask again (a GET).
			perr := a.responseError(u, resp, nil)
			resp.Body.Close()
			if err := a.waitRateLimit(ctx, perr, rateRetries); err != nil {
				return nil, err
			}
			rateRetries++
			hop--
			continue
		case resp.StatusCode != http.StatusOK:
			resp.Body.Close()
			return nil, fmt.Errorf("poppy: fetching %s %s: HTTP %d", what, endpointOf(u), resp.StatusCode)
		}
		body, err := bounded.ReadAll(resp.Body, limit)
		resp.Body.Close()
		if err != nil {
			if !errors.Is(err, ErrResponseTooLarge) {
				err = fmt.Errorf("reading the response: %w", err)
			}
			return nil, fmt.Errorf("poppy: %s: %w", what, err)
		}
		c.store(rawURL, body, resp.Header.Get("ETag"), u.String(), resp, a.clock.Now())
		return body, nil
	}
}

func isRedirect(code int) bool {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// store records body as fresh for the response's max-age (PA-3-04,
// PA-3.2-08). no-store keeps nothing; no-cache keeps it for revalidation
// only.
func (c *docCache) store(key string, body []byte, etag, lastURL string, resp *http.Response, now time.Time) {
	ttl, keep := freshness(resp.Header, now)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !keep {
		delete(c.entries, key)
		return
	}
	c.entries[key] = &cacheEntry{body: body, etag: etag, lastURL: lastURL, expires: now.Add(ttl)}
}

// freshness reads Cache-Control, Age and Expires. keep is false for
// no-store. Every duration is clamped to rangeMaxAge (durations.go).
func freshness(h http.Header, now time.Time) (ttl time.Duration, keep bool) {
	cc := strings.ToLower(strings.Join(h.Values("Cache-Control"), ","))
	if len(cc) > 4<<10 {
		cc = cc[:4<<10]
	}
	maxAge, haveMaxAge := 0.0, false
	for _, d := range strings.Split(cc, ",") {
		d = strings.TrimSpace(d)
		switch {
		case d == "no-store":
			return 0, false
		case d == "no-cache":
			return 0, true
		case strings.HasPrefix(d, "max-age="):
			v := strings.Trim(d[len("max-age="):], `"`)
			if isDigits(v) {
				maxAge, haveMaxAge = parseSeconds(v)
			}
		}
	}
	if haveMaxAge {
		if age := strings.TrimSpace(h.Get("Age")); isDigits(age) {
			a, _ := parseSeconds(age)
			maxAge -= a
		}
		return clampSeconds(maxAge, rangeMaxAge), true
	}
	if exp := h.Get("Expires"); exp != "" {
		if t, err := http.ParseTime(exp); err == nil {
			return clampDuration(t.Sub(now), rangeMaxAge), true
		}
		return 0, true
	}
	return 0, true // no freshness information: revalidate every time
}
