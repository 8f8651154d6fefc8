// Package api calls a Company's APIs (spec 6) in a Poppy Session: OpenAPI
// endpoints with the Session's DPoP Session Token, MCP tools with a Bearer
// Session Token issued for exactly that MCP server; package llmtools makes
// both tools for an LLM tool runtime.
//
//	for _, e := range api.List(company) { fmt.Println(e.Type, e.URL, e.Description) }
//	oa, _ := api.LoadOpenAPI(ctx, sess, entry, nil)    // kin-openapi, 3.0 and 3.1
//	resp, _ := oa.Call(ctx, "listOrders", nil)          // DPoP token + proof
//	client, _ := gen.NewClientWithResponses(oa.ServerURL(), gen.WithHTTPClient(oa.HTTPClient()))
//	m, _ := api.ConnectMCP(ctx, sess, mcpEntry, nil)    // go-sdk, Streamable HTTP
//	res, _ := m.CallTool(ctx, "search_products", map[string]any{"query": "jacket"})
//	schema, _ := oa.InputSchema(ep, 0)                  // an endpoint's arguments as one object
//
// # OpenAPI
//
// LoadOpenAPI fetches the description through the Agent's document cache,
// like poppy.json (HTTPS only, redirects only to HTTPS, HTTP caching headers,
// a size cap), and indexes its endpoints (what OpenAPI calls operations:
// one method of one path; in this SDK an operation is always the operations
// extension's). Calls go through
// Session.HTTPClient, which signs a proof per request, renews an
// invalid_token once, uses a stored Account Token on sign_in_required, and
// waits out 429s. An answer of 400 or above becomes a *poppy.Error: Code
// from WWW-Authenticate or the JSON body, Scope for insufficient_scope,
// SignInTypes for sign_in_required and insufficient_scope, Extension for
// extension_required. A 202 whose body carries "operation" (operations
// extension, OPS 4.1) is returned in Response.Operation, an
// *operations.Operation, as an MCP tool result's is in
// ToolResult.Operation; with OpenAPIOptions.Operations
// (MCPOptions.Operations for MCP tools) it is that Client's view, and a
// call whose operation is still open is not sent again and returns it in
// an *operations.PendingError (OPS 6; package llmtools and the poppy
// command do this). HTTPClient and
// Transport hand the same transport to a generated client (oapi-codegen),
// which then sees every answer as a response. After sign_in_required or
// insufficient_scope, SignInFor gives the scopes to ask for (the union with
// the Session's) and the sign-in types that can grant them.
//
// A description's cost is bounded as a whole, not only per schema: before
// kin-openapi resolves it, the nodes its references make it resolve are
// counted and a description over the bound is refused; schemas are kept as
// the description gives them (Parameter.Schema, one shared copy each) and
// inlined only when InputSchema or ResolveSchema is called, all of it
// drawing on one budget per description (an error when spent).
// A path parameter that a server or proxy would read as a "." or ".."
// segment, in any encoding, is refused before anything is sent
// (ErrInvalidArguments).
//
// # MCP
//
// ConnectMCP reads the server's protected resource metadata (RFC 9728)
// before the first use and refuses a server whose authorization_servers
// lacks the Company's issuer (ErrIssuerNotListed) or whose resource isn't
// its url. It then connects with github.com/modelcontextprotocol/go-sdk over
// Streamable HTTP. Every request carries "Authorization: Bearer" with a
// Session Token requested without a proof for resource = the server's url
// (spec 4.3); the Session keeps it beside its DPoP token. The Bearer
// transport sends it to that server's origin only (ErrForeignHost
// otherwise), follows no redirect, renews the token once when the server
// answers 401, uses a stored Account Token on sign_in_required, and waits
// out 429s. A refusal reaches the caller as a *poppy.Error wrapped in the
// go-sdk's error. What the server sends is bounded: a JSON answer by
// MCPOptions.MaxResponseBytes, tools/list by MaxTools and MaxToolPages (a
// repeated cursor ends it too), past which Tools ends with ErrTooManyTools
// after the tools within the bound.
//
// # Arguments as one object
//
// OpenAPI.InputSchema gives an endpoint's arguments as one JSON Schema
// object, the shape a model or a form fills in: a property per parameter
// and "body" for the request body, every $ref inlined and the whole
// bounded in size (as MCP.InputSchema does for an MCP tool's schema);
// Endpoint.ArgsOf splits such an object into Args and
// OpenAPI.CallEndpoint calls the endpoint with them. Package llmtools
// builds its tools for a model on these: it owns the one tool type, its
// names and descriptions, the validation of a model's arguments, and what
// a model is shown of a result, a proposed operation or a refusal.
//
// # Decisions on the specification's open points
//
//   - a Bearer token is requested for the MCP entry's url, always; an
//     MCP entry's "resource" is not used, since spec 6 says the server
//     accepts only tokens issued for its url. The OpenAPI description and
//     the protected resource metadata are public documents, fetched without
//     a token.
//   - entries of types other than "openapi" and "mcp" are skipped, as
//     are entries whose url isn't HTTPS (PA-6-01).
//   - insufficient_scope's scope is taken as the Company names it,
//     missing or full set; Error.SignInTypes lists the types that can grant
//     all of it, and a sign-in asks for the union with the Session's scopes.
//   - extension_required is read from the JSON body's "extension" (a
//     string) as in spec 3.3; errors.As finds a poppy.ExtensionRequiredError.
package api
