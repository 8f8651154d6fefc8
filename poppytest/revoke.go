package poppytest

// The revocation endpoint (spec 4.9, RFC 7009).

import "net/http"

// serveRevoke handles POST revocation_endpoint (RFC 7009 2). It needs
// client authentication and no DPoP proof. An Account Token of the
// client is revoked, whichever of its values (current or rotated away) is
// sent, and every Session signed in with it is signed out, or ended with
// EndSessionsOnSignOut (CO-4.9-01, CO-4.9-02). An Account Token of another
// client is refused with 400 unauthorized_client and stays valid
// (CO-4.9-07). A Session Token of the client is revoked. Anything else is
// ignored, and the answer is 200 (RFC 7009 2.2).
func (s *Server) serveRevoke(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	if !s.requireFormPOST(w, r, "revocation endpoint") {
		return
	}
	client, perr := s.authenticateClient(r, x.form, s.revocationEndpoint())
	if perr != nil {
		s.writeTokenError(w, r, perr)
		return
	}
	tok := x.form.Get("token")
	if tok == "" {
		s.writeTokenError(w, r, &protoError{code: "invalid_request", desc: "token is missing"})
		return
	}
	hint := x.form.Get("token_type_hint")
	s.mu.Lock()
	if at := s.signin.acctTokens[tok]; at != nil {
		if at.fam.clientID != client.id {
			s.mu.Unlock()
			s.writeTokenError(w, r, &protoError{code: "unauthorized_client", desc: "the token was not issued to this client"})
			return
		}
		s.revokeFamilyLocked(at.fam)
		s.mu.Unlock()
		if hint != "refresh_token" {
			s.violate(x.idx, "PA-4.9-01", "an Account Token was revoked without token_type_hint=refresh_token")
		}
	} else {
		if t := s.tokens[tok]; t != nil && t.clientID == client.id {
			t.revoked = true
			x.sessionID = t.sessionID
		}
		s.mu.Unlock()
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}
