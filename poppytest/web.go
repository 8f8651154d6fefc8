package poppytest

// The Company's website (spec 5): the browser-session endpoint, which
// checks a browser assertion and sets the Session's cookie, and a few pages
// that show, on every request, the state of the Session the cookie names.
//
// The cookie's value is a random handle into s.web.cookies; the record
// holds only the session_id and the cookie's expiry, never a copy of the
// Session's state, so sign-in, sign-out, scope changes and the Session's
// end show on the next page load (CO-5-14, CO-5-15). A handle stops
// working at its expiry, when its Session ends, and, with
// WebOptions.RevokeOnRejoin, when a newer join of the same Session
// replaces it.
//
// The endpoint runs every check of spec 5 step 3 before it changes any
// state; only an accepted assertion's jti is remembered (CO-5-08). Any
// failure is a 400 HTML page with no Set-Cookie (CO-5-12).

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// The endpoints of the website.
const (
	EndpointBrowserSession EndpointKind = "browser-session" // web.browser_session_endpoint (spec 5)
	EndpointWeb            EndpointKind = "web"             // any other page of the website
)

// BrowserSessionPath is the path of the browser-session endpoint on each
// of the Company's domains.
const BrowserSessionPath = "/poppy/browser-session"

// siteLoginCookie is the name of the website's own login cookie, set by
// GET /site-login?account=… . Pages honour it only while the browser
// carries no Session cookie (CO-5-19).
const siteLoginCookie = "poppytest_login"

// WebOptions configures the website (spec 5). The zero value gives the
// defaults on each field.
type WebOptions struct {
	// Subdomains are more hosts of the website under the primary domain,
	// by their first label: "shop" serves https://shop.example.test.
	// The website is always served on every domain and its www. twin.
	Subdomains []string
	// CookieName is the Session cookie's name. Default "poppytest_session".
	CookieName string
	// CookieTTL caps the cookie's Max-Age and its life on the server.
	// Default 1h. The cookie never outlives its Session (CO-5-15): its
	// Max-Age is at most the Session's remaining life (see
	// Options.Tokens.SessionLifetime), and it stops working when the Session
	// ends.
	CookieTTL time.Duration
	// RevokeOnRejoin makes each accepted join end the cookies set by the
	// Session's earlier joins on the server, not only in the browser
	// (the strict reading of A-19). Off by default: an earlier cookie
	// keeps working until it expires or its Session ends.
	RevokeOnRejoin bool
	// SameSite replaces the cookie's SameSite attribute (negative:
	// http.SameSiteStrictMode breaks CO-5-17). Default Lax.
	SameSite http.SameSite
}

// webState is the website's record, guarded by s.mu.
type webState struct {
	hosts   map[string]bool       // every host the website is served on
	cookies map[string]*webCookie // by cookie value
	jtis    jtiSet                // accepted browser assertion jtis, until they can't be replayed (load.go)
	joins   int
}

type webCookie struct {
	sessionID string
	expires   time.Time
	revoked   bool
}

// configureWeb applies the website's defaults and adds its hosts.
func (s *Server) configureWeb() error {
	o := &s.opts.Web
	o.Subdomains = slices.Clone(o.Subdomains)
	if o.CookieName == "" {
		o.CookieName = "poppytest_session"
	}
	if o.CookieTTL < 0 {
		return fmt.Errorf("poppytest: Web.CookieTTL %v must not be negative", o.CookieTTL)
	}
	if o.CookieTTL == 0 {
		o.CookieTTL = time.Hour
	}
	if o.SameSite == 0 {
		o.SameSite = http.SameSiteLaxMode
	}
	s.web = webState{hosts: map[string]bool{}, cookies: map[string]*webCookie{}, jtis: newJTISet()}
	for _, d := range s.opts.Domains {
		s.web.hosts[d] = true
		s.web.hosts["www."+d] = true
	}
	for _, sub := range o.Subdomains {
		sub = strings.ToLower(sub)
		if sub == "" || strings.ContainsAny(sub, "./:@ ") {
			return fmt.Errorf("poppytest: Web.Subdomains: bad label %q", sub)
		}
		h := sub + "." + s.primary
		if h == s.authHost || h == s.apiHost || h == s.mcpHost {
			return fmt.Errorf("poppytest: Web.Subdomains: %q is already another service's host", h)
		}
		s.web.hosts[h] = true
		s.hosts[h] = true
	}
	return nil
}

