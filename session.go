package poppy

// Sessions (spec 4.2, 4.3).
//
// A Session's state (session_id, signed-in state, scopes and its current
// tokens) lives in the keystore under (User, issuer, Session name), so that
// another process can resume it. In memory, each Session keeps its tokens by
// tokenKey: token type, resource and scope (A-08: a Session may hold a DPoP
// token, Bearer tokens for MCP servers and narrower tokens side by side).
//
// The token cache gives one renewal for all concurrent callers: the first
// caller that finds a token about to expire starts the renewal, every other
// caller waits for it (or for its own ctx). The renewal itself runs inside
// keystore Update, under the record's lock, and first re-reads the record: if
// another process has already renewed, its token is adopted and no request is
// sent. A Session that has ended at the Company (invalid_session) is replaced
// by a new one and OnSessionReplaced is called (PA-4.2-16).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/poppyproto/poppy/internal/jose"
	"github.com/poppyproto/poppy/internal/redact"
	"github.com/poppyproto/poppy/keystore"
)

// Token is a Session Token. Its value never appears in formatted output or
// logs; Value returns it for the rare caller that must send it itself.
type Token struct {
	value string
	// authz is the Authorization header value, "<Type> <value>": value is
	// its suffix, so the token is held once and the header is not built
	// on every request.
	authz   string
	ath     string
	renewAt time.Time
	// Type is "DPoP" or "Bearer".
	Type string
	// Expiry is when the token expires, by the Agent's clock.
	Expiry time.Time
	// Scopes are the account scopes the token carries; none when signed
	// out: scopes a Company sends with a signed-out token (signed_in
	// false) are dropped, since a signed-out Session has no account for
	// them to grant anything in (spec 4.4).
	Scopes []string
	// Resource is the RFC 8707 resource the token was issued for, if any.
	Resource string
	// SessionID is the Session the token belongs to.
	SessionID string
	// SignedIn reports whether the Session was signed in when it was issued.
	SignedIn bool
}

// Value returns the token itself. Never log it or put it in a URL.
func (t *Token) Value() string { return t.value }

// String describes the token without its value.
func (t *Token) String() string {
	return fmt.Sprintf("poppy.Token(%s, session %s, expires %s, value redacted)",
		t.Type, t.SessionID, t.Expiry.UTC().Format(time.RFC3339))
}

// GoString is String.
func (t *Token) GoString() string { return t.String() }

// Format writes String for every verb.
func (t *Token) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(t.String())) }

// LogValue logs the token without its value.
func (t *Token) LogValue() slog.Value {
	return slog.GroupValue(slog.String("type", t.Type), slog.String("session_id", t.SessionID),
		slog.Time("expiry", t.Expiry), slog.String("value", "REDACTED"))
}

// tokenKey distinguishes the tokens one Session holds.
type tokenKey struct {
	bearer   bool
	resource string
	scope    string // space-separated, sorted; "" = the Session's scopes
}

// storedToken is a token as kept in the keystore.
type storedToken struct {
	Bearer   bool      `json:"bearer,omitempty"`
	Resource string    `json:"resource,omitempty"`
	Scope    string    `json:"scope,omitempty"`   // what was asked for
	Granted  string    `json:"granted,omitempty"` // what the token carries
	Value    string    `json:"value"`
	Expiry   time.Time `json:"expiry"`
	RenewAt  time.Time `json:"renew_at"`
}

// sessionRecord is a Session as kept in the keystore.
type sessionRecord struct {
	SessionID string        `json:"session_id"`
	SignedIn  bool          `json:"signed_in"`
	Account   string        `json:"account,omitempty"` // label of the Account Token it signed in with
	Scope     string        `json:"scope,omitempty"`
	Tokens    []storedToken `json:"tokens,omitempty"`
}

func (r *sessionRecord) token(k tokenKey) *storedToken {
	for i := range r.Tokens {
		t := &r.Tokens[i]
		if t.Bearer == k.bearer && t.Resource == k.resource && t.Scope == k.scope {
			return t
		}
	}
	return nil
}

