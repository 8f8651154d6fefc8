// Package poppytest is a strict in-process fake Company for testing
// Personal Agents that speak the Personal Agent Protocol (Poppy) draft 0.1,
// in the manner of net/http/httptest.
//
// It speaks only the wire protocol and enforces the Company-side rules of
// the specification (the CO rows of REQUIREMENTS.md): a test starts one
// with [NewServer], points the agent under test at [Server.URL] using
// [Server.Client] (or [Server.Transport]), serves the agent's own client
// metadata, JWKS and callback with [Server.HandleAgent], and then inspects
// [Server.Requests], [Server.Session] and [Server.Token]. Anything the
// agent does that a correct Personal Agent never does is recorded as a
// [Violation] and fails the test at cleanup unless the test takes it with
// [Server.TakeViolations].
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
//	https://api.example.test/…                          the OpenAPI resource server
//	https://mcp.example.test/mcp                        the MCP server (reserved)
//	https://provider.test/…                             hops of RedirectWellKnown
//	https://agent.test/…                                the agent's handler (HandleAgent)
//
// [Server.Client] trusts the CA through RootCAs (never
// InsecureSkipVerify) and dials those hosts, on port 443, to the listener;
// other hosts fail to dial. Port 80 of the same hosts reaches a second,
// plain-HTTP listener that never serves poppy.json (CO-3-01) and records
// any Company request it gets as a PA-3-01 violation. A child process
// reaches the same fake with [Server.Env] and [ClientFromEnv].
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
//
// # Decisions on ambiguities
//
// The specification leaves some behaviour open (AMBIGUITIES.md). The fake
// decides as follows.
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
//   - revocation requests need client authentication and no DPoP
//     proof; a proof there is ignored.
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
//     "https://api.{primary}/" and APIResource; any other is invalid_target.
//     Without APIResource, the API accepts DPoP tokens issued with no
//     resource or for "https://api.{primary}/"; with it, only tokens issued
//     for APIResource. GET /openapi.json needs no token.
//   - renewing a signed-in Session with the JWT bearer assertion is
//     refused with invalid_grant and recorded as a PA-4.2-15 violation; a
//     signed-in Session is renewed with its Account Token.
//   - the token response always carries scope ("" when signed out).
//   - insufficient_scope names the full set of scopes the action
//     requires: DPoP error="insufficient_scope", scope="poppy:read poppy:write".
//   - RateLimit answers {"error":"rate_limited"} on any endpoint, with
//     the given Retry-After or none.
//   - Session Tokens last TokenTTL, 1 hour by default.
//   - DPoP proofs must be ES256 (the metadata says so); assertions may
//     use ES256/384/512, RS256/384/512, PS256/384/512 or EdDSA.
//   - a client beyond MaxNewClients gets 401 invalid_client.
//
// Other choices: a DPoP proof's iat must be within ±60 s of the Clock and
// its jti is remembered for 120 s; htu is compared after lower-casing scheme
// and host and removing a default port, and an htu with a query or fragment
// is invalid (and a PA-4.3-08 violation). A DPoP proof is checked before
// client authentication, so a use_dpop_nonce answer consumes no assertion.
// With RotateNonce, a nonce stays valid until 4 newer ones exist on its
// host. Client metadata and JWKS are cached for at most 60 s of Clock time
// and refetched once when an assertion fails to verify.
//
// # Violations
//
// The fake records, among others: a replayed DPoP proof (PA-4.3-05); a
// proof jwk with private members (PA-4.3-03); ath at the token endpoint
// (PA-4.3-11); a missing or wrong ath (PA-4.3-10); an htu with a query
// (PA-4.3-08); a token in a URL (PA-4.3-26, every request's path and query
// is scanned for issued tokens); an API request without Authorization
// (PA-4.3-23); a Bearer token at the API (PA-4.3-19); a DPoP token sent as
// Bearer or without a proof (PA-4.3-01); an assertion aud that is an array
// or not the token endpoint (PA-4.2-08); over-long assertion lifetimes
// (PA-4.1-09, PA-4.2-09); reused or short jti values (PA-4.1-09,
// PA-4.2-10); an email-like User ID (PA-4.2-04); a JWKS with private keys
// (PA-4.1-05); a DPoP key that is a published JWKS key (PA-4.1-10); one
// DPoP key used for two Users (PA-4.3-02); a Company request over plain HTTP
// (PA-3-01); following an http:// redirect of the well-known URL (PA-3-03). Missing or stale nonces, expired tokens and rate limits are
// ordinary protocol flow and never violations.
//
// Errors the fake itself returns never contain a token, proof or
// assertion; the request log does, because it is for tests.
package poppytest