// classifyWeb names the website endpoint a request reached, or "".
func (s *Server) classifyWeb(host, path string) EndpointKind {
	if !s.web.hosts[host] {
		return ""
	}
	if path == BrowserSessionPath && s.browserSessionEndpoint(host) != "" {
		return EndpointBrowserSession
	}
	return EndpointWeb
}

// browserSessionEndpoint returns the endpoint poppy.json lists for the
// domain of host, or "" when the document lists none.
func (s *Server) browserSessionEndpoint(host string) string {
	if s.opts.Discovery.DropWeb || s.opts.Discovery.DropBrowserSession || host != s.domainOf(host) {
		return ""
	}
	return "https://" + host + BrowserSessionPath
}

// browserSessionURL returns web.browser_session_endpoint of the
// primary domain's poppy.json, "" when it lists none.
func (s *Server) browserSessionURL() string { return s.browserSessionEndpoint(s.primary) }

// webDomainOf returns the Company domain whose website host is, or "".
func (s *Server) webDomainOf(host string) string {
	for _, d := range s.opts.Domains {
		if host == d || strings.HasSuffix(host, "."+d) {
			return d
		}
	}
	return ""
}

// webError answers a refused join: HTTP 400, an HTML page, no cookie
// (CO-5-12).
func (s *Server) webError(w http.ResponseWriter, r *http.Request, code, msg string) {
	x := exchangeOf(r)
	x.errorCode = code
	w.Header().Del("Set-Cookie")
	writePage(w, http.StatusBadRequest, "Could not join", `<p class="error">`+html.EscapeString(msg)+`</p>`)
}