func (r *sessionRecord) setToken(k tokenKey, t storedToken) {
	t.Bearer, t.Resource, t.Scope = k.bearer, k.resource, k.scope
	for i := range r.Tokens {
		if r.Tokens[i].Bearer == k.bearer && r.Tokens[i].Resource == k.resource && r.Tokens[i].Scope == k.scope {
			r.Tokens[i] = t
			return
		}
	}
	r.Tokens = append(r.Tokens, t)
}

// issuerState is what an Agent keeps per Company issuer, shared by every
// domain that names the issuer (spec 3.2).
type issuerState struct {
	issuer   string
	mu       sync.Mutex
	sessions map[[2]string]*Session // by (user, Session name)
}

func (a *Agent) issuer(iss string) *issuerState {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.companies[iss]
	if st == nil {
		st = &issuerState{issuer: iss, sessions: map[[2]string]*Session{}}
		a.companies[iss] = st
	}
	return st
}

// SessionOptions configures Company.Session. The zero value is valid.
type SessionOptions struct {
	// Name tells apart several Sessions of one User at one Company, such as
	// one per parallel task (spec 4). Sessions with the same name share
	// their state, across processes that share the keystore. "" means
	// "default".
	Name string
}

// Session is one User's Session at one Company (spec 4). It is safe for
// concurrent use; Company.Session returns the same *Session for the same
// User and name.
type Session struct {
	agent   *Agent
	company *Company
	user    string
	name    string
	userID  string
	key     *dpopKey
	skey    keystore.Key

	mu       sync.Mutex
	rec      sessionRecord
	tokens   map[tokenKey]*Token
	renewing map[tokenKey]*exchange[*Token] // nil while none is under way
	held     heldTokens                     // more tokens never to send in a URL (urltokens.go)
	values   sync.Map                       // SessionValue keys to their values (sessionvalue.go)
}

// Session starts or resumes the Session named by opts for the local user
// (spec 4.2). The first call creates the User's User ID and DPoP key and
// stores them; later calls, in this process or another sharing the keystore,
// resume the stored Session. It returns ErrNoAuth for a Company without auth.
func (c *Company) Session(ctx context.Context, user string, opts *SessionOptions) (*Session, error) {
	if c.meta == nil {
		return nil, ErrNoAuth // PA-3-10: no OAuth request
	}
	if user == "" {
		return nil, configError("Session: empty user")
	}
	name := "default"
	if opts != nil && opts.Name != "" {
		name = opts.Name
	}
	c.st.mu.Lock()
	s := c.st.sessions[[2]string{user, name}]
	c.st.mu.Unlock()
	if s != nil {
		if _, err := s.token(ctx, s.checkKey(), ""); err != nil {
			return nil, err
		}
		return s, nil
	}
	a := c.agent
	uid, err := a.UserID(ctx, user, c.Issuer())
	if err != nil {
		return nil, err
	}
	keyID := ""
	if a.opts.KeyPerSession {
		keyID = name
	}
	key, err := a.loadDPoPKey(ctx, user, c.Issuer(), keyID)
	if err != nil {
		return nil, err
	}
	s = &Session{
		agent: a, company: c, user: user, name: name, userID: uid, key: key,
		skey:   keystore.Key{Kind: keystore.KindSession, User: user, Issuer: c.Issuer(), ID: name},
		tokens: map[tokenKey]*Token{},
	}
	if b, err := a.store.Get(ctx, s.skey); err == nil {
		if json.Unmarshal(b, &s.rec) != nil {
			s.rec = sessionRecord{} // unreadable: start afresh
		}
		s.adoptAll()
	} else if !errors.Is(err, keystore.ErrNotFound) {
		return nil, fmt.Errorf("poppy: reading Session: %w", err)
	}
	c.st.mu.Lock()
	if other := c.st.sessions[[2]string{user, name}]; other != nil {
		s = other // another goroutine got there first
	} else {
		c.st.sessions[[2]string{user, name}] = s
	}
	c.st.mu.Unlock()
	// Start the Session now (or check the resumed one), so that errors such
	// as invalid_client surface here.
	if _, err := s.token(ctx, s.checkKey(), ""); err != nil {
		return nil, err
	}
	return s, nil
}

