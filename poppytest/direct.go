package poppytest

// Direct Sign-In (spec 4.5): the authorization endpoint with its consent
// page, the authorization_code grant, and Browse, the User's browser.
//
// GET authorization_endpoint checks client_id (fetching its metadata as
// the token endpoint does) and redirect_uri first: while either is wrong
// the answer is a 400 page and never a redirect (CO-4.5-01). Every later
// error redirects to redirect_uri with error, state and iss. A valid
// request gets a 200 consent page whose form posts back to the same URL;
// only that POST, sent by Browse with the programmable User's decision,
// issues a code or error=access_denied. Codes are one-time, live 60 s of
// Clock time, and are bound to the client_id, redirect_uri, PKCE
// challenge, account and granted scopes.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// BrowserUserAgent is the User-Agent of the requests Browse sends as the
// User's browser. The sign-in pages record a PA-4.4-02 violation for a
// request that carries what only the agent holds (a DPoP proof, an
// Authorization header, an assertion): a Personal Agent never opens them
// itself. Any other request to them is the User's (Request.User).
const BrowserUserAgent = "poppytest-browser"

// authzRequest is a Direct Sign-In request waiting on its consent page.
type authzRequest struct {
	id                            string
	clientID, clientName, logoURI string
	redirectURI, state, challenge string
	scopes                        []string
	resources                     []string // RFC 8707, as named
	expires                       time.Time
	done                          bool
}

// authCode is an issued authorization code.
type authCode struct {
	clientID, redirectURI, challenge string
	account                          string
	scopes                           []string
	resources                        []string // named at authorization
	expires                          time.Time
	used                             bool
	family                           string // the Account Token its exchange issued
}

