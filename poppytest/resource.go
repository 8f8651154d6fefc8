package poppytest

// The resource server on https://api.{primary} (spec 4.3, 6).
//
// authenticate applies to every request except GET /openapi.json (A-09:
// the description is public; a token sent with it is ignored). In order:
// exactly one Authorization header with the DPoP scheme (a token in the
// URL is never read); the DPoP proof with ath (dpop.go); the token is
// known, a DPoP token, unexpired by the Clock, unrevoked, its Session not
// ended; the proof key is the token's key (invalid_dpop_proof, A-07); the
// token was issued for this service's resource. The token then acts as it
// was issued (CO-4.4-13), except that a Session signed out since then makes
// a signed-in token act signed out (spec 4.9).

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
)

// auth is an authenticated resource request.
type auth struct {
	tok      *token
	signedIn bool
	scopes   []string
	account  string
}

// apiResource is the resource a token must carry at the API: API.Resource
// when set, else none or "https://api.{primary}/".
func (s *Server) apiAccepts(res string) bool {
	if s.opts.API.Resource != "" {
		return res == s.opts.API.Resource
	}
	return res == "" || res == s.apiOrigin
}

func (s *Server) authenticate(w http.ResponseWriter, r *http.Request, accepts func(string) bool) (*auth, bool) {
	x := exchangeOf(r)
	fail := func(e *protoError) (*auth, bool) {
		s.writeResourceError(w, r, e)
		return nil, false
	}
	invalidToken := func(desc string) (*auth, bool) {
		return fail(&protoError{code: "invalid_token", desc: desc, challenge: true})
	}
	authz := r.Header.Values("Authorization")
	if len(authz) == 0 {
		// CO-4.3-20: a token in the URL is never accepted.
		if q := r.URL.Query(); q.Has("access_token") {
			s.violate(x.idx, "PA-4.3-26", "access_token sent as a URL query parameter")
			return invalidToken("tokens are accepted only in the Authorization header")
		}
		s.violate(x.idx, "PA-4.3-23", "API request without a Session Token")
		return fail(&protoError{code: "invalid_token", desc: "the request has no Session Token", challenge: true})
	}
	if len(authz) > 1 {
		return fail(&protoError{status: http.StatusBadRequest, code: "invalid_request", desc: "more than one Authorization header", challenge: true})
	}
	scheme, value, _ := strings.Cut(authz[0], " ")
	value = strings.TrimSpace(value)
	x.authScheme, x.accessToken = scheme, value
	s.mu.Lock()
	t := s.tokens[value]
	var tc token
	if t != nil {
		tc = *t
	}
	s.mu.Unlock()
	if !strings.EqualFold(scheme, "DPoP") {
		// CO-4.3-14, CO-4.3-15: Bearer is for MCP only; DPoP everywhere else.
		switch {
		case t != nil && tc.typ == "Bearer":
			s.violate(x.idx, "PA-4.3-19", "a Bearer Session Token was sent to a DPoP API")
		case t != nil:
			s.violate(x.idx, "PA-4.3-01", "a DPoP-bound Session Token was sent with the %s scheme", scheme)
		default:
			s.violate(x.idx, "PA-4.3-01", "Authorization scheme %q at a DPoP API", scheme)
		}
		return invalidToken("this API accepts only DPoP-bound Session Tokens with the DPoP scheme")
	}
	if value == "" {
		return invalidToken("the Authorization header has no token")
	}
	if t != nil {
		x.sessionID = tc.sessionID
	}
	if _, perr := s.checkProof(r, proofCheck{htu: requestHTU(r), token: value}, false); perr != nil {
		if len(r.Header.Values("DPoP")) == 0 {
			s.violate(x.idx, "PA-4.3-01", "Session Token sent without a DPoP proof")
		}
		return fail(perr)
	}
	proofJKT := x.proof.JKT
	now := s.clock.Now()
	s.mu.Lock()
	var sess session
	if t != nil && s.sessions[tc.sessionID] != nil {
		s.lapseLocked(s.sessions[tc.sessionID], now)
		sess = *s.sessions[tc.sessionID]
	}
	s.mu.Unlock()
	if t != nil {
		s.checkSuperseded(x.idx, &tc, now)
	}
	switch {
	case t == nil:
		return invalidToken("unknown token")
	case tc.typ != "DPoP":
		s.violate(x.idx, "PA-4.3-19", "a Bearer Session Token was sent to a DPoP API")
		return invalidToken("a Bearer token is accepted only at the MCP server")
	case !now.Before(tc.expires):
		return invalidToken("the token has expired")
	case tc.revoked:
		return invalidToken("the token has been revoked")
	case sess.ended || sess.id == "":
		return invalidToken("the Session has ended")
	case tc.jkt != proofJKT:
		// CO-4.3-03, A-07.
		return fail(s.dpopError(r, "invalid_dpop_proof", "the proof key is not the key the token is bound to"))
	case !accepts(tc.resource):
		// CO-4.3-18.
		return invalidToken("the token was not issued for this resource")
	}
	s.useToken(&tc, now)
	a := &auth{tok: &tc}
	// CO-4.9-03: a signed-in token acts signed in only while its Session is
	// still signed in to that account, unless NoLiveSignInCheck.
	if tc.signedIn && (s.opts.SignIn.NoLiveSignInCheck || (sess.signedIn && sess.account == tc.account)) {
		a.signedIn, a.scopes, a.account = true, tc.scopes, tc.account
	}
	return a, true
}

