package poppytest

import "fmt"

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
	Request int    // index into Requests() of the offending request, -1 if none
}

func (v Violation) String() string {
	return fmt.Sprintf("%s: %s (request %d)", v.Rule, v.Detail, v.Request)
}

// violate records a violation of rule by request idx.
func (s *Server) violate(idx int, rule, format string, args ...any) {
	v := Violation{Rule: rule, Detail: fmt.Sprintf(format, args...), Request: idx}
	s.logMu.Lock()
	s.violations = append(s.violations, v)
	if idx >= 0 && idx < len(s.log) {
		s.log[idx].Violations = append(s.log[idx].Violations, rule)
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
