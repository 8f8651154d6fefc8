package poppytest

// The Server's Sessions and Tokens areas, and the one way to ask for an
// endpoint's URL. Like SignIn, Faults, Operations and Conversations, each
// area is a small value that points back at the Server; every method is
// safe for concurrent use with requests.

// EndpointURL returns the URL of the endpoint ep of the primary domain,
// as the documents publish it:
//
//   - EndpointPoppyJSON: https://{primary}/.well-known/poppy.json
//   - EndpointMetadata: the issuer's RFC 8414 metadata
//   - EndpointToken, EndpointRevoke, EndpointAuthorize (Direct Sign-In),
//     EndpointDevice (the device authorization endpoint) and
//     EndpointVerification (Device Sign-In's verification_uri)
//   - EndpointSignIn: auth.mediated.endpoint; a one-time code goes to
//     EndpointURL(EndpointSignIn) + "/" + sign_in_id
//   - EndpointAPI: the base URL of the OpenAPI API, "https://api.example.test"
//     (its description, poppy.json's url, is /openapi.json there)
//   - EndpointMCP: the MCP server's url, the resource a Bearer Session
//     Token must be requested for (the second server of
//     MCPServingOptions.SecondServer is https://mcp2.{primary}/mcp, its
//     metadata at /.well-known/oauth-protected-resource/mcp on each host)
//   - EndpointConversation and EndpointOperations: the poppy protocol
//     entry's and the operations extension's endpoints
//   - EndpointBrowserSession: web.browser_session_endpoint, "" when
//     poppy.json lists none
//   - EndpointWeb: the website, URL()
//
// Any other kind (EndpointAgent, EndpointProvider, EndpointOther) has no
// one URL: it returns "".
func (s *Server) EndpointURL(ep EndpointKind) string {
	switch ep {
	case EndpointPoppyJSON:
		return s.URL() + "/.well-known/poppy.json"
	case EndpointMetadata:
		host, path, _ := metadataPath(s.issuer)
		return "https://" + host + path
	case EndpointToken:
		return s.tokenEndpoint()
	case EndpointRevoke:
		return s.revocationEndpoint()
	case EndpointAuthorize:
		return s.authorizationEndpoint()
	case EndpointDevice:
		return s.deviceAuthorizationEndpoint()
	case EndpointVerification:
		return s.verificationURI()
	case EndpointSignIn:
		return s.mediatedEndpoint()
	case EndpointAPI:
		return s.apiURL()
	case EndpointMCP:
		return s.mcpURL()
	case EndpointConversation:
		return s.apiURL() + "/poppy/conversations"
	case EndpointOperations:
		return s.operationsEndpoint()
	case EndpointBrowserSession:
		return s.browserSessionURL()
	case EndpointWeb:
		return s.URL()
	}
	return ""
}

// Sessions are the Company's records and knobs of Sessions (spec 4.2,
// 4.9) and of the agents that start them (spec 4.1), from
// [Server.Sessions]: what the fake holds (Get, All, Cookies,
// ClientMetadata) and the Company's own acts on them (End, SignIn,
// SignOut, Disconnect, RevokeClient).
type Sessions struct{ s *Server }

// Sessions returns the Session knobs and records.
func (s *Server) Sessions() *Sessions { return &s.areas.sessions }

// Get returns the fake's record of a Session.
func (k *Sessions) Get(id string) (SessionInfo, bool) { return k.s.sessionInfo(id) }

// All returns every Session, in no particular order.
func (k *Sessions) All() []SessionInfo { return k.s.sessionList() }

// End ends a Session: its tokens stop working (invalid_token) and
// renewing it returns invalid_session (CO-4.2-10).
func (k *Sessions) End(sessionID string) { k.s.endSession(sessionID) }

// SignIn signs a Session in to account with scopes on the server side, as
// a finished sign-in would, and returns a signed-in DPoP Session Token for
// it, bound to the key of the Session's latest DPoP token. It fails if the
// Session doesn't exist, has ended, has no DPoP token yet, is signed in to
// another account (account_mismatch, spec 4.4), or a scope is unknown.
func (k *Sessions) SignIn(sessionID, account string, scopes ...string) (string, error) {
	return k.s.signInSession(sessionID, account, scopes...)
}

