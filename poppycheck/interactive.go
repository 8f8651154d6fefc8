package poppycheck

// Step 10, only with Options.Person: one sign-in of each type the Company
// offers (spec 4.4–4.7), each in a Session of its own, then the Account
// Token (4.8: a signed-in Session from it, rotation) and sign-out (4.9).
// The person signs in; the check never completes a Direct or Device page
// itself, and sends Mediated credentials only to auth.mediated.endpoint.

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/poppyproto/poppy/internal/jose"
	"github.com/poppyproto/poppy/internal/redact"
)

// Person is the person an interactive check walks through signing in.
// Its methods are called from the run's goroutine, one at a time.
type Person interface {
	// Visit asks the person to open v.URL in their own browser and sign
	// in there (Direct Sign-In's authorization URL, or Device Sign-In's
	// verification URL with v.UserCode). It returns once the person has
	// been told; the run then waits for the sign-in to finish (at most
	// SignInTimeout).
	Visit(ctx context.Context, v Visit) error
	// Ask asks the person for one value: a credential of Mediated
	// Sign-In, or its one-time code. A Secret question's answer must not
	// be echoed.
	Ask(ctx context.Context, q Question) (string, error)
}

// Visit is a sign-in page for the person to open.
type Visit struct {
	Type     string   // "direct" or "device"
	URL      string   // the page to open
	UserCode string   // Device Sign-In: the code the page asks for
	Scopes   []string // the scopes requested
}

// Question is a value to ask the person for.
type Question struct {
	Type   string // "mediated"
	Name   string // the field's name, or "code"
	Label  string // what to ask for, as the Company labels it (untrusted text)
	Secret bool
	SentTo string // for a one-time code: where the Company sent it (untrusted text)
}

// SignInTimeout bounds how long an interactive run waits for one sign-in.
const SignInTimeout = 5 * time.Minute

// signedIn is the outcome of one sign-in.
type signedIn struct {
	typ     string
	s       *session
	account string // the Account Token
	scope   string
	life    float64 // refresh_token_expires_in, 0 if none
}

// interactive runs the sign-ins. conv is the conversation protocol entry,
// if any; convSignIn says its conversation needed a signed-in Session,
// which the first sign-in then gives it.
func (p *prober) interactive(ctx context.Context, open string, conv map[string]any, convSignIn bool) {
	var done []signedIn
	for _, typ := range []string{"direct", "device", "mediated"} {
		scopes := p.c.signIn[typ]
		if scopes == nil {
			continue
		}
		p.step = "sign-in " + typ
		s, err := newSession()
		if err != nil {
			return
		}
		r, m, err := p.tokenRequest(ctx, s, url.Values{"grant_type": {grantJWTBearer}}, false)
		if err != nil || m == nil || !p.checkSessionToken(r, m, s, "") {
			return
		}
		pre := s.token
		var res *signedIn
		switch typ {
		case "direct":
			res = p.direct(ctx, s, scopes)
		case "device":
			res = p.device(ctx, s, scopes)
		case "mediated":
			res = p.mediated(ctx, s, scopes)
		}
		if ctx.Err() != nil {
			return
		}
		if res != nil {
			p.afterSignIn(ctx, res, pre)
			done = append(done, *res)
		}
	}
	if len(done) == 0 {
		p.notObserved("no sign-in completed", "CO-4.8-01", "CO-4.8-02", "CO-4.9-01")
		return
	}
	for _, d := range done {
		p.moreScope(ctx, d)
	}
	if convSignIn {
		p.conversation(ctx, done[0].s, conv)
	}
	// Before the sign-out below: the operation needs the signed-in Session.
	p.operation(ctx, done[0])
	p.accountToken(ctx, done[0], open)
}