var challengeRE = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`)
var verifierRE = regexp.MustCompile(`^[A-Za-z0-9._~-]{43,128}$`)

// serveAuthorize handles authorization_endpoint.
func (s *Server) serveAuthorize(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	if !s.signInOffered("direct") {
		s.notFound(w, r)
		return
	}
	s.checkBrowser(r, "the authorization endpoint")
	switch r.Method {
	case http.MethodGet:
		s.authorizeRequest(w, r)
	case http.MethodPost:
		s.authorizeDecision(w, r)
	default:
		w.Header().Set("Allow", "GET, POST")
		x.errorCode = "method_not_allowed"
		s.writePage(w, r, http.StatusMethodNotAllowed, "Method not allowed", "")
	}
}

// checkBrowser records PA-4.4-02 when a sign-in page is requested by the
// agent: with what only the agent holds (a DPoP proof, an Authorization
// header, an assertion). Any other request to the page is the User's,
// whatever browser or tool they use (userPage, log.go).
func (s *Server) checkBrowser(r *http.Request, what string) {
	x := exchangeOf(r)
	if r.Header.Get("User-Agent") != BrowserUserAgent && agentMarked(r, x.body) {
		s.violate(x.idx, "PA-4.4-02", "%s was requested by the agent (with its DPoP proof, Authorization header or assertion): Direct and Device Sign-In are for the User to complete", what)
	}
}

// authorizeRequest handles GET authorization_endpoint (spec 4.5 steps 1-2).
func (s *Server) authorizeRequest(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	q := r.URL.Query()
	page := func(msg string) {
		x.errorCode = "invalid_request"
		s.writePage(w, r, http.StatusBadRequest, "Sign-in error", msg)
	}
	if len(q["client_id"]) > 1 || len(q["redirect_uri"]) > 1 {
		page("client_id and redirect_uri must appear once")
		return
	}
	clientID := q.Get("client_id")
	if u, err := url.Parse(clientID); clientID == "" || err != nil || u.Scheme != "https" || u.Host == "" {
		page("client_id must be the https URL of the Personal Agent's metadata document")
		return
	}
	if why := s.clientRefused(clientID); why != "" {
		x.errorCode = "unauthorized_client"
		s.writePage(w, r, http.StatusBadRequest, "Sign-in error", why)
		return
	}
	ci, fresh, err := s.clientFor(r.Context(), x.idx, clientID, false)
	if err != nil {
		page(err.Error())
		return
	}
	redirect := q.Get("redirect_uri")
	// CO-4.5-01: exact match with an entry of redirect_uris, else no redirect.
	if !slices.Contains(redirectURIs(ci), redirect) && !fresh {
		if ci, _, err = s.clientFor(r.Context(), x.idx, clientID, true); err != nil {
			page(err.Error())
			return
		}
	}
	if !slices.Contains(redirectURIs(ci), redirect) {
		if redirect == "" {
			s.violate(x.idx, "PA-4.5-03", "authorization request without redirect_uri")
		} else {
			s.violate(x.idx, "PA-4.5-04", "redirect_uri does not exactly match an entry of the client's redirect_uris")
		}
		page("redirect_uri does not exactly match an entry of the Personal Agent's redirect_uris")
		return
	}
	state := q.Get("state")
	fail := func(code, desc string) { s.redirectError(w, r, redirect, state, code, desc) }
	if f, ok := s.takeFault(EndpointAuthorize); ok {
		if f.code == "" || f.rateLimit {
			s.writeFault(w, r, x, f)
		} else {
			fail(f.code, "injected by poppytest")
		}
		return
	}
	for k, v := range q {
		if len(v) > 1 && k != "resource" { // RFC 8707 section 2: resource may repeat
			fail("invalid_request", "parameter "+k+" appears more than once")
			return
		}
	}
	for _, res := range q["resource"] {
		if !s.knownResource(res) {
			fail("invalid_target", "unknown resource") // RFC 8707 section 2
			return
		}
	}
	if rt := q.Get("response_type"); rt != "code" {
		s.violate(x.idx, "PA-4.5-03", "response_type is %q, not code", rt)
		fail("unsupported_response_type", "response_type must be code")
		return
	}
	if state == "" {
		s.violate(x.idx, "PA-4.5-01", "authorization request without state")
		fail("invalid_request", "state is missing")
		return
	}
	if len(state) < 22 {
		s.violate(x.idx, "PA-4.5-01", "state has fewer than 22 characters: it can't hold 128 random bits")
	}
	s.mu.Lock()
	reused := s.signin.states[clientID+" "+state]
	s.signin.states[clientID+" "+state] = true
	s.mu.Unlock()
	if reused {
		s.violate(x.idx, "PA-4.5-01", "state reused: each attempt needs a fresh random state")
	}
	if m := q.Get("code_challenge_method"); m != "S256" {
		s.violate(x.idx, "PA-4.5-02", "code_challenge_method is %q: the Company supports only S256", m)
		fail("invalid_request", "code_challenge_method must be S256")
		return
	}
	challenge := q.Get("code_challenge")
	if !challengeRE.MatchString(challenge) {
		s.violate(x.idx, "PA-4.5-02", "code_challenge is not a base64url SHA-256 hash")
		fail("invalid_request", "code_challenge must be BASE64URL(SHA-256(code_verifier))")
		return
	}
	scopes, desc, malformed := s.parseScope("direct", q.Get("scope"))
	if desc != "" {
		if malformed {
			s.violate(x.idx, "PA-4.4-06", "scope is not single-space separated scope tokens")
		}
		fail("invalid_scope", desc) // CO-4.4-07, CO-4.4-08
		return
	}
	name, _ := str(ci.metadata, "client_name")
	logo, _ := str(ci.metadata, "logo_uri")
	req := &authzRequest{id: newID("azr_", 12), clientID: clientID, clientName: name, logoURI: logo,
		redirectURI: redirect, state: state, challenge: challenge, scopes: scopes,
		resources: slices.Clone(q["resource"]), expires: s.clock.Now().Add(authzRequestTTL)}
	s.mu.Lock()
	s.signin.authzReqs[req.id] = req
	s.mu.Unlock()
	s.writeConsentPage(w, r, "request", req.id, ConsentRequest{Type: "direct", ClientID: clientID, ClientName: name, LogoURI: logo, Scopes: scopes})
}

// formScopes reads the approved scopes of a consent form: checkboxes, or
// one space-separated value as Browse sends.
func formScopes(f url.Values) []string {
	return strings.Fields(strings.Join(f["scope"], " "))
}

func redirectURIs(ci *clientInfo) []string {
	var out []string
	list, _ := ci.metadata["redirect_uris"].([]any)
	for _, v := range list {
		if u, ok := v.(string); ok {
			out = append(out, u)
		}
	}
	return out
}

// authorizeDecision handles the consent form's POST (spec 4.5 step 3).
func (s *Server) authorizeDecision(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	if x.form == nil {
		x.errorCode = "invalid_request"
		s.writePage(w, r, http.StatusBadRequest, "Sign-in error", "the consent form is form-encoded")
		return
	}
	now := s.clock.Now()
	s.mu.Lock()
	req := s.signin.authzReqs[x.form.Get("request")]
	if req == nil || req.done || !now.Before(req.expires) {
		s.mu.Unlock()
		x.errorCode = "invalid_request"
		s.writePage(w, r, http.StatusBadRequest, "Sign-in error", "this sign-in page has expired or was already answered")
		return
	}
	rq := *req
	s.mu.Unlock()
	decision := x.form.Get("decision")
	approved := intersect(formScopes(x.form), rq.scopes)
	account := s.formAccount(x.form)
	switch {
	case decision == "approve" && s.account(account) == nil:
		x.errorCode = "invalid_request"
		s.writePage(w, r, http.StatusBadRequest, "Sign-in error", "unknown account")
		return
	case decision != "approve" && decision != "deny":
		x.errorCode = "invalid_request"
		s.writePage(w, r, http.StatusBadRequest, "Sign-in error", "decision must be approve or deny")
		return
	}
	s.mu.Lock()
	if req.done {
		s.mu.Unlock()
		x.errorCode = "invalid_request"
		s.writePage(w, r, http.StatusBadRequest, "Sign-in error", "this sign-in page was already answered")
		return
	}
	req.done = true
	code := ""
	if decision == "approve" && len(approved) > 0 {
		code = newID("", 24)
		s.signin.codes[code] = &authCode{clientID: rq.clientID, redirectURI: rq.redirectURI, challenge: rq.challenge,
			account: account, scopes: approved, resources: rq.resources, expires: now.Add(authCodeTTL)}
	}
	s.mu.Unlock()
	if code == "" {
		// CO-4.5-04
		s.redirectError(w, r, rq.redirectURI, rq.state, "access_denied", "the User declined")
		return
	}
	// CO-4.5-03: code, the same state, and iss (RFC 9207).
	s.redirect(w, r, rq.redirectURI, url.Values{"code": {code}, "state": {rq.state}, "iss": {s.issuer}})
}

// redirectError sends the browser back to redirectURI with an error.
func (s *Server) redirectError(w http.ResponseWriter, r *http.Request, redirectURI, state, code, desc string) {
	exchangeOf(r).errorCode = code
	v := url.Values{"error": {code}, "iss": {s.issuer}}
	if desc != "" {
		v.Set("error_description", desc)
	}
	if state != "" {
		v.Set("state", state)
	}
	s.redirect(w, r, redirectURI, v)
}

// redirect answers 303 to base with params added to its query.
func (s *Server) redirect(w http.ResponseWriter, r *http.Request, base string, params url.Values) {
	u, _ := url.Parse(base)
	q := u.Query()
	for k, vs := range params {
		q[k] = vs
	}
	u.RawQuery = q.Encode()
	w.Header().Set("Location", u.String())
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusSeeOther)
}

// writePage answers with a small HTML page; msg, when set, is shown in a
// <p class="error"> that Browse reports.
func (s *Server) writePage(w http.ResponseWriter, r *http.Request, status int, title, msg string) {
	body := ""
	if msg != "" {
		body = `<p class="error">` + html.EscapeString(msg) + "</p>\n"
	}
	s.writeHTML(w, r, status, title, body)
}

func (s *Server) writeHTML(w http.ResponseWriter, r *http.Request, status int, title, body string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		fmt.Fprintf(w, "<!doctype html>\n<title>%s</title>\n<h1>%s</h1>\n%s", html.EscapeString(title), html.EscapeString(title), body)
	}
}

// formAccount is the account the consent form names: empty is the first
// of Options.SignIn.Accounts, as for the programmable User (Consent), so
// a person approving by hand may leave it out.
func (s *Server) formAccount(f url.Values) string {
	if a := f.Get("account"); a != "" {
		return a
	}
	return s.signin.accounts[0].ID
}

// writeConsentPage shows the User which Personal Agent asks for which
// scopes (CO-4.5-02, CO-4.6-01), with a form that posts the decision back
// to the page's URL carrying the hidden field key=value.
func (s *Server) writeConsentPage(w http.ResponseWriter, r *http.Request, key, value string, c ConsentRequest) {
	var b strings.Builder
	name := c.ClientName
	if name == "" {
		name = c.ClientID
	}
	if c.LogoURI != "" {
		fmt.Fprintf(&b, "<img src=\"%s\" alt=\"\">\n", html.EscapeString(c.LogoURI))
	}
	fmt.Fprintf(&b, "<p><b>%s</b> wants to use your Example Company account.</p>\n", html.EscapeString(name))
	action := "https://" + s.authHost + r.URL.EscapedPath()
	fmt.Fprintf(&b, "<form method=\"post\" action=\"%s\">\n", html.EscapeString(action))
	fmt.Fprintf(&b, "<input type=\"hidden\" name=\"%s\" value=\"%s\">\n", key, html.EscapeString(value))
	ids := make([]string, len(s.signin.accounts))
	for i, a := range s.signin.accounts {
		ids[i] = a.ID
	}
	fmt.Fprintf(&b, "<label>Account <input name=\"account\" placeholder=\"%s\"></label> <small>(the fake's accounts: %s; empty is %s)</small>\n",
		html.EscapeString(ids[0]), html.EscapeString(strings.Join(ids, ", ")), html.EscapeString(ids[0]))
	for _, sc := range c.Scopes {
		desc := s.scopeDescription(sc)
		fmt.Fprintf(&b, "<label><input type=\"checkbox\" name=\"scope\" value=\"%s\" checked> %s</label>\n", html.EscapeString(sc), html.EscapeString(desc))
	}
	b.WriteString("<button name=\"decision\" value=\"approve\">Allow</button>\n<button name=\"decision\" value=\"deny\">Decline</button>\n</form>\n")
	s.writeHTML(w, r, http.StatusOK, "Sign in to Example Company", b.String())
}

func (s *Server) scopeDescription(sc string) string {
	switch sc {
	case "poppy:read":
		return "View account information, such as orders and bookings"
	case "poppy:write":
		return "Make changes, such as exchanging an item"
	}
	if d := s.opts.SignIn.CustomScopes[sc]; d != "" {
		return d
	}
	return sc
}

// grantAuthorizationCode exchanges a Direct Sign-In code (spec 4.5 step 4,
// RFC 6749 4.1.3, RFC 7636 4.6). The code is left usable when the Session
// is wrong (invalid_session, account_mismatch: the agent may start a new
// Session and exchange it there, A-12) or the DPoP, scope or resource
// checks fail; a wrong redirect_uri or code_verifier uses it up.
func (s *Server) grantAuthorizationCode(g *grantRequest) (map[string]any, *protoError) {
	x := g.x
	invalid := func(code, desc string) (map[string]any, *protoError) {
		return nil, &protoError{code: code, desc: desc}
	}
	value := g.form.Get("code")
	if value == "" {
		return invalid("invalid_request", "code is missing")
	}
	sid := g.form.Get("session_id")
	// CO-6-08: an MCP client that doesn't speak Poppy signs in with
	// MCP's own authorization flow: its exchange names the MCP url as
	// resource and no session_id, and starts a new signed-in Session.
	mcpFlow := sid == "" && len(g.form["resource"]) == 1 && s.isMCPURL(g.form.Get("resource"))
	if sid == "" && !mcpFlow {
		s.violate(x.idx, "PA-4.5-09", "code exchange without session_id")
		return invalid("invalid_request", "session_id is required: it names the Session to sign in (spec 4.5)")
	}
	now := s.clock.Now()
	s.mu.Lock()
	c := s.signin.codes[value]
	switch {
	case c == nil || c.clientID != g.client.id:
		s.mu.Unlock()
		return invalid("invalid_grant", "unknown code") // CO-4.5-05
	case c.used:
		// RFC 6749 4.1.2: a reused code revokes what it issued.
		if f := s.signin.families[c.family]; f != nil {
			s.revokeFamilyLocked(f)
		}
		s.mu.Unlock()
		return invalid("invalid_grant", "the code was already used") // CO-4.5-06
	case !now.Before(c.expires):
		s.mu.Unlock()
		return invalid("invalid_grant", "the code has expired") // CO-4.5-06
	}
	cc := *c
	sess := s.sessions[sid]
	if mcpFlow {
		sess = &session{id: newID("ses_", 12), clientID: g.client.id, sub: newID("mcp_", 16), created: now}
	}
	var st session
	if sess != nil {
		s.lapseLocked(sess, now)
		st = *sess
	}
	s.mu.Unlock()
	switch {
	case sess == nil || st.ended:
		return invalid("invalid_session", "the Session has ended or does not exist")
	case st.clientID != g.client.id:
		return invalid("invalid_session", "the Session belongs to another Personal Agent") // CO-4.5-08
	case st.account != "" && st.account != cc.account:
		return nil, accountMismatch() // CO-4.4-12
	}
	spend := func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		if c.used {
			return false
		}
		c.used = true
		return true
	}
	// CO-4.5-07: bound to the redirect_uri.
	if g.form.Get("redirect_uri") != cc.redirectURI {
		spend()
		return invalid("invalid_grant", "redirect_uri differs from the authorization request's")
	}
	// CO-4.5-05: PKCE S256.
	verifier := g.form.Get("code_verifier")
	sum := sha256.Sum256([]byte(verifier))
	if !verifierRE.MatchString(verifier) || b64.EncodeToString(sum[:]) != cc.challenge {
		spend()
		return invalid("invalid_grant", "code_verifier does not match the code_challenge")
	}
	spec, perr := s.issueSpec(g, cc.scopes)
	if perr != nil {
		return nil, perr
	}
	if !spend() {
		return invalid("invalid_grant", "the code was already used")
	}
	// StrictResourceIndicators: checked after the code is spent, as
	// oidc-provider does.
	if perr := s.holdToGranted(spec, g, cc.resources, true); perr != nil {
		return nil, perr
	}
	if mcpFlow {
		s.mu.Lock()
		s.sessions[sess.id] = sess
		s.mu.Unlock()
		s.sessionsStarted.Add(1)
	}
	fam, resp, perr := s.completeSignIn(g, sess, "direct", cc.account, cc.scopes, spec)
	if perr != nil {
		return nil, perr
	}
	s.mu.Lock()
	c.family = fam.id
	s.mu.Unlock()
	return resp, nil
}

var (
	hiddenRE    = regexp.MustCompile(`<input type="hidden" name="(request|user_code)" value="([^"]*)">`)
	pageErrorRE = regexp.MustCompile(`<p class="error">([^<]*)</p>`)
)