// checkKey is the token Company.Session gets to start or check the
// Session: the default token of a signed-out Session, the sign-in's
// (signInKey) of a signed-in one, which an OAuth server that holds the
// Account Token to several resources issues, as it may not a token for
// none of them (RFC 8707 section 2.2).
func (s *Session) checkKey() tokenKey {
	s.mu.Lock()
	signedIn := s.rec.SignedIn
	s.mu.Unlock()
	if signedIn {
		return s.signInKey()
	}
	return tokenKey{}
}

// ID returns the Company's session_id.
func (s *Session) ID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.SessionID
}

// SignedIn reports whether the Session is signed in to an account.
func (s *Session) SignedIn() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rec.SignedIn
}

// Account returns the label of the Account Token the Session is signed in
// with (SignInOptions.Account), or "" when it is signed out.
func (s *Session) Account() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.rec.SignedIn {
		return ""
	}
	return s.rec.Account
}

// Scopes returns the account scopes of the Session; none when signed out,
// whatever scopes the Company sent with a signed-out token.
func (s *Session) Scopes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Fields(s.rec.Scope)
}

// User returns the application's own name for the User the Session acts
// for, as given to Company.Session. It never leaves the process: the
// Company knows the User only by UserID.
func (s *Session) User() string { return s.user }

// UserID returns the User ID the Company knows the User by: random,
// created once per User and Company, and sent in every Session assertion
// (spec 4.2). It is not the application's name for the User (User).
func (s *Session) UserID() string { return s.userID }

// Company returns the Company.
func (s *Session) Company() *Company { return s.company }

// Thumbprint returns the RFC 7638 thumbprint of the Session's DPoP key.
func (s *Session) Thumbprint() string { return s.key.jkt }

// TokenOptions asks for a particular Session Token (spec 4.3).
type TokenOptions struct {
	// Scopes asks for fewer scopes than the Session has. Empty means all.
	Scopes []string
	// Resource asks for a token for one service (RFC 8707).
	Resource string
	// Bearer asks for a Bearer token, requested without a proof, as MCP
	// needs. Resource must then be the MCP server's url.
	Bearer bool
	// Renew forces a new token even if the cached one is still valid.
	Renew bool
	// Refused is a token a server just refused (a 401): the token is
	// renewed only if the Session's is still that one. Of several
	// requests refused at once, the first renews and the others get its
	// new token, as the Session transport does for its own requests
	// (spec 6). Package api renews MCP Bearer tokens this way.
	Refused *Token
}

func (o *TokenOptions) key() tokenKey {
	if o == nil {
		return tokenKey{}
	}
	sc := slices.Clone(o.Scopes)
	slices.Sort(sc)
	return tokenKey{bearer: o.Bearer, resource: o.Resource, scope: strings.Join(slices.Compact(sc), " ")}
}

// Token returns a valid Session Token, from the cache or by renewing it.
// opts may be nil for the Session's default DPoP token. When ctx ends
// during a renewal, Token returns ctx's error at once and the renewal
// finishes without it, keeping what the Company answered (a rotated
// Account Token is never lost), for the next caller.
func (s *Session) Token(ctx context.Context, opts *TokenOptions) (*Token, error) {
	k := s.keyFor(opts.key())
	if k.bearer && k.resource == "" {
		return nil, configError("Token: a Bearer token needs the MCP server's url as Resource")
	}
	stale := ""
	if opts != nil && opts.Refused != nil {
		stale = opts.Refused.value
	}
	if opts != nil && opts.Renew {
		s.mu.Lock()
		if t := s.tokens[k]; t != nil {
			stale = t.value
		}
		s.mu.Unlock()
	}
	return s.token(ctx, k, stale)
}

