package poppycheck

// Steps 1 and 2: discovery (spec 3) and the OAuth server metadata (spec
// 3.2).

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
)

const maxRedirects = 5

// company is what the run learnt about the Company.
type company struct {
	domain    string
	org       string // organization.domain
	doc       map[string]any
	issuer    string
	meta      map[string]any
	tokenEP   string
	revokeEP  string
	authzEP   string
	deviceEP  string
	signIn    map[string][]string // type -> scopes
	mediated  map[string]any
	custom    map[string]any
	apis      []map[string]any
	protocols []map[string]any
	exts      map[string]any
	browserEP string
}

var versionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)

// hostOf is a host as organization.domain and poppy_domains are compared
// with it: lower-cased, without port, trailing dot and one leading
// "www.".
func hostOf(h string) string {
	u := url.URL{Host: strings.TrimSpace(h)}
	h = strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	return strings.TrimPrefix(h, "www.")
}

// urlDetail is what a report says of a document's URL: the URL, and what
// is wrong with it when something is.
func (p *prober) urlDetail(raw string) (bool, string) {
	ok, why := p.okURL(raw)
	if ok {
		return true, fmt.Sprintf("%q", raw)
	}
	return false, fmt.Sprintf("%q (%s)", raw, why)
}

// discover fetches poppy.json from target, following redirects one hop at
// a time (CO-3-01..03), and checks the document (CO-3-04..13, CO-3.3-01,
// CO-4.4-03, CO-4.4-04, CO-6-01, CO-OPS2-01).
func (p *prober) discover(ctx context.Context, target *url.URL) bool {
	p.step = "discovery"
	u := target.Scheme + "://" + target.Host + "/.well-known/poppy.json"
	var r *reply
	redirected := false
	for hop := 0; ; hop++ {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		req.Header.Set("Accept", "application/json")
		var err error
		r, err = p.send(ctx, req, nil)
		if err != nil {
			if p.stop != nil || ctx.Err() != nil {
				return false // the caller's to allow, or the caller stopped: not the Company's failure
			}
			if hop == 0 {
				p.fail("CO-3-01", r.ex, "GET %s got no answer: %v", u, err)
			} else {
				p.fail("CO-3-02", r.ex, "the redirect target %s got no answer", u)
			}
			p.aborted = "discovery failed: " + err.Error()
			return false
		}
		if r.status < 300 || r.status > 399 || r.status == http.StatusNotModified {
			break
		}
		loc := r.get("Location")
		next, err := url.Parse(u)
		if err == nil {
			next, err = next.Parse(loc)
		}
		if loc == "" || err != nil {
			p.fail("CO-3-03", r.ex, "redirect %d without a usable Location", r.status)
			p.aborted = "discovery: a redirect without a usable Location"
			return false
		}
		if ok, why := p.okURL(next.String()); !p.check("CO-3-03", ok, r.ex, "redirect %d of the well-known URL to %s%s", r.status, next.Redacted(), paren(why)) {
			p.aborted = "discovery: a redirect to a URL an agent never follows"
			return false
		}
		if hop+1 >= maxRedirects {
			p.fail("CO-3-02", r.ex, "more than %d redirects", maxRedirects)
			p.aborted = "discovery: too many redirects"
			return false
		}
		redirected = true
		u = next.String()
	}
	if !p.check("CO-3-01", r.status == http.StatusOK, r.ex, "GET %s answered %d", u, r.status) {
		p.aborted = "discovery: no poppy.json"
		return false
	}
	var doc map[string]any
	if err := json.Unmarshal(r.body, &doc); err != nil || doc == nil {
		p.fail("CO-3-01", r.ex, "poppy.json is not a JSON object")
		p.aborted = "discovery: poppy.json is not JSON"
		return false
	}
	ex := r.ex
	// spec 3.1: a Personal Agent must not use a document whose major
	// version it doesn't support; the check knows 0.1 and says so, once,
	// rather than report a document of another version against 0.1's
	// rules.
	v, _ := doc["protocol_version"].(string)
	if versionRE.MatchString(v) {
		major, minor, _ := strings.Cut(v, ".")
		if strings.TrimLeft(major, "0") != "" {
			p.otherVersion = v
			p.aborted = fmt.Sprintf("the Company's poppy.json follows protocol version %s; this check knows version 0.1 only, whose agents must not use a document of another major version (spec 3.1)", v)
			return false
		}
		if strings.TrimLeft(minor, "0") != "1" {
			p.note("poppy.json follows protocol version %s; the check knows 0.1 and checks the rules of 0.1, which a newer minor version keeps", v)
		}
	}
	p.cachingNote("poppy.json", r)
	if etag := r.get("ETag"); etag != "" {
		p.revalidate(ctx, u, etag)
	}
	c := &company{domain: target.Host, doc: doc, signIn: map[string][]string{}}
	p.c = c

	p.check("CO-3-04", versionRE.MatchString(v), ex, "protocol_version %q", v)
	org, _ := doc["organization"].(map[string]any)
	name, _ := org["name"].(string)
	c.org, _ = org["domain"].(string)
	orgOK := p.check("CO-3-05", org != nil && strings.TrimSpace(name) != "" && c.org != "", ex, "organization name %q, domain %q", name, c.org)
	asked, got := hostOf(target.Host), hostOf(c.org)
	if c.org != "" {
		orgOK = p.check("CO-3-06", got == asked, ex, "organization.domain %q for the domain %q", c.org, target.Host) && orgOK
		if redirected {
			p.check("CO-3-02", got == asked, ex, "the document served after the redirect speaks for %q", c.org)
		}
	} else {
		p.notObserved("organization.domain is absent (CO-3-05)", "CO-3-06", "CO-3-02")
	}
	if !redirected {
		p.notObserved("the well-known URL answered without a redirect", "CO-3-02")
	}

	auth, _ := doc["auth"].(map[string]any)
	agent, hasAgent := doc["agent"].(map[string]any)
	apis, hasAPIs := doc["apis"].([]any)
	web, hasWeb := doc["web"].(map[string]any)
	c.browserEP, _ = web["browser_session_endpoint"].(string)
	needsAuth := hasAgent || hasAPIs || c.browserEP != ""
	c.issuer, _ = auth["issuer"].(string)
	if auth != nil || needsAuth {
		okIssuer, issuer := p.urlDetail(c.issuer)
		okIssuer = okIssuer && auth != nil
		p.check("CO-3-07", okIssuer, ex, "auth %s, issuer %s", present(auth != nil), issuer)
		if !okIssuer {
			c.issuer = ""
		}
	} else {
		p.notObserved("the document has no auth, agent, apis or browser session endpoint", "CO-3-07")
	}
	p.check("CO-3-08", hasAgent || hasAPIs || hasWeb, ex, "agent %s, apis %s, web %s", present(hasAgent), present(hasAPIs), present(hasWeb))

	protos, _ := agent["protocols"].([]any)
	if len(protos) == 0 {
		p.notObserved("the Company lists no agent.protocols", "CO-3-09")
	}
	if hasAgent {
		for i, e := range protos {
			m, _ := e.(map[string]any)
			typ, _ := m["type"].(string)
			ep, _ := m["endpoint"].(string)
			okEP, epText := p.urlDetail(ep)
			p.check("CO-3-09", typ != "" && okEP, ex, "agent.protocols[%d]: type %q, endpoint %s", i, typ, epText)
			if m != nil && okEP {
				c.protocols = append(c.protocols, m)
			}
		}
	}
	for i, e := range apis {
		m, _ := e.(map[string]any)
		typ, _ := m["type"].(string)
		u, _ := m["url"].(string)
		desc, _ := m["description"].(string)
		p.check("CO-3-10", typ != "" && u != "" && strings.TrimSpace(desc) != "", ex, "apis[%d]: type %q, url %q, description %q", i, typ, u, desc)
		p.check("CO-6-01", typ == "openapi" || typ == "mcp", ex, "apis[%d] type %q", i, typ)
		if m != nil {
			c.apis = append(c.apis, m)
		}
	}
	p.signInTypes(auth, ex)
	p.extensions(doc, ex)
	if !orgOK {
		// spec 3.1: an agent uses a document only when organization
		// names the domain it asked for; the rest of the document is
		// checked above, and nothing an agent would do with it.
		p.aborted = "poppy.json doesn't speak for the domain asked (organization): an agent must not use it"
		return false
	}
	return true
}