// afterSignIn uses the signed-in token where the description says scopes
// are needed (CO-4.4-02, CO-6-11) and the Session's signed-out token from
// before (CO-4.4-13).
func (p *prober) afterSignIn(ctx context.Context, in *signedIn, pre string) {
	if p.openClosed == "" {
		return
	}
	p.step = "signed in " + in.typ
	accept := http.Header{"Accept": {"application/json"}}
	if r, err := p.resourceRequest(ctx, in.s, http.MethodGet, p.openClosed, nil, accept, "", proofOK); err == nil {
		code, attrs, _ := challenge(r.header, "DPoP")
		switch {
		case r.status >= 200 && r.status < 300:
			p.pass("CO-4.4-02", r.ex, "a %s sign-in's token with scope %q reached %s", in.typ, in.scope, p.openClosed)
		case r.status == http.StatusForbidden && code == "insufficient_scope":
			p.check("CO-6-11", attrs["scope"] != "", r.ex, "a token with scope %q at %s answered insufficient_scope naming scope %q", in.scope, p.openClosed, attrs["scope"])
		default:
			p.note("a %s sign-in's token at %s answered %d %q", in.typ, p.openClosed, r.status, code)
		}
	}
	if pre != "" && pre != in.s.token {
		if r, err := p.resourceRequest(ctx, in.s, http.MethodGet, p.openClosed, nil, accept, pre, proofOK); err == nil {
			code, _, _ := challenge(r.header, "DPoP")
			if r.status == http.StatusUnauthorized && code == "invalid_token" {
				// The Company revoked the older token when it issued
				// the signed-in one (A-08 leaves that open): it grants
				// nothing, and shows nothing of the rule.
				p.notObserved("the Company revoked the Session's signed-out token when it issued the signed-in one (invalid_token), which A-08 allows", "CO-4.4-13")
			} else {
				p.check("CO-4.4-13", r.status == http.StatusForbidden && code == "sign_in_required", r.ex,
					"the Session's signed-out token from before the sign-in answered %d %q at %s", r.status, code, p.openClosed)
			}
		}
	}
}

// moreScope asks the Account Token of a sign-in that granted less than
// the Company offers for one more scope (CO-4.8-07).
func (p *prober) moreScope(ctx context.Context, in signedIn) {
	granted := strings.Fields(in.scope)
	extra := ""
	for _, typ := range []string{"direct", "device", "mediated"} {
		for _, sc := range p.c.signIn[typ] {
			if !slices.Contains(granted, sc) && extra == "" {
				extra = sc
			}
		}
	}
	if extra == "" {
		p.notObserved("the sign-in granted every scope the Company offers: no scope to ask the Account Token for more of", "CO-4.8-07")
		return
	}
	p.step = "account token scope"
	s := &session{userID: in.s.userID, key: in.s.key, nonces: map[string]string{}}
	want := strings.TrimSpace(in.scope + " " + extra)
	r, m, err := p.tokenRequest(ctx, s, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {in.account}, "scope": {want}}, false)
	if err != nil || r == nil {
		return
	}
	p.check("CO-4.8-07", m == nil && errorCode(r.body) == "invalid_scope", r.ex,
		"an Account Token granted %q, asked for %q, answered %d %q", in.scope, want, r.status, errorCode(r.body))
}

// checkSignedIn checks the answer that ends a sign-in (CO-4.4-11,
// CO-4.4-06) for Session s and returns the Account Token.
func (p *prober) checkSignedIn(typ string, ex *Exchange, m map[string]any, s *session, asked []string) *signedIn {
	tok, _ := m["access_token"].(string)
	acct, _ := m["refresh_token"].(string)
	sid, _ := m["session_id"].(string)
	signed, _ := m["signed_in"].(bool)
	scope, okScope := m["scope"].(string)
	ok := tok != "" && acct != "" && sid == s.id && signed && okScope
	p.check("CO-4.4-11", ok, ex, "%s Sign-In ended with refresh_token %s, access_token %s, session_id %q (the Session %q), signed_in %v, scope %q",
		typ, present(acct != ""), present(tok != ""), sid, s.id, signed, scope)
	extra := []string{}
	for _, sc := range strings.Fields(scope) {
		if !slices.Contains(asked, sc) {
			extra = append(extra, sc)
		}
	}
	p.check("CO-4.4-06", len(extra) == 0, ex, "%s Sign-In granted %q for %q asked", typ, scope, strings.Join(asked, " "))
	if !ok {
		return nil
	}
	s.token, s.signed, s.scope = tok, true, scope
	if e, ok := m["expires_in"].(float64); ok {
		s.ttl = time.Duration(e) * time.Second
	}
	life, _ := m["refresh_token_expires_in"].(float64)
	return &signedIn{typ: typ, s: s, account: acct, scope: scope, life: life}
}