// Browse plays the User's browser on a sign-in page of this Company, as
// the User would after the agent showed it to them: it opens rawURL (the
// authorization URL of Direct Sign-In, or verification_uri_complete of
// Device Sign-In), lets the programmable User (SetUser) decide on the
// consent page, and submits the decision. Opening a page never decides
// anything by itself (CO-4.6-02).
//
// For Direct Sign-In it returns the Location of the redirect to the
// agent's redirect_uri, which it doesn't follow: the callback URL with
// code, state and iss, or with error=access_denied (or another error the
// authorization endpoint redirected with before any consent, such as
// invalid_scope). For Device Sign-In it returns "": the agent learns the
// outcome by polling. It also returns "" when the User leaves without
// answering (Consent.NoAnswer). A page that refuses the request (400,
// e.g. an unregistered redirect_uri or an unknown user_code) is an error.
//
// Its requests carry User-Agent BrowserUserAgent and are logged with
// Request.Browser set.
func (s *Server) Browse(ctx context.Context, rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" || canonicalHost(u.Host) != s.authHost {
		return "", fmt.Errorf("poppytest: Browse: %q is not a sign-in page of this Company", rawURL)
	}
	ep := s.classifySignIn(u.EscapedPath())
	if ep != EndpointAuthorize && ep != EndpointVerification {
		return "", fmt.Errorf("poppytest: Browse: %q is neither the authorization endpoint nor the verification page", rawURL)
	}
	client := &http.Client{
		Transport:     userAgentTransport{s.transport, BrowserUserAgent},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	status, loc, page, err := browseDo(ctx, client, http.MethodGet, rawURL, nil)
	if err != nil {
		return "", err
	}
	switch {
	case status >= 300 && status < 400:
		return loc, nil // an error redirect before any consent
	case status != http.StatusOK:
		return "", browseError(http.MethodGet, status, page)
	}
	m := hiddenRE.FindStringSubmatch(page)
	if m == nil {
		return "", errors.New("poppytest: Browse: the page asks for a user code: open verification_uri_complete, or verification_uri with ?user_code=")
	}
	key, value := m[1], html.UnescapeString(m[2])
	req, ok := s.consentRequest(key, value)
	if !ok {
		return "", errors.New("poppytest: Browse: the consent page is gone")
	}
	c := s.decide(req)
	if c.NoAnswer {
		return "", nil
	}
	form := url.Values{key: {value}, "decision": {"deny"}}
	if c.Approve {
		form.Set("decision", "approve")
		form.Set("account", c.Account)
		form.Set("scope", strings.Join(c.Scopes, " "))
	}
	action := u.Scheme + "://" + u.Host + u.EscapedPath()
	status, loc, page, err = browseDo(ctx, client, http.MethodPost, action, form)
	switch {
	case err != nil:
		return "", err
	case status >= 300 && status < 400:
		return loc, nil
	case status != http.StatusOK:
		return "", browseError(http.MethodPost, status, page)
	}
	return "", nil
}

