package poppy

// Account Tokens, sign-in results and sign-out (spec 4.4, 4.8, 4.9).
//
// An Account Token is kept in the keystore per (User, issuer, account label)
// and only ever used under that record's lock: a refresh re-reads the
// record, sends it, and writes a rotated token before Update returns, so the
// rotated token is stored before the Session Token it came with is used, and
// a second process that was waiting on the lock reads the rotated token
// instead of sending the old one (PA-4.8-04, PA-4.8-05). A refresh that
// answers invalid_grant deletes the record, and the Session carries on
// signed out (PA-4.8-06, A-45).
//
// The SDK never holds two keystore locks at once: the Account Token's lock
// is taken for the refresh alone, and the Session's record is written after
// it is released. A store whose locks are database connections can then
// never have every connection held by a caller waiting for a second one.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/poppyproto/poppy/internal/jose"
	"github.com/poppyproto/poppy/keystore"
)

// Errors of sign-in and Account Tokens.
var (
	ErrNoAccountToken   = errors.New("poppy: no Account Token")
	ErrScopeNotGranted  = errors.New("poppy: the User did not grant the scopes the task needs")
	ErrRevocationFailed = errors.New("poppy: revoking the Account Token failed")
)

// DefaultAccount labels the Account Token of a User's only account. A User
// with several accounts at one Company (personal and business) gives each
// a label of the application's choosing.
const DefaultAccount = "default"

// AccountToken is an Account Token (spec 4.8): an OAuth refresh token that
// gets signed-in Session Tokens. Its value never appears in formatted
// output or logs and is never given to callers.
type AccountToken struct {
	value string
	// Account is the application's label for the account.
	Account string
	// Scopes are the scopes the User granted.
	Scopes []string
	// Expiry is when the Company said the token expires; zero if it didn't.
	Expiry time.Time
}

// String describes the token without its value.
func (t *AccountToken) String() string {
	return fmt.Sprintf("poppy.AccountToken(account %s, scopes %q, value [REDACTED])", t.Account, strings.Join(t.Scopes, " "))
}

// GoString is String.
func (t *AccountToken) GoString() string { return t.String() }

// Format writes String for every verb.
func (t *AccountToken) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(t.String())) }

// LogValue logs the token without its value.
func (t *AccountToken) LogValue() slog.Value {
	return slog.GroupValue(slog.String("account", t.Account), slog.Any("scopes", t.Scopes), slog.String("value", "[REDACTED]"))
}

// accountRecord is an Account Token as kept in the keystore.
type accountRecord struct {
	Token  string    `json:"refresh_token"`
	Scope  string    `json:"scope"`
	Expiry time.Time `json:"expiry,omitzero"`
	// Recent are the Session Tokens the latest refreshes got, so that a
	// replica that waited for the lock while another refreshed for the
	// same Session adopts that token instead of refreshing again. An entry
	// stands in for a refresh only for a caller that still holds the token
	// it replaced (Replaces), and a refresh that may have been answered
	// without the SDK keeping the answer (a rotation lost) clears them all:
	// nothing here can sign a Session in after the Account Token was
	// revoked, signed out or rotated away, not even a record restored
	// from before (PA-4.8-04).
	Recent []recentToken `json:"recent,omitempty"`
}

// recentToken is a Session Token a refresh with the Account Token got for
// the Session Asked, with the token key it was asked for.
type recentToken struct {
	Asked     string    `json:"asked"`
	Bearer    bool      `json:"bearer,omitempty"`
	Resource  string    `json:"resource,omitempty"`
	KeyScope  string    `json:"key_scope,omitempty"`
	Value     string    `json:"value"`
	Type      string    `json:"type"`
	SessionID string    `json:"session_id"`
	Scope     *string   `json:"scope,omitempty"`
	Issued    time.Time `json:"issued"`
	Lifetime  int64     `json:"lifetime"` // seconds
	// Replaces is heldHash of the token the refresh replaced: what the
	// replicas that raced with it hold for the key.
	Replaces string `json:"replaces,omitempty"`
}

