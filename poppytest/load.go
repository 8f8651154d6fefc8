package poppytest

// The fake under load: agent products load-test against it, so its own
// cost per request must not grow with the number of requests it has seen.
//
//   - Replay windows (DPoP proof jtis, Session and client assertion jtis)
//     are a map plus a queue in order of arrival: each check drops the
//     entries at the head of the queue that have expired, so remembering
//     and forgetting a jti is O(1) amortised and the sets hold only what
//     is inside its window (jtiSet).
//   - The scan for Account Tokens sent where they don't belong looks up the
//     "pat_" values in a request in the map of Account Tokens, instead of
//     searching the request for every Account Token ever issued.
//   - The request log is a queue of at most LoadOptions.LogSize requests
//     (65,536 by default) holding at most LoadOptions.LogBytes (256 MiB by
//     default), or keeps only the requests that broke a rule; counts of
//     every request are kept apart (Server.Counts).
//   - With LoadOptions.ForgetTokensAfter, Session Tokens are forgotten that
//     long after they expire.

import (
	"maps"
	"slices"
	"strings"
	"time"
)

// defaultLogSize is how many requests the log keeps when LoadOptions.LogSize
// is zero.
const defaultLogSize = 1 << 16

// defaultLogBytes is how many bytes of requests the log keeps when
// LoadOptions.LogBytes is zero: each request may hold a 1 MiB form and
// headers beside its 64 KiB body, so a log bounded by count alone could
// hold tens of GiB.
const defaultLogBytes = 256 << 20

// LoadOptions bound what the fake keeps, for long runs. The zero value keeps
// the last DefaultLogSize requests and every Session Token.
type LoadOptions struct {
	// LogSize is how many of the latest requests Requests returns; older
	// ones are dropped (their Index stays). Zero means DefaultLogSize;
	// negative keeps every request.
	LogSize int
	// ViolationsOnly keeps in the log only the requests that broke a rule.
	// Counts still counts every request.
	ViolationsOnly bool
	// MaxViolations bounds the violations kept for Violations and
	// TakeViolations; later ones are only counted (Counts.Violations).
	// Zero means 65,536.
	MaxViolations int
	// ForgetTokensAfter, if positive, forgets a Session Token that long
	// after it expired: Token no longer finds it, and a request with it
	// gets invalid_token as an unknown token.
	ForgetTokensAfter time.Duration
	// BodyLogBytes bounds the request body kept in the log. Zero means
	// 64 KiB; negative keeps none.
	BodyLogBytes int
	// LogBytes bounds the log by bytes as well as by count: the oldest
	// requests are dropped while the requests kept hold more than this
	// (their URL, headers, form, body, proof and assertions; the latest
	// request is always kept). Zero means DefaultLogBytes; negative sets
	// no bound.
	LogBytes int
}

// Counts are totals over every request the fake received, including those
// the log no longer holds.
type Counts struct {
	Requests   int
	Dropped    int // requests no longer (or never) in the log
	Violations int // violations recorded, including those not kept
	ByEndpoint map[EndpointKind]int
	// Grants counts token requests by grant_type, and GrantErrors those
	// answered with an error.
	Grants, GrantErrors map[string]int
	// EarlyRenewals counts Session Tokens issued to renew a Session (a
	// refresh or an assertion grant naming it) less than half a lifetime
	// after the same Session got one for the same type, resource, scopes
	// and sign-in state: the mark of two replicas renewing one Session at
	// once, or of an agent renewing too eagerly. It is no violation (an
	// agent renews a token the Company rejected at once, by design), but a
	// load test of replicas can assert it stays near zero.
	EarlyRenewals int
	// SessionsStarted counts the Sessions the token endpoint started, and
	// SignIns the sign-ins it completed (each issuing an Account Token),
	// of every type.
	SessionsStarted, SignIns int
}

// Counts returns the request counts.
func (s *Server) Counts() Counts {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	c := s.counts
	c.ByEndpoint = maps.Clone(c.ByEndpoint)
	c.Grants = maps.Clone(c.Grants)
	c.GrantErrors = maps.Clone(c.GrantErrors)
	c.EarlyRenewals = int(s.earlyRenewals.Load())
	c.SessionsStarted = int(s.sessionsStarted.Load())
	c.SignIns = int(s.signIns.Load())
	return c
}