// SignOut signs a Session out on the server side, as revoking its Account
// Token would (spec 4.9). Its signed-in tokens then act signed out.
func (k *Sessions) SignOut(sessionID string) { k.s.signOutSession(sessionID) }

// Disconnect plays the User disconnecting the Personal Agents from account
// in the Company's account settings (spec 4.9): every Account Token for
// the account is revoked and every Session signed in to it is signed out
// (ended with SignInPolicy.EndSessionsOnSignOut), whatever signed it in.
// Signed-in Session Tokens then get sign_in_required (CO-4.9-06).
func (k *Sessions) Disconnect(account string) { k.s.disconnect(account) }

// RevokeClient revokes a client_id: its next token or revocation request
// gets 401 invalid_client (CO-4.1-07).
func (k *Sessions) RevokeClient(clientID string) { k.s.revokeClient(clientID) }

// ClientMetadata returns the client metadata document the fake last
// fetched for clientID, as served.
func (k *Sessions) ClientMetadata(clientID string) ([]byte, bool) {
	return k.s.clientMetadata(clientID)
}

// Cookies returns the Session cookies the website has set (spec 5), in no
// particular order.
func (k *Sessions) Cookies() []WebCookie { return k.s.webCookies() }

// Tokens are the Company's records and knobs of Session Tokens, Account
// Tokens and DPoP nonces (spec 4.2, 4.3, 4.8), from [Server.Tokens]: what
// the fake issued (Get, Account, EmbeddedCredentials), the Company's own
// acts on them (Expire, Revoke, RevokeAccount, NewNonce), and token
// responses bent for negative tests (SetType, SetExpiresIn).
type Tokens struct{ s *Server }

// Tokens returns the token knobs and records.
func (s *Server) Tokens() *Tokens { return &s.areas.tokens }

// Get returns the fake's record of a Session Token.
func (k *Tokens) Get(value string) (TokenInfo, bool) { return k.s.tokenInfo(value) }

// Account returns the fake's record of an Account Token value.
func (k *Tokens) Account(value string) (AccountTokenInfo, bool) {
	return k.s.accountTokenInfo(value)
}

// Expire makes the Session Token value (DPoP or Bearer) expire now, by the
// Company's records, while the client still holds it as valid: its next
// use gets 401 invalid_token (PA-6-05). It reports whether the fake issued
// the token.
func (k *Tokens) Expire(value string) bool { return k.s.expireToken(value) }

// Revoke revokes the Session Token value on the Company's side: its next
// use gets 401 invalid_token, and the Session goes on (a new token for it
// is issued as usual). It reports whether the fake issued the token.
func (k *Tokens) Revoke(value string) bool { return k.s.revokeToken(value) }

// RevokeAccount revokes an Account Token on the server side, as the
// Company's own systems might, and signs out the Sessions signed in with
// it (ending them with SignInPolicy.EndSessionsOnSignOut). It reports
// whether the value was known. The next refresh with it gets invalid_grant
// (CO-4.8-10).
func (k *Tokens) RevokeAccount(value string) bool { return k.s.revokeAccountToken(value) }

// EmbeddedCredentials opens the backend session blob sealed in a token
// issued with TokenPolicy.EmbedCredentials, as the Company's own systems
// would (CO-4.2-12). It reports false for any other token.
func (k *Tokens) EmbeddedCredentials(tok string) (string, bool) {
	return k.s.embeddedCredentials(tok)
}

// NewNonce issues a new DPoP nonce on the host of ep (EndpointToken and
// EndpointRevoke share the issuer host; EndpointAPI, EndpointConversation
// and EndpointOperations share the API host) and returns it. Older nonces
// stay acceptable until 4 newer ones exist; use it to test a stale nonce.
func (k *Tokens) NewNonce(ep EndpointKind) string { return k.s.newNonce(ep) }

// SetType answers the next token request that issues a token with
// token_type t, whatever the token really is (PA-4.2-12).
func (k *Tokens) SetType(t string) { k.s.setTokenType(t) }

// SetExpiresIn answers the next times token responses that issue a token
// (one when times is 0) with expires_in seconds (PA-4.2-13). When seconds
// is > 0 the tokens really expire after that many seconds; when it is
// <= 0 (a value the client must refuse) they keep the configured lifetime.
func (k *Tokens) SetExpiresIn(seconds, times int) { k.s.setExpiresIn(seconds, times) }