// heldHash identifies held, the value of the token a caller holds for a
// key ("" for none), without keeping the value.
func heldHash(held string) string {
	if held == "" {
		return ""
	}
	return jose.Hash(held)
}

// maxRecent bounds accountRecord.Recent: one entry per Session and token
// key in use, the oldest dropped first.
const maxRecent = 16

// recent returns the entry a refresh for sessionID and k, by a caller
// that holds held for k, can adopt: a token still before its renewal
// point, not stale, that replaced held.
func (r *accountRecord) recent(sessionID string, k tokenKey, stale, held string, now time.Time) *tokenResponse {
	if sessionID == "" {
		return nil // a new Session each time
	}
	for _, e := range r.Recent {
		if e.Asked != sessionID || e.Bearer != k.bearer || e.Resource != k.resource || e.KeyScope != k.scope {
			continue
		}
		if e.Replaces != heldHash(held) {
			return nil // not a refresh this caller raced with
		}
		lifetime := time.Duration(e.Lifetime) * time.Second
		if e.Value == stale || !now.Before(renewPoint(e.Issued, lifetime)) {
			return nil
		}
		return &tokenResponse{AccessToken: e.Value, TokenType: e.Type, Scope: e.Scope, SessionID: e.SessionID,
			SignedIn: true, expiresIn: lifetime, issued: e.Issued, adopted: true}
	}
	return nil
}

// remember records tr, obtained for sessionID and k by a caller that held
// held, in Recent, dropping entries past their renewal point.
func (r *accountRecord) remember(sessionID string, k tokenKey, tr *tokenResponse, held string, now time.Time) {
	keep := r.Recent[:0]
	for _, e := range r.Recent {
		same := e.Asked == sessionID && e.Bearer == k.bearer && e.Resource == k.resource && e.KeyScope == k.scope
		if !same && now.Before(renewPoint(e.Issued, time.Duration(e.Lifetime)*time.Second)) {
			keep = append(keep, e)
		}
	}
	r.Recent = keep
	if sessionID == "" || !tr.SignedIn {
		return
	}
	if len(r.Recent) >= maxRecent {
		r.Recent = slices.Delete(r.Recent, 0, len(r.Recent)-maxRecent+1)
	}
	r.Recent = append(r.Recent, recentToken{Asked: sessionID, Bearer: k.bearer, Resource: k.resource, KeyScope: k.scope,
		Value: tr.AccessToken, Type: tr.TokenType, SessionID: tr.SessionID, Scope: tr.Scope,
		Issued: now, Lifetime: int64(tr.expiresIn / time.Second), Replaces: heldHash(held)})
}

func (r *accountRecord) expired(now time.Time) bool {
	return !r.Expiry.IsZero() && !now.Before(r.Expiry)
}

func (s *Session) accountKey(account string) keystore.Key {
	return keystore.Key{Kind: keystore.KindAccountToken, User: s.user, Issuer: s.company.Issuer(), ID: account}
}

// AccountToken returns the stored Account Token for account ("" means
// DefaultAccount), without its value, or ErrNoAccountToken.
func (s *Session) AccountToken(ctx context.Context, account string) (*AccountToken, error) {
	if account == "" {
		account = DefaultAccount
	}
	b, err := s.agent.store.Get(ctx, s.accountKey(account))
	if errors.Is(err, keystore.ErrNotFound) {
		return nil, ErrNoAccountToken
	}
	if err != nil {
		return nil, fmt.Errorf("poppy: reading Account Token: %w", err)
	}
	var rec accountRecord
	if json.Unmarshal(b, &rec) != nil || rec.Token == "" {
		return nil, ErrNoAccountToken
	}
	if rec.expired(s.agent.clock.Now()) {
		return nil, ErrNoAccountToken // PA-4.4-12
	}
	return &AccountToken{value: rec.Token, Account: account, Scopes: strings.Fields(rec.Scope), Expiry: rec.Expiry}, nil
}

