package poppytest

// The token endpoint (spec 4.2, 4.3, RFC 6749, RFC 7523, RFC 9449) and the
// revocation endpoint (spec 4.9, RFC 7009).
//
// A token request is handled in this order: method and form checks; the
// DPoP proof, if any (so that a use_dpop_nonce answer consumes no assertion
// jti and the client may resend its assertions with a new proof); client
// authentication; then the grant's handler from s.grants, keyed by
// grant_type. Grant handlers validate everything, including the requested
// scope and resource (issueSpec), before they change any state, and then
// issue with issueToken. The sign-in grants (authorization_code in
// direct.go, device_code in device.go, refresh_token in refresh.go) sign
// the Session in with completeSignIn (signin.go).

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	grantJWTBearer    = "urn:ietf:params:oauth:grant-type:jwt-bearer"
	grantAuthCode     = "authorization_code"
	grantRefreshToken = "refresh_token"
	grantDeviceCode   = "urn:ietf:params:oauth:grant-type:device_code"
)

// session is the Company's record of a Session (spec 4.4 "How sign-in is
// remembered").
type session struct {
	id, clientID, sub string
	created           time.Time
	ended             bool
	signedIn          bool
	account           string   // the account it is or was signed in to
	scopes            []string // granted account scopes while signed in
	family            string   // the Account Token (family) it is signed in with, "" for none
	lastJKT           string   // key of its latest DPoP token
	// used is the newest token used, by type and resource (PA-4.3-25).
	used map[string]tokenUse
	// last is what its latest Session Token was issued for, and when,
	// for Counts.EarlyRenewals.
	last struct {
		key    string
		issued time.Time
		ttl    time.Duration
	}
}

// token is the Company's record of a Session Token.
type token struct {
	value             string
	sessionID         string
	clientID, sub     string
	typ               string // "DPoP" or "Bearer"
	jkt               string
	resource          string
	scopes            []string
	signedIn          bool
	account           string
	issued, expires   time.Time
	revoked           bool
	revokedForReissue bool
	// seq orders the tokens the token endpoint issued (1, 2, …); 0 for
	// one a test made with Sessions.SignIn, which supersedes nothing.
	seq uint64
}

// supersedeGrace is how long, by the Clock, after a Session's newer token
// was first used, a request with an older token of the same type and
// resource is still taken as one that was on its way before the agent
// got the newer one: a race, not a violation of PA-4.3-25.
const supersedeGrace = 5 * time.Second

// tokenUse is the newest token of a Session used for one purpose (A-08:
// token type and resource), and when it was first used.
type tokenUse struct {
	seq uint64
	at  time.Time
}

// checkSuperseded records PA-4.3-25 when request idx uses t although the
// agent had already used a newer token of t's Session for the same type
// and resource at least supersedeGrace earlier: it got the new
// token, and goes on with the old one. Otherwise, once the request is
// accepted, useToken notes the use.
func (s *Server) checkSuperseded(idx int, t *token, now time.Time) {
	if t.seq == 0 {
		return
	}
	s.mu.Lock()
	sess := s.sessions[t.sessionID]
	var u tokenUse
	if sess != nil {
		u = sess.used[t.typ+" "+t.resource]
	}
	s.mu.Unlock()
	if u.seq > t.seq && !now.Before(u.at.Add(supersedeGrace)) {
		s.violate(idx, "PA-4.3-25", "a %s Session Token was used after the agent had used a newer one for the same Session and resource", t.typ)
	}
}

// useToken notes that an accepted request used t (checkSuperseded).
func (s *Server) useToken(t *token, now time.Time) {
	if t.seq == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sess := s.sessions[t.sessionID]
	if sess == nil {
		return
	}
	key := t.typ + " " + t.resource
	if sess.used[key].seq < t.seq {
		if sess.used == nil {
			sess.used = map[string]tokenUse{}
		}
		sess.used[key] = tokenUse{seq: t.seq, at: now}
	}
}

// SessionInfo describes a Session, for tests.
type SessionInfo struct {
	ID       string
	ClientID string
	UserID   string // the assertion's sub
	Created  time.Time
	Ended    bool
	SignedIn bool
	Account  string   // the account it is (or was last) signed in to
	Scopes   []string // granted scopes while signed in
	// AccountToken is the current value of the Account Token the Session
	// is signed in with: the one its sign-in or refresh issued or used
	// (after a rotation, the newest). "" when signed out, or signed in by
	// Sessions.SignIn.
	AccountToken string
}