func (s *Server) logSize() int {
	switch n := s.opts.Load.LogSize; {
	case n == 0:
		return defaultLogSize
	case n < 0:
		return -1
	default:
		return n
	}
}

func (s *Server) maxViolations() int {
	if n := s.opts.Load.MaxViolations; n > 0 {
		return n
	}
	return 1 << 16
}

func (s *Server) bodyLogBytes() int {
	switch n := s.opts.Load.BodyLogBytes; {
	case n == 0:
		return maxLogBody
	case n < 0:
		return 0
	default:
		return n
	}
}

// logStart numbers a new request and, unless only violations are kept,
// puts it in the log. s.logMu is held.
func (s *Server) logStartLocked(rec *Request) {
	rec.Index = s.counts.Requests
	s.counts.Requests++
	if s.counts.ByEndpoint == nil {
		s.counts.ByEndpoint = map[EndpointKind]int{}
		s.counts.Grants = map[string]int{}
		s.counts.GrantErrors = map[string]int{}
	}
	s.counts.ByEndpoint[rec.Endpoint]++
	s.inflight[rec.Index] = rec
	if !s.opts.Load.ViolationsOnly {
		s.appendLogLocked(rec)
	}
}

// logEndLocked ends a request: counts its grant and, when only violations
// are kept, logs it if it broke a rule.
func (s *Server) logEndLocked(rec *Request) {
	delete(s.inflight, rec.Index)
	if rec.Endpoint == EndpointToken && rec.Form != nil {
		g := rec.Form.Get("grant_type")
		if len(g) > 64 {
			g = g[:64]
		}
		s.counts.Grants[g]++
		if rec.Status >= 400 {
			s.counts.GrantErrors[g]++
		}
	}
	if s.opts.Load.ViolationsOnly {
		if len(rec.Violations) > 0 {
			s.appendLogLocked(rec)
		} else {
			s.counts.Dropped++
		}
	}
}

// appendLogLocked adds rec to the log, dropping the oldest requests while
// the log holds more than LogSize requests or more than LogBytes bytes.
// The log is a queue: s.log[s.logHead:] in order of arrival (so of
// Index); the slice is compacted when half of it is dropped entries.
func (s *Server) appendLogLocked(rec *Request) {
	rec.logBytes = rec.footprint()
	s.log = append(s.log, rec)
	s.logBytes += rec.logBytes
	n, max := s.logSize(), s.logByteBudget()
	for len(s.log)-s.logHead > 1 && ((n >= 0 && len(s.log)-s.logHead > n) || (max >= 0 && s.logBytes > max)) {
		s.logBytes -= s.log[s.logHead].logBytes
		s.log[s.logHead] = nil
		s.logHead++
		s.counts.Dropped++
	}
	if s.logHead > 0 && s.logHead >= len(s.log)/2 {
		s.log = append(s.log[:0:0], s.log[s.logHead:]...)
		s.logHead = 0
	}
}

// logged returns the log in order of arrival. s.logMu is held.
func (s *Server) loggedLocked() []*Request {
	return s.log[s.logHead:]
}

// requestLocked finds request idx in flight or in the log. s.logMu is held.
func (s *Server) requestLocked(idx int) *Request {
	if r := s.inflight[idx]; r != nil {
		return r
	}
	logged := s.loggedLocked()
	// The log is in order of Index.
	i, found := slices.BinarySearchFunc(logged, idx, func(r *Request, idx int) int { return r.Index - idx })
	if found {
		return logged[i]
	}
	return nil
}

// logByteBudget is LoadOptions.LogBytes with its default; -1 means no
// bound.
func (s *Server) logByteBudget() int {
	switch n := s.opts.Load.LogBytes; {
	case n == 0:
		return defaultLogBytes
	case n < 0:
		return -1
	default:
		return n
	}
}