// direct runs Direct Sign-In (spec 4.5) with the person's browser.
func (p *prober) direct(ctx context.Context, s *session, scopes []string) *signedIn {
	c, a := p.c, p.opts.Agent
	verifier := jose.RandomID(32)
	state := jose.RandomID(16)
	p.secret(verifier, state)
	q := url.Values{"response_type": {"code"}, "client_id": {a.ClientID()}, "redirect_uri": {a.RedirectURI()},
		"scope": {strings.Join(scopes, " ")}, "state": {state}, "code_challenge": {jose.Hash(verifier)}, "code_challenge_method": {"S256"}}
	au, err := url.Parse(c.authzEP)
	if err != nil {
		return nil
	}
	au.RawQuery = q.Encode()
	for len(a.callback) > 0 { // a stale callback
		<-a.callback
	}
	if err := p.opts.Person.Visit(ctx, Visit{Type: "direct", URL: au.String(), Scopes: scopes}); err != nil {
		p.notObserved("the person could not be asked to sign in: "+err.Error(), "CO-4.5-03")
		return nil
	}
	var cb url.Values
	t := time.NewTimer(SignInTimeout)
	defer t.Stop()
	select {
	case cb = <-a.callback:
	case <-t.C:
		p.notObserved("Direct Sign-In did not come back within "+SignInTimeout.String(), "CO-4.5-03")
		return nil
	case <-ctx.Done():
		return nil
	}
	code := cb.Get("code")
	p.secret(code)
	ex := &Exchange{Method: http.MethodGet, URL: a.RedirectURI() + "?" + cb.Encode()}
	if e := cb.Get("error"); e != "" {
		p.check("CO-4.5-04", e == "access_denied" && cb.Get("state") == state && cb.Get("iss") == c.issuer, ex,
			"the declined sign-in came back with error %q, the state %s, iss %q", e, sameOrNot(cb.Get("state") == state), cb.Get("iss"))
		p.notObserved("the person declined Direct Sign-In", "CO-4.5-03")
		return nil
	}
	if !p.check("CO-4.5-03", code != "" && cb.Get("state") == state && cb.Get("iss") == c.issuer, ex,
		"the redirect came back with a code %s, the state %s, iss %q (auth.issuer %q)", present(code != ""), sameOrNot(cb.Get("state") == state), cb.Get("iss"), c.issuer) {
		return nil
	}
	p.step = "sign-in direct exchange"
	r, m, err := p.tokenRequest(ctx, s, url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {a.RedirectURI()},
		"code_verifier": {verifier}, "session_id": {s.id}}, false)
	if err != nil || m == nil {
		if r != nil {
			p.fail("CO-4.5-05", r.ex, "the code exchange answered %d %q", r.status, errorCode(r.body))
		}
		return nil
	}
	p.pass("CO-4.5-05", r.ex, "the code, the PKCE verifier and the client assertion were accepted")
	return p.checkSignedIn("Direct", r.ex, m, s, scopes)
}

func sameOrNot(b bool) string {
	if b {
		return "unchanged"
	}
	return "changed"
}

// deviceCodes registers the secrets of a device authorization answer: the
// device code, and the user code, which a person types.
func (p *prober) deviceCodes(body []byte) {
	var m map[string]any
	_ = json.Unmarshal(body, &m)
	dc, _ := m["device_code"].(string)
	uc, _ := m["user_code"].(string)
	p.secret(dc)
	p.typedSecret(uc)
}

