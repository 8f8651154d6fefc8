package poppytest

import (
	"fmt"
	"net/url"
	"strings"
)

// A Violation is a rule of the protocol that a client broke: something a
// correct Personal Agent never does, such as replaying a DPoP proof, sending a
// token in a URL or publishing a private key. Ordinary protocol flow (a
// missing or stale nonce, an expired token used once in a race, a 429) is
// never a violation.
//
// A Server created with a testing.TB reports every Violation that the test
// did not take with [Server.TakeViolations] as a test error when the test
// ends. Tests that send deliberately bad requests take their violations.
type Violation struct {
	Rule    string // requirement ID the client broke, e.g. "PA-4.3-11"
	Detail  string // what happened; never holds a token, proof or assertion
	Request int    // Request.Index of the offending request, -1 if none
	// Method and URL are the offending request's method and URL, without
	// its query and with any long path segment elided, since either may
	// hold a token; empty if none.
	Method, URL string
	// ClientID and SessionID name the agent that broke the rule: the
	// client_id of the Session the request acted on, or the one the
	// request named (its client assertion, client_id form field or query
	// parameter), and that Session. Either is "" when the request named
	// none. They are filled in once the request is answered.
	ClientID, SessionID string
}

// String gives the rule, what happened and the request:
// "PA-4.3-11: … (POST https://auth.example.test/oauth/token)".
func (v Violation) String() string {
	if v.Method == "" {
		return fmt.Sprintf("%s: %s", v.Rule, v.Detail)
	}
	return fmt.Sprintf("%s: %s (%s %s)", v.Rule, v.Detail, v.Method, v.URL)
}

// violate records a violation of rule by request idx.
func (s *Server) violate(idx int, rule, format string, args ...any) {
	v := Violation{Rule: rule, Detail: fmt.Sprintf(format, args...), Request: idx}
	s.logMu.Lock()
	s.counts.Violations++
	if r := s.requestLocked(idx); idx >= 0 && r != nil {
		r.Violations = append(r.Violations, rule)
		v.Method, v.URL = r.Method, safeURL(r.URL)
	}
	if len(s.violations) < s.maxViolations() {
		s.violations = append(s.violations, v)
		if x := s.exchanges[idx]; idx >= 0 && x != nil {
			x.violations = append(x.violations, len(s.violations)-1)
			x.violationsGen = s.violationsGen
		}
	}
	s.logMu.Unlock()
}

// nameAgent fills in ClientID and SessionID of the violations request x
// broke, once it is answered. s.logMu is not held.
func (s *Server) nameAgent(x *exchange, rec *Request) {
	s.logMu.Lock()
	n := len(x.violations)
	s.logMu.Unlock()
	if n == 0 {
		return
	}
	sid, client := x.sessionID, ""
	s.mu.Lock()
	if sess := s.sessions[sid]; sess != nil {
		client = sess.clientID
	}
	s.mu.Unlock()
	if client == "" {
		client = namedClient(rec)
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	if x.violationsGen != s.violationsGen {
		return // taken since
	}
	for _, i := range x.violations {
		if i < len(s.violations) && s.violations[i].Request == x.idx {
			s.violations[i].ClientID, s.violations[i].SessionID = client, sid
		}
	}
}

// namedClient is the client_id a request names: its client assertion's
// iss, its client_id form field or query parameter.
func namedClient(rec *Request) string {
	if j := rec.ClientAssertion; j != nil {
		if iss, ok := j.Claims["iss"].(string); ok && iss != "" {
			return iss
		}
	}
	if c := rec.Form.Get("client_id"); c != "" {
		return c
	}
	if u, err := url.Parse(rec.URL); err == nil {
		return u.Query().Get("client_id")
	}
	return ""
}

// Violations returns the violations recorded and not yet taken, in order.
func (s *Server) Violations() []Violation {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return append([]Violation(nil), s.violations...)
}

// TakeViolations returns the violations recorded and not yet taken, and
// marks them taken so they are not reported when the test ends.
func (s *Server) TakeViolations() []Violation {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	v := s.violations
	s.violations = nil
	s.violationsGen++
	return v
}

// safeURL returns u without its query, with every path segment of 32 or
// more bytes (a token, a code) replaced by "…".
func safeURL(u string) string {
	u, _, _ = strings.Cut(u, "?")
	u, _, _ = strings.Cut(u, "#")
	parts := strings.Split(u, "/")
	for i := 3; i < len(parts); i++ { // after "https:", "", host
		if len(parts[i]) >= 32 {
			parts[i] = "…"
		}
	}
	return strings.Join(parts, "/")
}