// serveBrowserSession checks a browser assertion (spec 5 step 3).
func (s *Server) serveBrowserSession(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	endpoint := s.browserSessionEndpoint(x.host)
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		x.errorCode = "invalid_request"
		writePage(w, http.StatusMethodNotAllowed, "Could not join", `<p class="error">the browser-session endpoint takes POST</p>`)
		return
	}
	// CO-5-13: an assertion in the URL is refused, whatever the body has.
	if q, err := url.ParseQuery(r.URL.RawQuery); err != nil || q.Has("assertion") {
		s.violate(x.idx, "PA-5-10", "browser assertion sent in the URL")
		s.webError(w, r, "invalid_request", "the assertion belongs in the request body, never in the URL")
		return
	}
	if x.form == nil {
		s.violate(x.idx, "PA-5-09", "join request is not an application/x-www-form-urlencoded POST")
		s.webError(w, r, "invalid_request", "the body must be application/x-www-form-urlencoded")
		return
	}
	if len(x.form["assertion"]) != 1 {
		s.webError(w, r, "invalid_request", "the form must carry one assertion field")
		return
	}
	j, err := splitJWS(x.form.Get("assertion"))
	if err != nil {
		s.webError(w, r, "invalid_grant", "the assertion is malformed")
		return
	}
	// CO-5-02, CO-5-03: only a browser assertion, by its typ.
	if typ, _ := str(j.header, "typ"); typ != browserAssertionType {
		if strings.EqualFold(typ, browserAssertionType) {
			s.violate(x.idx, "PA-5-03", "browser assertion typ %q is not exactly %s", typ, browserAssertionType)
		}
		s.webError(w, r, "invalid_grant", "the assertion's typ must be "+browserAssertionType)
		return
	}
	c := j.claims
	iss, _ := str(c, "iss")
	if u, err := url.Parse(iss); err != nil || u.Scheme != "https" || u.Host == "" {
		s.webError(w, r, "invalid_grant", "the assertion's iss must be the client_id, an https URL")
		return
	}
	if why := s.clientRefused(iss); why != "" {
		s.webError(w, r, "invalid_client", why)
		return
	}
	// CO-5-01: the signature verifies with a key from the client's jwks_uri
	// (a cached key set is refetched once before giving up, as for client
	// assertions).
	ci, fresh, err := s.clientFor(r.Context(), x.idx, iss, false)
	if err != nil {
		s.webError(w, r, "invalid_client", err.Error())
		return
	}
	if verifyWithSet(j, ci.set) != nil {
		ok := false
		if !fresh {
			if ci, _, err = s.clientFor(r.Context(), x.idx, iss, true); err == nil {
				ok = verifyWithSet(j, ci.set) == nil
			}
		}
		if !ok {
			s.webError(w, r, "invalid_grant", "the assertion's signature does not verify with the client's keys")
			return
		}
	}
	// CO-5-05: aud is this endpoint, as one string.
	if aud, ok := c["aud"].(string); !ok || aud != endpoint {
		if _, isList := c["aud"].([]any); isList {
			s.violate(x.idx, "PA-5-05", "browser assertion aud is an array, not the endpoint as a string")
		}
		s.webError(w, r, "invalid_grant", "the assertion's aud must be this endpoint")
		return
	}
	// CO-5-06, CO-5-07: not expired; exp at most 60 s after iat.
	now := s.clock.Now()
	exp, okExp := num(c, "exp")
	iat, okIat := num(c, "iat")
	switch {
	case !okExp || !okIat:
		s.webError(w, r, "invalid_grant", "the assertion needs numeric iat and exp")
		return
	case exp > 9e9 || !now.Before(time.Unix(int64(exp), 0)):
		s.webError(w, r, "invalid_grant", "the assertion has expired")
		return
	case exp-iat > assertionLifetimeBound.Seconds():
		s.violate(x.idx, "PA-5-08", "browser assertion exp is %.0f s after iat, over 60 s", exp-iat)
		s.webError(w, r, "invalid_grant", "the assertion's exp is more than 60 seconds after iat")
		return
	case time.Unix(int64(iat), 0).After(now.Add(clockLeeway)):
		s.webError(w, r, "invalid_grant", "the assertion's iat is in the future")
		return
	}
	if d := now.Sub(time.Unix(int64(iat), 0)); d > 5*time.Second || d < -5*time.Second {
		s.violate(x.idx, "PA-5-04", "browser assertion iat is %v from the Company's clock, beyond 5 s", d.Round(time.Second))
	}
	jti, _ := str(c, "jti")
	if jti == "" {
		s.violate(x.idx, "PA-5-04", "browser assertion has no jti")
		s.webError(w, r, "invalid_grant", "the assertion's jti is missing")
		return
	}
	if !has128Bits(jti) {
		s.violate(x.idx, "PA-5-04", "browser assertion jti has fewer than 128 bits")
	}
	sub, _ := str(c, "sub")
	sid, _ := str(c, "session_id")
	returnTo, _ := str(c, "return_to")
	// CO-5-10: return_to is an https URL on this domain or a subdomain.
	if !s.onOwnDomain(returnTo, x.host) {
		s.violate(x.idx, "PA-5-07", "browser assertion return_to %q is not an https URL on %s", returnTo, s.domainOf(x.host))
		s.webError(w, r, "invalid_request", "return_to must be an https URL on this Company's domain")
		return
	}

	jtiKey := iss + " " + jti
	s.mu.Lock()
	// CO-5-08: a jti accepted before is refused until it expires.
	if s.web.jtis.seen(jtiKey, now) {
		s.mu.Unlock()
		s.violate(x.idx, "PA-5-04", "browser assertion jti reused")
		s.webError(w, r, "invalid_grant", "the assertion was already used")
		return
	}
	// CO-5-09: an active Session of the same client and User.
	sess := s.sessions[sid]
	s.lapseLocked(sess, now)
	switch {
	case sid == "" || sess == nil || sess.ended:
		s.mu.Unlock()
		s.webError(w, r, "invalid_session", "the Session has ended or does not exist")
		return
	case sess.clientID != iss || sess.sub != sub:
		s.mu.Unlock()
		s.webError(w, r, "invalid_session", "the Session belongs to another Personal Agent or User")
		return
	}
	s.web.jtis.add(jtiKey, time.Unix(int64(exp), 0).Add(clockLeeway), now)
	if s.opts.Web.RevokeOnRejoin {
		for _, ck := range s.web.cookies {
			if ck.sessionID == sid {
				ck.revoked = true
			}
		}
	}
	if len(s.web.cookies) > 4096 {
		for v, ck := range s.web.cookies {
			if ck.revoked || !now.Before(ck.expires) {
				delete(s.web.cookies, v)
			}
		}
	}
	// CO-5-15: the cookie doesn't outlive the Session: its life, on the
	// server and in Max-Age, is CookieTTL or the Session's remaining
	// life, whichever is shorter.
	expires := now.Add(s.opts.Web.CookieTTL)
	if end := s.sessionEnd(sess); !end.IsZero() && end.Before(expires) {
		expires = end
	}
	maxAge := int(expires.Sub(now) / time.Second)
	if maxAge < 1 {
		s.mu.Unlock()
		s.webError(w, r, "invalid_session", "the Session ends within a second")
		return
	}
	expires = now.Add(time.Duration(maxAge) * time.Second)
	value := newID("bs_", 24)
	s.web.cookies[value] = &webCookie{sessionID: sid, expires: expires}
	s.web.joins++
	s.mu.Unlock()
	x.sessionID = sid

	// CO-5-11, CO-5-16, CO-5-17: one cookie, Secure, HttpOnly, SameSite
	// Lax, for the whole domain so that return_to on a subdomain gets it.
	http.SetCookie(w, &http.Cookie{
		Name: s.opts.Web.CookieName, Value: value, Path: "/", Domain: s.webDomainOf(x.host),
		MaxAge: maxAge, Secure: true, HttpOnly: true, SameSite: s.opts.Web.SameSite,
	})
	w.Header().Set("Location", returnTo)
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusSeeOther)
}