// device runs Device Sign-In (spec 4.6): the person opens the link; the
// run polls at the interval, within expires_in and at most 120 polls.
func (p *prober) device(ctx context.Context, s *session, scopes []string) *signedIn {
	c := p.c
	if c.deviceEP == "" {
		return nil
	}
	r, err := p.clientPost(ctx, c.deviceEP, url.Values{"scope": {strings.Join(scopes, " ")}})
	if err != nil || r.status != http.StatusOK {
		if r != nil && err == nil {
			p.checkTokenError(r)
		}
		return nil
	}
	p.deviceCodes(r.body)
	var d struct {
		DeviceCode              string `json:"device_code"`
		UserCode                string `json:"user_code"`
		VerificationURI         string `json:"verification_uri"`
		VerificationURIComplete string `json:"verification_uri_complete"`
		ExpiresIn               int    `json:"expires_in"`
		Interval                int    `json:"interval"`
	}
	err = json.Unmarshal(r.body, &d)
	if okURI, _ := p.okURL(d.VerificationURI); err != nil || d.DeviceCode == "" || !okURI {
		p.note("the device authorization answer lacks device_code or an https verification_uri")
		return nil
	}
	link := d.VerificationURIComplete
	if ok, _ := p.okURL(link); !ok {
		link = d.VerificationURI
	}
	if err := p.opts.Person.Visit(ctx, Visit{Type: "device", URL: link, UserCode: d.UserCode, Scopes: scopes}); err != nil {
		return nil
	}
	interval := 5 * time.Second // RFC 8628 section 3.2: the default
	if d.Interval > 0 {
		interval = time.Duration(min(d.Interval, 60)) * time.Second
	}
	deadline := time.Now().Add(min(SignInTimeout, time.Duration(max(d.ExpiresIn, 1))*time.Second+interval))
	p.step = "sign-in device polls"
	for polls := 0; polls < 120 && time.Now().Before(deadline); polls++ {
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		r, m, err := p.tokenRequest(ctx, s, url.Values{"grant_type": {"urn:ietf:params:oauth:grant-type:device_code"},
			"device_code": {d.DeviceCode}, "session_id": {s.id}}, false)
		if err != nil {
			return nil
		}
		if m != nil {
			return p.checkSignedIn("Device", r.ex, m, s, scopes)
		}
		switch code := errorCode(r.body); code {
		case "authorization_pending":
		case "slow_down":
			interval += 5 * time.Second // RFC 8628 3.5
			p.pass("CO-4.6-03", r.ex, "the Company asked for slower polling with slow_down")
		case "access_denied":
			p.pass("CO-4.6-04", r.ex, "the declined Device Sign-In answered access_denied")
			return nil
		case "expired_token":
			p.pass("CO-4.6-05", r.ex, "the Device Sign-In past expires_in answered expired_token")
			return nil
		default:
			p.note("a device poll answered %d %q", r.status, code)
			return nil
		}
	}
	p.note("Device Sign-In did not finish in time")
	return nil
}

