package poppytest

import (
	"slices"
	"time"
)

// A ConsentRequest is what the Company's consent page shows the User in
// Direct Sign-In (the authorization endpoint) and Device Sign-In (the
// verification page): which Personal Agent asks, by the name and logo of
// its client metadata, and for which scopes (CO-4.5-02, CO-4.6-01).
type ConsentRequest struct {
	Type        string   // "direct" or "device"
	ClientID    string   // the Personal Agent's client_id
	ClientName  string   // client_name from its metadata document, "" if none
	LogoURI     string   // logo_uri from it, "" if none
	Scopes      []string // the requested scopes, in request order
	RedirectURI string   // Direct: where the User goes back to
	UserCode    string   // Device: the user_code the User entered
}

// A Consent is what the User does on a consent page.
type Consent struct {
	// Approve signs the User in to Account and grants Scopes; false
	// declines (error=access_denied, CO-4.5-04, CO-4.6-04).
	Approve bool
	// Account is the account the User signs in to; "" means the first of
	// Options.SignIn.Accounts. An unknown account makes the page answer 400.
	Account string
	// Scopes are the scopes the User approves: nil means every requested
	// scope; otherwise only those of them that were requested are
	// granted (CO-4.4-06), and approving none of them declines.
	Scopes []string
	// NoAnswer makes the User leave the page without deciding: Browse
	// returns "" and the Device Sign-In request stays pending until it
	// expires. Approve is then ignored.
	NoAnswer bool
}

// A User decides on a consent page. The fake calls it from Browse, not
// from a request handler, so it may call the Server's methods, and its
// decision takes effect only when Browse submits it.
type User func(ConsentRequest) Consent

// SignIn is the User's side of sign-in, from [Server.SignIn]: who answers
// the consent pages (SetUser, ApproveAll, ApproveScopes, Deny,
// NeverAnswer) and what they saw (Consents), how Device Sign-In polls are
// answered (HoldDevicePolls, ScriptDevicePolls), and the one-time codes
// Mediated Sign-In sent (Outbox, LastCode).
type SignIn struct{ s *Server }

// SignIn returns the sign-in knobs and records.
func (s *Server) SignIn() *SignIn { return &s.areas.signIn }

// SetUser programs the User who answers the consent pages of Direct and
// Device Sign-In. nil restores the default: approve every requested scope
// for the first of Options.SignIn.Accounts.
func (k *SignIn) SetUser(u User) {
	s := k.s
	s.mu.Lock()
	s.signin.user = u
	s.mu.Unlock()
}

// ApproveAll programs the User to approve every requested scope for
// account ("" means the first of Options.SignIn.Accounts).
func (k *SignIn) ApproveAll(account string) {
	k.SetUser(func(ConsentRequest) Consent { return Consent{Approve: true, Account: account} })
}

// ApproveScopes programs the User to approve, for account, only those of
// scopes that were requested (PA-4.4-11). If none of them was requested,
// that declines.
func (k *SignIn) ApproveScopes(account string, scopes ...string) {
	scopes = slices.Clone(scopes)
	if scopes == nil {
		scopes = []string{}
	}
	k.SetUser(func(ConsentRequest) Consent { return Consent{Approve: true, Account: account, Scopes: scopes} })
}

// Deny programs the User to decline every consent page.
func (k *SignIn) Deny() {
	k.SetUser(func(ConsentRequest) Consent { return Consent{} })
}

// NeverAnswer programs the User to leave every consent page without
// deciding.
func (k *SignIn) NeverAnswer() {
	k.SetUser(func(ConsentRequest) Consent { return Consent{NoAnswer: true} })
}

// Consents returns every consent page the User has seen through Browse,
// in order.
func (k *SignIn) Consents() []ConsentRequest {
	s := k.s
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ConsentRequest, len(s.signin.consents))
	for i, c := range s.signin.consents {
		c.Scopes = slices.Clone(c.Scopes)
		out[i] = c
	}
	return out
}

// decide shows req to the programmable User and returns the decision,
// normalised: Account filled in, Scopes cut to the requested ones.
func (s *Server) decide(req ConsentRequest) Consent {
	s.mu.Lock()
	u := s.signin.user
	s.signin.consents = append(s.signin.consents, req)
	s.mu.Unlock()
	req.Scopes = slices.Clone(req.Scopes)
	c := Consent{Approve: true}
	if u != nil {
		c = u(req)
	}
	if c.Account == "" {
		c.Account = s.signin.accounts[0].ID
	}
	if c.Scopes == nil {
		c.Scopes = req.Scopes
	}
	c.Scopes = intersect(c.Scopes, req.Scopes)
	if c.Approve && len(c.Scopes) == 0 {
		c.Approve = false
	}
	return c
}

// AccountTokenInfo describes an Account Token, for tests (spec 4.4 "How
// sign-in is remembered").
type AccountTokenInfo struct {
	ClientID  string
	UserID    string // the User ID of the Session its sign-in signed in
	Account   string
	Type      string // the sign-in type that issued it: "direct", "device" or "mediated"
	Scopes    []string
	IssuedAt  time.Time // of the sign-in; a rotation keeps it
	ExpiresAt time.Time // zero: no lifetime
	Revoked   bool      // revoked by the agent, Tokens.RevokeAccount or Sessions.Disconnect
	// Replaced reports that a rotation replaced this value; Current is the
	// value that works now.
	Replaced bool
	Current  string
}

// accountTokenInfo returns the fake's record of an Account Token value.
func (s *Server) accountTokenInfo(value string) (AccountTokenInfo, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := s.signin.acctTokens[value]
	if at == nil {
		return AccountTokenInfo{}, false
	}
	f := at.fam
	return AccountTokenInfo{ClientID: f.clientID, UserID: f.sub, Account: f.account, Type: f.kind,
		Scopes: slices.Clone(f.scopes), IssuedAt: f.issued, ExpiresAt: f.expires, Revoked: f.revoked,
		Replaced: !at.replaced.IsZero(), Current: f.current}, true
}

// revokeAccountToken revokes an Account Token on the server side, as the
// Company's own systems might, and signs out the Sessions signed in with
// it (ending them with EndSessionsOnSignOut). It reports whether the value
// was known. The next refresh with it gets invalid_grant (CO-4.8-10).
func (s *Server) revokeAccountToken(value string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at := s.signin.acctTokens[value]
	if at == nil {
		return false
	}
	s.revokeFamilyLocked(at.fam)
	return true
}

// disconnect plays the User disconnecting the Personal Agents from
// account in the Company's account settings (spec 4.9): every Account
// Token for the account is revoked and every Session signed in to it is
// signed out (ended with EndSessionsOnSignOut), whatever signed it in.
// Signed-in Session Tokens then get sign_in_required (CO-4.9-06).
func (s *Server) disconnect(account string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.signin.families {
		if f.account == account {
			f.revoked = true
		}
	}
	for _, sess := range s.sessions {
		if sess.signedIn && sess.account == account {
			s.signOutLocked(sess)
		}
	}
}