// keyFor is k with the resource a request for a DPoP token that names
// none asks for (Company.defaultResource): the one rule of it, applied
// wherever a Session Token is asked for (token, and Token before it).
func (s *Session) keyFor(k tokenKey) tokenKey {
	if k.resource == "" && !k.bearer {
		k.resource = s.company.defaultResource()
	}
	return k
}

// renewMargin is the least time before expiry at which a token is
// renewed, so that a short-lived token does not expire while a request
// that carries it is in flight or waits for a lock.
const renewMargin = time.Second

// renewBefore is how long before expiry a token is renewed: 10% of its
// lifetime, at most a minute, but at least renewMargin (or half the
// lifetime, if that is shorter): the renewal point is
// min(90% of the lifetime, lifetime - renewMargin).
func renewBefore(lifetime time.Duration) time.Duration {
	return max(min(lifetime/10, time.Minute), min(renewMargin, lifetime/2))
}

// renewPoint is when a token issued at issued with lifetime is renewed.
func renewPoint(issued time.Time, lifetime time.Duration) time.Time {
	return issued.Add(lifetime - renewBefore(lifetime))
}

// token returns the token for k. If stale is non-empty, a token with that
// value is known to be rejected and is renewed even if not yet expired.
//
// The renewal is a credential exchange (token.go): it runs to its end on
// its own bounded time whatever the ctx of the caller that began it does,
// and every caller for k, that one included, waits for it or for its own
// ctx. A caller that gives up after the Company rotated the Account Token
// therefore loses nothing, and the others get the renewal's token.
func (s *Session) token(ctx context.Context, k tokenKey, stale string) (*Token, error) {
	k = s.keyFor(k)
	now := s.agent.clock.Now()
	s.mu.Lock()
	t := s.tokens[k]
	if t != nil && t.value != stale && now.Before(t.renewAt) {
		s.mu.Unlock()
		return t, nil
	}
	r := s.renewing[k]
	if r == nil {
		if err := ctx.Err(); err != nil {
			s.mu.Unlock()
			return nil, err // nothing sent for a caller already gone
		}
		if s.renewing == nil {
			s.renewing = map[tokenKey]*exchange[*Token]{}
		}
		r = begin(ctx, func(ctx context.Context) (*Token, error) {
			tok, err := s.renew(ctx, k, stale)
			s.mu.Lock()
			delete(s.renewing, k)
			if len(s.renewing) == 0 {
				s.renewing = nil // an idle Session keeps no map (heap per Session)
			}
			s.mu.Unlock()
			return tok, err
		})
		s.renewing[k] = r
	}
	s.mu.Unlock()
	return r.wait(ctx)
}

// renew gets a new token for k.
//
// A signed-out Session is renewed under the keystore lock of its record,
// which first adopts a token another process stored, if it is still good.
// A signed-in Session is renewed with its Account Token under the Account
// Token's lock, and the record is written afterwards: the SDK never holds
// two keystore locks at once, so a store whose locks are connections (a
// database pool) can't run out of them with every holder waiting for a
// second one.
func (s *Session) renew(ctx context.Context, k tokenKey, stale string) (*Token, error) {
	for range 2 {
		out, signedIn, err := s.renewSignedOut(ctx, k, stale)
		if err != nil || signedIn == nil {
			return out, wrapRenewal(err)
		}
		out, err = s.renewSignedIn(ctx, k, signedIn, stale)
		if errors.Is(err, ErrNoAccountToken) {
			continue // now signed out: renew with the assertion (PA-4.8-06)
		}
		return out, wrapRenewal(err)
	}
	return nil, wrapRenewal(errors.New("the Session kept changing while it was renewed"))
}