func browseDo(ctx context.Context, c *http.Client, method, u string, form url.Values) (status int, loc, page string, err error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, "", "", fmt.Errorf("poppytest: Browse: %w", err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", "", fmt.Errorf("poppytest: Browse: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode, resp.Header.Get("Location"), string(b), nil
}

func browseError(method string, status int, page string) error {
	msg := ""
	if m := pageErrorRE.FindStringSubmatch(page); m != nil {
		msg = ": " + html.UnescapeString(m[1])
	}
	return fmt.Errorf("poppytest: Browse: %s answered HTTP %d%s", method, status, msg)
}

// consentRequest describes the pending consent page named by key=value.
func (s *Server) consentRequest(key, value string) (ConsentRequest, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key == "request" {
		r := s.signin.authzReqs[value]
		if r == nil {
			return ConsentRequest{}, false
		}
		return ConsentRequest{Type: "direct", ClientID: r.clientID, ClientName: r.clientName, LogoURI: r.logoURI,
			Scopes: slices.Clone(r.scopes), RedirectURI: r.redirectURI}, true
	}
	d := s.signin.userCodes[value]
	if d == nil {
		return ConsentRequest{}, false
	}
	return ConsentRequest{Type: "device", ClientID: d.clientID, ClientName: d.clientName, LogoURI: d.logoURI,
		Scopes: slices.Clone(d.scopes), UserCode: d.userCode}, true
}