// paren is " (why)", or "" for no why.
func paren(why string) string {
	if why == "" {
		return ""
	}
	return " (" + why + ")"
}

// signInTypes checks auth.direct, device, mediated and custom_scopes
// (CO-3-11, CO-4.4-03, CO-4.4-04).
func (p *prober) signInTypes(auth map[string]any, ex *Exchange) {
	if auth == nil {
		return
	}
	for _, typ := range []string{"direct", "device", "mediated"} {
		t, ok := auth[typ].(map[string]any)
		if _, present := auth[typ]; !present {
			continue
		}
		scopes, okScopes := strings_(t["scopes"])
		switch typ {
		case "mediated":
			ep, _ := t["endpoint"].(string)
			okEP, epText := p.urlDetail(ep)
			fields, _ := t["fields"].([]any)
			okFields := len(fields) > 0
			for _, f := range fields {
				fm, _ := f.(map[string]any)
				n, _ := fm["name"].(string)
				l, _ := fm["label"].(string)
				_, isBool := fm["secret"].(bool)
				okFields = okFields && n != "" && l != "" && isBool
			}
			p.check("CO-3-11", ok && okEP && okFields && okScopes, ex, "auth.mediated: endpoint %s, %d fields (each with name, label and secret: %v), scopes %v", epText, len(fields), okFields, scopes)
			if okEP {
				p.c.mediated = t
			}
		default:
			p.check("CO-3-11", ok && okScopes, ex, "auth.%s scopes %v", typ, scopes)
		}
		if ok && okScopes {
			p.c.signIn[typ] = scopes
		}
	}
	if _, present := auth["mediated"]; !present {
		p.notObserved("the Company doesn't offer Mediated Sign-In", "CO-4.7-01", "CO-4.7-07")
	}
	if cs, present := auth["custom_scopes"]; present {
		m, ok := cs.(map[string]any)
		p.c.custom = m
		okDesc := ok
		for name, d := range m {
			s, _ := d.(string)
			okDesc = okDesc && strings.TrimSpace(s) != ""
			p.check("CO-4.4-04", !strings.HasPrefix(name, "poppy:"), ex, "custom scope %q", name)
		}
		p.check("CO-4.4-03", okDesc, ex, "auth.custom_scopes describes each of its %d scopes", len(m))
	} else {
		p.notObserved("the Company defines no scopes of its own (no auth.custom_scopes)", "CO-4.4-03", "CO-4.4-04")
	}
}

