package poppytest

import (
	"net/http"
)

// Runtime knobs. Every method is safe for concurrent use with requests.

// fault is one queued injected answer.
type fault struct {
	status     int
	code       string
	retryAfter string
	rateLimit  bool
	n          int
}

// Faults are the errors the fake injects at an endpoint, from
// [Server.Faults]: 429s (RateLimit) and any other error answer
// (ForceError).
type Faults struct{ s *Server }

// Faults returns the fault knobs.
func (s *Server) Faults() *Faults { return &s.areas.faults }

// RateLimit answers the next n requests to ep with 429
// {"error":"rate_limited"} and, unless retryAfter is "", that Retry-After
// header value (delta-seconds or an HTTP-date) (CO-4.3-21, CO-4.2-11).
func (k *Faults) RateLimit(ep EndpointKind, n int, retryAfter string) {
	s := k.s
	s.queueFault(ep, &fault{status: http.StatusTooManyRequests, code: "rate_limited", retryAfter: retryAfter, rateLimit: true, n: n})
}

// Fault is an error answer that [Faults.ForceError] injects.
type Fault struct {
	// Status is the HTTP status; 0 picks the protocol status for Code.
	Status int
	// Code is the error code; "" answers {} with Status.
	Code string
	// RetryAfter, if set, is sent as the Retry-After header.
	RetryAfter string
	// Times is how many requests get the fault. Default 1.
	Times int
}

// ForceError answers the next f.Times requests to ep with the fault f, for
// example ForceError(EndpointRevoke, Fault{Status: 503}). At the token,
// revocation and device authorization endpoints it is an OAuth JSON error;
// at the authorization endpoint, once client_id and redirect_uri check
// out, a redirect to redirect_uri with error=code, state and iss (a
// status-only fault, Code "", answers there with a page instead); at
// resources and the mediated endpoint a token or DPoP error code goes in
// WWW-Authenticate: DPoP error="…" (with the scopes "poppy:read
// poppy:write" for insufficient_scope, a fresh DPoP-Nonce for
// use_dpop_nonce) and in a JSON body; other codes only in the body, with
// "extension":"operations" added for extension_required. The
// request is not processed.
func (k *Faults) ForceError(ep EndpointKind, f Fault) {
	s := k.s
	if f.Times == 0 {
		f.Times = 1
	}
	s.queueFault(ep, &fault{status: f.Status, code: f.Code, retryAfter: f.RetryAfter, n: f.Times})
}

func (s *Server) queueFault(ep EndpointKind, f *fault) {
	if f.n <= 0 {
		return
	}
	s.mu.Lock()
	s.faults[ep] = append(s.faults[ep], f)
	s.mu.Unlock()
}

// applyFaults answers r with the next queued fault of its endpoint, if
// any, and reports whether it did.
func (s *Server) applyFaults(w http.ResponseWriter, r *http.Request, x *exchange) bool {
	if x.endpoint == EndpointAuthorize {
		return false // serveAuthorize takes its faults once the redirect_uri is known
	}
	f, ok := s.takeFault(x.endpoint)
	if !ok {
		return false
	}
	s.writeFault(w, r, x, f)
	return true
}

// takeFault dequeues the next fault of ep.
func (s *Server) takeFault(ep EndpointKind) (fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.faults[ep]
	if len(q) == 0 {
		return fault{}, false
	}
	f := *q[0]
	q[0].n--
	if q[0].n <= 0 {
		s.faults[ep] = q[1:]
	}
	return f, true
}

// writeFault answers r with the injected fault f.
func (s *Server) writeFault(w http.ResponseWriter, r *http.Request, x *exchange, f fault) {
	e := &protoError{status: f.status, code: f.code, retryAfter: f.retryAfter, desc: "injected by poppytest", extension: "operations"}
	if f.code == "" {
		x.errorCode = ""
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		s.writeJSON(w, r, f.status, map[string]any{})
		return
	}
	switch x.endpoint {
	case EndpointToken, EndpointRevoke, EndpointDevice:
		e.nonce = f.code == "use_dpop_nonce"
		s.writeTokenError(w, r, e)
	case EndpointAPI, EndpointConversation, EndpointOperations, EndpointMCP, EndpointSignIn:
		if isChallengeError(f.code) {
			e.challenge = true
			e.bearer = x.endpoint == EndpointMCP
			e.nonce = f.code == "use_dpop_nonce"
			if f.code == "insufficient_scope" {
				e.scope = s.signin.read + " " + s.signin.write
			}
		}
		s.writeResourceError(w, r, e)
	default:
		x.errorCode = f.code
		if e.status == 0 {
			e.status = resourceErrStatus(f.code)
		}
		if f.retryAfter != "" {
			w.Header().Set("Retry-After", f.retryAfter)
		}
		s.writeJSON(w, r, e.status, oauthError(f.code, e.desc))
	}
}

// setTokenType answers the next token request that issues a token with
// token_type t, whatever the token really is (PA-4.2-12).
func (s *Server) setTokenType(t string) {
	s.mu.Lock()
	s.tokenTypes = append(s.tokenTypes, t)
	s.mu.Unlock()
}

// setExpiresIn answers the next times token responses that issue a token
// with expires_in seconds (see Tokens.SetExpiresIn).
func (s *Server) setExpiresIn(seconds, times int) {
	if times <= 0 {
		times = 1
	}
	s.mu.Lock()
	s.expiresIn, s.expiresTimes = seconds, times
	s.mu.Unlock()
}

// endSession ends a Session: its tokens stop working (invalid_token) and
// renewing it returns invalid_session (CO-4.2-10).
func (s *Server) endSession(sessionID string) {
	s.mu.Lock()
	if ss := s.sessions[sessionID]; ss != nil {
		ss.ended = true
	}
	s.mu.Unlock()
}

// revokeClient revokes a client_id: its next token or revocation request
// gets 401 invalid_client (CO-4.1-07).
func (s *Server) revokeClient(clientID string) {
	s.mu.Lock()
	s.revoked[clientID] = true
	s.mu.Unlock()
}
