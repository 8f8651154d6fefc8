package poppy

// A Company and its rules: what its documents say, which origins are its
// own (and so may receive its tokens), which services it lists with which
// resources, which sign-in types it offers, and which pages are its
// website (spec 3, 4.3, 5).

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Company is a Company resolved from one of its domains. Companies are
// identified by their issuer (spec 3.2): two domains naming one issuer share
// User IDs, Sessions and Account Tokens.
type Company struct {
	agent  *Agent
	domain string // as requested: lower case, port and www. kept
	doc    *Document
	meta   *Metadata // nil without auth
	st     *issuerState

	hostsOnce sync.Once
	orgHost   string          // organization.domain, normalized
	origins   map[origin]bool // the origins the documents name (ownsURL)

	endpointsOnce sync.Once
	eps           []endpoint
	anyResource   bool // some listed entry has a resource (set with eps)

	resourcesOnce sync.Once
	resources     []string // Resources
	signInRes     string   // signInResource
	defaultRes    string   // defaultResource
}

// Domain returns the domain the Company was resolved from, as given to
// Agent.Company: lower case, without a trailing dot, with its port and any
// leading www. kept, so that Agent.Company(ctx, c.Domain()) resolves the
// same Company. organization.domain is Document().Organization.Domain.
func (c *Company) Domain() string { return c.domain }

// Name returns organization.name.
func (c *Company) Name() string { return c.doc.Organization.Name }

// Issuer returns auth.issuer, or "" for a Company without auth.
func (c *Company) Issuer() string {
	if c.doc.Auth == nil {
		return ""
	}
	return c.doc.Auth.Issuer
}

// Document returns the Company's poppy.json. Callers must not modify it.
func (c *Company) Document() *Document { return c.doc }

// Metadata returns the issuer's metadata, or nil for a Company without auth.
// Callers must not modify it.
func (c *Company) Metadata() *Metadata { return c.meta }

// Extension returns the Company's entry for the named extension when its
// major version is one of versions (spec 3.3: an unsupported version is
// ignored, as if the Company did not list the extension).
func (c *Company) Extension(name string, versions ...string) (ExtensionEntry, bool) {
	e, ok := c.doc.Extensions[name]
	if !ok {
		return ExtensionEntry{}, false
	}
	for _, v := range versions {
		if e.Version == v {
			return e, true
		}
	}
	return ExtensionEntry{}, false
}

// ScopeDescription returns the Company's description of a scope it defines
// in auth.custom_scopes (spec 4.4).
func (c *Company) ScopeDescription(scope string) (string, bool) {
	if c.doc.Auth == nil {
		return "", false
	}
	d, ok := c.doc.Auth.CustomScopes[scope]
	return d, ok
}

// WebsiteDomain returns the domain of the Company's website:
// organization.domain (Domain when poppy.json names none), lower-cased,
// without a trailing dot or a leading "www.". Its subdomains are
// the website too (spec 5).
func (c *Company) WebsiteDomain() string {
	d := c.domain
	if c.doc != nil && c.doc.Organization != nil && c.doc.Organization.Domain != "" {
		d = c.doc.Organization.Domain
	}
	d = strings.TrimSuffix(strings.ToLower(d), ".")
	return strings.TrimPrefix(d, "www.")
}

// onWebsite reports whether host is the Company's website domain or a
// subdomain of it, compared without case and trailing dot.
func (c *Company) onWebsite(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	d := c.WebsiteDomain()
	return d != "" && (host == d || strings.HasSuffix(host, "."+d))
}

// maxReturnTo bounds return_to: it travels in a JWT and a Location header.
const maxReturnTo = 2048

// BrowserSessionEndpoint returns the Company's web.browser_session_endpoint
// (spec 5), checked to be a plain https URL whose host can appear in a
// Content-Security-Policy: ErrNoBrowserSessionEndpoint when poppy.json
// lists none (the website has nothing to join, PA-5-02),
// ErrBadBrowserSessionEndpoint when it is not such a URL.
func (c *Company) BrowserSessionEndpoint() (string, error) {
	if c.doc == nil || c.doc.Web == nil || c.doc.Web.BrowserSessionEndpoint == "" {
		return "", ErrNoBrowserSessionEndpoint
	}
	raw := c.doc.Web.BrowserSessionEndpoint
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.User != nil || !plainHost(u.Host) || u.Fragment != "" || len(raw) > maxReturnTo {
		return "", fmt.Errorf("%w: web.browser_session_endpoint is not a plain https URL", ErrBadBrowserSessionEndpoint)
	}
	return raw, nil
}