// mediated runs Mediated Sign-In (spec 4.7) with credentials the person
// types. They go only to auth.mediated.endpoint.
func (p *prober) mediated(ctx context.Context, s *session, scopes []string) *signedIn {
	m := p.c.mediated
	ep, _ := m["endpoint"].(string)
	fields, _ := m["fields"].([]any)
	creds := map[string]string{}
	var secrets []string
	for _, f := range fields {
		fm, _ := f.(map[string]any)
		name, _ := fm["name"].(string)
		label, _ := fm["label"].(string)
		secret, _ := fm["secret"].(bool)
		v, err := p.opts.Person.Ask(ctx, Question{Type: "mediated", Name: name, Label: label, Secret: secret})
		if err != nil {
			return nil
		}
		creds[name] = v
		secrets = append(secrets, v)
	}
	p.typedSecret(secrets...) // everything the person typed, whatever its length
	p.step = "sign-in mediated"
	body := jsonBody(map[string]any{"scope": strings.Join(scopes, " "), "credentials": creds})
	hdr := http.Header{"Content-Type": {"application/json"}, "Accept": {"application/json"}}
	r, err := p.resourceRequest(ctx, s, http.MethodPost, ep, body, hdr, "", proofOK)
	if err != nil {
		return nil
	}
	for attempt := 0; attempt < 3; attempt++ {
		var ans map[string]any
		_ = json.Unmarshal(r.body, &ans)
		p.secretsOf(ans)
		// CO-4.7-07
		p.check("CO-4.7-07", !echoes(r, secrets), r.ex, "the Mediated Sign-In answer holds none of the credentials sent (looked for in its headers, its body and its JSON as decoded)")
		switch st, _ := ans["status"].(string); st {
		case "complete":
			_, hasStatus := ans["status"]
			p.check("CO-4.7-01", r.status == http.StatusOK && hasStatus, r.ex, "complete with status and the fields of spec 4.4")
			return p.checkSignedIn("Mediated", r.ex, ans, s, scopes)
		case "code_required":
			id, _ := ans["sign_in_id"].(string)
			code, _ := ans["code"].(map[string]any)
			sentTo, _ := code["sent_to"].(string)
			exp, _ := ans["expires_at"].(string)
			_, terr := time.Parse(time.RFC3339, exp)
			p.check("CO-4.7-02", id != "" && sentTo != "" && terr == nil, r.ex, "code_required with sign_in_id %s, code.sent_to %s, expires_at %q", present(id != ""), present(sentTo != ""), exp)
			if id == "" || !idRE.MatchString(id) {
				return nil
			}
			otp, err := p.opts.Person.Ask(ctx, Question{Type: "mediated", Name: "code", Label: "One-time code", SentTo: sentTo})
			if err != nil {
				return nil
			}
			p.typedSecret(otp)
			r, err = p.resourceRequest(ctx, s, http.MethodPost, strings.TrimSuffix(ep, "/")+"/"+id, jsonBody(map[string]any{"code": otp}), hdr, "", proofOK)
			if err != nil {
				return nil
			}
		case "failed":
			_, hasTok := ans["refresh_token"]
			p.check("CO-4.7-09", !hasTok, r.ex, "a failed Mediated Sign-In carries no token")
			p.note("Mediated Sign-In failed: check the credentials typed")
			return nil
		default:
			p.note("Mediated Sign-In answered %d, status %q", r.status, st)
			return nil
		}
	}
	return nil
}

func (p *prober) secretsOf(m map[string]any) {
	for _, k := range []string{"access_token", "refresh_token"} {
		if v, ok := m[k].(string); ok {
			p.secret(v)
		}
	}
}

