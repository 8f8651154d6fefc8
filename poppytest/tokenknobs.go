package poppytest

// expireToken makes the Session Token value (DPoP or Bearer) expire now, by
// the Company's records, while the client still holds it as valid: its
// next use gets 401 invalid_token (PA-6-05). It reports whether the fake
// issued the token.
func (s *Server) expireToken(value string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tokens[value]
	if t == nil {
		return false
	}
	t.expires = s.clock.Now()
	return true
}

// revokeToken revokes the Session Token value on the Company's side: its
// next use gets 401 invalid_token, and the Session goes on (a new token for
// it is issued as usual). It reports whether the fake issued the token.
func (s *Server) revokeToken(value string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tokens[value]
	if t == nil {
		return false
	}
	t.revoked = true
	return true
}