// CheckReturnTo reports whether returnTo may be a browser assertion's
// return_to at the Company (spec 5 step 1, PA-5-07): an absolute https URL
// without userinfo, at most 2048 bytes, whose host is WebsiteDomain or a
// subdomain of it, compared case-insensitively without a trailing dot, a
// DNS name of well-formed labels with, if any, a port from 1 to 65535.
// Other domains of the same issuer are refused: the cookie the
// endpoint sets can't cover them. The error wraps ErrReturnTo.
func (c *Company) CheckReturnTo(returnTo string) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: %s", ErrReturnTo, why)
	}
	if len(returnTo) > maxReturnTo {
		return bad("longer than 2048 bytes")
	}
	u, err := url.Parse(returnTo)
	switch {
	case err != nil || !u.IsAbs():
		return bad("not an absolute URL")
	case u.Scheme != "https":
		return bad("not https")
	case u.User != nil:
		return bad("has userinfo")
	case !plainHost(u.Host):
		return bad("host is not a DNS name with an optional port in 1-65535")
	}
	if !c.onWebsite(u.Hostname()) {
		return bad("host is not " + c.WebsiteDomain() + " or one of its subdomains")
	}
	return nil
}

// plainHost reports whether hostport is a DNS name with an optional port,
// nothing a CSP source, a Location or a browser could read another way:
// labels of ASCII letters, digits and inner hyphens, 1 to 63 bytes each and
// at most 253 bytes in all, with an optional trailing dot; a port in
// decimal from 1 to 65535, without leading zeros (a browser reads
// "example.com:99999" as no URL at all and ":00443" as 443).
func plainHost(hostport string) bool {
	h, port, hasPort := strings.Cut(hostport, ":")
	if hasPort {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			return false
		}
	}
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' ||
			strings.Trim(strings.ToLower(label), "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
			return false
		}
	}
	return true
}

// SignInTypes returns the sign-in types the Company offers and can serve:
// those in auth whose endpoint the metadata gives (PA-3.2-06, PA-4.4-01),
// in the order "direct", "device", "mediated".
func (c *Company) SignInTypes() []string {
	var out []string
	if c.doc.Auth == nil || c.meta == nil {
		return out
	}
	if c.doc.Auth.Direct != nil && c.meta.AuthorizationEndpoint != "" {
		out = append(out, "direct")
	}
	if c.doc.Auth.Device != nil && c.meta.DeviceAuthorizationEndpoint != "" {
		out = append(out, "device")
	}
	if c.doc.Auth.Mediated != nil && c.doc.Auth.Mediated.Endpoint != "" {
		out = append(out, "mediated")
	}
	return out
}

// EligibleSignInTypes returns the sign-in types the Company offers whose
// scopes include every one of scopes (spec 4.4), in the order of
// SignInTypes.
func (c *Company) EligibleSignInTypes(scopes []string) []string {
	var out []string
	for _, t := range c.SignInTypes() {
		var can []string
		switch t {
		case "direct":
			can = c.doc.Auth.Direct.Scopes
		case "device":
			can = c.doc.Auth.Device.Scopes
		case "mediated":
			can = c.doc.Auth.Mediated.Scopes
		}
		if covers(can, scopes) {
			out = append(out, t)
		}
	}
	return out
}

// Agent returns the Agent that resolved the Company.
func (c *Company) Agent() *Agent { return c.agent }

// ownsURL reports whether u is on one of the Company's origins: one that
// its documents name (poppy.json's endpoints and the issuer, the token,
// revocation and mediated endpoints), the one it was discovered at, or
// https on port 443 at organization.domain or a subdomain of it. The host
// alone is not enough: a named host on another port is another server,
// which may not be the Company's at all.
func (c *Company) ownsURL(u *url.URL) bool {
	o, ok := originKey(u)
	if !ok {
		return false
	}
	c.hostsOnce.Do(c.collectOrigins)
	if c.origins[o] {
		return true
	}
	if o.scheme != "https" || o.port != "443" {
		return false
	}
	h, d := o.host, c.orgHost
	return d != "" && (h == d || (len(h) > len(d) && h[len(h)-len(d)-1] == '.' && strings.HasSuffix(h, d)))
}