// accountToken uses the Account Token of a sign-in: the signed-in token
// reaches what needs scopes, a refresh without session_id starts a new
// signed-in Session (CO-4.8-01, CO-4.8-02, CO-4.8-09), and revoking it
// signs the Sessions out (CO-4.9-01, CO-4.9-03, CO-4.9-05, CO-4.9-07).
func (p *prober) accountToken(ctx context.Context, in signedIn, open string) {
	p.step = "account token"
	s := &session{userID: in.s.userID, key: in.s.key, nonces: map[string]string{}}
	acct := in.account
	r, m, err := p.tokenRequest(ctx, s, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {acct}}, false)
	if err != nil || m == nil {
		if r != nil {
			p.fail("CO-4.8-01", r.ex, "the Account Token without session_id answered %d %q", r.status, errorCode(r.body))
		}
		return
	}
	sid, _ := m["session_id"].(string)
	signed, _ := m["signed_in"].(bool)
	tok, _ := m["access_token"].(string)
	p.check("CO-4.8-01", sid != "" && sid != in.s.id && signed && tok != "", r.ex, "the Account Token without session_id started Session %q, signed_in %v", sid, signed)
	newAcct, rotated := m["refresh_token"].(string)
	_, hasExp := m["expires_in"].(float64)
	p.check("CO-4.8-02", tok != "" && hasExp && m["scope"] != nil, r.ex, "the refresh answered access_token, expires_in and scope; refresh_token %s", present(rotated))
	if rotated && newAcct != "" && newAcct != acct {
		p.pass("CO-4.8-09", r.ex, "the Company rotated the Account Token on use")
		acct = newAcct
		if life, ok := m["refresh_token_expires_in"].(float64); ok && in.life > 0 {
			p.check("CO-4.8-08", life <= in.life, r.ex, "the rotated Account Token lives %v s more, the first %v s", life, in.life)
		}
	} else {
		p.notObserved("the Company did not rotate the Account Token (a MAY)", "CO-4.8-09")
	}
	s.id, s.token, s.signed = sid, tok, true
	// With session_id: the signed-in Session renewed by its Account Token.
	r, m, err = p.tokenRequest(ctx, in.s, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {acct}, "session_id": {in.s.id}}, false)
	if err == nil && m != nil {
		id, _ := m["session_id"].(string)
		signed, _ := m["signed_in"].(bool)
		p.check("CO-4.8-01", id == in.s.id && signed, r.ex, "the Account Token with session_id renewed Session %q signed in: %v", id, signed)
		if t, _ := m["access_token"].(string); t != "" {
			in.s.token = t
		}
		if v, ok := m["refresh_token"].(string); ok && v != "" {
			acct = v
		}
	}
	// Sign out.
	p.step = "sign-out"
	c := p.c
	if c.revokeEP == "" {
		return // CO-3.2-04 failed: no revocation endpoint an agent can use
	}
	r, err = p.clientPost(ctx, c.revokeEP, url.Values{"token": {acct}, "token_type_hint": {"refresh_token"}})
	if err != nil {
		return
	}
	if !p.check("CO-4.9-07", r.status == http.StatusOK, r.ex, "revoking the check's own Account Token with its client assertion answered %d", r.status) {
		return
	}
	// The signed-in Session renewed with the assertion is now signed out
	// (or ended, CO-4.9-02).
	r, m, err = p.tokenRequest(ctx, s, url.Values{"grant_type": {grantJWTBearer}, "session_id": {s.id}}, false)
	if err == nil {
		if m != nil {
			signed, _ := m["signed_in"].(bool)
			p.check("CO-4.9-01", !signed, r.ex, "after sign-out, the Session renewed with the assertion is signed_in %v", signed)
			if t, _ := m["access_token"].(string); t != "" {
				s.token = t
			}
		} else {
			code := errorCode(r.body)
			p.check("CO-4.9-02", code == "invalid_session", r.ex, "after sign-out, renewing the Session answered %q (the Company ends Sessions at sign-out)", code)
		}
	}
	// A signed-in token from before the sign-out, where scopes are
	// needed: refused at once with a live check (CO-4.9-03), else the
	// tokens must be short (CO-4.9-04).
	if p.openClosed != "" && in.s.token != "" {
		if r, err := p.resourceRequest(ctx, in.s, http.MethodGet, p.openClosed, nil, http.Header{"Accept": {"application/json"}}, "", proofOK); err == nil {
			code, _, _ := challenge(r.header, "DPoP")
			if r.status >= 200 && r.status < 300 {
				p.notObserved("the Company doesn't check on each request that the Session is still signed in (a SHOULD; CO-4.9-04 then applies)", "CO-4.9-03")
				p.check("CO-4.9-04", in.s.ttl > 0 && in.s.ttl <= 10*time.Minute, r.ex,
					"a signed-in token still worked after sign-out, and signed-in tokens last %v (a few minutes at most: 10 min)", in.s.ttl)
			} else {
				p.check("CO-4.9-03", r.status == http.StatusForbidden && code == "sign_in_required" || r.status == http.StatusUnauthorized, r.ex,
					"a signed-in token issued before sign-out, at %s, answered %d %q", p.openClosed, r.status, code)
			}
		}
	}
	// The revoked Account Token.
	r, m, err = p.tokenRequest(ctx, s, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {acct}}, false)
	if err == nil && r != nil {
		p.check("CO-4.8-10", m == nil && errorCode(r.body) == "invalid_grant", r.ex, "the revoked Account Token answered %d %q", r.status, errorCode(r.body))
	}
}

// echoes reports whether the answer r holds one of values, the
// credentials sent (CO-4.7-07: a Company never returns them): in its
// headers, its body, and its JSON as decoded, which undoes any escape a
// JSON decoder undoes (\u0063 is c), since an agent, and a model it hands
// the answer to, reads it decoded. It asks the SDK's one reading,
// redact.Carries: a value of redact.ShortSecret bytes or more is found
// anywhere, a shorter one (a PIN, a short password) only as a word of its
// own, so that a 4-digit PIN doesn't match inside an ID or a date.
func echoes(r *reply, values []string) bool {
	texts := []string{string(r.body)}
	for _, vs := range r.header {
		texts = append(texts, vs...)
	}
	for _, v := range values {
		for _, t := range texts {
			if redact.Carries(t, v) {
				return true
			}
		}
	}
	return false
}
