package poppytest

// Mediated Sign-In (spec 4.7) at auth.mediated.endpoint and
// {endpoint}/{sign_in_id}.
//
// Both take a DPoP Session Token with its proof, authenticated like any
// DPoP resource (resource.go: Bearer tokens and missing proofs are
// refused), and a JSON body. The answers:
//
//	200 {"status":"complete", …spec 4.4 fields}   signed in
//	200 {"status":"code_required", "sign_in_id", "code":{"sent_to"}, "expires_at"}
//	200 {"status":"failed"}                         wrong credentials, or too many wrong codes
//	200 {"status":"expired"}                        a code submitted after expires_at
//	400 {"error":"invalid_request"}                 not JSON, a field missing or extra, a value not a string
//	400 {"error":"invalid_scope"}                   scope missing, unknown or not listed for mediated
//	400 {"error":"account_mismatch"}                the Session is signed in to another account
//	404 {"error":"sign_in_not_found"}               unknown sign_in_id, finished, or started by another Session
//	429 {"error":"rate_limited"} + Retry-After      too many failures for this client and account
//
// Failures (wrong credentials, wrong codes) are counted per client_id and
// account (the values of the non-secret fields) over a minute of Clock
// time; MediatedFailuresPerMinute of them make every further attempt a 429
// until the oldest is a minute old (CO-4.7-06). No answer ever carries a
// credential (CO-4.7-07).

import (
	"crypto/rand"
	"encoding/json"
	"fmt"
	"math/big"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"
)

// sentTo is code.sent_to of every one-time code the fake sends.
const sentTo = "Text to the phone number ending in 71"

// A SentCode is a one-time code the Company sent the User during a
// Mediated Sign-In (CO-4.7-02): what the User reads on their phone.
type SentCode struct {
	SignInID  string
	Account   string
	Code      string // six digits
	SentTo    string
	ExpiresAt time.Time
}

// mediatedSignIn is a Mediated Sign-In waiting for its one-time code.
type mediatedSignIn struct {
	id        string
	sessionID string
	clientID  string
	account   string
	scopes    []string
	code      string
	expires   time.Time
	attempts  int
	limitKey  string
}

// Outbox returns every one-time code the fake has sent, oldest first.
func (k *SignIn) Outbox() []SentCode {
	s := k.s
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.signin.outbox)
}

// LastCode returns the latest one-time code the fake sent, as the User
// would read it from their phone, or "" if none. A test answering the
// agent's request for the code (code_required) returns it.
func (k *SignIn) LastCode() string {
	s := k.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := len(s.signin.outbox); n > 0 {
		return s.signin.outbox[n-1].Code
	}
	return ""
}