func wrapRenewal(err error) error {
	var pe *Error
	if err == nil || errors.As(err, &pe) || errors.Is(err, ErrInvalidTokenResponse) ||
		errors.Is(err, ErrUnexpectedTokenType) || isContextErr(err) {
		return err
	}
	return fmt.Errorf("poppy: renewing Session Token: %w", err)
}

// renewSignedOut adopts a good token from the stored record, or renews a
// signed-out Session with the assertion (spec 4.2). For a signed-in Session
// it changes nothing and returns the record as it found it.
func (s *Session) renewSignedOut(ctx context.Context, k tokenKey, stale string) (*Token, *sessionRecord, error) {
	a := s.agent
	var (
		replaced [2]string
		out      *Token
		signedIn *sessionRecord
	)
	err := a.store.Update(ctx, s.skey, func(cur []byte) ([]byte, error) {
		var rec sessionRecord
		if cur != nil && json.Unmarshal(cur, &rec) != nil {
			rec = sessionRecord{}
		}
		now := a.clock.Now()
		// Another process (or an earlier call) may have renewed already.
		if st := rec.token(k); st != nil && st.Value != stale && now.Before(st.RenewAt) && rec.SessionID != "" {
			out = s.tokenFrom(&rec, st)
			s.setRecord(&rec)
			return cur, nil
		}
		if rec.SignedIn {
			signedIn = &rec
			return cur, nil
		}
		before := rec.SessionID
		tr, err := s.request(ctx, rec.SessionID, k)
		switch {
		case rec.SessionID == "":
		case errors.Is(err, ErrInvalidSession):
			// PA-4.2-16: the Session has ended; start a new one.
			a.log.InfoContext(ctx, "poppy: Session ended at the Company, starting a new one", "session_id", rec.SessionID)
			rec = sessionRecord{}
			tr, err = s.request(ctx, "", k)
		case errors.Is(err, ErrInvalidGrant):
			// the Company holds the Session signed in, and won't
			// renew it with the assertion: its Account Token was refused
			// (a rotation another replica lost), or a replica died between
			// a sign-in at the Company and storing it. A new signed-out
			// Session replaces it, once for every replica, since the record
			// is written under its lock; if the Company refuses that start
			// too, its invalid_grant is returned (PA-4.2-17: no loop).
			a.log.InfoContext(ctx, "poppy: the Company refused to renew the Session with the assertion, starting a new one", "session_id", rec.SessionID)
			rec = sessionRecord{}
			tr, err = s.request(ctx, "", k)
		}
		if err != nil {
			return nil, err
		}
		if before != "" && tr.SessionID != before {
			replaced = [2]string{before, tr.SessionID}
		}
		out = s.recordToken(&rec, tr, k, "")
		return json.Marshal(&rec)
	})
	if err != nil {
		return nil, nil, err
	}
	s.replaced(replaced)
	return out, signedIn, nil
}

// restart replaces the Session the Company answered invalid_session for,
// ended, with a new signed-out Session started with the assertion, and
// reports the replacement to OnSessionReplaced (PA-4.2-16). A sign-in whose
// completion the Company refused that way can then be completed on the new
// Session (ExchangeCode, PollDevice). If the stored record already names another
// Session (another task or process restarted it first), that one is
// adopted and nothing is sent.
func (s *Session) restart(ctx context.Context, ended string) error {
	a := s.agent
	var replaced [2]string
	err := a.store.Update(ctx, s.skey, func(cur []byte) ([]byte, error) {
		var rec sessionRecord
		if cur != nil && json.Unmarshal(cur, &rec) != nil {
			rec = sessionRecord{}
		}
		if rec.SessionID != "" && rec.SessionID != ended {
			s.setRecord(&rec)
			return cur, nil
		}
		a.log.InfoContext(ctx, "poppy: Session ended at the Company, starting a new one", "session_id", ended)
		tr, err := s.request(ctx, "", tokenKey{})
		if err != nil {
			return nil, err
		}
		rec = sessionRecord{}
		s.recordToken(&rec, tr, tokenKey{}, "")
		if ended != "" {
			replaced = [2]string{ended, tr.SessionID}
		}
		return json.Marshal(&rec)
	})
	if err != nil {
		return wrapRenewal(err)
	}
	s.replaced(replaced)
	return nil
}