// TokenInfo describes a Session Token, for tests.
type TokenInfo struct {
	SessionID string
	ClientID  string
	UserID    string
	Type      string // "DPoP" or "Bearer"
	JKT       string // thumbprint of the key it is bound to (DPoP), CO-4.3-01
	Resource  string // the resource it was issued for, "" for none
	Scopes    []string
	SignedIn  bool
	Account   string
	IssuedAt  time.Time
	ExpiresAt time.Time
	Revoked   bool
}

// sessionInfo returns the fake's record of a Session.
func (s *Server) sessionInfo(id string) (SessionInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[id]
	if ss == nil {
		return SessionInfo{}, false
	}
	s.lapseLocked(ss, s.clock.Now())
	info := SessionInfo{ID: ss.id, ClientID: ss.clientID, UserID: ss.sub, Created: ss.created, Ended: ss.ended,
		SignedIn: ss.signedIn, Account: ss.account, Scopes: slices.Clone(ss.scopes)}
	if f := s.signin.families[ss.family]; f != nil && ss.signedIn {
		info.AccountToken = f.current
	}
	return info, true
}

// sessionList returns every Session, in no particular order.
func (s *Server) sessionList() []SessionInfo {
	s.mu.Lock()
	ids := make([]string, 0, len(s.sessions))
	for id := range s.sessions {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	out := make([]SessionInfo, 0, len(ids))
	for _, id := range ids {
		if si, ok := s.sessionInfo(id); ok {
			out = append(out, si)
		}
	}
	return out
}

// tokenInfo returns the fake's record of a Session Token.
func (s *Server) tokenInfo(value string) (TokenInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tokens[value]
	if t == nil {
		return TokenInfo{}, false
	}
	return TokenInfo{SessionID: t.sessionID, ClientID: t.clientID, UserID: t.sub, Type: t.typ, JKT: t.jkt,
		Resource: t.resource, Scopes: slices.Clone(t.scopes), SignedIn: t.signedIn, Account: t.account,
		IssuedAt: t.issued, ExpiresAt: t.expires, Revoked: t.revoked}, true
}

// grantRequest is a client-authenticated token request.
type grantRequest struct {
	r      *http.Request
	x      *exchange
	form   url.Values
	client *clientInfo
	proof  *parsedProof // nil: no DPoP header
}

// renewal reports whether g renews a Session it names (a refresh or an
// assertion grant with session_id), as opposed to starting one or signing
// one in.
func (g *grantRequest) renewal() bool {
	switch g.form.Get("grant_type") {
	case grantRefreshToken, grantJWTBearer:
		return g.form.Get("session_id") != ""
	}
	return false
}

type grantFunc func(s *Server, g *grantRequest) (map[string]any, *protoError)

// serveToken handles POST token_endpoint.
func (s *Server) serveToken(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	if s.opts.Tokens.RotateNonce {
		w.Header().Set("DPoP-Nonce", s.rotateNonce(x.host))
	}
	if !s.requireFormPOST(w, r, "token endpoint") {
		return
	}
	for k, v := range x.form {
		if len(v) > 1 && k != "resource" {
			s.writeTokenError(w, r, &protoError{code: "invalid_request", desc: "parameter " + k + " appears more than once"})
			return
		}
	}
	// CO-4.3-08: token endpoint proofs get the same checks, minus ath.
	proof, perr := s.checkProof(r, proofCheck{htu: s.normalizedEndpoint(s.tokenEndpoint()), tokenEndpoint: true}, true)
	if perr != nil {
		s.writeTokenError(w, r, perr)
		return
	}
	client, perr := s.authenticateClient(r, x.form, s.tokenEndpoint())
	if perr != nil {
		s.writeTokenError(w, r, perr)
		return
	}
	if proof != nil {
		s.checkPublishedKey(x.idx, proof.jkt)
	}
	gt := x.form.Get("grant_type")
	grant := s.grants[gt]
	if grant == nil {
		code := "unsupported_grant_type"
		if gt == "" {
			code = "invalid_request"
		}
		s.writeTokenError(w, r, &protoError{code: code, desc: "grant_type is missing or not supported"})
		return
	}
	resp, perr := grant(s, &grantRequest{r: r, x: x, form: x.form, client: client, proof: proof})
	if perr != nil {
		s.writeTokenError(w, r, perr)
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Pragma", "no-cache")
	s.writeJSON(w, r, http.StatusOK, resp)
}

func (s *Server) normalizedEndpoint(raw string) string {
	u, _ := url.Parse(raw)
	return normalizeHTU(u)
}

// grantJWTBearer starts or renews a Session with a Session assertion (spec
// 4.2, RFC 7523 2.1).
func (s *Server) grantJWTBearer(g *grantRequest) (map[string]any, *protoError) {
	x := g.x
	invalid := func(code, format string, args ...any) (map[string]any, *protoError) {
		return nil, &protoError{code: code, desc: fmt.Sprintf(format, args...)}
	}
	raw := g.form.Get("assertion")
	if raw == "" {
		return invalid("invalid_grant", "assertion is missing") // CO-4.2-04
	}
	j, err := splitJWS(raw)
	if err != nil {
		return invalid("invalid_grant", "assertion is malformed") // CO-4.2-04
	}
	if typ, _ := str(j.header, "typ"); strings.EqualFold(typ, "poppy-browser+jwt") {
		return invalid("invalid_grant", "a browser assertion is not accepted at the token endpoint")
	}
	// CO-4.2-01: verified against the client's jwks_uri.
	if err := verifyWithSet(j, g.client.set); err != nil {
		ci, _, ferr := s.clientFor(g.r.Context(), x.idx, g.client.id, true)
		if ferr != nil || verifyWithSet(j, ci.set) != nil {
			return invalid("invalid_grant", "assertion signature does not verify with the client's keys")
		}
	}
	c := j.claims
	if iss, _ := str(c, "iss"); iss != g.client.id {
		return invalid("invalid_grant", "assertion iss is not the authenticated client_id") // CO-4.2-01
	}
	sub, _ := str(c, "sub")
	if sub == "" {
		return invalid("invalid_grant", "assertion sub (the User ID) is missing")
	}
	// CO-4.2-03: aud is the token endpoint as a single string.
	switch aud := c["aud"].(type) {
	case string:
		if aud != s.tokenEndpoint() {
			s.violate(x.idx, "PA-4.2-08", "Session assertion aud is not the token endpoint")
			return invalid("invalid_grant", "assertion aud must be the token endpoint")
		}
	case []any:
		s.violate(x.idx, "PA-4.2-08", "Session assertion aud is an array, not a single string")
		return invalid("invalid_grant", "assertion aud must be a single string, not an array")
	default:
		return invalid("invalid_grant", "assertion aud is missing")
	}
	now := s.clock.Now()
	if msg := s.checkLifetime(x.idx, c, now, "PA-4.2-09", "Session assertion"); msg != "" {
		return invalid("invalid_grant", "assertion %s", msg) // CO-4.2-04
	}
	jti, _ := str(c, "jti")
	if jti == "" {
		return invalid("invalid_grant", "assertion jti is missing")
	}
	if !has128Bits(jti) {
		s.violate(x.idx, "PA-4.2-10", "Session assertion jti has fewer than 128 bits")
	}
	if strings.Contains(sub, "@") {
		s.violate(x.idx, "PA-4.2-04", "the User ID looks like an email address")
	}

	sid := g.form.Get("session_id")
	var sess *session
	if sid != "" {
		s.mu.Lock()
		sess = s.sessions[sid]
		s.lapseLocked(sess, s.clock.Now())
		var state session
		lost := false // the client was refused its Account Token for this Session
		if sess != nil {
			state = *sess
			if f := s.signin.families[sess.family]; f != nil {
				lost = f.refused || f.revoked
			}
		}
		s.mu.Unlock()
		switch {
		case sess == nil || state.ended:
			return invalid("invalid_session", "the Session has ended or does not exist") // CO-4.2-10
		case state.clientID != g.client.id || state.sub != sub:
			return invalid("invalid_session", "the Session belongs to another Personal Agent or User") // CO-4.2-08
		case state.signedIn:
			// a signed-in Session is renewed with its Account Token.
			if !lost {
				s.violate(x.idx, "PA-4.2-15", "signed-in Session renewed with the JWT bearer assertion instead of the Account Token")
			}
			return invalid("invalid_grant", "the Session is signed in: renew it with the Account Token")
		}
	}
	spec, perr := s.issueSpec(g, nil)
	if perr != nil {
		return nil, perr
	}
	// CO-4.2-02: a replayed assertion jti is rejected.
	exp, _ := num(c, "exp")
	key := g.client.id + " " + jti
	s.mu.Lock()
	if s.assertJTIs.seen(key, now) {
		s.mu.Unlock()
		s.violate(x.idx, "PA-4.2-10", "Session assertion jti reused")
		return invalid("invalid_grant", "assertion jti was already used")
	}
	if sess == nil {
		// CO-4.1-08: Session starts per client_id per minute.
		if lim := s.opts.Clients.SessionStartsPerMinute; lim > 0 {
			var recent []time.Time
			for _, t := range s.starts[g.client.id] {
				if now.Sub(t) < time.Minute {
					recent = append(recent, t)
				}
			}
			s.starts[g.client.id] = recent
			if len(recent) >= lim {
				s.mu.Unlock()
				wait := int(recent[0].Add(time.Minute).Sub(now)/time.Second) + 1
				return nil, &protoError{code: "rate_limited", desc: "too many new Sessions for this client_id", retryAfter: fmt.Sprint(wait)}
			}
			s.starts[g.client.id] = append(recent, now)
		}
	}
	s.assertJTIs.add(key, time.Unix(int64(exp), 0).Add(clockLeeway), now)
	if sess == nil {
		sess = &session{id: newID("ses_", 12), clientID: g.client.id, sub: sub, created: now}
		s.sessions[sess.id] = sess
		s.sessionsStarted.Add(1)
	}
	s.mu.Unlock()
	return s.issueToken(g, sess, spec), nil
}

// has128Bits reports whether a jti can hold 128 random bits: 16 bytes once
// base64url-decoded, or 32 hex digits.
func has128Bits(jti string) bool {
	if b, err := b64.DecodeString(strings.TrimRight(jti, "=")); err == nil && len(b) >= 16 {
		return true
	}
	return len(jti) >= 32
}

// issueSpec is what a token request asks for, once validated.
type issueSpecT struct {
	typ      string
	jkt      string
	resource string
	scopes   []string // nil: all the Session has
	narrowed bool
	// authorized are the resources the sign-in's authorization named, for
	// the Account Token a sign-in grant issues (StrictResourceIndicators).
	authorized []string
}

// issueSpec validates scope, resource and the token type of a grant
// (CO-4.3-11, CO-4.3-16, A-09). available is what the Session (as it will
// be) has.
func (s *Server) issueSpec(g *grantRequest, available []string) (*issueSpecT, *protoError) {
	spec := &issueSpecT{typ: "DPoP"}
	if g.proof != nil {
		spec.jkt = g.proof.jkt
	} else {
		spec.typ = "Bearer"
	}
	if sc := strings.Fields(g.form.Get("scope")); len(sc) > 0 {
		for _, want := range sc {
			if !slices.Contains(available, want) {
				return nil, &protoError{code: "invalid_scope", desc: "scope asks for more than the Session has"}
			}
		}
		slices.Sort(sc)
		spec.scopes, spec.narrowed = slices.Compact(sc), true
	}
	res := g.form["resource"]
	if len(res) > 1 {
		return nil, &protoError{code: "invalid_target", desc: "only one resource per token request"}
	}
	if len(res) == 1 {
		if !s.knownResource(res[0]) {
			return nil, &protoError{code: "invalid_target", desc: "unknown resource"}
		}
		spec.resource = res[0]
	}
	// CO-4.3-11, A-09: a proof-less request gets a Bearer token, for the MCP
	// server only.
	if g.proof == nil && !s.isMCPURL(spec.resource) {
		return nil, &protoError{code: "invalid_target", desc: "a token request without a DPoP proof must name the MCP server as resource"}
	}
	return spec, nil
}

// knownResource reports whether the fake has a service for resource: the
// MCP url, the API's resource (API.Resource, or "https://api.{primary}/").
func (s *Server) knownResource(res string) bool {
	return s.isMCPURL(res) || res == s.apiOrigin || (s.opts.API.Resource != "" && res == s.opts.API.Resource) ||
		(s.opts.Operations.Resource != "" && res == s.opts.Operations.Resource) ||
		(s.opts.Conversations.Resource != "" && res == s.opts.Conversations.Resource)
}

// issueToken mints a Session Token for sess as spec asks and returns the
// token response (spec 4.2).
func (s *Server) issueToken(g *grantRequest, sess *session, spec *issueSpecT) map[string]any {
	now := s.clock.Now()
	s.mu.Lock()
	ttl := s.opts.Tokens.TTL
	expiresIn := int(ttl / time.Second)
	if s.expiresTimes > 0 {
		s.expiresTimes--
		expiresIn = s.expiresIn
		if s.expiresIn > 0 {
			ttl = time.Duration(s.expiresIn) * time.Second
		}
	}
	typ := spec.typ
	if len(s.tokenTypes) > 0 {
		typ = s.tokenTypes[0]
		s.tokenTypes = s.tokenTypes[1:]
	}
	scopes := slices.Clone(sess.scopes)
	if spec.narrowed {
		scopes = spec.scopes
	}
	if !sess.signedIn {
		scopes = nil
	}
	account := ""
	if sess.signedIn {
		account = sess.account
	}
	sid, signedIn := sess.id, sess.signedIn
	s.mu.Unlock()

	value := s.mintToken(sid, now, ttl)
	t := &token{value: value, sessionID: sid, clientID: sess.clientID, sub: sess.sub, typ: spec.typ, jkt: spec.jkt,
		resource: spec.resource, scopes: scopes, signedIn: signedIn, account: account, issued: now, expires: now.Add(ttl)}

	s.mu.Lock()
	if s.opts.Tokens.RevokeOnReissue {
		for _, old := range s.tokens {
			if old.sessionID == sid && old.typ == t.typ && old.resource == t.resource && !old.revoked {
				old.revoked, old.revokedForReissue = true, true
			}
		}
	}
	s.tokenSeq++
	t.seq = s.tokenSeq
	s.tokens[value] = t
	s.rememberTokenLocked(t, now)
	// A renewal of the Session's token for the same purpose less than half
	// its lifetime after the last one: two replicas renewing at once, or
	// an agent renewing too eagerly.
	key := t.typ + " " + t.resource + " " + strings.Join(scopes, " ") + " " + strconv.FormatBool(signedIn)
	if g.renewal() && sess.last.key == key && now.Sub(sess.last.issued) < sess.last.ttl/2 {
		s.earlyRenewals.Add(1)
	}
	sess.last.key, sess.last.issued, sess.last.ttl = key, now, ttl
	owner := sess.clientID + " " + sess.sub
	prev, seen := "", false
	if t.jkt != "" {
		sess.lastJKT = t.jkt
		prev, seen = s.jktOwner[t.jkt]
		if !seen {
			s.jktOwner[t.jkt] = owner
		}
	}
	s.mu.Unlock()
	if seen && prev != owner {
		s.violate(g.x.idx, "PA-4.3-02", "one DPoP key is used for two Users")
	}
	g.x.sessionID = sid
	return map[string]any{
		"access_token": value,
		"token_type":   typ,
		"expires_in":   expiresIn,
		"scope":        strings.Join(scopes, " "),
		"session_id":   sid,
		"signed_in":    signedIn,
	}
}

// signInSession signs a Session in to account with scopes on the server
// side, as a finished sign-in would, and returns a signed-in DPoP Session
// Token for it, bound to the key of the Session's latest DPoP token. It
// fails if the Session doesn't exist, has ended, has no DPoP token yet, is
// signed in to another account (account_mismatch, spec 4.4), or a scope is
// unknown.
func (s *Server) signInSession(sessionID, account string, scopes ...string) (string, error) {
	if account == "" {
		return "", errors.New("poppytest: SignInSession needs an account")
	}
	known := s.allScopes()
	for _, sc := range scopes {
		if !slices.Contains(known, sc) {
			return "", fmt.Errorf("poppytest: SignInSession: unknown scope %q", sc)
		}
	}
	now := s.clock.Now()
	s.mu.Lock()
	sess := s.sessions[sessionID]
	s.lapseLocked(sess, now)
	switch {
	case sess == nil || sess.ended:
		s.mu.Unlock()
		return "", errors.New("poppytest: SignInSession: no such active Session")
	case sess.account != "" && sess.account != account:
		s.mu.Unlock()
		return "", errors.New("poppytest: SignInSession: account_mismatch: the Session is signed in to another account")
	case sess.lastJKT == "":
		s.mu.Unlock()
		return "", errors.New("poppytest: SignInSession: the Session has no DPoP token to take the key from")
	}
	sess.signedIn, sess.account, sess.family = true, account, ""
	sc := slices.Clone(scopes)
	slices.Sort(sc)
	sess.scopes = slices.Compact(sc)
	jkt := sess.lastJKT
	s.mu.Unlock()
	value := s.mintToken(sessionID, now, s.opts.Tokens.TTL)
	s.mu.Lock()
	t := &token{value: value, sessionID: sessionID, clientID: sess.clientID, sub: sess.sub, typ: "DPoP", jkt: jkt,
		scopes: slices.Clone(sess.scopes), signedIn: true, account: account, issued: now, expires: now.Add(s.opts.Tokens.TTL)}
	s.tokens[value] = t
	s.rememberTokenLocked(t, now)
	s.mu.Unlock()
	return value, nil
}

// signOutSession signs a Session out on the server side, as revoking its
// Account Token would (spec 4.9). Its signed-in tokens then act signed out.
func (s *Server) signOutSession(sessionID string) {
	s.mu.Lock()
	if sess := s.sessions[sessionID]; sess != nil {
		sess.signedIn, sess.scopes, sess.family = false, nil, ""
	}
	s.mu.Unlock()
}