func (c *Company) collectOrigins() {
	c.orgHost = normHost(c.doc.Organization.Domain)
	c.origins = map[origin]bool{}
	add := func(raw string) {
		if u, err := url.Parse(raw); err == nil {
			if o, ok := originKey(u); ok {
				c.origins[o] = true
			}
		}
	}
	// Where poppy.json was fetched from, as Agent.Company fetched it.
	scheme := "https"
	if c.agent != nil && c.agent.opts.UnsafeAllowLoopbackHTTP && isLoopback(hostOnly(c.domain)) {
		scheme = "http"
	}
	add(scheme + "://" + c.domain + "/")
	for _, e := range c.endpoints() {
		add(e.url)
	}
	if c.meta != nil {
		add(c.meta.TokenEndpoint)
		add(c.meta.RevocationEndpoint)
	}
	if c.doc.Auth != nil {
		add(c.doc.Auth.Issuer)
		if c.doc.Auth.Mediated != nil {
			add(c.doc.Auth.Mediated.Endpoint)
		}
	}
}

// endpoint is a service the Company lists, with the resource its tokens
// must be issued for, if any.
type endpoint struct {
	url, resource string
	mcp           bool
	web           bool // the browser session endpoint, which takes no Session Token (spec 5)
	// htu is the url as a DPoP htu ("" if it doesn't parse). resOrigin
	// and resPath are the resource, urlOrigin and urlDir the url's
	// directory, normalised for resourceFor ("" if they don't parse). All
	// are computed once, not on every request.
	htu                string
	resOrigin, resPath string
	urlOrigin, urlDir  string
}

// endpoints returns the services the Company lists, computed once.
func (c *Company) endpoints() []endpoint {
	c.endpointsOnce.Do(func() { c.eps = c.listEndpoints() })
	return c.eps
}

func (c *Company) listEndpoints() []endpoint {
	var out []endpoint
	if c.doc.Agent != nil {
		for _, p := range c.doc.Agent.Protocols {
			out = append(out, endpoint{url: p.Endpoint, resource: p.Resource})
		}
	}
	for _, api := range c.doc.APIs {
		out = append(out, endpoint{url: api.URL, resource: api.Resource, mcp: api.Type == "mcp"})
	}
	for _, e := range c.doc.Extensions {
		var v struct {
			Endpoint string `json:"endpoint"`
			Resource string `json:"resource"`
		}
		if json.Unmarshal(e.Raw, &v) == nil && v.Endpoint != "" {
			out = append(out, endpoint{url: v.Endpoint, resource: v.Resource})
		}
	}
	if c.doc.Web != nil && c.doc.Web.BrowserSessionEndpoint != "" {
		out = append(out, endpoint{url: c.doc.Web.BrowserSessionEndpoint, web: true})
	}
	for i := range out {
		e := &out[i]
		eu, err := url.Parse(e.url)
		if err == nil && eu.Host != "" {
			e.htu = htuOf(eu)
		}
		if e.resource == "" || e.mcp {
			continue
		}
		c.anyResource = true
		if r, err := url.Parse(e.resource); err == nil && r.Host != "" {
			e.resOrigin, e.resPath = normURL(r)
		}
		if err == nil && eu.Host != "" {
			o, p := normURL(eu)
			e.urlOrigin, e.urlDir = o, p[:strings.LastIndex(p, "/")+1]
		}
	}
	return out
}

// isMCP reports whether target, a request's htu, is the url of an MCP
// server the Company lists.
func (c *Company) isMCP(target string) bool {
	for _, e := range c.endpoints() {
		if e.mcp && e.htu != "" && e.htu == target {
			return true
		}
	}
	return false
}

// resourceFor returns the resource a DPoP token for u must be issued for:
// that of the listed entry whose resource (an https URL) contains u, or
// else whose URL's directory contains u, the longest match winning; "" when
// no entry with a resource matches (spec 4.3: one token works everywhere).
// URLs are compared normalised (RFC 3986 section 6.2.2, 6.2.3; urlnorm.go),
// and paths segment by segment. The entries' sides are normalised once, in
// listEndpoints; a request's URL once per call.
func (c *Company) resourceFor(u *url.URL) string {
	eps := c.endpoints()
	if !c.anyResource {
		return "" // nothing to match: the common case costs nothing
	}
	origin, path := normURL(u)
	best, bestLen := "", -1
	for i := range eps {
		e := &eps[i]
		if e.resource == "" || e.mcp {
			continue
		}
		switch {
		case e.resOrigin != "" && e.resOrigin == origin && pathWithin(path, e.resPath):
			if len(e.resPath) > bestLen {
				best, bestLen = e.resource, len(e.resPath)
			}
		case e.urlOrigin != "" && e.urlOrigin == origin && strings.HasPrefix(path, e.urlDir):
			if len(e.urlDir) > bestLen {
				best, bestLen = e.resource, len(e.urlDir)
			}
		}
	}
	return best
}

