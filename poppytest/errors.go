package poppytest

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// protoError is an error answer: an OAuth error at the token endpoint, a
// WWW-Authenticate challenge at resources.
type protoError struct {
	status     int
	code       string
	desc       string // never holds a token, proof or assertion
	scope      string // insufficient_scope: the scopes the action requires
	nonce      bool   // send DPoP-Nonce
	retryAfter string
	challenge  bool   // resources: send WWW-Authenticate
	extension  string // extension_required: the extension's name
	bearer     bool   // the MCP server: a Bearer challenge (RFC 6750)
}

func oauthError(code, desc string) map[string]any {
	m := map[string]any{"error": code}
	if desc != "" {
		m["error_description"] = desc
	}
	return m
}

// tokenErrStatus is the status of each token endpoint error (spec 4.2,
// CO-4.2-11).
func tokenErrStatus(code string) int {
	switch code {
	case "invalid_client":
		return http.StatusUnauthorized
	case "rate_limited":
		return http.StatusTooManyRequests
	}
	return http.StatusBadRequest
}

// resourceErrStatus is the status of each resource error (spec 6, A-07).
func resourceErrStatus(code string) int {
	switch code {
	case "invalid_token", "invalid_dpop_proof", "use_dpop_nonce":
		return http.StatusUnauthorized
	case "sign_in_required", "insufficient_scope", "extension_required":
		return http.StatusForbidden
	case "rate_limited":
		return http.StatusTooManyRequests
	case "invalid_client":
		return http.StatusUnauthorized
	}
	return http.StatusBadRequest
}

func isDPoPError(code string) bool {
	return code == "invalid_dpop_proof" || code == "use_dpop_nonce"
}

// isChallengeError reports whether a resource error goes in WWW-Authenticate.
func isChallengeError(code string) bool {
	switch code {
	case "invalid_token", "invalid_dpop_proof", "use_dpop_nonce", "sign_in_required", "insufficient_scope", "invalid_request":
		return true
	}
	return false
}

// dpopError builds a DPoP proof error for r's endpoint: 400 at the token
// endpoint, 401 at resources.
func (s *Server) dpopError(r *http.Request, code, desc string) *protoError {
	e := &protoError{code: code, desc: desc, nonce: code == "use_dpop_nonce", challenge: true}
	if exchangeOf(r).endpoint == EndpointToken || exchangeOf(r).endpoint == EndpointRevoke {
		e.status = http.StatusBadRequest
	} else {
		e.status = http.StatusUnauthorized
	}
	return e
}

// writeJSON writes v as JSON with status, adding Noise when configured.
func (s *Server) writeJSON(w http.ResponseWriter, r *http.Request, status int, v any) {
	if s.opts.Noise {
		v = addNoise(v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "poppytest: cannot encode response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		w.Write(b)
	}
}

// writeTokenError answers a token or revocation endpoint request with an
// OAuth error (RFC 6749 5.2, spec 4.2).
func (s *Server) writeTokenError(w http.ResponseWriter, r *http.Request, e *protoError) {
	x := exchangeOf(r)
	x.errorCode = e.code
	if e.status == 0 {
		e.status = tokenErrStatus(e.code)
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Pragma", "no-cache")
	if isDPoPError(e.code) {
		h.Set("WWW-Authenticate", challenge(e))
	}
	if e.nonce {
		h.Set("DPoP-Nonce", s.currentNonce(x.host))
	}
	if e.retryAfter != "" {
		h.Set("Retry-After", e.retryAfter)
	}
	s.writeJSON(w, r, e.status, oauthError(e.code, e.desc))
}

// writeResourceError answers an API request with a token or DPoP error in
// WWW-Authenticate (RFC 9449 7.1, RFC 6750 3, spec 6) and the same error
// as a JSON body.
func (s *Server) writeResourceError(w http.ResponseWriter, r *http.Request, e *protoError) {
	x := exchangeOf(r)
	x.errorCode = e.code
	if e.status == 0 {
		e.status = resourceErrStatus(e.code)
	}
	h := w.Header()
	if e.challenge || isChallengeError(e.code) {
		h.Set("WWW-Authenticate", challenge(e))
	}
	if e.nonce {
		h.Set("DPoP-Nonce", s.currentNonce(x.host))
	}
	if e.retryAfter != "" {
		h.Set("Retry-After", e.retryAfter)
	}
	body := oauthError(e.code, e.desc)
	if e.scope != "" {
		body["scope"] = e.scope
	}
	if e.code == "extension_required" {
		body["extension"] = e.extension
	}
	s.writeJSON(w, r, e.status, body)
}

// challenge renders a DPoP WWW-Authenticate challenge. sign_in_required and
// insufficient_scope take exactly the form of the spec 6 example:
// DPoP error="insufficient_scope", scope="poppy:read poppy:write".
func challenge(e *protoError) string {
	var b strings.Builder
	if e.bearer {
		b.WriteString("Bearer ")
	} else {
		b.WriteString("DPoP ")
	}
	if e.code != "" {
		b.WriteString(`error="` + e.code + `"`)
	}
	if e.scope != "" {
		b.WriteString(`, scope="` + e.scope + `"`)
	}
	if e.code == "sign_in_required" || e.code == "insufficient_scope" {
		return b.String()
	}
	if e.desc != "" {
		b.WriteString(`, error_description="` + quoteSafe(e.desc) + `"`)
	}
	if e.bearer {
		return b.String()
	}
	if e.code != "" {
		b.WriteString(", ")
	}
	b.WriteString(`algs="ES256"`)
	return b.String()
}

// quoteSafe keeps the characters RFC 6750 allows in error_description.
func quoteSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e || r == '"' || r == '\\' {
			return '\''
		}
		return r
	}, s)
}