// extensions checks extension names and the operations entry (CO-3.3-01,
// CO-OPS2-01).
func (p *prober) extensions(doc map[string]any, ex *Exchange) {
	exts, _ := doc["extensions"].(map[string]any)
	p.c.exts = exts
	for name, e := range exts {
		m, _ := e.(map[string]any)
		ver, _ := m["version"].(string)
		if name == "operations" {
			ep, _ := m["endpoint"].(string)
			okEP, epText := p.urlDetail(ep)
			p.check("CO-OPS2-01", ver == "1" && okEP, ex, "extensions.operations: version %q, endpoint %s", ver, epText)
			p.check("CO-3.3-01", true, ex, "extension %q is defined with the protocol", name)
			continue
		}
		host, _, scoped := strings.Cut(name, "/")
		p.check("CO-3.3-01", scoped && strings.Contains(host, ".") && !strings.HasPrefix(host, "."), ex,
			"extension %q: an extension not defined with the protocol is named after a domain", name)
	}
	if _, ok := exts["operations"]; !ok {
		p.notObserved("the Company lists no operations extension", "CO-OPS2-01")
	}
	if len(exts) == 0 {
		p.notObserved("the Company lists no extension", "CO-3.3-01")
	}
}

// metadata fetches the RFC 8414 metadata of the issuer and checks it
// (CO-3.2-02..05).
func (p *prober) metadata(ctx context.Context) bool {
	p.step = "metadata"
	c := p.c
	if c.issuer == "" {
		p.aborted = "no usable auth.issuer: the Session steps need one"
		return false
	}
	iu, _ := url.Parse(c.issuer)
	path := strings.TrimSuffix(iu.EscapedPath(), "/")
	mu := iu.Scheme + "://" + iu.Host + "/.well-known/oauth-authorization-server" + path
	req, _ := http.NewRequest(http.MethodGet, mu, nil)
	req.Header.Set("Accept", "application/json")
	r, err := p.send(ctx, req, nil)
	if err != nil {
		if p.stop == nil && ctx.Err() == nil {
			p.fail("CO-3.2-02", r.ex, "GET %s got no answer", mu)
		}
		p.abort("no metadata")
		return false
	}
	var meta map[string]any
	if r.status != http.StatusOK || json.Unmarshal(r.body, &meta) != nil || meta == nil {
		p.fail("CO-3.2-02", r.ex, "GET %s answered %d without a JSON object", mu, r.status)
		p.aborted = "no metadata"
		return false
	}
	p.cachingNote("the metadata", r)
	iss, _ := meta["issuer"].(string)
	// spec 3.2: the agent checks that issuer exactly matches auth.issuer.
	if !p.check("CO-3.2-02", iss == c.issuer, r.ex, "metadata issuer %q, auth.issuer %q (exact match)", iss, c.issuer) {
		p.aborted = "the metadata's issuer is not auth.issuer: an agent must not use this Company"
		return false
	}
	c.meta = meta
	// CO-3.2-03: the domain whose poppy.json names the issuer is the one
	// the check asked (A-01: compared without port and leading www.).
	domains, _ := strings_(meta["poppy_domains"])
	listed := slices.ContainsFunc(domains, func(d string) bool { return hostOf(d) == hostOf(c.domain) })
	if !p.check("CO-3.2-03", listed, r.ex, "poppy_domains %v, the domain asked %q", domains, c.domain) {
		p.aborted = "poppy_domains doesn't list the domain: an agent must not use this Company"
		return false
	}
	c.tokenEP, _ = meta["token_endpoint"].(string)
	c.revokeEP, _ = meta["revocation_endpoint"].(string)
	okToken, tokenText := p.urlDetail(c.tokenEP)
	okRevoke, revokeText := p.urlDetail(c.revokeEP)
	p.check("CO-3.2-04", okToken && okRevoke, r.ex, "token_endpoint %s, revocation_endpoint %s", tokenText, revokeText)
	if !okRevoke {
		c.revokeEP = ""
	}
	c.authzEP, _ = meta["authorization_endpoint"].(string)
	c.deviceEP, _ = meta["device_authorization_endpoint"].(string)
	if _, ok := c.signIn["direct"]; ok {
		okAuthz, authzText := p.urlDetail(c.authzEP)
		p.check("CO-3.2-05", okAuthz, r.ex, "Direct Sign-In offered; authorization_endpoint %s", authzText)
	}
	if _, ok := c.signIn["device"]; ok {
		okDevice, deviceText := p.urlDetail(c.deviceEP)
		p.check("CO-3.2-05", okDevice, r.ex, "Device Sign-In offered; device_authorization_endpoint %s", deviceText)
		if !okDevice {
			c.deviceEP = ""
		}
	}
	if len(c.signIn) == 0 || (c.signIn["direct"] == nil && c.signIn["device"] == nil) {
		p.notObserved("the Company offers neither Direct nor Device Sign-In", "CO-3.2-05")
	}
	if !okToken {
		p.aborted = "no token endpoint an agent can use"
		return false
	}
	return true
}

