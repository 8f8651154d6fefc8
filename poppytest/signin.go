package poppytest

// Sign-in (spec 4.4–4.9): what every sign-in type shares.
//
// Every sign-in type ends in completeSignIn, which, under s.mu, checks that
// the Session hasn't ended and is signed out or signed in to the same
// account (account_mismatch otherwise, CO-4.4-12), records a new Account
// Token, signs the Session in with it, and then issues the Session Token
// with issueToken. The grant handlers check everything else before they
// call it, so a failed sign-in changes nothing (CO-4.4-10).
//
// The record behind an Account Token is an acctFamily, the Company's
// record of one sign-in (spec 4.4 "How sign-in is remembered": client_id,
// User ID, account, granted scopes, expiry). Rotation (RotateAccountTokens)
// gives the family a new current value and keeps the record, so the
// lifetime never extends (CO-4.8-08) and revoking any value revokes the
// sign-in. A Session remembers the family it is signed in with: that is
// what revocation signs out (spec 4.9). Disconnect signs out every Session
// signed in to the account, whatever signed it in.
//
// The User is programmable (accounts.go): the consent pages of Direct and
// Device Sign-In ask a User func what the User does, and Browse plays the
// User's browser, so opening a page never decides anything by itself
// (CO-4.6-02).

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Defaults of the sign-in options.
const (
	defaultAccountTokenTTL = 30 * 24 * time.Hour
	defaultDeviceCodeTTL   = 10 * time.Minute
	defaultDeviceInterval  = 5 * time.Second
	slowDownStep           = 5 * time.Second // RFC 8628 3.5
	defaultCodeTTL         = 5 * time.Minute
	defaultCodeAttempts    = 3
	defaultFailuresPerMin  = 5
	authCodeTTL            = 60 * time.Second
	authzRequestTTL        = 10 * time.Minute
	noLiveCheckTTL         = 5 * time.Minute
	// expiredGrace is how long after an Account Token expired a use of it
	// is ordinary clock skew rather than a PA-4.4-12 violation.
	expiredGrace = 5 * time.Second
)

// An Account is a Company account that Users sign in to.
type Account struct {
	// ID names the account in consent decisions, Session records
	// (SessionInfo.Account), Account Token records and Disconnect.
	ID string
	// Credentials are the values Mediated Sign-In accepts for the account,
	// keyed by MediatedField.Name. A sign-in must match every field.
	Credentials map[string]string
	// RequireCode makes a Mediated Sign-In of this account ask for a
	// one-time code (CO-4.7-02).
	RequireCode bool
}

// A CredentialField is one entry of auth.mediated.fields (spec 4.7).
type CredentialField struct {
	Name   string
	Label  string
	Secret bool
}

// signinState is the sign-in configuration (set by configureSignIn,
// read-only afterwards) and state (under Server.mu).
type signinState struct {
	scopes      map[string][]string // by sign-in type
	known       []string            // every scope the Company defines
	read, write string              // the scopes the API requires
	accounts    []Account
	scanned     []scannedValue // credential values no request may carry elsewhere

	user       User
	consents   []ConsentRequest
	families   map[string]*acctFamily
	acctTokens map[string]*acctToken
	authzReqs  map[string]*authzRequest
	codes      map[string]*authCode
	states     map[string]bool           // client_id + " " + state, PA-4.5-01
	devices    map[string]*deviceRequest // by device_code
	userCodes  map[string]*deviceRequest // by user_code
	script     []string                  // scripted device poll answers
	signIns    map[string]*mediatedSignIn
	outbox     []SentCode
	failures   map[string][]time.Time     // Mediated Sign-In failures by client and account
	keysSeen   map[string]map[string]bool // account -> DPoP keys of completed mediated sign-ins
}

// scannedValue is a credential value the fake looks for in requests.
type scannedValue struct {
	value  string
	secret bool
}

// acctFamily is the Company's record of an Account Token across rotations.
type acctFamily struct {
	id                     string
	current                string // the value that works now
	clientID, sub, account string
	kind                   string // "direct", "device" or "mediated"
	scopes                 []string
	// resources are those the sign-in's authorization named, which
	// StrictResourceIndicators holds the Account Token to.
	resources       []string
	issued, expires time.Time // expires zero: no lifetime
	revoked         bool
	// refused: a refresh with one of its values was refused, so the
	// client knows it has no usable value (A-10: renewing the Session it
	// signed in with the assertion is then no PA-4.2-15 violation).
	refused bool
}

