package poppytest

// Program mode: the fake outside a test, as a process of its own (the
// poppy fake command), inside a program that is not a test, or in an
// Example. New returns configuration errors instead of failing a test, and
// the caller reads Violations and calls Close itself. NewServer, the test
// helper (testhelper.go), is built on the same constructor.

import (
	"errors"
	"fmt"
	"slices"
)

// New starts a fake Company for a program or an Example rather than a
// test. It returns configuration errors (including a poppy.json or
// metadata that breaks a CO rule without a Misconfig switch asking for it)
// instead of failing a test. The caller must call Close, and reads what
// agents did wrong with Violations or TakeViolations: nothing is reported
// by itself. A misuse at run time that a method can't return as an error
// (a conversation that doesn't exist) panics. opts may be nil; it is
// copied.
func New(opts *Options) (*Server, error) {
	return newServer(opts)
}

// newServer configures and starts a Server.
func newServer(opts *Options) (*Server, error) {
	s := &Server{}
	s.areas = areas{signIn: SignIn{s}, faults: Faults{s}, conversations: Conversations{s}, operations: Operations{s},
		sessions: Sessions{s}, tokens: Tokens{s}}
	if opts != nil {
		s.opts = *opts
	}
	if err := s.configure(); err != nil {
		return nil, err
	}
	if err := s.start(); err != nil {
		return nil, fmt.Errorf("poppytest: %w", err)
	}
	return s, nil
}

// ProxyURL starts, on first use, the fake's HTTPS proxy (the one Env names
// in HTTPS_PROXY) and returns its URL, "http://127.0.0.1:PORT": a client
// in any language that sends https requests through it with CONNECT
// reaches every host the fake serves, and trusts the fake with the CA
// certificate of BrowserTrust (CAPEM). It fails after Close.
func (s *Server) ProxyURL() (string, error) {
	p, err := s.startProxy()
	if err != nil {
		return "", fmt.Errorf("poppytest: starting the proxy: %w", err)
	}
	if p == nil {
		return "", errors.New("poppytest: the fake is closed")
	}
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		return "", errors.New("poppytest: the fake is closed")
	}
	return "http://" + p.ln.Addr().String(), nil
}

// plainAddr returns the address of the fake's plain-HTTP listener, which
// answers every host the fake serves on port 80 (and never serves
// poppy.json, CO-3-01).
func (s *Server) plainAddr() string { return s.plainLn.Addr().String() }

// LastRequests returns the latest n requests of Requests (fewer if the log
// holds fewer), in order of arrival: what a live view of the fake reads
// without copying the whole log.
func (s *Server) LastRequests(n int) []Request {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	logged := s.loggedLocked()
	if n < 0 {
		n = 0
	}
	if len(logged) > n {
		logged = logged[len(logged)-n:]
	}
	out := make([]Request, len(logged))
	for i, r := range logged {
		out[i] = *r
		out[i].Violations = slices.Clone(r.Violations)
	}
	return out
}