// abort stops the run with why, unless it already stopped.
func (p *prober) abort(why string) {
	p.mu.Lock()
	if p.aborted == "" {
		p.aborted = why
	}
	p.mu.Unlock()
}

// cachingNote records the caching headers of a document (PA-3-04: agents
// cache by them) and, with an ETag, whether a conditional GET is
// answered 304.
func (p *prober) cachingNote(what string, r *reply) {
	cc, etag, lm := r.get("Cache-Control"), r.get("ETag"), r.get("Last-Modified")
	if cc == "" && etag == "" && lm == "" {
		p.note("%s has no caching headers: agents fetch it again on every use", what)
		return
	}
	p.note("%s: Cache-Control: %s; ETag: %s; Last-Modified: %s", what, orNone(cc), orNone(etag), orNone(lm))
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// revalidate asks for poppy.json again with If-None-Match and notes
// whether the Company answers 304 (agents revalidate cached documents).
func (p *prober) revalidate(ctx context.Context, u, etag string) {
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("If-None-Match", etag)
	r, err := p.send(ctx, req, nil)
	if err != nil {
		return
	}
	if r.status == http.StatusNotModified {
		p.note("poppy.json: a conditional GET with its ETag is answered 304 Not Modified")
	} else {
		p.note("poppy.json: a conditional GET with its ETag is answered %d, not 304: agents fetch it whole again", r.status)
	}
}

func present(b bool) string {
	if b {
		return "present"
	}
	return "absent"
}

// strings_ reads a JSON array of strings.
func strings_(v any) ([]string, bool) {
	a, ok := v.([]any)
	if !ok {
		return nil, false
	}
	out := make([]string, 0, len(a))
	for _, e := range a {
		s, ok := e.(string)
		if !ok {
			return out, false
		}
		out = append(out, s)
	}
	return out, true
}

// errorCode reads the "error" member of a JSON error body.
func errorCode(body []byte) string {
	var m map[string]any
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	s, _ := m["error"].(string)
	return s
}

// challenge reads the error attribute of a WWW-Authenticate challenge of
// scheme (case-insensitive), "" if none.
func challenge(h http.Header, scheme string) (errCode string, attrs map[string]string, ok bool) {
	for _, v := range h.Values("WWW-Authenticate") {
		s, rest, _ := strings.Cut(strings.TrimSpace(v), " ")
		if !strings.EqualFold(s, scheme) {
			continue
		}
		attrs = parseAuthParams(rest)
		return attrs["error"], attrs, true
	}
	return "", nil, false
}

// asciiLower lower-cases ASCII letters only: attribute names are tokens,
// and other bytes stay as they are.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// parseAuthParams reads name="value" and name=token pairs.
func parseAuthParams(s string) map[string]string {
	out := map[string]string{}
	for s != "" {
		s = strings.TrimLeft(s, " ,")
		name, rest, ok := strings.Cut(s, "=")
		if !ok {
			break
		}
		name = asciiLower(strings.TrimSpace(name))
		rest = strings.TrimLeft(rest, " ")
		var val string
		if strings.HasPrefix(rest, `"`) {
			var b strings.Builder
			i := 1
			for ; i < len(rest); i++ {
				if rest[i] == '\\' && i+1 < len(rest) {
					i++
					b.WriteByte(rest[i])
					continue
				}
				if rest[i] == '"' {
					break
				}
				b.WriteByte(rest[i])
			}
			val = b.String()
			if i < len(rest) {
				rest = rest[i+1:]
			} else {
				rest = ""
			}
		} else {
			val, rest, _ = strings.Cut(rest, ",")
			val = strings.TrimSpace(val)
		}
		out[name] = val
		s = rest
	}
	return out
}
