package poppytest

// The refresh_token grant: using an Account Token (spec 4.8, RFC 6749 6).
//
// Checks, in order: the Account Token is known and issued to this client
// (CO-4.8-04), not revoked, not expired (CO-4.8-10), and current (a value
// a rotation replaced works only within RotationGrace); the Session, if
// named, exists, belongs to the token's client_id and User ID (CO-4.8-05)
// and is signed out or signed in to the token's account (CO-4.8-06); the
// scope asks for no more than the token has (CO-4.8-07). Then the Session
// (or, without session_id, a new one) is signed in with the token, and
// with RotateAccountTokens the token gets a new value, which the response
// carries with the remaining lifetime: a rotation never extends the
// lifetime (CO-4.8-08, A-16). Without rotation the response has no
// refresh_token (CO-4.8-02).

import "time"

// grantRefreshToken handles grant_type=refresh_token.
func (s *Server) grantRefreshToken(g *grantRequest) (map[string]any, *protoError) {
	x := g.x
	invalid := func(code, desc string) (map[string]any, *protoError) {
		return nil, &protoError{code: code, desc: desc}
	}
	value := g.form.Get("refresh_token")
	if value == "" {
		return invalid("invalid_request", "refresh_token is missing")
	}
	sid := g.form.Get("session_id")
	now := s.clock.Now()
	var violation, vdetail string
	defer func() {
		if violation != "" {
			s.violate(x.idx, violation, "%s", vdetail)
		}
	}()

	s.mu.Lock()
	at := s.signin.acctTokens[value]
	if at == nil || at.fam.clientID != g.client.id {
		s.mu.Unlock()
		return invalid("invalid_grant", "unknown Account Token") // CO-4.8-04
	}
	f := at.fam
	switch {
	case f.revoked:
		f.refused = true
		s.mu.Unlock()
		return invalid("invalid_grant", "the Account Token has been revoked") // CO-4.8-10
	case !f.expires.IsZero() && !now.Before(f.expires):
		if now.Sub(f.expires) > expiredGrace {
			violation, vdetail = "PA-4.4-12", "an Account Token was used after refresh_token_expires_in"
		}
		f.refused = true
		s.mu.Unlock()
		return invalid("invalid_grant", "the Account Token has expired") // CO-4.8-08, CO-4.8-10
	case !at.replaced.IsZero() && now.Sub(at.replaced) >= s.opts.SignIn.RotationGrace:
		violation, vdetail = "PA-4.8-04", "an Account Token that a rotation replaced was used again"
		f.refused = true
		s.mu.Unlock()
		return invalid("invalid_grant", "the Account Token was replaced by rotation")
	}
	var sess *session
	if sid != "" {
		sess = s.sessions[sid]
		s.lapseLocked(sess, now)
		switch {
		case sess == nil || sess.ended:
			s.mu.Unlock()
			return invalid("invalid_session", "the Session has ended or does not exist")
		case sess.clientID != f.clientID || sess.sub != f.sub:
			s.mu.Unlock()
			return invalid("invalid_session", "the Session belongs to another Personal Agent or User") // CO-4.8-05
		case sess.account != "" && sess.account != f.account:
			violation, vdetail = "PA-4.4-13", "one account's Account Token was sent with a Session of another account"
			s.mu.Unlock()
			return nil, accountMismatch() // CO-4.8-06
		}
	}
	spec, perr := s.issueSpec(g, f.scopes) // CO-4.8-07
	if perr != nil {
		s.mu.Unlock()
		return nil, perr
	}
	sendToken := false
	if s.opts.SignIn.RotateAccountTokens {
		sendToken = true
		if at.replaced.IsZero() {
			// CO-4.8-09: the old value dies at once, or after RotationGrace.
			at.replaced = now
			s.addAccountTokenLocked(f)
		}
	}
	// StrictResourceIndicators: checked after the rotation, as
	// oidc-provider does, so a refused refresh has used the value up.
	if f.kind != "mediated" {
		if perr := s.holdToGranted(spec, g, f.resources, false); perr != nil {
			s.mu.Unlock()
			return nil, perr
		}
	}
	if sess == nil {
		sess = &session{id: newID("ses_", 12), clientID: f.clientID, sub: f.sub, created: now}
		s.sessions[sess.id] = sess
		s.sessionsStarted.Add(1)
	}
	sess.signedIn, sess.account, sess.scopes, sess.family = true, f.account, append([]string(nil), f.scopes...), f.id
	current, expires := f.current, f.expires
	s.mu.Unlock()

	resp := s.issueToken(g, sess, spec) // CO-4.8-01
	if sendToken {
		resp["refresh_token"] = current
		if !expires.IsZero() {
			resp["refresh_token_expires_in"] = int(expires.Sub(now).Round(time.Second) / time.Second)
		}
	}
	return resp, nil
}