// acctToken is one value of an Account Token family.
type acctToken struct {
	value    string
	fam      *acctFamily
	replaced time.Time // when a rotation replaced it; zero while current
}

// configureSignIn applies the sign-in defaults and checks the sign-in
// options. It runs before the documents are built.
func (s *Server) configureSignIn() error {
	o := &s.opts
	si := &s.signin

	if len(o.SignIn.MediatedFields) == 0 {
		o.SignIn.MediatedFields = []CredentialField{{Name: "email", Label: "Email"}, {Name: "password", Label: "Password", Secret: true}}
	} else {
		o.SignIn.MediatedFields = slices.Clone(o.SignIn.MediatedFields)
	}
	seen := map[string]bool{}
	for _, f := range o.SignIn.MediatedFields {
		if f.Name == "" || strings.TrimSpace(f.Label) == "" || seen[f.Name] {
			return fmt.Errorf("poppytest: SignIn.MediatedFields: each field needs a unique name and a label (CO-3-11), got %q", f.Name)
		}
		seen[f.Name] = true
	}

	// Scopes (spec 4.4).
	custom := map[string]string{}
	for k, v := range o.SignIn.CustomScopes {
		custom[k] = v
	}
	si.read, si.write = "poppy:read", "poppy:write"
	if o.SignIn.NarrowScopesOnly {
		si.read, si.write = "orders:read", "orders:write"
		if _, ok := custom[si.read]; !ok {
			custom[si.read] = "View your orders"
		}
		if _, ok := custom[si.write]; !ok {
			custom[si.write] = "Exchange items in your orders"
		}
	}
	o.SignIn.CustomScopes = custom
	names := make([]string, 0, len(custom))
	for k := range custom {
		names = append(names, k)
	}
	slices.Sort(names)
	if !o.SignIn.NarrowScopesOnly {
		si.known = []string{"poppy:read", "poppy:write"}
	}
	si.known = append(si.known, names...)
	si.scopes = map[string][]string{}
	if o.SignIn.NarrowScopesOnly {
		si.scopes["direct"] = slices.Clone(names)
		si.scopes["device"] = []string{si.read, si.write}
		si.scopes["mediated"] = []string{si.read}
	} else {
		si.scopes["direct"] = append([]string{"poppy:read", "poppy:write"}, names...)
		si.scopes["device"] = []string{"poppy:read", "poppy:write"}
		si.scopes["mediated"] = []string{"poppy:read"}
	}
	for typ, list := range o.SignIn.Scopes {
		if typ != "direct" && typ != "device" && typ != "mediated" {
			return fmt.Errorf("poppytest: SignIn.Scopes: unknown sign-in type %q", typ)
		}
		si.scopes[typ] = slices.Clone(list)
		for _, sc := range list {
			if !slices.Contains(si.known, sc) {
				si.known = append(si.known, sc) // the validator judges it (CO-3-11)
			}
		}
	}

	// Accounts.
	if len(o.SignIn.Accounts) == 0 {
		cred := map[string]string{}
		for _, f := range o.SignIn.MediatedFields {
			switch f.Name {
			case "email":
				cred[f.Name] = "user@example.test"
			case "password":
				cred[f.Name] = "correct horse"
			case "pin":
				cred[f.Name] = "4071"
			default:
				cred[f.Name] = f.Name + "-acct_1"
			}
		}
		o.SignIn.Accounts = []Account{{ID: "acct_1", Credentials: cred}}
	}
	ids := map[string]bool{}
	for _, a := range o.SignIn.Accounts {
		if a.ID == "" || ids[a.ID] {
			return fmt.Errorf("poppytest: SignIn.Accounts: each account needs a unique ID, got %q", a.ID)
		}
		ids[a.ID] = true
		a.Credentials = cloneMap(a.Credentials)
		if s.signInOffered("mediated") {
			for _, f := range o.SignIn.MediatedFields {
				if a.Credentials[f.Name] == "" {
					return fmt.Errorf("poppytest: account %q has no value for the mediated field %q", a.ID, f.Name)
				}
			}
		}
		for _, f := range o.SignIn.MediatedFields {
			if v := a.Credentials[f.Name]; len(v) >= 4 {
				si.scanned = append(si.scanned, scannedValue{value: v, secret: f.Secret})
			}
		}
		si.accounts = append(si.accounts, a)
	}
	o.SignIn.Accounts = slices.Clone(si.accounts)

	// Lifetimes and limits.
	switch {
	case o.SignIn.AccountTokenTTL == 0:
		o.SignIn.AccountTokenTTL = defaultAccountTokenTTL
	case o.SignIn.AccountTokenTTL > 0 && o.SignIn.AccountTokenTTL < time.Second:
		return errors.New("poppytest: SignIn.AccountTokenTTL must be at least 1 s")
	}
	if o.SignIn.RotationGrace < 0 || o.SignIn.DeviceCodeTTL < 0 || o.SignIn.DeviceInterval < 0 || o.SignIn.CodeTTL < 0 || o.SignIn.CodeAttempts < 0 {
		return errors.New("poppytest: SignIn.RotationGrace, DeviceCodeTTL, DeviceInterval, CodeTTL and CodeAttempts must not be negative")
	}
	if o.SignIn.DeviceCodeTTL == 0 {
		o.SignIn.DeviceCodeTTL = defaultDeviceCodeTTL
	}
	if o.SignIn.DeviceInterval == 0 || o.SignIn.OmitInterval {
		o.SignIn.DeviceInterval = defaultDeviceInterval
	}
	if o.SignIn.DeviceCodeTTL < time.Second || o.SignIn.DeviceInterval < time.Second {
		return errors.New("poppytest: SignIn.DeviceCodeTTL and DeviceInterval must be at least 1 s")
	}
	if o.SignIn.CodeTTL == 0 {
		o.SignIn.CodeTTL = defaultCodeTTL
	}
	if o.SignIn.CodeAttempts == 0 {
		o.SignIn.CodeAttempts = defaultCodeAttempts
	}
	if o.SignIn.MediatedFailuresPerMinute == 0 {
		o.SignIn.MediatedFailuresPerMinute = defaultFailuresPerMin
	}

	si.families = map[string]*acctFamily{}
	si.acctTokens = map[string]*acctToken{}
	si.authzReqs = map[string]*authzRequest{}
	si.codes = map[string]*authCode{}
	si.states = map[string]bool{}
	si.devices = map[string]*deviceRequest{}
	si.userCodes = map[string]*deviceRequest{}
	si.signIns = map[string]*mediatedSignIn{}
	si.failures = map[string][]time.Time{}
	si.keysSeen = map[string]map[string]bool{}
	return nil
}