// SignInOptions says what a sign-in is for.
type SignInOptions struct {
	// Scopes are the scopes the task needs (spec 4.4). Required.
	Scopes []string
	// Account labels the account; "" means DefaultAccount.
	Account string
	// Verify asks the Company, at the cost of one token request, before a
	// Session already signed in for the scopes is reused: its Account
	// Token is sent (spec 4.8) instead of trusting the local record, so
	// that a User the Company disconnected since the Session's last token
	// is asked to sign in now, not at the next API call. Without it,
	// Reused is a local check (SignInResult.Reused).
	Verify bool
}

func (o *SignInOptions) account() string {
	if o == nil || o.Account == "" {
		return DefaultAccount
	}
	return o.Account
}

// SignInResult is how a sign-in ended.
type SignInResult struct {
	// User is the local User (Session.User) and SessionName the Session's
	// name (SessionOptions.Name) the sign-in was for, so that an
	// application that completes sign-ins in a callback needs no map of
	// its own.
	User        string
	SessionName string
	// Account labels the account signed in to (SignInOptions.Account).
	Account string
	// SessionID is the Company's session_id of the signed-in Session.
	SessionID string
	// Requested are the scopes asked for; Granted those the User approved,
	// which may be fewer (spec 4.4).
	Requested []string
	Granted   []string
	// Reused reports that no User was asked (spec 4.4, 4.8): the Session
	// was already signed in to the account with the scopes and held a
	// signed-in Session Token not yet due for renewal, or a stored Account
	// Token covered the scopes and the Company accepted it.
	//
	// The first is a local check: nothing is sent, so a Company-side
	// change since the Session's last token (the User disconnected the
	// agent, the Company revoked the Account Token) is not seen until the
	// next API call answers sign_in_required. Verified tells the two
	// apart; SignInOptions.Verify makes every reuse ask the Company.
	Reused bool
	// Verified reports that the Company accepted the Account Token during
	// this call (a token request was answered), rather than the Session's
	// local record being trusted.
	Verified bool
}

// Missing returns the requested scopes the User did not grant.
func (r *SignInResult) Missing() []string {
	var out []string
	for _, sc := range r.Requested {
		if !slices.Contains(r.Granted, sc) {
			out = append(out, sc)
		}
	}
	return out
}