const browserAssertionType = "poppy-browser+jwt"

// onOwnDomain reports whether raw is an https URL, without userinfo, on
// the domain of the endpoint host or one of its subdomains (CO-5-10, A-18:
// a sibling domain of the same issuer is not "its own domain" here: its
// cookie could not reach it).
func (s *Server) onOwnDomain(raw, endpointHost string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "https" || u.User != nil || u.Host == "" || len(raw) > 4096 {
		return false
	}
	d, h := s.domainOf(endpointHost), canonicalHost(u.Host)
	return d != "" && (h == d || strings.HasSuffix(h, "."+d))
}

// webView is what a page request is handled as.
type webView struct {
	sessionID string // "" for none
	clientID  string
	sub       string
	ended     bool
	signedIn  bool
	account   string
	scopes    []string
	siteLogin string // the site's own login, used only without a Session cookie
}

// viewOf reads the Session cookie and looks up the Session's current state
// (CO-5-14, CO-5-15, CO-5-19).
func (s *Server) viewOf(r *http.Request) webView {
	var v webView
	now := s.clock.Now()
	if ck, err := r.Cookie(s.opts.Web.CookieName); err == nil {
		s.mu.Lock()
		rec := s.web.cookies[ck.Value]
		if rec != nil && !rec.revoked && now.Before(rec.expires) {
			sess := s.sessions[rec.sessionID]
			s.lapseLocked(sess, now)
			if sess != nil && !sess.ended {
				v.sessionID, v.signedIn = sess.id, sess.signedIn
				v.clientID, v.sub = sess.clientID, sess.sub
				if sess.signedIn {
					v.account, v.scopes = sess.account, slices.Clone(sess.scopes)
				}
			}
		}
		s.mu.Unlock()
		if v.sessionID != "" {
			return v // CO-5-19: the Session wins over any other cookie
		}
	}
	if ck, err := r.Cookie(siteLoginCookie); err == nil {
		v.siteLogin = ck.Value
	}
	return v
}

