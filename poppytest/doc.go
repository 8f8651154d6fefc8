// Package poppytest is a strict in-process fake Company for testing
// Personal Agents that speak the Personal Agent Protocol (Poppy) draft 0.1,
// in the manner of net/http/httptest.
//
// It speaks only the wire protocol and enforces the Company-side rules of
// the specification (the CO rules listed in docs/conformance.md): a test
// starts one with [NewServer], gives the agent under test [Server.Client]
// (or [Server.Transport]) and [Server.Clock], points it at the Company's
// domain ("example.test"; [Server.URL] is its base URL), serves the
// agent's own client metadata, JWKS and callback with
// [Server.HandleAgent], and then inspects [Server.Requests],
// [Server.Session] and [Server.Token]. Package poppytest/agenttest does
// the agent's part in one call for agents built with this SDK. Anything the
// agent does that a correct Personal Agent never does is recorded as a
// [Violation] and fails the test at cleanup unless the test takes it with
// [Server.TakeViolations].
//
// [NewServer] is the test helper; a program (the poppy fake command) or an
// Example starts the same fake with [New], which returns configuration
// errors, and calls Close and reads Violations itself. The package imports
// neither package testing nor its flags: NewServer takes a [TB].
//
// # Hosts and TLS
//
// One TLS listener on 127.0.0.1 serves every host, routed by the Host
// header, with certificates from a CA the fake generates (ECDSA P-256).
// URLs carry no port. With the default options:
//
//	https://example.test/.well-known/poppy.json         poppy.json (also www.example.test)
//	https://auth.example.test/.well-known/oauth-authorization-server
//	https://auth.example.test/oauth/token               token endpoint
//	https://auth.example.test/oauth/revoke              revocation endpoint
//	https://auth.example.test/oauth/authorize           authorization endpoint and consent page (Direct Sign-In)
//	https://auth.example.test/oauth/device              device authorization endpoint (Device Sign-In)
//	https://auth.example.test/device                    verification_uri, the Device Sign-In page
//	https://auth.example.test/poppy/sign-in[/{id}]      auth.mediated.endpoint and its code URLs (Mediated Sign-In)
//	https://api.example.test/…                          the OpenAPI resource server
//	https://mcp.example.test/mcp                        the MCP server (go-sdk, Streamable HTTP, Bearer tokens)
//	https://mcp.example.test/.well-known/oauth-protected-resource/mcp  its RFC 9728 metadata
//	https://example.test/poppy/browser-session          web.browser_session_endpoint (spec 5)
//	https://example.test/…, www.example.test/…          the website (and Web.Subdomains)
//	https://provider.test/…                             hops of Discovery.RedirectWellKnown
//	https://agent.test/…                                the agent's handler (HandleAgent)
//
// [Server.Client] trusts the CA through RootCAs (never
// InsecureSkipVerify) and dials those hosts, on port 443, to the listener;
// other hosts fail to dial. Port 80 of the same hosts reaches a second,
// plain-HTTP listener that never serves poppy.json (CO-3-01) and records
// any Company request it gets as a PA-3-01 violation. A child process
// reaches the same fake with [Server.Env] (see the recipes below).
//
// # Recipe: test your agent code
//
// With the SDK, package poppytest/agenttest returns a ready Agent:
//
//	srv := poppytest.NewServer(t, nil)
//	agent, identity := agenttest.New(t, srv, nil)
//	// the code under test uses agent; then inspect srv.Requests()
//
// Any other Personal Agent needs four things: an HTTP client from
// [Server.Client], the clock from [Server.Clock] (or polls and renewals
// wait in real time), its identity documents served with
// [Server.HandleAgent] (or the Company answers invalid_client: the
// metadata fetch found nothing), and "example.test" as the Company's
// domain.
//
// # Recipe: test a command that runs in a child process
//
// Start the fake and serve the agent's identity in the test, then run the
// command with the fake's environment:
//
//	cmd := exec.Command(bin, args...)
//	cmd.Env = append(os.Environ(), srv.Env()...)
//
// The command reaches the fake in one of two ways:
//
//   - Unchanged: a binary that uses Go's standard transport (the SDK's
//     default client, with no AgentOptions.HTTPClient) sends its requests
//     through the fake, which Env names as HTTPS_PROXY, and trusts the
//     fake's CA, which Env writes to the file named by SSL_CERT_FILE;
//     NO_PROXY is emptied. Those three are all it needs. The child runs on
//     the real clock, so leave [Server.Clock] alone.
//   - With a test hook: a command that calls [ClientFromEnv] (and
//     [ClockFromEnv]) gets the same client as [Server.Client] from the
//     POPPYTEST_* variables. ClientFromEnv returns [ErrNoFake] when the
//     environment names no fake, so the command can fall back to its
//     production client.
//
// Every value of Env is one line, so a shell can take the fake's
// environment too: written to a file, one entry per line,
//
//	while IFS= read -r kv; do export "$kv"; done < fake.env
//
// exports it as it is.
//
// The command's agent identity must be the one the test serves: share its
// private key with the child (for example SigningKey.MarshalPrivateJWK in
// an environment variable of the test's own) or a keystore.
//
// Time-bound rules use [Server.Clock], real time plus an offset that tests
// advance; every response's Date header is Clock time.
//
// # API of the fake resource server
//
//	GET    /openapi.json            public OpenAPI 3.1 description
//	GET    /products                any valid Session Token, signed in or out
//	GET    /orders                  poppy:read, else 403 sign_in_required / insufficient_scope
//	POST   /orders/{id}/exchanges   poppy:read and poppy:write (insufficient_scope names both)
//	DELETE /orders/{id}             always 403 {"error":"forbidden"} without WWW-Authenticate (CO-4-01)
//	POST   /echo                    echoes the JSON body verbatim
//	GET    /addresses               the custom scope "addresses"
//
// The description (OpenAPI 3.1, validated with kin-openapi) gives schemas
// for every body and the 202 + operation answer of the exchanges endpoint
// (OPS 4.1).
//
// # MCP server
//
// https://mcp.example.test/mcp is an MCP server built with the go-sdk
// behind auth.RequireBearerToken: it accepts only Bearer Session Tokens
// issued for its url, checked against the fake's token store, and
// enforces each tool's scopes with 403 Bearer error="sign_in_required" or
// error="insufficient_scope", scope="…" (CO-6-05). Tools: search_products,
// size_advice (any token), list_orders (poppy:read), save_size_profile
// (poppy:write), request_exchange (poppy:read and poppy:write: the order
// action that proposes an operation in structuredContent.operation, the
// same operation as POST /orders/{id}/exchanges, OPS 4.2); tools/list
// answers pages of two. Options.MCP
// (MCPOptions) replaces authorization_servers in its RFC 9728 metadata,
// adds a second server at mcp2.example.test, issues Bearer tokens for
// servers a test runs itself, or serves it on the API's host. A DPoP token at the MCP server, a
// Bearer token at a DPoP API and a proof sent to the MCP server are
// violations (PA-4.3-19, PA-6-02). [Server.ExpireToken] and
// [Server.RevokeToken] spoil a Session Token on the Company's side.
//
// For an agent whose client metadata lists the operations extension
// ("extensions": {"operations": {"version": "1"}}), POST
// /orders/{id}/exchanges answers 202 {"operation": …}: the spec's jacket
// exchange (item_id and replacement_sku from the body, default itm_4Qa and
// stormline-insulated-m), proposed, not performed. Any other agent gets the
// exchange performed at once (201), or, with
// Options.Operations.RequireOperations, 403 extension_required. While an
// exchange of the same order and item is open for the same owner, it
// answers with that operation (CO-OPS4-01), unless
// Options.Operations.ProposeAgain; a request with an Idempotency-Key the
// same client and User sent before answers with the operation that key
// proposed, in whatever state it is (the same key for another request is
// 422). Options.Operations.ProposeFaults injects faults into proposing
// requests (a lost 202, say); OperationInfo.Proposals and IdempotencyKeys
// count them.
//
// With NarrowScopesOnly the API requires orders:read and orders:write
// instead (CO-4.4-05). A signed-in token acts signed in only while its
// Session is still signed in to that account (CO-4.9-03), unless
// NoLiveSignInCheck.
//
// # Operations
//
// The operations endpoint https://api.{primary}/poppy/operations (also
// [Server.OperationsEndpoint]) serves GET /{id}, POST /{id}/confirm and
// POST /{id}/cancel with every Company rule of the extension: revisions
// are fixed once issued and only the latest is confirmable; a revision
// expires at expires_at (Options.Operations.TTL, default 15 min); an
// operation belongs to its Session and, if proposed signed in, to the
// account; a confirm needs the scopes of the action; user_approval_required
// refuses standing_permission; a final operation never changes. The
// performer acts once per operation, on its confirm, as
// Options.Operations.Perform (or [Operations.SetPerform]) says: at once, slowly
// (in_progress with Retry-After), failing partway (with a result.summary
// of what was done), or with an outcome unknown until
// [Operations.Resolve]. [Operations.Revise] issues the next
// revision (the next jacket size), [Operations.MutateRevision] breaks a
// revision on purpose, [Operations.HoldConfirms] holds confirms in flight, and
// Options.Operations.Faults injects a cut connection, a lost response after
// performing, a 500 after performing or a 503 into any confirm, read or
// cancel (ProposeFaults the same into proposing requests). [Operations.Get], [Operations.All] and
// [Operations.Performed] show what was proposed and performed, and how
// often (OperationInfo.Performed is 0 or 1).
//
// # Signing in
//
// The Company has Options.SignIn.Accounts (default one, "acct_1", with email
// "user@example.test" and password "correct horse") and offers the three
// sign-in types with the scopes of Options.SignIn.Scopes (default: direct
// poppy:read, poppy:write and the custom scopes; device poppy:read and
// poppy:write; mediated poppy:read). Every type ends with an Account Token
// as refresh_token and a signed-in Session Token for the Session the
// request named (spec 4.4).
//
// The User is programmable. Direct and Device Sign-In show a consent page
// naming the agent (client_name, logo_uri) and the requested scopes;
// opening it decides nothing. A test plays the User's browser with
// [Server.Browse], which opens the page, asks the programmable User, and
// submits the decision. The User approves every requested scope for the
// first account unless the test programs it with [SignIn.SetUser] (a
// func(ConsentRequest) Consent), [SignIn.ApproveAll],
// [SignIn.ApproveScopes], [SignIn.Deny] or [SignIn.NeverAnswer];
// [SignIn.Consents] lists what it saw. In an SDK test:
//
//   - Direct: the prompter gets the authorization URL; the test calls
//     loc, err := srv.Browse(ctx, authURL) and hands loc, the agent's
//     redirect_uri with code, state and iss (or error=access_denied),
//     back to the agent as its callback. Browse doesn't follow it.
//   - Device: the prompter gets verification_uri_complete (or
//     verification_uri and user_code); the test calls
//     srv.Browse(ctx, verificationURIComplete), or Browse of
//     verification_uri + "?user_code=" + code, which returns "" once the
//     User decided; the agent's polls see the decision.
//     [SignIn.HoldDevicePolls] and [SignIn.ScriptDevicePolls] make polls
//     answer authorization_pending or slow_down first.
//   - Mediated: when the agent asks for the one-time code
//     (code_required, with Options.SignIn.RequireCode, Account.RequireCode or
//     UnusualOnNewKey), the test answers [SignIn.LastCode], the code the
//     fake "texted" the User; [SignIn.Outbox] lists them all.
//
// [Server.AccountToken] shows the record behind an Account Token,
// [Server.RevokeAccountToken] revokes one on the Company's side, and
// [Server.Disconnect] plays the User disconnecting the agents from an
// account (spec 4.9).
//
// # The website
//
// The browser-session endpoint runs every check of spec 5 step 3 and
// answers 303 to return_to with one Secure, HttpOnly, SameSite=Lax cookie
// for the whole domain, or a 400 page with no cookie. Every page (GET any
// path) shows, on each request, the state of the Session the cookie names:
// "Signed in to account acct_1.", "Scopes: …", "Signed out." or "Visitor
// without a Session.", and "Session {id}". POST /exchange needs the write
// scope (CO-5-18); GET /site-login?account=B sets the site's own login
// cookie, ignored while a Session cookie is present (CO-5-19). Options.Web
// holds the knobs; [Server.WebCookies] lists the cookies set;
// [Server.BrowserTrust] says how a real browser reaches the fake and
// pins its certificate's key. GET /operations/{id}, an operation's url,
// shows the operation (summary, state, revision, result) to a Session that
// may use it at the operations endpoint, and is a 404 for anyone else.
// While it is proposed, the page has a confirm form (POST
// /operations/{id}/confirm with revision and approved_by) and a cancel
// form (POST /operations/{id}/cancel): the website's confirm of OPS 4.4,
// with the endpoint's checks in the endpoint's order, on the same
// operation, so the two channels together perform it at most once
// (CO-OPS6-02). OperationInfo.WebsiteConfirms, WebsiteCancels and
// ConfirmedVia show what the website did.
//
// # Conversations
//
// https://api.example.test/poppy/conversations is the poppy conversation
// endpoint (spec 7), configured by Options.Conversations: JSON reads with
// cursor, wait and has_more paging, SSE streams (Streaming) with
// text-delta pieces, event retention (Retention, [Conversations.PurgeBefore]),
// idempotent message IDs, Direct Conversations and ownership by client_id,
// User and account. Its Company Agent is scripted by
// ConversationOptions.Agent, a func(*Turn) run for each message; tests
// drive the Company's side through [Server.Conversations]: [Conversations.Say],
// [Conversations.SetState], [Conversations.RequestUser],
// [Conversations.RequireAuthorization], [Conversations.JoinHuman],
// [Conversations.NoHumanAvailable], [Conversations.Close] and
// [Conversations.Append]; read it with [Conversations.Get] and
// [Conversations.All]; and inject faults with [Conversations.SetFaults],
// [Conversations.LoseResponses] and [Conversations.Cut]. Decisions:
// a conversation belongs to an account from its first signed-in request
// "same content" of a retried message is its canonical JSON and
// parent_conversation_id; wait may be fractional and is capped by
// MaxWait, and a POST never streams; an empty read without cursor
// answers "cursor": null; Last-Event-ID wins over a cursor query
// (a stream ignores the query with StreamIgnoresCursor), and ordinary
// events carry no SSE event name; a Direct as parent
// gets conversation_not_found; closing twice answers 200 and a
// handoff while queued or with a person answers 202 with the state as it
// is; malformed requests get 400 invalid_request.
//
// # Knobs
//
// Options set the Company's behaviour for the whole test; methods change
// it at run time. Options.Misconfig groups the negative-test switches,
// each of which makes the Company break the rule it names so that a test
// can show the client refuses it; everything else in Options keeps the
// Company conformant. At run time: [Faults.RateLimit] and [Faults.ForceError]
// inject answers on any [Endpoint] (a failing revocation is
// ForceError(EndpointRevoke, Fault{Status: 503})); [Server.SetTokenType] and
// [Server.SetExpiresIn] bend token responses; Options.Tokens.SessionLifetime
// ends each Session at a set age; [Server.EndSession],
// [Server.RevokeClient], [Server.SignInSession], [Server.SignOutSession],
// [Server.RevokeAccountToken] and [Server.Disconnect] change Company
// state; [Server.NewNonce] rotates a DPoP nonce; the User knobs above
// decide consent pages; HoldDevicePolls and ScriptDevicePolls script
// Device Sign-In polls. Sign-in options (Options.SignIn): Accounts, MediatedFields,
// Scopes, NarrowScopesOnly, AccountTokenTTL, RotateAccountTokens,
// RotationGrace, DeviceCodeTTL, DeviceInterval, OmitInterval,
// RequireCode, UnusualOnNewKey, CodeTTL, CodeAttempts,
// MediatedFailuresPerMinute, EndSessionsOnSignOut and NoLiveSignInCheck.
//
// # Load testing
//
// A fake that keeps every request grows without bound in a long run.
// Options.Load bounds it ([LoadOptions]: the latest requests, by count and
// by bytes, or only those that broke a rule, and Session Tokens forgotten a while
// after they expire), and [Server.Counts] keeps totals of every request,
// including EarlyRenewals (a Session renewed less than half a lifetime
// after its last token: replicas renewing twice), SessionsStarted and
// SignIns. Its cost per request does not grow with the requests it has
// seen (TestFakeSteadyLoad, POPPY_TEST_FAKE_LOAD=60, with the SDK in the
// same process on 2 cores): 16 callers for 50 Users with 4 s Session
// Tokens and rotating Account Tokens ran at 6,062 calls/s in the first
// 10 s and 6,738 in the last, the heap at 29 then 76 MB; 2,000 callers
// for 2,000 Users at 4,348 and 5,070 calls/s with about 550 refreshes/s;
// 3,000 callers for 10,000 Users reached 3,188 calls/s and 1,340
// refreshes/s once the first renewals, all due at once, were past, the
// heap at about 300 MB.
//
// # Decisions on ambiguities
//
// The specification leaves some behaviour open; docs/decisions.md in this
// module lists every point, numbered A-nn, with what the SDK and the fake
// do. The fake decides as follows.
//
//   - organization.domain is compared with the requested host after
//     lower-casing and removing one leading "www." from both.
//   - "the same domain as client_id" is the same host, port included:
//     jwks_uri and redirect_uris must be https URLs on the client_id's host.
//   - a client assertion's aud may be the token endpoint URL, the
//     issuer, or the URL of the endpoint it is sent to (revocation), as a
//     string or in an array; the value matched is recorded in
//     JWT.AudienceMatch.
//   - client assertions and Session assertions have separate jti
//     namespaces, each per client_id, remembered until exp plus 60 s. A
//     lifetime (exp - iat) over 5 minutes is rejected; over 60 s it is
//     accepted and recorded as a violation (PA-4.1-09, PA-4.2-09). A
//     Session assertion jti that decodes (base64url) to fewer than 16 bytes
//     and is shorter than 32 characters is a PA-4.2-10 violation. iat and
//     nbf may be up to 60 s in the future.
//   - the metadata is served at the RFC 8414 location derived from
//     the issuer (path inserted, trailing slash removed), also for the
//     MetadataIssuer and IssuerInDocument variants on the issuer's host.
//   - revocation and device authorization requests need client
//     authentication and no DPoP proof; a proof there is ignored. Their
//     client assertion's aud may also be the URL they are sent to.
//   - DPoP failures at resources are 401 with WWW-Authenticate: DPoP
//     error="invalid_dpop_proof" (or "use_dpop_nonce" with a DPoP-Nonce
//     header); at the token endpoint they are 400 with the same header. A
//     proof key that differs from the token's key is invalid_dpop_proof.
//   - tokens are per (Session, type, resource). By default issuing a
//     token revokes nothing; RevokeOnReissue revokes the previous token of
//     the same Session, type and resource.
//   - a token request without a DPoP proof gets a Bearer token only
//     when resource is the MCP url, else 400 invalid_target; such a request
//     may also start a new Session. Known resources are the MCP url, the API's
//     "https://api.{primary}/" and API.Resource; any other is invalid_target.
//     Without API.Resource, the API accepts DPoP tokens issued with no
//     resource or for "https://api.{primary}/"; with it, only tokens issued
//     for API.Resource. GET /openapi.json needs no token.
//   - RFC 8707 at sign-in: the authorization and device authorization
//     requests may name resources (resource repeated); each must be a
//     known resource, else invalid_target. They don't restrict
//     the Account Token: spec 4.3 lets any token request name a resource.
//     With StrictResourceIndicators they do, as oidc-provider's default
//     does (RFC 8707 section 2.2): every token request of the sign-in's
//     grant must name exactly one of them (none is enough when only one
//     was named), else invalid_target, after the grant was used.
//   - renewing a signed-in Session with the JWT bearer assertion is
//     refused with invalid_grant and recorded as a PA-4.2-15 violation; a
//     signed-in Session is renewed with its Account Token. Once a refresh
//     with that Session's Account Token was refused (revoked, expired or
//     rotated away), the refusal stays but is no violation: the client has
//     no Account Token left for it and must start a new Session.
//   - the token response always carries scope ("" when signed out).
//   - an authorization code's exchange takes the User ID for the
//     Account Token from the Session it signs in, which must belong to
//     the same client_id (invalid_session). An exchange without
//     session_id is refused with invalid_request (a PA-4.5-09 violation),
//     unless it names an MCP url as resource: that is MCP's own sign-in
//     flow by a client that doesn't speak Poppy, and it starts a new
//     signed-in Session with a Bearer token (CO-6-08). PKCE plain, or no method, is
//     refused (redirect with error=invalid_request) and recorded as a
//     PA-4.5-02 violation; the metadata lists only S256. Direct and Device
//     completion with a Session signed in to another account is
//     account_mismatch. invalid_session and account_mismatch leave the
//     code usable, so the agent can start a new Session and exchange it
//     there; a wrong redirect_uri or code_verifier uses it up; reusing a
//     spent code revokes the Account Token it issued (RFC 6749 4.1.2).
//   - redirects always carry iss, and the metadata says
//     authorization_response_iss_parameter_supported.
//   - interval defaults to 5 s and slow_down adds 5 s to the polled
//     request's interval (RFC 8628). The fake answers slow_down to a poll
//     sooner than interval after the previous one while the User hasn't
//     decided; a second such poll right after a slow_down is a PA-4.6-07
//     violation. A poll naming an ended or foreign Session gets
//     invalid_session and leaves the device request as it is.
//   - Mediated Sign-In answers every status with HTTP 200 and a
//     "status" member: complete (with the spec 4.4 fields, including
//     refresh_token_expires_in), code_required, failed, expired. Errors
//     are JSON {"error": …}: 400 invalid_request (not JSON, a field
//     missing or extra), 400 invalid_scope, 400 account_mismatch, 404
//     sign_in_not_found (unknown, finished, or another Session's sign-in:
//     the same answer, and the sign-in goes on), 429 rate_limited with
//     Retry-After once MediatedFailuresPerMinute failures (wrong
//     credentials or codes, per client_id and account) happened in a
//     minute, and the token errors of any DPoP resource. The code URL is
//     {endpoint}/{sign_in_id}; codes are six digits, live CodeTTL, and
//     CodeAttempts wrong ones end the sign-in with failed.
//   - with RotateAccountTokens the old value dies at once unless
//     RotationGrace keeps it working a little longer (a use then returns
//     the current value without rotating again). A rotated token keeps
//     the sign-in's expiry: refresh_token_expires_in is the remaining
//     lifetime. Using a replaced value afterwards is a PA-4.8-04
//     violation.
//   - a revocation failure is injected with ForceError. Revocation
//     signs out the Sessions signed in with that Account Token at once
//     (their tokens then get sign_in_required), or ends them with
//     EndSessionsOnSignOut. Revoking another client's Account Token is
//     400 unauthorized_client and revokes nothing; an unknown token is
//     200 (RFC 7009).
//   - insufficient_scope names the full set of scopes the action
//     requires: DPoP error="insufficient_scope", scope="poppy:read poppy:write".
//   - every answer of the operations endpoint is 200 with the
//     operation (in_progress with Retry-After). Confirm checks ownership
//     (404), scopes (403), then answers a non-proposed or expired
//     operation as it is, then the revision (409 terms_changed with the
//     current operation), then approved_by (403 user_approval_required):
//     the state comes before the revision so that every repeated confirm
//     is safe. A proposed operation past expires_at becomes expired when
//     next used.
//   - cancel takes any body, or none.
//   - an operation proposed in a signed-out Session stays that
//     Session's alone, even after the Session signs in.
//   - extension_required is 403 {"error":"extension_required",
//     "extension":"operations"}, without WWW-Authenticate.
//   - RateLimit answers {"error":"rate_limited"} on any endpoint, with
//     the given Retry-After or none.
//   - Session Tokens last Tokens.TTL, 1 hour by default (5 minutes,
//     and at most that, with NoLiveSignInCheck).
//   - the refresh grant answers invalid_grant for an unknown,
//     expired, revoked or rotated-away Account Token and for one issued
//     to another client alike; only error_description differs.
//   - Account Tokens are bound to the client, not to a DPoP key: a
//     refresh may carry a proof by any key, to which the new Session
//     Token is bound, or, with resource set to the MCP url, none.
//   - DPoP proofs must be ES256 (the metadata says so); assertions may
//     use ES256/384/512, RS256/384/512, PS256/384/512 or EdDSA.
//   - a client beyond Clients.MaxNew gets 401 invalid_client.
//   - return_to must be an https URL on the domain of the endpoint's
//     host or a subdomain; another domain of the same issuer is refused
//     (its cookie could not reach it).
//   - a browser assertion's exp must be after the Clock and at most
//     60 s after iat, and iat at most 60 s ahead; an iat more than 5 s
//     off is recorded (PA-5-04). A new join leaves the earlier cookie
//     working unless Web.RevokeOnRejoin.
//
// Other choices: a DPoP proof's iat must be within ±60 s of the Clock and
// its jti is remembered for 120 s; htu is compared after lower-casing scheme
// and host and removing a default port, and an htu with a query or fragment
// is invalid (and a PA-4.3-08 violation). An htu for another URL is a
// PA-4.3-08 violation only when the URLs differ after RFC 3986
// syntax-based normalisation too (an escaped unreserved character is the
// same URL: answered 401, recorded as none). A DPoP proof is checked before
// client authentication, so a use_dpop_nonce answer consumes no assertion.
// With RotateNonce, a nonce stays valid until 4 newer ones exist on its
// host. Client metadata and JWKS are cached for at most 60 s of Clock time
// and refetched once when an assertion fails to verify.
//
// # Violations
//
// The fake records, among others: a replayed DPoP proof (PA-4.3-05); a
// proof jwk with private members (PA-4.3-03); ath at the token endpoint
// (PA-4.3-11); a missing or wrong ath (PA-4.3-10); an htu with a query or
// for another URL (PA-4.3-08); an htm that is not the method (PA-4.3-07);
// a Session Token used at least 5 s (Clock) after the agent first used a
// newer one for the same Session, type and resource (PA-4.3-25; earlier,
// it is a request that was on its way); a token in a URL (PA-4.3-26, every request's path and query
// is scanned for issued tokens); an API request without Authorization
// (PA-4.3-23); a Bearer token at the API (PA-4.3-19); a DPoP token sent as
// Bearer or without a proof (PA-4.3-01); an assertion aud that is an array
// or not the token endpoint (PA-4.2-08); over-long assertion lifetimes
// (PA-4.1-09, PA-4.2-09); reused or short jti values (PA-4.1-09,
// PA-4.2-10); an email-like User ID (PA-4.2-04); a JWKS with private keys
// (PA-4.1-05); a DPoP key that is a published JWKS key (PA-4.1-10); one
// DPoP key used for two Users (PA-4.3-02); a Company request over plain HTTP
// (PA-3-01); following an http:// redirect of the well-known URL
// (PA-3-03). For sign-in: a sign-in page (authorization endpoint,
// verification page) requested with what only the agent holds: a DPoP
// proof, an Authorization header or an assertion (PA-4.4-02; any other
// request to those pages is the User's, Request.User, whatever browser
// or tool the person uses, and no rule of the agent is checked on it but
// a token in its URL, which the agent put there); a
// redirect_uri that doesn't exactly match (PA-4.5-04); a missing, short
// (under 22 characters) or reused state (PA-4.5-01); PKCE other than
// S256 (PA-4.5-02); a scope not single-space separated (PA-4.4-06); an
// exchange or poll without session_id (PA-4.5-09, PA-4.6-04); ignoring
// slow_down (PA-4.6-07); polling after access_denied or expired_token
// (PA-4.6-09, PA-4.6-10); a device_code in a URL (PA-4.6-03); a mediated
// request missing a listed field (PA-4.7-01) or not JSON (PA-4.7-02);
// any configured credential value of 4 or more characters (as a whole
// token, e.g. not inside a base64 string) in a URL, a header or a body other than that of the POST
// to auth.mediated.endpoint (PA-4.7-05 for secret fields, PA-4.7-06 for
// the others); a code submitted with the credentials or from another
// Session (PA-4.7-09); an Account Token in a URL (PA-4.8-11) or anywhere
// but the token and revocation endpoints (PA-4.8-01); one account's
// Account Token sent with a Session of another account (PA-4.4-13); an
// Account Token used more than 5 s after it expired (PA-4.4-12) or after
// a rotation replaced it (PA-4.8-04); revoking one without
// token_type_hint=refresh_token (PA-4.9-01). Missing or stale nonces,
// expired tokens, early polls answered with slow_down, wrong passwords,
// wrong codes, declined consents and rate limits are ordinary protocol
// flow and never violations.
//
// Errors the fake itself returns never contain a token, proof or
// assertion; the request log does, because it is for tests.
package poppytest