// serveMediated handles the mediated endpoint and its code URLs.
func (s *Server) serveMediated(w http.ResponseWriter, r *http.Request) {
	x := exchangeOf(r)
	if s.opts.Tokens.RotateNonce {
		w.Header().Set("DPoP-Nonce", s.rotateNonce(x.host))
	}
	if !s.signInOffered("mediated") {
		s.notFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		x.errorCode = "method_not_allowed"
		s.writeJSON(w, r, http.StatusMethodNotAllowed, map[string]any{"error": "method_not_allowed"})
		return
	}
	a, ok := s.authenticate(w, r, func(res string) bool { return res == "" })
	if !ok {
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	fail := func(status int, code, desc string) {
		x.errorCode = code
		w.Header().Set("Cache-Control", "no-store")
		s.writeJSON(w, r, status, oauthError(code, desc))
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		s.violate(x.idx, "PA-4.7-02", "Mediated Sign-In body is not application/json")
		fail(http.StatusBadRequest, "invalid_request", "the body must be application/json")
		return
	}
	var body map[string]json.RawMessage
	if json.Unmarshal(x.body, &body) != nil || body == nil {
		fail(http.StatusBadRequest, "invalid_request", "the body must be a JSON object")
		return
	}
	endpointPath := strings.TrimPrefix(s.mediatedEndpoint(), "https://"+s.authHost)
	if r.URL.Path == endpointPath {
		s.mediatedStart(w, r, a, body, fail)
		return
	}
	id := strings.TrimPrefix(r.URL.Path, endpointPath+"/")
	if id == "" || strings.Contains(id, "/") {
		fail(http.StatusNotFound, "sign_in_not_found", "unknown sign-in")
		return
	}
	s.mediatedCode(w, r, a, id, body, fail)
}

type failFunc func(status int, code, desc string)

// mediatedStart handles POST auth.mediated.endpoint.
func (s *Server) mediatedStart(w http.ResponseWriter, r *http.Request, a *auth, body map[string]json.RawMessage, fail failFunc) {
	x := exchangeOf(r)
	var scope string
	if raw, ok := body["scope"]; ok && json.Unmarshal(raw, &scope) != nil {
		fail(http.StatusBadRequest, "invalid_scope", "scope must be a string")
		return
	}
	scopes, desc, malformed := s.parseScope("mediated", scope)
	if desc != "" {
		if malformed {
			s.violate(x.idx, "PA-4.4-06", "scope is not single-space separated scope tokens")
		}
		fail(http.StatusBadRequest, "invalid_scope", desc) // CO-4.4-07..09, A-15
		return
	}
	var creds map[string]any
	if raw, ok := body["credentials"]; !ok || json.Unmarshal(raw, &creds) != nil || creds == nil {
		s.violate(x.idx, "PA-4.7-02", "Mediated Sign-In body has no credentials object")
		fail(http.StatusBadRequest, "invalid_request", "credentials must be an object")
		return
	}
	var missing []string
	values := map[string]string{}
	for _, f := range s.opts.SignIn.MediatedFields {
		v, ok := creds[f.Name]
		if !ok {
			missing = append(missing, f.Name)
			continue
		}
		sv, ok := v.(string)
		if !ok {
			fail(http.StatusBadRequest, "invalid_request", "credential "+f.Name+" must be a string")
			return
		}
		values[f.Name] = sv
	}
	if len(missing) > 0 {
		s.violate(x.idx, "PA-4.7-01", "credentials lack the field(s) %s listed in auth.mediated.fields", strings.Join(missing, ", "))
		fail(http.StatusBadRequest, "invalid_request", "credentials lack the field(s) "+strings.Join(missing, ", "))
		return
	}
	for k := range creds {
		if _, ok := values[k]; !ok {
			fail(http.StatusBadRequest, "invalid_request", "credentials has a field that auth.mediated.fields doesn't list: "+k)
			return
		}
	}
	// The rate limit key: the client and the account as named by the
	// non-secret fields.
	key := a.tok.clientID
	for _, f := range s.opts.SignIn.MediatedFields {
		if !f.Secret {
			key += "\x00" + values[f.Name]
		}
	}
	now := s.clock.Now()
	if s.rateLimited(w, r, key, now) {
		return
	}
	var acct *Account
	for i := range s.signin.accounts {
		ac := &s.signin.accounts[i]
		match := true
		for _, f := range s.opts.SignIn.MediatedFields {
			if ac.Credentials[f.Name] != values[f.Name] {
				match = false
				break
			}
		}
		if match {
			acct = ac
			break
		}
	}
	if acct == nil {
		// CO-4.7-09: wrong credentials end the sign-in; nothing is issued.
		s.recordFailure(key, now)
		s.writeJSON(w, r, http.StatusOK, map[string]any{"status": "failed"})
		return
	}
	s.mu.Lock()
	sess := s.sessions[a.tok.sessionID]
	mismatch := sess != nil && sess.account != "" && sess.account != acct.ID
	unusual := s.opts.SignIn.UnusualOnNewKey && !s.signin.keysSeen[acct.ID][a.tok.jkt]
	s.mu.Unlock()
	if mismatch {
		fail(http.StatusBadRequest, "account_mismatch", "the Session is signed in to another account: start a new Session") // CO-4.4-12
		return
	}
	if s.opts.SignIn.RequireCode || acct.RequireCode || unusual {
		// CO-4.7-02, CO-4.7-08
		si := &mediatedSignIn{id: newID("sgn_", 9), sessionID: a.tok.sessionID, clientID: a.tok.clientID,
			account: acct.ID, scopes: scopes, code: sixDigits(), expires: now.Add(s.opts.SignIn.CodeTTL), limitKey: key}
		s.mu.Lock()
		s.signin.signIns[si.id] = si
		s.signin.outbox = append(s.signin.outbox, SentCode{SignInID: si.id, Account: acct.ID, Code: si.code, SentTo: sentTo, ExpiresAt: si.expires})
		s.mu.Unlock()
		s.writeCodeRequired(w, r, si)
		return
	}
	s.mediatedComplete(w, r, a, sess, acct.ID, scopes, fail)
}

// mediatedCode handles POST {endpoint}/{sign_in_id}.
func (s *Server) mediatedCode(w http.ResponseWriter, r *http.Request, a *auth, id string, body map[string]json.RawMessage, fail failFunc) {
	x := exchangeOf(r)
	if _, ok := body["credentials"]; ok {
		s.violate(x.idx, "PA-4.7-09", "the code submission sent the credentials again")
	}
	var code string
	if raw, ok := body["code"]; !ok || json.Unmarshal(raw, &code) != nil || code == "" {
		fail(http.StatusBadRequest, "invalid_request", "code must be a non-empty string")
		return
	}
	now := s.clock.Now()
	s.mu.Lock()
	si := s.signin.signIns[id]
	var sc mediatedSignIn
	if si != nil {
		sc = *si
	}
	s.mu.Unlock()
	if si == nil {
		fail(http.StatusNotFound, "sign_in_not_found", "unknown or finished sign-in")
		return
	}
	if sc.sessionID != a.tok.sessionID {
		// CO-4.7-03: only the Session that started it can finish it; the
		// sign-in is untouched.
		s.violate(x.idx, "PA-4.7-09", "a one-time code was submitted with another Session's token")
		fail(http.StatusNotFound, "sign_in_not_found", "unknown or finished sign-in")
		return
	}
	if s.rateLimited(w, r, sc.limitKey, now) {
		return
	}
	if !now.Before(sc.expires) {
		// CO-4.7-05
		s.writeJSON(w, r, http.StatusOK, map[string]any{"status": "expired"})
		return
	}
	if code != sc.code {
		// CO-4.7-04
		s.recordFailure(sc.limitKey, now)
		s.mu.Lock()
		si.attempts++
		failed := si.attempts >= s.opts.SignIn.CodeAttempts
		if failed {
			delete(s.signin.signIns, id)
		}
		s.mu.Unlock()
		if failed {
			s.writeJSON(w, r, http.StatusOK, map[string]any{"status": "failed"})
			return
		}
		s.writeCodeRequired(w, r, &sc)
		return
	}
	s.mu.Lock()
	_, live := s.signin.signIns[id]
	delete(s.signin.signIns, id)
	sess := s.sessions[a.tok.sessionID]
	s.mu.Unlock()
	if !live {
		fail(http.StatusNotFound, "sign_in_not_found", "unknown or finished sign-in")
		return
	}
	s.mediatedComplete(w, r, a, sess, sc.account, sc.scopes, fail)
}

// mediatedComplete signs the Session in and answers complete (CO-4.7-01).
func (s *Server) mediatedComplete(w http.ResponseWriter, r *http.Request, a *auth, sess *session, account string, scopes []string, fail failFunc) {
	x := exchangeOf(r)
	if sess == nil {
		fail(http.StatusUnauthorized, "invalid_token", "the Session has ended")
		return
	}
	g := &grantRequest{r: r, x: x}
	spec := &issueSpecT{typ: "DPoP", jkt: a.tok.jkt}
	_, resp, perr := s.completeSignIn(g, sess, "mediated", account, scopes, spec)
	if perr != nil {
		fail(http.StatusBadRequest, perr.code, perr.desc)
		return
	}
	s.mu.Lock()
	if s.signin.keysSeen[account] == nil {
		s.signin.keysSeen[account] = map[string]bool{}
	}
	s.signin.keysSeen[account][a.tok.jkt] = true
	s.mu.Unlock()
	resp["status"] = "complete"
	w.Header().Set("Cache-Control", "no-store")
	s.writeJSON(w, r, http.StatusOK, resp)
}

func (s *Server) writeCodeRequired(w http.ResponseWriter, r *http.Request, si *mediatedSignIn) {
	w.Header().Set("Cache-Control", "no-store")
	s.writeJSON(w, r, http.StatusOK, map[string]any{
		"status":     "code_required",
		"sign_in_id": si.id,
		"code":       map[string]any{"sent_to": sentTo},
		"expires_at": si.expires.UTC().Format(time.RFC3339),
	})
}

// rateLimited answers 429 when key has had MediatedFailuresPerMinute
// failures within the last minute (CO-4.7-06).
func (s *Server) rateLimited(w http.ResponseWriter, r *http.Request, key string, now time.Time) bool {
	lim := s.opts.SignIn.MediatedFailuresPerMinute
	if lim < 0 {
		return false
	}
	s.mu.Lock()
	var recent []time.Time
	for _, t := range s.signin.failures[key] {
		if now.Sub(t) < time.Minute {
			recent = append(recent, t)
		}
	}
	s.signin.failures[key] = recent
	s.mu.Unlock()
	if len(recent) < lim {
		return false
	}
	wait := int(recent[0].Add(time.Minute).Sub(now)/time.Second) + 1
	x := exchangeOf(r)
	x.errorCode = "rate_limited"
	w.Header().Set("Retry-After", fmt.Sprint(wait))
	w.Header().Set("Cache-Control", "no-store")
	s.writeJSON(w, r, http.StatusTooManyRequests, oauthError("rate_limited", "too many failed sign-in attempts"))
	return true
}

func (s *Server) recordFailure(key string, now time.Time) {
	s.mu.Lock()
	s.signin.failures[key] = append(s.signin.failures[key], now)
	s.mu.Unlock()
}

// sixDigits returns a random six-digit code.
func sixDigits() string {
	n, _ := rand.Int(rand.Reader, big.NewInt(1_000_000))
	return fmt.Sprintf("%06d", n.Int64())
}