// serveWeb serves the website's pages.
func (s *Server) serveWeb(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	v := s.viewOf(r)
	x.sessionID = v.sessionID
	switch {
	case r.URL.Path == "/favicon.ico":
		http.NotFound(w, r)
	case r.URL.Path == "/site-login" && r.Method == http.MethodGet:
		acct := r.URL.Query().Get("account")
		if acct == "" || len(acct) > 64 {
			writePage(w, http.StatusBadRequest, "Sign in", `<p class="error">account is missing</p>`)
			return
		}
		http.SetCookie(w, &http.Cookie{Name: siteLoginCookie, Value: url.QueryEscape(acct), Path: "/",
			Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
		w.Header().Set("Location", "/account")
		w.WriteHeader(http.StatusSeeOther)
	case r.URL.Path == "/exchange":
		// CO-5-18: the website applies the Session's scopes as the API does.
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			writePage(w, http.StatusMethodNotAllowed, "Exchange", `<p class="error">POST the exchange form</p>`)
			return
		}
		switch {
		case v.sessionID == "" && v.siteLogin == "":
			x.errorCode = "sign_in_required"
			writePage(w, http.StatusUnauthorized, "Exchange", `<p class="error">sign in to request an exchange</p>`)
		case v.sessionID != "" && !v.signedIn:
			x.errorCode = "sign_in_required"
			writePage(w, http.StatusUnauthorized, "Exchange", `<p class="error">the Session is not signed in</p>`)
		case v.sessionID != "" && !slices.Contains(v.scopes, s.signin.write):
			x.errorCode = "insufficient_scope"
			writePage(w, http.StatusForbidden, "Exchange", `<p class="error">the Session lacks the scope `+html.EscapeString(s.signin.write)+`</p>`)
		default:
			writePage(w, http.StatusOK, "Exchange", `<p id="result">Exchange requested.</p>`+s.stateBlock(v))
		}
	case strings.HasPrefix(r.URL.Path, operationPagePrefix) && r.Method == http.MethodPost:
		s.serveOperationForm(w, r, v) // OPS 4.4: confirm or cancel on the website
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		w.Header().Set("Allow", "GET, HEAD")
		writePage(w, http.StatusMethodNotAllowed, "Not allowed", `<p class="error">method not allowed</p>`)
	case strings.HasPrefix(r.URL.Path, operationPagePrefix):
		s.serveOperationPage(w, r, v)
	default:
		title := "Example Company"
		if p := strings.Trim(r.URL.Path, "/"); p != "" {
			title = "Example Company: " + p
		}
		body := s.stateBlock(v) + `<form method="post" action="/exchange"><button type="submit">Request an exchange</button></form>`
		writePage(w, http.StatusOK, title, body)
	}
}

// stateBlock renders the signed-in state of a view. The texts are stable:
// tests (and an agent's own checks, A-19) read them.
func (s *Server) stateBlock(v webView) string {
	var b strings.Builder
	b.WriteString(`<div id="state">`)
	switch {
	case v.sessionID != "" && v.signedIn:
		fmt.Fprintf(&b, `<p id="status">Signed in to account %s.</p><p id="scopes">Scopes: %s</p>`,
			html.EscapeString(v.account), html.EscapeString(strings.Join(v.scopes, " ")))
	case v.sessionID != "":
		b.WriteString(`<p id="status">Signed out.</p>`)
	case v.siteLogin != "":
		acct, _ := url.QueryUnescape(v.siteLogin)
		fmt.Fprintf(&b, `<p id="status">Signed in to account %s (site login, no Session).</p>`, html.EscapeString(acct))
	default:
		b.WriteString(`<p id="status">Visitor without a Session.</p>`)
	}
	if v.sessionID != "" {
		fmt.Fprintf(&b, `<p id="session">Session %s</p>`, html.EscapeString(v.sessionID))
	}
	b.WriteString(`</div>`)
	return b.String()
}

// pageCSP is the website's Content-Security-Policy: no script at all.
const pageCSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

func writePage(w http.ResponseWriter, status int, title, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>%s</title>"+
		"<style>body{font:16px sans-serif;margin:2em}.error{color:#a00}</style></head>"+
		"<body><h1>%s</h1>\n%s\n</body></html>\n", html.EscapeString(title), html.EscapeString(title), body)
}