// footprint is about how many bytes r holds: what bounds the log by
// bytes (LoadOptions.LogBytes). It counts the strings and slices a
// request keeps (URL, headers, form, body, the decoded proof and
// assertions) plus a fixed overhead for the rest.
func (r *Request) footprint() int {
	n := 512 + len(r.URL) + len(r.Host) + len(r.Path) + len(r.Method) + len(r.Body) + len(r.AccessToken)
	for k, vs := range r.Header {
		n += len(k) + 16
		for _, v := range vs {
			n += len(v) + 16
		}
	}
	for k, vs := range r.Form {
		n += len(k) + 16
		for _, v := range vs {
			n += len(v) + 16
		}
	}
	if r.Proof != nil {
		n += 2*len(r.Proof.Compact) + len(r.Proof.RawHeader) + len(r.Proof.RawClaims)
	}
	for _, j := range []*JWT{r.Assertion, r.ClientAssertion} {
		if j != nil {
			n += 2*len(j.Compact) + len(j.RawHeader) + len(j.RawClaims)
		}
	}
	return n
}

// jtiSet remembers values (jtis) until a time, for replay checks. Entries
// are dropped from the head of a queue in order of arrival once expired,
// so add is O(1) amortised. An entry behind a longer-lived one leaves the
// queue only after it, which keeps memory within the longest window and
// never forgets a value too early: seen checks the map's own time.
type jtiSet struct {
	m    map[string]time.Time
	q    []jtiEntry
	head int
}

type jtiEntry struct {
	key   string
	until time.Time
}

func newJTISet() jtiSet { return jtiSet{m: map[string]time.Time{}} }

// seen reports whether key was added with a time after now.
func (j *jtiSet) seen(key string, now time.Time) bool {
	until, ok := j.m[key]
	return ok && now.Before(until)
}

// add remembers key until until, first forgetting what expired by now.
func (j *jtiSet) add(key string, until, now time.Time) {
	j.expire(now)
	j.m[key] = until
	j.q = append(j.q, jtiEntry{key, until})
}

func (j *jtiSet) expire(now time.Time) {
	for j.head < len(j.q) && !now.Before(j.q[j.head].until) {
		e := j.q[j.head]
		if u, ok := j.m[e.key]; ok && u.Equal(e.until) {
			delete(j.m, e.key)
		}
		j.q[j.head] = jtiEntry{}
		j.head++
	}
	if j.head > 1024 && j.head > len(j.q)/2 {
		j.q = append(j.q[:0], j.q[j.head:]...)
		j.head = 0
	}
}

func (j *jtiSet) len() int { return len(j.m) }

// tokenExpiry is a Session Token to forget at a time.
type tokenExpiry struct {
	value string
	at    time.Time
}

// rememberTokenLocked notes when to forget a new Session Token and forgets
// those due. s.mu is held.
func (s *Server) rememberTokenLocked(t *token, now time.Time) {
	after := s.opts.Load.ForgetTokensAfter
	if after <= 0 {
		return
	}
	for s.forgetHead < len(s.forget) && !now.Before(s.forget[s.forgetHead].at) {
		f := s.forget[s.forgetHead]
		if old := s.tokens[f.value]; old != nil && !now.Before(old.expires.Add(after)) {
			delete(s.tokens, f.value)
		}
		s.forget[s.forgetHead] = tokenExpiry{}
		s.forgetHead++
	}
	if s.forgetHead > 1024 && s.forgetHead > len(s.forget)/2 {
		s.forget = append(s.forget[:0], s.forget[s.forgetHead:]...)
		s.forgetHead = 0
	}
	s.forget = append(s.forget, tokenExpiry{t.value, t.expires.Add(after)})
}

// accountTokenPrefix starts every Account Token value (addAccountTokenLocked).
const accountTokenPrefix = "pat_"

// accountTokenLen is the length of an Account Token value: the prefix and
// 32 random bytes in unpadded base64url.
const accountTokenLen = len(accountTokenPrefix) + 43

// findAccountTokenLocked reports whether any of hay holds an Account Token
// value the fake issued. s.mu is held.
func (s *Server) findAccountTokenLocked(hay []string) bool {
	for _, h := range hay {
		for from := 0; ; {
			i := strings.Index(h[from:], accountTokenPrefix)
			if i < 0 {
				break
			}
			i += from
			if i+accountTokenLen <= len(h) {
				if _, ok := s.signin.acctTokens[h[i:i+accountTokenLen]]; ok {
					return true
				}
			}
			from = i + 1
		}
	}
	return false
}