// Require returns ErrScopeNotGranted, naming the scopes, unless every one
// of scopes was granted (PA-4.4-11).
func (r *SignInResult) Require(scopes ...string) error {
	var missing []string
	for _, sc := range scopes {
		if !slices.Contains(r.Granted, sc) {
			missing = append(missing, sc)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s", ErrScopeNotGranted, strings.Join(missing, " "))
	}
	return nil
}

// covers reports whether granted holds every scope in need.
func covers(granted, need []string) bool {
	for _, sc := range need {
		if !slices.Contains(granted, sc) {
			return false
		}
	}
	return true
}

// signInKey is the key of the token a sign-in gets and UseAccountToken
// renews: the Session's default token, or at a Company that lists
// resources, the token of signInResource.
func (s *Session) signInKey() tokenKey {
	return tokenKey{resource: s.company.signInResource()}
}

// completeSignIn sends a sign-in grant for this Session to the token
// endpoint: grant holds grant_type and the grant's own parameters (code,
// redirect_uri and code_verifier for Direct Sign-In, device_code for Device
// Sign-In); session_id, the client assertion and a DPoP proof are added. On
// success the Account Token is stored and the Session is signed in
// (spec 4.4). On failure nothing changes (PA-4.4-10) and the Company's error
// is returned as an *Error. ExchangeCode and PollDevice send theirs with it.
//
// The request names exactly one resource, signInResource, when the
// Company lists any (RFC 8707 section 2.2), and the Session Token it gets
// is kept as that resource's token.
//
// If the Company answers invalid_session (it ended the Session), a new
// Session is started before the error is returned, so that the caller may
// send the grant once more, on the new one: the User's consent is for the
// code, not for the Session (PA-4.2-16).
//
// It is a credential exchange (token.go): the Company may have used the
// code up and issued the Account Token, so the exchange and the writes that
// keep its answer finish even if ctx ends first.
func (s *Session) completeSignIn(ctx context.Context, grant url.Values, opts *SignInOptions) (*SignInResult, error) {
	if opts == nil || len(opts.Scopes) == 0 {
		return nil, configError("completing a sign-in: no scopes")
	}
	return settle(ctx, func(ctx context.Context) (*SignInResult, error) {
		a, c := s.agent, s.company
		sessionID := s.ID()
		k := s.signInKey()
		body, err := a.postForm(ctx, c, c.meta.TokenEndpoint, s.key, func() (url.Values, error) {
			f := url.Values{}
			for k, v := range grant {
				f[k] = slices.Clone(v)
			}
			if sessionID != "" {
				f.Set("session_id", sessionID) // spec 4.5, 4.6
			}
			if k.resource != "" {
				f.Set("resource", k.resource) // exactly one (RFC 8707 section 2.2)
			}
			return f, nil
		})
		if errors.Is(err, ErrInvalidSession) {
			if rerr := s.restart(ctx, sessionID); rerr != nil {
				return nil, rerr
			}
		}
		if err != nil {
			return nil, err
		}
		return s.acceptTokenResponse(ctx, body, opts, k)
	})
}

// acceptSignIn adopts a sign-in's token response obtained another way,
// such as Mediated Sign-In's "complete" (spec 4.7): it stores the Account
// Token and signs the Session in with the Session Token.
//
// Its request named no resource, so the Session Token is kept as the
// Session's default token.
func (s *Session) acceptSignIn(ctx context.Context, tokenResponse []byte, opts *SignInOptions) (*SignInResult, error) {
	return s.acceptTokenResponse(ctx, tokenResponse, opts, tokenKey{})
}

// acceptTokenResponse checks a sign-in's token response and adopts it,
// keeping its Session Token for k.
func (s *Session) acceptTokenResponse(ctx context.Context, tokenResponse []byte, opts *SignInOptions, k tokenKey) (*SignInResult, error) {
	if opts == nil || len(opts.Scopes) == 0 {
		return nil, configError("accepting a sign-in: no scopes")
	}
	tr, err := parseTokenResponse(tokenResponse, false)
	if err != nil {
		return nil, err
	}
	if tr.RefreshToken == "" {
		return nil, fmt.Errorf("%w: sign-in answer without an Account Token (refresh_token)", ErrInvalidTokenResponse)
	}
	if !tr.SignedIn {
		return nil, fmt.Errorf("%w: sign-in answer with signed_in false", ErrInvalidTokenResponse)
	}
	return s.adoptSignIn(ctx, tr, opts.account(), opts.Scopes, k)
}

// adoptSignIn stores a sign-in's Account Token, then makes its Session Token
// the Session's (PA-4.5-10, PA-4.6-08, PA-4.7-07). The token replaced for
// the same account is revoked, best effort (PA-4.4-09). k is the key of the
// Session Token tr carries.
func (s *Session) adoptSignIn(ctx context.Context, tr *tokenResponse, account string, requested []string, k tokenKey) (*SignInResult, error) {
	a := s.agent
	now := a.clock.Now()
	granted := strings.Join(requested, " ")
	if tr.Scope != nil {
		granted = *tr.Scope
	}
	var old string
	if tr.RefreshToken != "" {
		rec := accountRecord{Token: tr.RefreshToken, Scope: granted}
		if tr.RefreshTokenExpiresIn > 0 {
			rec.Expiry = now.Add(time.Duration(tr.RefreshTokenExpiresIn) * time.Second) // PA-4.4-12
		}
		err := a.store.Update(ctx, s.accountKey(account), func(cur []byte) ([]byte, error) {
			var prev accountRecord
			if cur != nil && json.Unmarshal(cur, &prev) == nil && prev.Token != tr.RefreshToken {
				old = prev.Token
			}
			return json.Marshal(&rec)
		})
		if err != nil {
			return nil, fmt.Errorf("poppy: storing Account Token: %w", err)
		}
		s.holdAccountToken(tr.RefreshToken) // never in a URL (urltokens.go)
	}
	tr.Scope = &granted
	err := a.store.Update(ctx, s.skey, func(cur []byte) ([]byte, error) {
		var rec sessionRecord
		if cur != nil && json.Unmarshal(cur, &rec) != nil {
			rec = sessionRecord{}
		}
		rec.Tokens = nil // tokens issued before the sign-in no longer apply
		s.recordToken(&rec, tr, k, account)
		return json.Marshal(&rec)
	})
	if err != nil {
		return nil, fmt.Errorf("poppy: storing Session: %w", err)
	}
	if old != "" {
		if err := s.company.revoke(ctx, old); err != nil {
			a.log.WarnContext(ctx, "poppy: revoking the replaced Account Token failed", "error", err)
		}
	}
	return &SignInResult{User: s.user, SessionName: s.name, Account: account, SessionID: tr.SessionID,
		Requested: slices.Clone(requested), Granted: strings.Fields(granted)}, nil
}

// UseAccountToken signs the Session in with a stored Account Token that
// covers opts.Scopes, if there is one (spec 4.4: check before starting a new
// sign-in; spec 4.8). It reports false, and changes nothing, when there is
// none. A Session already signed in to that account for those scopes, with
// a signed-in Session Token that is not yet due for renewal, is reused as
// it is: the result has Reused set and nothing is sent, unless opts.Verify
// asks the Company. An Account Token the Company refuses is deleted and
// the Session signed out (PA-4.8-06): it reports false, and a sign-in
// asks the User. When ctx ends first, it returns ctx's error and the
// refresh finishes without it, keeping a rotated Account Token.
func (s *Session) UseAccountToken(ctx context.Context, opts *SignInOptions) (*SignInResult, bool, error) {
	return s.useAccountToken(ctx, opts, true)
}

// useAccountToken is UseAccountToken; reuse false always sends the Account
// Token, for a caller whose signed-in token the Company just refused.
func (s *Session) useAccountToken(ctx context.Context, opts *SignInOptions, reuse bool) (*SignInResult, bool, error) {
	account := opts.account()
	var need []string
	if opts != nil {
		need = opts.Scopes
	}
	at, err := s.AccountToken(ctx, account)
	if errors.Is(err, ErrNoAccountToken) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if !covers(at.Scopes, need) {
		return nil, false, nil
	}
	s.mu.Lock()
	signedInElsewhere := s.rec.SignedIn && s.rec.Account != account
	s.mu.Unlock()
	if signedInElsewhere {
		return nil, false, fmt.Errorf("%w: the Session is signed in to another account; use a Session per account", ErrAccountMismatch)
	}
	if reuse && (opts == nil || !opts.Verify) {
		if res, err := s.reusable(ctx, account, need); res != nil || err != nil {
			return res, res != nil, err
		}
	}
	// A credential exchange (token.go): the Company may rotate the Account
	// Token, so the refresh and the writes finish even if ctx ends first.
	res, err := settle(ctx, func(ctx context.Context) (*SignInResult, error) {
		k := s.signInKey()
		held := ""
		s.mu.Lock()
		if t := s.tokens[k]; t != nil {
			held = t.value
		}
		s.mu.Unlock()
		tr, err := s.refresh(ctx, s.ID(), account, k, "", held)
		if errors.Is(err, ErrAccountMismatch) || errors.Is(err, ErrInvalidSession) {
			tr, err = s.refresh(ctx, "", account, k, "", "") // a new signed-in Session
		}
		if errors.Is(err, ErrNoAccountToken) {
			// Refused or expired, and deleted by refresh: a Session signed
			// in with it carries on signed out (PA-4.8-06).
			return nil, s.markSignedOut(ctx, account)
		}
		if err != nil {
			return nil, err
		}
		tok, err := s.storeRenewal(ctx, tr, k, account)
		if err != nil {
			return nil, err
		}
		return &SignInResult{User: s.user, SessionName: s.name, Account: account, SessionID: tok.SessionID,
			Requested: slices.Clone(need), Granted: slices.Clone(tok.Scopes), Reused: true, Verified: !tr.adopted}, nil
	})
	return res, res != nil, err
}

// reusable returns the result of a sign-in for need at account when the
// Session, as stored now, is already signed in to account with every scope
// of need and holds a signed-in Session Token not yet due for renewal; nil
// otherwise.
func (s *Session) reusable(ctx context.Context, account string, need []string) (*SignInResult, error) {
	if err := s.reload(ctx); err != nil {
		return nil, err
	}
	now := s.agent.clock.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	granted := strings.Fields(s.rec.Scope)
	t := s.tokens[s.signInKey()]
	if !s.rec.SignedIn || s.rec.Account != account || !covers(granted, need) ||
		t == nil || !t.SignedIn || t.SessionID != s.rec.SessionID || !now.Before(t.renewAt) {
		return nil, nil
	}
	return &SignInResult{User: s.user, SessionName: s.name, Account: account, SessionID: s.rec.SessionID,
		Requested: slices.Clone(need), Granted: granted, Reused: true}, nil
}

// storeRenewal writes tr's token for k, from the Account Token of account,
// into the Session's record, and reports a replaced Session. It runs after
// the Account Token's lock is released, never inside it.
func (s *Session) storeRenewal(ctx context.Context, tr *tokenResponse, k tokenKey, account string) (*Token, error) {
	var out *Token
	var replaced [2]string
	err := s.agent.store.Update(ctx, s.skey, func(cur []byte) ([]byte, error) {
		var rec sessionRecord
		if cur != nil && json.Unmarshal(cur, &rec) != nil {
			rec = sessionRecord{}
		}
		if st := rec.token(k); tr.adopted && st != nil && st.Value == tr.AccessToken && rec.SessionID == tr.SessionID && rec.SignedIn {
			// Another replica stored it already: nothing to write.
			out = s.tokenFrom(&rec, st)
			s.setRecord(&rec)
			return cur, nil
		}
		if rec.SessionID != "" && rec.SessionID != tr.SessionID {
			replaced = [2]string{rec.SessionID, tr.SessionID}
		}
		out = s.recordToken(&rec, tr, k, account)
		return json.Marshal(&rec)
	})
	if err != nil {
		return nil, fmt.Errorf("poppy: storing Session: %w", err)
	}
	s.replaced(replaced)
	return out, nil
}

// markSignedOut records that the Session, if it is signed in with the
// Account Token of account, is signed out now.
func (s *Session) markSignedOut(ctx context.Context, account string) error {
	err := s.agent.store.Update(ctx, s.skey, func(cur []byte) ([]byte, error) {
		var rec sessionRecord
		if cur == nil || json.Unmarshal(cur, &rec) != nil || !rec.SignedIn || rec.Account != account {
			return cur, nil
		}
		// The Company may still hold the Session signed in (a rotation
		// lost by another replica): see renewSignedOut.
		rec = sessionRecord{SessionID: rec.SessionID}
		s.setRecord(&rec)
		return json.Marshal(&rec)
	})
	if err != nil {
		return fmt.Errorf("poppy: storing Session: %w", err)
	}
	return nil
}

// refresh sends the Account Token grant (spec 4.8) for the Session
// sessionID, or for a new signed-in Session when sessionID is "", under the
// Account Token's lock, storing a rotated token before returning. It holds
// no other keystore lock. On invalid_grant it deletes the Account Token and
// returns an error matching ErrInvalidGrant and ErrNoAccountToken.
//
// Replicas that find one Session's token due at once all queue on the
// Account Token's lock, but the Session's record is written only after the
// lock is released, so a re-read of that record under the lock would still
// find the old token. The refresh therefore also keeps the Session Token it
// got in the Account Token's record (accountRecord.Recent), and a refresh
// for the same Session and token key that finds one there still before its
// renewal point, and not stale, adopts it and sends nothing, if it was
// got in place of held, the token the caller holds for k: only a caller
// that raced with that refresh adopts its token.
//
// A rotated Account Token is stored whatever else is wrong with the
// response that carried it: the Company has consumed the old one
// (RFC 6749 section 6, PA-4.8-04).
func (s *Session) refresh(ctx context.Context, sessionID, account string, k tokenKey, stale, held string) (*tokenResponse, error) {
	a, c := s.agent, s.company
	var tr *tokenResponse
	var grantErr error
	var heldAccount string // the Account Token, kept out of URLs (urltokens.go)
	err := a.store.Update(ctx, s.accountKey(account), func(cur []byte) ([]byte, error) {
		var ar accountRecord
		if cur == nil || json.Unmarshal(cur, &ar) != nil || ar.Token == "" {
			grantErr = ErrNoAccountToken
			return cur, nil
		}
		defer func() { heldAccount = ar.Token }()
		now := a.clock.Now()
		if ar.expired(now) {
			grantErr = fmt.Errorf("%w: it has expired", ErrNoAccountToken) // PA-4.4-12
			return nil, nil
		}
		if tr = ar.recent(sessionID, k, stale, held, now); tr != nil {
			return cur, nil // PA-4.8-05: another replica refreshed while we waited
		}
		key := s.key
		if k.bearer {
			key = nil
		}
		body, err := a.postForm(ctx, c, c.meta.TokenEndpoint, key, func() (url.Values, error) {
			f := url.Values{}
			f.Set("grant_type", grantRefreshToken) // PA-4.8-01
			f.Set("refresh_token", ar.Token)
			if sessionID != "" {
				f.Set("session_id", sessionID) // PA-4.8-02
			}
			if k.scope != "" {
				f.Set("scope", k.scope) // PA-4.8-03
			}
			if k.resource != "" {
				f.Set("resource", k.resource)
			}
			return f, nil
		})
		if errors.Is(err, ErrInvalidGrant) {
			// PA-4.8-06: expired, revoked or disconnected.
			a.log.InfoContext(ctx, "poppy: Account Token refused; deleting it", "account", account)
			grantErr = fmt.Errorf("%w (%w)", ErrNoAccountToken, err)
			return nil, nil
		}
		if err != nil {
			grantErr = err
			if len(ar.Recent) > 0 {
				// The Company may have rotated the token without the
				// answer reaching us: nothing may stand in for the next
				// refresh, which must ask it (PA-4.8-04).
				ar.Recent = nil
				return json.Marshal(&ar)
			}
			return cur, nil
		}
		now = a.clock.Now()
		rotated := false
		if rt, expiresIn := rotatedToken(body); rt != "" && rt != ar.Token {
			// PA-4.8-04: rotated; stored before the Session Token is used,
			// and even if the rest of the response is refused below.
			ar.Token, rotated = rt, true
			if expiresIn > 0 {
				ar.Expiry = now.Add(time.Duration(expiresIn) * time.Second)
			}
		}
		tr, grantErr = parseTokenResponse(body, k.bearer)
		if grantErr != nil {
			tr = nil
			if rotated {
				ar.Recent = nil // the old token's Session Tokens stand in for nothing
				return json.Marshal(&ar)
			}
			return cur, nil
		}
		tr.issued = now
		ar.remember(sessionID, k, tr, held, now)
		return json.Marshal(&ar)
	})
	if err != nil {
		return nil, fmt.Errorf("poppy: Account Token: %w", err)
	}
	s.holdAccountToken(heldAccount) // never in a URL (urltokens.go)
	return tr, grantErr
}

// rotatedToken returns the refresh_token of a token response, and its
// refresh_token_expires_in when that is an integer, however wrong the rest
// of the response is.
func rotatedToken(body []byte) (string, int64) {
	var v struct {
		RefreshToken string `json:"refresh_token"`
	}
	if json.Unmarshal(body, &v) != nil && v.RefreshToken == "" {
		return "", 0
	}
	var e struct {
		ExpiresIn int64 `json:"refresh_token_expires_in"`
	}
	if json.Unmarshal(body, &e) != nil {
		e.ExpiresIn = 0
	}
	return v.RefreshToken, e.ExpiresIn
}

// renewSignedIn renews the token for k of a signed-in Session, whose
// record was snap, with its Account Token (PA-4.2-15), then stores it.
// account_mismatch or invalid_session start a new signed-in Session
// (PA-4.2-18). If the Account Token is gone or refused, the Session is
// marked signed out and ErrNoAccountToken returned, for the caller to renew
// it signed out (PA-4.8-06).
func (s *Session) renewSignedIn(ctx context.Context, k tokenKey, snap *sessionRecord, stale string) (*Token, error) {
	held := ""
	if st := snap.token(k); st != nil {
		held = st.Value
	}
	tr, err := s.refresh(ctx, snap.SessionID, snap.Account, k, stale, held)
	if errors.Is(err, ErrAccountMismatch) || errors.Is(err, ErrInvalidSession) {
		tr, err = s.refresh(ctx, "", snap.Account, k, "", "")
	}
	if errors.Is(err, ErrNoAccountToken) {
		if merr := s.markSignedOut(ctx, snap.Account); merr != nil {
			return nil, merr
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	return s.storeRenewal(ctx, tr, k, snap.Account)
}

// SignOut revokes the Account Token for account ("" means DefaultAccount)
// at the revocation endpoint (spec 4.9), deletes it from the keystore even
// if revocation fails (PA-4.9-04, A-17: the failure is reported with
// ErrRevocationFailed), and signs out the User's Sessions at the Company
// that used it, so that they renew signed out (PA-4.9-02).
func (s *Session) SignOut(ctx context.Context, account string) error {
	if account == "" {
		account = DefaultAccount
	}
	a := s.agent
	var token string
	err := a.store.Update(ctx, s.accountKey(account), func(cur []byte) ([]byte, error) {
		var rec accountRecord
		if cur != nil && json.Unmarshal(cur, &rec) == nil {
			token = rec.Token
		}
		return nil, nil
	})
	if err != nil {
		return fmt.Errorf("poppy: deleting Account Token: %w", err)
	}
	if err := s.company.signOutSessions(ctx, s.user, account); err != nil {
		return err
	}
	if token == "" {
		return ErrNoAccountToken
	}
	if err := s.company.revoke(ctx, token); err != nil {
		return fmt.Errorf("%w: %w", ErrRevocationFailed, err)
	}
	return nil
}

// signOutSessions marks every Session of user signed in with account as
// signed out, in memory and in the keystore.
func (c *Company) signOutSessions(ctx context.Context, user, account string) error {
	a := c.agent
	keys, err := a.store.List(ctx, keystore.KindSession, user, c.Issuer())
	if err != nil {
		return fmt.Errorf("poppy: listing Sessions: %w", err)
	}
	for _, k := range keys {
		err := a.store.Update(ctx, k, func(cur []byte) ([]byte, error) {
			var rec sessionRecord
			if cur == nil || json.Unmarshal(cur, &rec) != nil || !rec.SignedIn || rec.Account != account {
				return cur, nil
			}
			rec = sessionRecord{SessionID: rec.SessionID}
			return json.Marshal(&rec)
		})
		if err != nil {
			return fmt.Errorf("poppy: signing out Session: %w", err)
		}
	}
	c.st.mu.Lock()
	var live []*Session
	for key, s := range c.st.sessions {
		if key[0] == user {
			live = append(live, s)
		}
	}
	c.st.mu.Unlock()
	for _, s := range live {
		s.mu.Lock()
		if s.rec.SignedIn && s.rec.Account == account {
			s.rec = sessionRecord{SessionID: s.rec.SessionID}
			clear(s.tokens)
		}
		s.mu.Unlock()
	}
	return nil
}

// revoke revokes an Account Token (RFC 7009, PA-4.9-01): the client
// assertion, no proof.
func (c *Company) revoke(ctx context.Context, token string) error {
	_, err := c.agent.postForm(ctx, c, c.meta.RevocationEndpoint, nil, func() (url.Values, error) {
		f := url.Values{}
		f.Set("token", token)
		f.Set("token_type_hint", "refresh_token")
		return f, nil
	})
	return err
}

// Close forgets the Session in this process. It revokes nothing: the
// Session simply stops being used, and the Account Token stays (PA-4.9-05).
func (s *Session) Close() {
	st := s.company.st
	st.mu.Lock()
	if st.sessions[[2]string{s.user, s.name}] == s {
		delete(st.sessions, [2]string{s.user, s.name})
	}
	st.mu.Unlock()
}