// WebCookie describes a Session cookie the website set, for tests.
type WebCookie struct {
	Value     string
	SessionID string
	ExpiresAt time.Time
	// Active reports whether pages still honour it: not expired, not
	// replaced under RevokeOnRejoin, and its Session active.
	Active bool
}

// webCookies returns the Session cookies the website has set, in no
// particular order.
func (s *Server) webCookies() []WebCookie {
	now := s.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]WebCookie, 0, len(s.web.cookies))
	for v, c := range s.web.cookies {
		sess := s.sessions[c.sessionID]
		s.lapseLocked(sess, now)
		out = append(out, WebCookie{Value: v, SessionID: c.sessionID, ExpiresAt: c.expires,
			Active: !c.revoked && now.Before(c.expires) && sess != nil && !sess.ended})
	}
	return out
}

// BrowserTrust is how a real browser reaches this fake and trusts its TLS
// certificate without trusting anything else.
type BrowserTrust struct {
	// Addr is the TLS listener, "127.0.0.1:PORT": the browser must map
	// each of Hosts to it (Chromium: --host-resolver-rules).
	Addr string
	// Hosts are the Company's hosts the fake serves with its first leaf
	// certificate: domains, www. twins, website subdomains, the issuer,
	// API and MCP hosts.
	Hosts []string
	// SPKI is the base64 SHA-256 hash of that leaf certificate's
	// SubjectPublicKeyInfo, for Chromium's
	// --ignore-certificate-errors-spki-list: the browser then accepts
	// exactly the server that proves, in the TLS handshake, that it holds
	// this leaf's private key. The CA's hash would not do: a browser
	// compares the hashes of the certificates a server presents, and the
	// CA certificate is public.
	SPKI string
	// CAPEM is the fake's CA certificate, for browsers that take a CA.
	CAPEM []byte
}

// BrowserTrust returns what a real browser needs to reach this fake.
func (s *Server) BrowserTrust() BrowserTrust {
	leaf := s.tls.leaf.Leaf
	return BrowserTrust{
		Addr:  s.ln.Addr().String(),
		Hosts: slices.Clone(leaf.DNSNames),
		SPKI:  spkiHash(leaf),
		CAPEM: slices.Clone(s.tls.caPEM),
	}
}

// ChromiumHostRules returns Chromium's --host-resolver-rules for the
// fake: each of Hosts mapped to Addr, every other name unresolvable, and
// 127.0.0.1 (where an agent serves its own pages) left alone.
func (t BrowserTrust) ChromiumHostRules() string {
	rules := make([]string, 0, len(t.Hosts)+2)
	for _, h := range t.Hosts {
		rules = append(rules, "MAP "+h+" "+t.Addr)
	}
	return strings.Join(append(rules, "MAP * ~NOTFOUND", "EXCLUDE 127.0.0.1"), ",")
}

func spkiHash(c *x509.Certificate) string {
	sum := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}