// recordToken puts tr's token for k into rec, which it makes the Session's
// state, and returns the token. account labels the Account Token a
// signed-in token came from.
func (s *Session) recordToken(rec *sessionRecord, tr *tokenResponse, k tokenKey, account string) *Token {
	now := tr.issued
	if now.IsZero() {
		now = s.agent.clock.Now()
	}
	if rec.SessionID != tr.SessionID {
		rec.Tokens = nil // a different Session: its old tokens don't apply
	}
	rec.SessionID = tr.SessionID
	granted := ""
	switch {
	case !tr.SignedIn:
		// No account scopes when signed out, whatever the Company sent
		// (Token.Scopes, Session.Scopes).
	case tr.Scope != nil:
		granted = *tr.Scope
	case k.scope != "":
		granted = k.scope // RFC 6749: omitted scope = requested scope
	}
	if tr.SignedIn && !rec.SignedIn || !tr.SignedIn && rec.SignedIn {
		rec.Tokens = nil // tokens of the other state no longer apply
	}
	rec.SignedIn, rec.Account = tr.SignedIn, ""
	if tr.SignedIn {
		rec.Account = account
	}
	if k == (tokenKey{}) || k == s.signInKey() {
		rec.Scope = granted
	}
	rec.setToken(k, storedToken{Value: tr.AccessToken, Granted: granted,
		Expiry: now.Add(tr.expiresIn), RenewAt: renewPoint(now, tr.expiresIn)})
	s.setRecord(rec)
	return s.tokenFrom(rec, rec.token(k))
}

// replaced reports a replaced Session to OnSessionReplaced.
func (s *Session) replaced(r [2]string) {
	if r[0] != "" && s.agent.opts.OnSessionReplaced != nil {
		s.agent.opts.OnSessionReplaced(r[0], r[1])
	}
}

// request sends the token request that starts (sessionID "") or renews a
// signed-out Session with the assertion (spec 4.2).
func (s *Session) request(ctx context.Context, sessionID string, k tokenKey) (*tokenResponse, error) {
	a := s.agent
	c := s.company
	build := func() (url.Values, error) {
		assertion, err := a.id.sessionAssertion(c.meta.TokenEndpoint, s.userID, a.clock.Now())
		if err != nil {
			return nil, fmt.Errorf("poppy: signing Session assertion: %w", err)
		}
		f := url.Values{}
		f.Set("grant_type", grantJWTBearer) // PA-4.2-05
		f.Set("assertion", assertion)
		if sessionID != "" {
			f.Set("session_id", sessionID) // PA-4.2-14
		}
		if k.scope != "" {
			f.Set("scope", k.scope) // PA-4.3-20
		}
		if k.resource != "" {
			f.Set("resource", k.resource) // PA-4.3-21, PA-4.3-18
		}
		return f, nil
	}
	key := s.key
	if k.bearer {
		key = nil // PA-4.3-17: no proof for a Bearer token
	}
	body, err := a.postForm(ctx, c, c.meta.TokenEndpoint, key, build)
	if err != nil {
		return nil, err
	}
	tr, err := parseTokenResponse(body, k.bearer)
	if err != nil {
		return nil, err
	}
	if tr.SignedIn {
		// PA-4.2-11: the assertion starts or renews a signed-out Session
		// (spec 4.2; a signed-in one is renewed with its Account Token,
		// 4.8). An answer that says otherwise is the Company's error: its
		// scopes grant nothing, and the Session is not signed in.
		return nil, fmt.Errorf("%w: a Session started or renewed with the assertion answered signed_in true", ErrInvalidTokenResponse)
	}
	return tr, nil
}