func cloneMap(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// signInOffered reports whether poppy.json offers sign-in type typ.
func (s *Server) signInOffered(typ string) bool {
	return !slices.Contains(s.opts.SignIn.Disable, typ)
}

// authorizationEndpoint returns authorization_endpoint (Direct Sign-In).
func (s *Server) authorizationEndpoint() string { return s.authBase + "/oauth/authorize" }

// deviceAuthorizationEndpoint returns device_authorization_endpoint
// (Device Sign-In).
func (s *Server) deviceAuthorizationEndpoint() string { return s.authBase + "/oauth/device" }

// verificationURI returns the verification_uri of Device Sign-In.
func (s *Server) verificationURI() string { return s.authBase + "/device" }

// mediatedEndpoint returns auth.mediated.endpoint (Mediated Sign-In); a
// one-time code goes to EndpointURL(EndpointSignIn) + "/" + sign_in_id.
func (s *Server) mediatedEndpoint() string { return s.authBase + "/poppy/sign-in" }

// classifySignIn names the sign-in endpoint at path on the issuer host, or
// returns "".
func (s *Server) classifySignIn(path string) EndpointKind {
	base := strings.TrimPrefix(s.authBase, "https://"+s.authHost)
	switch {
	case path == base+"/oauth/authorize":
		return EndpointAuthorize
	case path == base+"/oauth/device":
		return EndpointDevice
	case path == base+"/device":
		return EndpointVerification
	case path == base+"/poppy/sign-in" || strings.HasPrefix(path, base+"/poppy/sign-in/"):
		return EndpointSignIn
	}
	return ""
}

// account returns the configured account id, or nil.
func (s *Server) account(id string) *Account {
	for i := range s.signin.accounts {
		if s.signin.accounts[i].ID == id {
			return &s.signin.accounts[i]
		}
	}
	return nil
}

// parseScope checks the scope of a sign-in request of type typ (spec 4.4):
// present, single-space separated scope tokens (RFC 6749 3.3), each listed
// for typ. It returns the scopes in request order without duplicates, or
// an invalid_scope description and whether the string was malformed
// (PA-4.4-06).
func (s *Server) parseScope(typ, raw string) (scopes []string, desc string, malformed bool) {
	if raw == "" {
		return nil, "scope is missing: every sign-in request names its scopes", false // CO-4.4-07
	}
	for _, sc := range strings.Split(raw, " ") {
		if !validScopeToken(sc) {
			return nil, "scope must be scope tokens separated by single spaces", true
		}
		if !slices.Contains(s.signin.known, sc) {
			return nil, fmt.Sprintf("unknown scope %q", sc), false // CO-4.4-08
		}
		if !slices.Contains(s.signin.scopes[typ], sc) {
			return nil, fmt.Sprintf("scope %q is not available for %s sign-in", sc, typ), false // CO-4.4-09
		}
		if !slices.Contains(scopes, sc) {
			scopes = append(scopes, sc)
		}
	}
	return scopes, "", false
}

// intersect returns the members of want that are in allowed, in want's
// order.
func intersect(want, allowed []string) []string {
	var out []string
	for _, sc := range want {
		if slices.Contains(allowed, sc) && !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	return out
}

// completeSignIn ends a sign-in of kind: it signs sess in to account with
// scopes and a new Account Token, and returns the spec 4.4 response
// (CO-4.4-11). The caller has checked that sess belongs to the client.
func (s *Server) completeSignIn(g *grantRequest, sess *session, kind, account string, scopes []string, spec *issueSpecT) (*acctFamily, map[string]any, *protoError) {
	now := s.clock.Now()
	s.mu.Lock()
	s.lapseLocked(sess, now)
	switch {
	case sess.ended:
		s.mu.Unlock()
		return nil, nil, &protoError{code: "invalid_session", desc: "the Session has ended"}
	case sess.account != "" && sess.account != account:
		s.mu.Unlock()
		return nil, nil, accountMismatch()
	}
	fam := s.newFamilyLocked(sess.clientID, sess.sub, account, kind, scopes, now)
	fam.resources = slices.Clone(spec.authorized)
	sess.signedIn, sess.account, sess.scopes, sess.family = true, account, slices.Clone(scopes), fam.id
	value, expires := fam.current, fam.expires
	s.mu.Unlock()
	s.signIns.Add(1)
	resp := s.issueToken(g, sess, spec)
	resp["refresh_token"] = value
	if !expires.IsZero() {
		resp["refresh_token_expires_in"] = int(expires.Sub(now).Round(time.Second) / time.Second)
	}
	return fam, resp, nil
}

func accountMismatch() *protoError {
	return &protoError{code: "account_mismatch", desc: "the Session is signed in to another account: start a new Session"}
}

// newFamilyLocked records a new Account Token. s.mu is held.
func (s *Server) newFamilyLocked(clientID, sub, account, kind string, scopes []string, now time.Time) *acctFamily {
	f := &acctFamily{id: newID("atf_", 9), clientID: clientID, sub: sub, account: account, kind: kind,
		scopes: slices.Clone(scopes), issued: now}
	if ttl := s.opts.SignIn.AccountTokenTTL; ttl > 0 {
		f.expires = now.Add(ttl)
	}
	s.signin.families[f.id] = f
	s.addAccountTokenLocked(f)
	return f
}

// addAccountTokenLocked gives f a new current value. s.mu is held.
func (s *Server) addAccountTokenLocked(f *acctFamily) string {
	v := newID("pat_", 32)
	f.current = v
	s.signin.acctTokens[v] = &acctToken{value: v, fam: f}
	return v
}

// revokeFamilyLocked revokes an Account Token and signs out (or, with
// EndSessionsOnSignOut, ends) every Session signed in with it (spec 4.9).
// s.mu is held.
func (s *Server) revokeFamilyLocked(f *acctFamily) {
	f.revoked = true
	for _, sess := range s.sessions {
		if sess.family == f.id && sess.signedIn {
			s.signOutLocked(sess)
		}
	}
}

// sessionEnd is when sess ends by Options.Tokens.SessionLifetime; zero if never.
func (s *Server) sessionEnd(sess *session) time.Time {
	if s.opts.Tokens.SessionLifetime <= 0 {
		return time.Time{}
	}
	return sess.created.Add(s.opts.Tokens.SessionLifetime)
}

// lapseLocked brings sess up to date with the clock: it ends sess when its
// SessionLifetime is over, and signs it out when the Account Token it is
// signed in with has expired: that sign-in is over (spec 4.4: after
// refresh_token_expires_in the User signs in again), so its tokens act
// signed out and the Session is renewed with the assertion (PA-4.8-06).
// Whatever reads a Session's state calls it first. s.mu is held.
func (s *Server) lapseLocked(sess *session, now time.Time) {
	if sess == nil {
		return
	}
	if end := s.sessionEnd(sess); !end.IsZero() && !now.Before(end) {
		sess.ended = true // SessionLifetime is over
	}
	if !sess.signedIn || sess.family == "" {
		return
	}
	if f := s.signin.families[sess.family]; f != nil && !f.expires.IsZero() && !now.Before(f.expires) {
		sess.signedIn, sess.scopes, sess.family = false, nil, ""
	}
}

// signOutLocked signs sess out, or ends it with EndSessionsOnSignOut
// (CO-4.9-02). s.mu is held.
func (s *Server) signOutLocked(sess *session) {
	sess.signedIn, sess.scopes, sess.family = false, nil, ""
	if s.opts.SignIn.EndSessionsOnSignOut {
		sess.ended = true
	}
}

// scanForCredentials records PA-4.7-05 (a secret field's value) and
// PA-4.7-06 (any field's value) when a request carries a configured
// credential anywhere but the body of a POST to the mediated endpoint, and
// PA-4.8-01 when an Account Token reaches anything but the token and
// revocation endpoints outside the URL (the URL is scanList's job:
// PA-4.8-11). A value counts only as a whole token: not preceded or
// followed by a letter or digit, so a PIN inside a base64url string or a
// timestamp doesn't match.
func (s *Server) scanForCredentials(idx int, r *http.Request, x *exchange) {
	var hay []string
	hay = append(hay, r.URL.Path)
	if q, err := url.QueryUnescape(r.URL.RawQuery); err == nil {
		hay = append(hay, q)
	} else {
		hay = append(hay, r.URL.RawQuery)
	}
	for k, vs := range r.Header {
		if k == "User-Agent" {
			continue
		}
		hay = append(hay, vs...)
	}
	urlAndHeaders := len(hay)
	body := string(x.body)
	hay = append(hay, body)
	if b, err := url.QueryUnescape(body); err == nil && b != body {
		hay = append(hay, b)
	}
	mediatedPost := x.endpoint == EndpointSignIn && r.Method == http.MethodPost &&
		r.URL.Path == strings.TrimPrefix(s.mediatedEndpoint(), "https://"+s.authHost)

	secret, plain := false, false
	for _, v := range s.signin.scanned {
		for i, h := range hay {
			if mediatedPost && i >= urlAndHeaders {
				break // the credentials belong in this body
			}
			if containsToken(h, v.value) {
				if v.secret {
					secret = true
				} else {
					plain = true
				}
				break
			}
		}
	}
	if secret {
		s.violate(idx, "PA-4.7-05", "a secret credential value was sent outside the body of the POST to auth.mediated.endpoint (%s %s)", r.Method, x.endpoint)
	}
	if plain {
		s.violate(idx, "PA-4.7-06", "a credential value was sent outside the body of the POST to auth.mediated.endpoint (%s %s)", r.Method, x.endpoint)
	}

	if x.endpoint == EndpointToken || x.endpoint == EndpointRevoke {
		return
	}
	// An index lookup of the "pat_" values in the request, not a search
	// for every Account Token ever issued (load.go).
	s.mu.Lock()
	found := s.findAccountTokenLocked(hay[2:]) // headers and body: scanURLForTokens has the path and query
	s.mu.Unlock()
	if found {
		rule := "PA-4.8-01"
		if x.endpoint == EndpointConversation {
			rule = "PA-4.8-09"
		}
		s.violate(idx, rule, "an Account Token was sent to %s, which is neither the token nor the revocation endpoint", x.endpoint)
	}
}

// containsToken reports whether v occurs in h with no letter or digit
// right before or after it.
func containsToken(h, v string) bool {
	for from := 0; ; {
		i := strings.Index(h[from:], v)
		if i < 0 {
			return false
		}
		i += from
		end := i + len(v)
		if (i == 0 || !isAlnum(h[i-1])) && (end == len(h) || !isAlnum(h[end])) {
			return true
		}
		from = i + 1
	}
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