// Resources returns the RFC 8707 resource identifiers the Company lists in
// poppy.json: the "resource" of every entry that has one, and the url of
// every MCP server (whose Bearer tokens are asked for with it, spec 4.3),
// each once, in the order listed. A resource passes the module's one URL
// check (Agent.ParseURL: https, or loopback http:// under
// AgentOptions.UnsafeAllowLoopbackHTTP), as the entries package api lists
// do.
//
// Direct and Device Sign-In name them all in the authorization request
// (RFC 8707 section 2.1), so that an OAuth server that holds the Account
// Token to the resources named at authorization (RFC 8707 section 2.2)
// issues tokens for each of them later; every token request then names
// exactly one resource, the one whose token it gets (see the package doc).
func (c *Company) Resources() []string {
	c.resourcesOnce.Do(func() {
		seen := map[string]bool{}
		for _, e := range c.endpoints() {
			r := e.resource
			if e.mcp && r == "" {
				r = e.url
			}
			if r == "" || seen[r] {
				continue
			}
			if _, err := c.agent.ParseURL(r); err != nil {
				continue
			}
			seen[r] = true
			c.resources = append(c.resources, r)
			if !e.mcp && c.signInRes == "" {
				c.signInRes = r
			}
		}
		if c.signInRes == "" && len(c.resources) > 1 {
			// Only MCP servers: none is named while there is one (an
			// OAuth server that holds the grant to it resolves it by
			// itself), the first when there are several.
			c.signInRes = c.resources[0]
		}
		c.defaultRes = c.signInRes
		if c.doc.Auth != nil && c.doc.Auth.Mediated != nil {
			c.defaultRes = "" // the Mediated Sign-In endpoint names no resource
		}
		for _, e := range c.endpoints() {
			if !e.mcp && !e.web && e.resource == "" {
				c.defaultRes = "" // a service that takes a token for none
			}
		}
	})
	return slices.Clone(c.resources)
}

// signInResource is the resource whose token a sign-in's token request
// gets: at a Company that lists resources (Resources), the first one
// listed that is not an MCP server's url; "" otherwise. A sign-in's
// request asks for a DPoP token, which never goes to an MCP server
// (PA-4.3-19), so a lone MCP url is not named (a server that holds the
// grant to it alone resolves a request naming none to it); of several
// MCP urls, and nothing else, the first is, since such a server refuses a
// request naming none of several.
//
// RFC 8707 lets an OAuth server refuse a token request that names several
// resources, or none of several that the authorization named; oidc-provider
// does by default (invalid_target), and has then used the code up. Every
// token request therefore names exactly one resource once the
// authorization named some: the sign-in's code exchange or device poll
// names this one, and the token of every other resource is got by a
// refresh that names it (spec 4.3 lets any token request name one, so a
// Company that reads spec 4.3 alone accepts it as well).
func (c *Company) signInResource() string {
	c.Resources()
	return c.signInRes
}

// defaultResource is the resource a request for a DPoP Session Token that
// names none asks for: the Session's default token, which Token gives
// without TokenOptions.Resource and the transport sends to a URL no
// listed resource contains. It is "" while some service the Company lists
// takes a DPoP token (every entry but MCP servers and the browser session
// endpoint, and the Mediated Sign-In endpoint) without naming a resource:
// spec 4.3's default token, for no resource, is then what that service
// takes. When every such service names one, no service takes a token for
// none, and the default token is signInResource's, which the sign-in's
// own token request got: an OAuth server that holds the Account Token to
// the several resources the sign-in named refuses a refresh naming none
// (RFC 8707 section 2.2; oidc-provider's invalid_target, after it has used
// the Account Token up), so such a request would sign the User out. Every
// token request of such a Company thus names exactly one resource, renewal
// included, and works under both readings.
func (c *Company) defaultResource() string {
	c.Resources()
	return c.defaultRes
}

// endpointName names one of the Company's OAuth endpoints for a log record.
func (c *Company) endpointName(endpoint string) string {
	switch endpoint {
	case c.meta.TokenEndpoint:
		return "token endpoint"
	case c.meta.RevocationEndpoint:
		return "revocation endpoint"
	case c.meta.DeviceAuthorizationEndpoint:
		return "device authorization endpoint"
	}
	return "OAuth endpoint"
}
