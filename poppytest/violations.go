package poppytest

import (
	"fmt"
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
	}
	s.logMu.Unlock()
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