func (s *Session) tokenFrom(rec *sessionRecord, st *storedToken) *Token {
	typ := "DPoP"
	if st.Bearer {
		typ = "Bearer"
	}
	authz := typ + " " + st.Value
	st.Value = authz[len(typ)+1:] // the record and the Token share one copy
	return &Token{
		value: authz[len(typ)+1:], authz: authz, ath: jose.Hash(st.Value), renewAt: st.RenewAt, Type: typ, Expiry: st.Expiry,
		Scopes: strings.Fields(st.Granted), Resource: st.Resource,
		SessionID: rec.SessionID, SignedIn: rec.SignedIn,
	}
}

// setRecord makes rec the Session's state in memory: its tokens, and only
// those, are the Session's tokens from now on.
func (s *Session) setRecord(rec *sessionRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rec = *rec
	s.rec.Tokens = slices.Clone(rec.Tokens)
	tokens := make(map[tokenKey]*Token, len(rec.Tokens))
	for i := range rec.Tokens {
		st := &rec.Tokens[i]
		k := tokenKey{bearer: st.Bearer, resource: st.Resource, scope: st.Scope}
		if t := s.tokens[k]; t != nil && t.value == st.Value && t.SessionID == rec.SessionID && t.SignedIn == rec.SignedIn {
			tokens[k] = t
		} else {
			tokens[k] = s.tokenFrom(rec, st)
		}
	}
	s.retireLocked(tokens)
	s.tokens = tokens
}

// adoptAll loads every token of the stored record into memory.
func (s *Session) adoptAll() {
	rec := s.rec
	s.setRecord(&rec)
}

// reload adopts the Session's record as the keystore has it now, which
// another process may have changed.
func (s *Session) reload(ctx context.Context) error {
	b, err := s.agent.store.Get(ctx, s.skey)
	if errors.Is(err, keystore.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("poppy: reading Session: %w", err)
	}
	var rec sessionRecord
	if json.Unmarshal(b, &rec) != nil {
		return nil
	}
	s.setRecord(&rec)
	return nil
}

// Redact returns s with every secret the Session holds taken out: its
// Session Tokens (DPoP and Bearer, of every resource and scope) and the
// Account Token it is signed in with, each replaced by "[redacted]"
// whole, JSON-escaped, or in part, as a cut left it (internal/redact).
// An LLM tool runtime passes what goes to a model through it, so that no
// token reaches the model's context (PA-4.8-08); packages api and llmtools
// do. It reads the Account Token from the keystore and sends nothing.
func (s *Session) Redact(ctx context.Context, text string) string {
	return redact.Secrets(text, s.secrets(ctx))
}

// secrets returns the values of the Session Tokens the Session holds and of
// the Account Token it is signed in with, so that the tool runtime can make
// sure none reaches a model (PA-4.8-08). It sends no request.
func (s *Session) secrets(ctx context.Context) []string {
	s.mu.Lock()
	out := make([]string, 0, len(s.tokens)+1)
	for _, t := range s.tokens {
		out = append(out, t.value)
	}
	account := s.rec.Account
	s.mu.Unlock()
	if account == "" {
		account = DefaultAccount
	}
	if t, err := s.AccountToken(ctx, account); err == nil {
		out = append(out, t.value)
	}
	return out
}

// Name returns the Session's name (SessionOptions.Name).
func (s *Session) Name() string { return s.name }

// String describes the Session without any token, and without the local
// User's name, which applications often make an e-mail address: formatted
// Sessions end up in logs.
func (s *Session) String() string {
	if s == nil {
		return "poppy.Session(nil)"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("poppy.Session(%s %q at %s, signed in %v)", s.rec.SessionID, s.name, s.company.Issuer(), s.rec.SignedIn)
}

// GoString is String, so %#v shows no token either.
func (s *Session) GoString() string { return s.String() }

// Format writes String for every verb.
func (s *Session) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(s.String())) }

// LogValue logs the Session without any token.
func (s *Session) LogValue() slog.Value { return slog.StringValue(s.String()) }