// require answers 403 sign_in_required or insufficient_scope unless a is
// signed in with every scope in need (spec 6, A-21: scope names the full
// set the action requires).
func (s *Server) require(w http.ResponseWriter, r *http.Request, a *auth, need ...string) bool {
	if !a.signedIn {
		s.writeResourceError(w, r, &protoError{code: "sign_in_required", desc: "this request needs a signed-in Session Token", challenge: true})
		return false
	}
	for _, sc := range need {
		if !slices.Contains(a.scopes, sc) {
			s.writeResourceError(w, r, &protoError{code: "insufficient_scope", scope: strings.Join(need, " "), challenge: true})
			return false
		}
	}
	return true
}

// serveAPI routes the OpenAPI resource server.
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	if s.opts.Tokens.RotateNonce {
		w.Header().Set("DPoP-Nonce", s.rotateNonce(x.host))
	}
	path := r.URL.Path
	if path == "/openapi.json" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			x.errorCode = "method_not_allowed"
			s.writeJSON(w, r, http.StatusMethodNotAllowed, map[string]any{"error": "method_not_allowed"})
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "max-age=300")
		w.Write(s.openapi)
		return
	}
	a, ok := s.authenticate(w, r, s.apiAccepts)
	if !ok {
		return
	}
	seg := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case r.Method == http.MethodGet && path == "/products":
		s.writeJSON(w, r, http.StatusOK, map[string]any{"products": s.products(r.URL.Query())})
	case r.Method == http.MethodGet && path == "/orders":
		if !s.require(w, r, a, s.signin.read) {
			return
		}
		s.writeJSON(w, r, http.StatusOK, map[string]any{"orders": []any{
			map[string]any{"id": "ord_7Hk2", "number": "1042", "status": "delivered", "account": a.account},
		}})
	case r.Method == http.MethodPost && len(seg) == 3 && seg[0] == "orders" && seg[2] == "exchanges":
		if !s.require(w, r, a, s.signin.read, s.signin.write) {
			return
		}
		var req map[string]any
		if len(x.body) > 0 && json.Unmarshal(x.body, &req) != nil {
			x.errorCode = "invalid_request"
			s.writeJSON(w, r, http.StatusBadRequest, oauthError("invalid_request", "the body is not a JSON object"))
			return
		}
		s.serveExchange(w, r, a, seg[1], req)
	case r.Method == http.MethodDelete && len(seg) == 2 && seg[0] == "orders":
		// CO-4-01: a policy denial, not a token error: no WWW-Authenticate.
		x.errorCode = "forbidden"
		s.writeJSON(w, r, http.StatusForbidden, oauthError("forbidden", "Personal Agents may not delete orders"))
	case r.Method == http.MethodPost && path == "/echo":
		if !json.Valid(x.body) {
			x.errorCode = "invalid_request"
			s.writeJSON(w, r, http.StatusBadRequest, oauthError("invalid_request", "the body is not JSON"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write(x.body) // verbatim, without Noise
	default:
		if !s.serveAddresses(w, r, a) {
			s.notFound(w, r)
		}
	}
}
