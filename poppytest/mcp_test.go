package poppytest_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/poppytest"
)

// bearer asks for a Bearer token without a proof for resource, renewing
// the signed-out Session sid of user (spec 4.3).
func (a *rawAgent) bearer(user, sid, resource string) *response {
	a.t.Helper()
	f := a.renewForm(user, sid)
	f.Set("resource", resource)
	return postForm(a.t, a.srv, a.srv.EndpointURL(poppytest.EndpointToken), f)
}

// bearerSignedIn signs user in with scope (Direct Sign-In) and returns a
// Bearer token for resource from the Account Token, and the Session ID.
func (a *rawAgent) bearerSignedIn(user, scope, resource string) (string, string) {
	a.t.Helper()
	in := a.signedIn(user, scope)
	sid := in.str("session_id")
	r := postForm(a.t, a.srv, a.srv.EndpointURL(poppytest.EndpointToken), a.clientForm("grant_type", "refresh_token",
		"refresh_token", in.str("refresh_token"), "session_id", sid, "resource", resource))
	if r.Status != 200 || r.str("token_type") != "Bearer" {
		a.t.Fatalf("signed-in Bearer token: %d %s", r.Status, r.Raw)
	}
	return r.str("access_token"), sid
}

// mcpSession is a raw Streamable HTTP MCP client: JSON-RPC POSTs with a
// Bearer token.
type mcpSession struct {
	t       testing.TB
	srv     *poppytest.Server
	url     string
	tok     string
	id      string // Mcp-Session-Id
	version string
	next    int
}

func (m *mcpSession) post(method string, params any) *response {
	m.t.Helper()
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		msg["params"] = params
	}
	if !strings.HasPrefix(method, "notifications/") {
		m.next++
		msg["id"] = m.next
	}
	b, _ := json.Marshal(msg)
	req, _ := http.NewRequest(http.MethodPost, m.url, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if m.tok != "" {
		req.Header.Set("Authorization", "Bearer "+m.tok)
	}
	if m.id != "" {
		req.Header.Set("Mcp-Session-Id", m.id)
		req.Header.Set("Mcp-Protocol-Version", m.version)
	}
	return do(m.t, m.srv.Client(), req)
}

// initialize starts the MCP session, failing the test unless it works.
func (m *mcpSession) initialize(version string) *response {
	m.t.Helper()
	r := m.post("initialize", map[string]any{"protocolVersion": version, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "raw", "version": "1"}})
	if r.Status != 200 {
		m.t.Fatalf("initialize: %d %q %s", r.Status, r.wwwAuth(), r.Raw)
	}
	m.id = r.Header.Get("Mcp-Session-Id")
	res, _ := r.Body["result"].(map[string]any)
	m.version, _ = res["protocolVersion"].(string)
	if r := m.post("notifications/initialized", nil); r.Status != http.StatusAccepted {
		m.t.Fatalf("initialized: %d %s", r.Status, r.Raw)
	}
	return r
}

func newMCP(t testing.TB, srv *poppytest.Server, url, tok string) *mcpSession {
	return &mcpSession{t: t, srv: srv, url: url, tok: tok}
}

func TestCO_6_02_CO_6_04_MCPServer(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	sid := a.start("usr_1").str("session_id")
	b := a.bearer("usr_1", sid, srv.EndpointURL(poppytest.EndpointMCP))
	// CO-4.3-11: a proof-less request for the MCP url gets a Bearer token.
	if b.Status != 200 || b.str("token_type") != "Bearer" || b.str("session_id") != sid {
		t.Fatalf("Bearer token: %d %s", b.Status, b.Raw)
	}
	m := newMCP(t, srv, srv.EndpointURL(poppytest.EndpointMCP), b.str("access_token"))
	m.initialize("2025-06-18")
	// CO-6-02: Streamable HTTP, MCP 2025-06-18 or later.
	if m.version < "2025-06-18" || m.id == "" {
		t.Fatalf("protocolVersion %q, Mcp-Session-Id %q", m.version, m.id)
	}
	// CO-6-04: the Bearer Session Token is the access token.
	r := m.post("tools/list", map[string]any{})
	res, _ := r.Body["result"].(map[string]any)
	tools, _ := res["tools"].([]any)
	cursor, _ := res["nextCursor"].(string)
	if r.Status != 200 || len(tools) != 2 || cursor == "" {
		t.Fatalf("tools/list: %d %s", r.Status, r.Raw)
	}
	for page := 2; cursor != ""; page++ {
		r = m.post("tools/list", map[string]any{"cursor": cursor})
		res, _ = r.Body["result"].(map[string]any)
		more, _ := res["tools"].([]any)
		if r.Status != 200 || len(more) == 0 || len(more) > 2 || page > 3 {
			t.Fatalf("tools/list page %d: %d %s", page, r.Status, r.Raw)
		}
		tools = append(tools, more...)
		cursor, _ = res["nextCursor"].(string)
	}
	if len(tools) != 5 {
		t.Fatalf("%d tools", len(tools))
	}
	r = m.post("tools/call", map[string]any{"name": "search_products", "arguments": map[string]any{"query": "insulated"}})
	if r.Status != 200 || !strings.Contains(string(r.Raw), "stormline-insulated-m") {
		t.Fatalf("tools/call: %d %s", r.Status, r.Raw)
	}
	if info, _ := srv.Tokens().Get(b.str("access_token")); info.Type != "Bearer" || info.Resource != srv.EndpointURL(poppytest.EndpointMCP) || info.JKT != "" {
		t.Errorf("Bearer token record: %+v", info)
	}
}

// CO-6-05: the MCP server enforces the token's scopes per tool.
func TestCO_6_05_MCPScopes(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	tok, _ := a.bearerSignedIn("usr_1", "poppy:read", srv.EndpointURL(poppytest.EndpointMCP))
	m := newMCP(t, srv, srv.EndpointURL(poppytest.EndpointMCP), tok)
	m.initialize("2025-11-25")
	if r := m.post("tools/call", map[string]any{"name": "list_orders", "arguments": map[string]any{}}); r.Status != 200 ||
		!strings.Contains(string(r.Raw), "ord_7Hk2") {
		t.Errorf("read tool with poppy:read: %d %s", r.Status, r.Raw)
	}
	r := m.post("tools/call", map[string]any{"name": "save_size_profile", "arguments": map[string]any{"height_cm": 180}})
	if r.Status != 403 || !strings.HasPrefix(r.wwwAuth(), `Bearer error="insufficient_scope", scope="poppy:write"`) {
		t.Errorf("write tool with poppy:read: %d %q", r.Status, r.wwwAuth())
	}
	// A signed-out Bearer token: sign_in_required for an account tool.
	sid := a.start("usr_2").str("session_id")
	out := newMCP(t, srv, srv.EndpointURL(poppytest.EndpointMCP), a.bearer("usr_2", sid, srv.EndpointURL(poppytest.EndpointMCP)).str("access_token"))
	out.initialize("2025-11-25")
	r = out.post("tools/call", map[string]any{"name": "list_orders", "arguments": map[string]any{}})
	if r.Status != 403 || !strings.HasPrefix(r.wwwAuth(), `Bearer error="sign_in_required"`) {
		t.Errorf("account tool signed out: %d %q", r.Status, r.wwwAuth())
	}
}

// CO-6-06: only tokens issued for this server's url.
func TestCO_6_06_MCPOnlyItsOwnTokens(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{MCP: poppytest.MCPServingOptions{SecondServer: true}})
	a := newAgent(t, srv, "agent.test")
	start := a.start("usr_1")
	sid := start.str("session_id")
	other := a.bearer("usr_1", sid, mcp2URL(srv)).str("access_token")
	r := newMCP(t, srv, srv.EndpointURL(poppytest.EndpointMCP), other).post("initialize", map[string]any{"protocolVersion": "2025-11-25"})
	if r.Status != 401 || !strings.HasPrefix(r.wwwAuth(), `Bearer error="invalid_token"`) {
		t.Errorf("token for mcp2 at mcp: %d %q", r.Status, r.wwwAuth())
	}
	// It works where it belongs.
	newMCP(t, srv, mcp2URL(srv), other).initialize("2025-11-25")
	// A DPoP Session Token issued without resource, sent as Bearer.
	r = newMCP(t, srv, srv.EndpointURL(poppytest.EndpointMCP), start.str("access_token")).post("initialize", map[string]any{"protocolVersion": "2025-11-25"})
	if r.Status != 401 || !strings.Contains(r.wwwAuth(), `error="invalid_token"`) {
		t.Errorf("DPoP token at mcp: %d %q", r.Status, r.wwwAuth())
	}
	wantRules(t, srv, pa("4.3-19"), pa("4.3-19"))
}

// CO-6-07: RFC 9728 metadata lists auth.issuer; the knob replaces it.
func TestCO_6_07_ResourceMetadata(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	r := get(t, srv, mcpMetadataURL(srv))
	as, _ := r.Body["authorization_servers"].([]any)
	if r.Status != 200 || r.str("resource") != srv.EndpointURL(poppytest.EndpointMCP) || len(as) != 1 || as[0] != srv.Issuer() {
		t.Fatalf("metadata: %d %s", r.Status, r.Raw)
	}
	// A 401 names the metadata (RFC 9728 5.1).
	r = newMCP(t, srv, srv.EndpointURL(poppytest.EndpointMCP), "").post("initialize", map[string]any{})
	if r.Status != 401 || !strings.Contains(r.wwwAuth(), `resource_metadata="`+mcpMetadataURL(srv)+`"`) {
		t.Errorf("no token: %d %q", r.Status, r.wwwAuth())
	}
	bad := poppytest.NewServer(t, &poppytest.Options{MCP: poppytest.MCPServingOptions{AuthorizationServers: []string{"https://auth.other.test"}}})
	r = get(t, bad, mcpMetadataURL(bad))
	if as, _ := r.Body["authorization_servers"].([]any); len(as) != 1 || as[0] != "https://auth.other.test" {
		t.Errorf("knob: %s", r.Raw)
	}
}

// CO-6-08: MCP's own sign-in flow (a code exchange for the MCP url
// with no session_id) starts a new signed-in Session.
func TestCO_6_08_MCPOwnSignIn(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	p := newPKCE()
	u, _ := a.authzURL("poppy:read", p)
	code := browse(t, srv, u).Query().Get("code")
	f := a.clientForm("grant_type", "authorization_code", "code", code, "redirect_uri", "https://agent.test/oauth/callback",
		"code_verifier", p.verifier, "resource", srv.EndpointURL(poppytest.EndpointMCP))
	r := postForm(t, srv, srv.EndpointURL(poppytest.EndpointToken), f) // no proof: an MCP client
	if r.Status != 200 || r.str("token_type") != "Bearer" || r.Body["signed_in"] != true || r.str("session_id") == "" {
		t.Fatalf("exchange: %d %s", r.Status, r.Raw)
	}
	info, ok := srv.Sessions().Get(r.str("session_id"))
	if !ok || !info.SignedIn {
		t.Fatalf("session: %+v", info)
	}
	m := newMCP(t, srv, srv.EndpointURL(poppytest.EndpointMCP), r.str("access_token"))
	m.initialize("2025-11-25")
	if r := m.post("tools/call", map[string]any{"name": "list_orders", "arguments": map[string]any{}}); r.Status != 200 {
		t.Errorf("list_orders: %d %s", r.Status, r.Raw)
	}
}

// CO-6-09 for Bearer (RFC 6750): an expired or revoked token is 401
// invalid_token.
func TestCO_6_09_MCPInvalidToken(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	sid := a.start("usr_1").str("session_id")
	for name, spoil := range map[string]func(string) bool{"expired": srv.Tokens().Expire, "revoked": srv.Tokens().Revoke} {
		tok := a.bearer("usr_1", sid, srv.EndpointURL(poppytest.EndpointMCP)).str("access_token")
		if !spoil(tok) {
			t.Fatal("unknown token")
		}
		r := newMCP(t, srv, srv.EndpointURL(poppytest.EndpointMCP), tok).post("initialize", map[string]any{"protocolVersion": "2025-11-25"})
		if r.Status != 401 || !strings.HasPrefix(r.wwwAuth(), `Bearer error="invalid_token"`) {
			t.Errorf("%s: %d %q", name, r.Status, r.wwwAuth())
		}
	}
	// The DPoP API refuses an expired DPoP token the same way.
	tok := a.start("usr_2").str("access_token")
	srv.Tokens().Expire(tok)
	wantDPoPError(t, a.call("GET", "/products", tok, ""), "invalid_token")
}

// PA-6-02: a proof sent to the MCP server is recorded.
func TestMCPProofIsViolation(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	sid := a.start("usr_1").str("session_id")
	tok := a.bearer("usr_1", sid, srv.EndpointURL(poppytest.EndpointMCP)).str("access_token")
	req, _ := http.NewRequest(http.MethodPost, srv.EndpointURL(poppytest.EndpointMCP), strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("DPoP", a.proof("POST", srv.EndpointURL(poppytest.EndpointMCP)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	do(t, srv.Client(), req)
	wantRules(t, srv, pa("6-02"))
}

// CO-4.4-02: the description's custom scope (addresses) is enforced. (That
// the description itself validates is checked with kin-openapi
// in the api module, TestCO_6_02_FakeDescriptionValidates.)
func TestCO_4_4_02_CustomScope(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	start := a.start("usr_1")
	in, err := srv.Sessions().SignIn(start.str("session_id"), "acct_1", "poppy:read")
	if err != nil {
		t.Fatal(err)
	}
	if r := a.call("GET", "/addresses", in, ""); r.Status != 403 || r.wwwAuth() != `DPoP error="insufficient_scope", scope="addresses"` {
		t.Errorf("addresses with poppy:read: %d %q", r.Status, r.wwwAuth())
	}
	in, _ = srv.Sessions().SignIn(start.str("session_id"), "acct_1", "poppy:read", "addresses")
	if r := a.call("GET", "/addresses", in, ""); r.Status != 200 || !strings.Contains(string(r.Raw), "adr_1") {
		t.Errorf("addresses: %d %s", r.Status, r.Raw)
	}
	q := url.Values{"q": {"insulated"}}
	if r := a.call("GET", "/products?"+q.Encode(), in, ""); r.Status != 200 || strings.Count(string(r.Raw), "sku") != 1 {
		t.Errorf("products?q: %s", r.Raw)
	}
}

// MCPServingOptions.OnAPIHost: the MCP server shares the API's host; a DPoP token
// at /mcp and a Bearer token at the API are refused and recorded.
func TestMCPOnAPIHostWrongTokens(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{MCP: poppytest.MCPServingOptions{OnAPIHost: true}})
	if srv.EndpointURL(poppytest.EndpointMCP) != srv.EndpointURL(poppytest.EndpointAPI)+"/mcp" || mcpMetadataURL(srv) != srv.EndpointURL(poppytest.EndpointAPI)+"/.well-known/oauth-protected-resource/mcp" {
		t.Fatalf("urls %s %s", srv.EndpointURL(poppytest.EndpointMCP), mcpMetadataURL(srv))
	}
	if r := get(t, srv, mcpMetadataURL(srv)); r.str("resource") != srv.EndpointURL(poppytest.EndpointMCP) {
		t.Fatalf("metadata %s", r.Raw)
	}
	a := newAgent(t, srv, "agent.test")
	start := a.start("usr_1")
	bearer := a.bearer("usr_1", start.str("session_id"), srv.EndpointURL(poppytest.EndpointMCP)).str("access_token")
	newMCP(t, srv, srv.EndpointURL(poppytest.EndpointMCP), bearer).initialize("2025-11-25")
	r := newMCP(t, srv, srv.EndpointURL(poppytest.EndpointMCP), start.str("access_token")).post("initialize", map[string]any{"protocolVersion": "2025-11-25"})
	if r.Status != 401 {
		t.Errorf("DPoP token at /mcp: %d", r.Status)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.EndpointURL(poppytest.EndpointAPI)+"/products", nil)
	req.Header.Set("Authorization", "Bearer "+bearer)
	if r := do(t, srv.Client(), req); r.Status != 401 {
		t.Errorf("Bearer token at the API: %d", r.Status)
	}
	wantRules(t, srv, pa("4.3-19"), pa("4.3-19"))
}

// ForceError at the MCP server answers with a Bearer challenge.
func TestMCPForcedErrorIsBearer(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	srv.Faults().ForceError(poppytest.EndpointMCP, poppytest.Fault{Status: 0, Code: "invalid_token", Times: 1})
	r := newMCP(t, srv, srv.EndpointURL(poppytest.EndpointMCP), "x").post("initialize", map[string]any{})
	if r.Status != 401 || !strings.HasPrefix(r.wwwAuth(), `Bearer error="invalid_token"`) || strings.Contains(r.wwwAuth(), "algs") {
		t.Fatalf("%d %q", r.Status, r.wwwAuth())
	}
}

// OPS 4.2, CO-OPS2-03: request_exchange proposes an operation, carried in
// structuredContent.operation with the summary as text, and does nothing
// yet; the same exchange through the API is the same operation (OPS 4).
// For an agent without the extension, it is done at once.
func TestMCPRequestExchangeProposes(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := opsAgent(t, srv)
	tok, _ := a.bearerSignedIn("usr_1", "poppy:read poppy:write", srv.EndpointURL(poppytest.EndpointMCP))
	m := newMCP(t, srv, srv.EndpointURL(poppytest.EndpointMCP), tok)
	m.initialize("2025-11-25")
	args := map[string]any{"order_id": "ord_7Hk2", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}
	r := m.post("tools/call", map[string]any{"name": "request_exchange", "arguments": args})
	res, _ := r.Body["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	op, _ := sc["operation"].(map[string]any)
	content, _ := res["content"].([]any)
	// CO-OPS4-04: the operation in structuredContent.operation, the summary
	// as text.
	if r.Status != 200 || op == nil || op["state"] != "proposed" || op["revision"] != float64(1) || len(content) != 1 {
		t.Fatalf("request_exchange: %d %s", r.Status, r.Raw)
	}
	if text, _ := content[0].(map[string]any)["text"].(string); !strings.Contains(text, "Not done until confirmed") ||
		!strings.Contains(text, op["summary"].(string)) {
		t.Errorf("text %q", text)
	}
	if n := len(srv.Operations().Performed()); n != 0 {
		t.Errorf("%d actions performed by a proposal", n)
	}
	id, _ := op["operation_id"].(string)
	if info, ok := srv.Operations().Get(id); !ok || info.State != "proposed" {
		t.Errorf("operation %s: %+v", id, info)
	}
	// A read-only token may not propose it (CO-6-05).
	ro, _ := a.bearerSignedIn("usr_2", "poppy:read", srv.EndpointURL(poppytest.EndpointMCP))
	m2 := newMCP(t, srv, srv.EndpointURL(poppytest.EndpointMCP), ro)
	m2.initialize("2025-11-25")
	if r := m2.post("tools/call", map[string]any{"name": "request_exchange", "arguments": args}); r.Status != 403 ||
		!strings.Contains(r.wwwAuth(), `scope="poppy:read poppy:write"`) {
		t.Errorf("read-only: %d %q", r.Status, r.wwwAuth())
	}

	// Without the extension: done at once, no operation.
	plain := poppytest.NewServer(t, nil)
	b := newAgent(t, plain, "agent.test")
	tok, _ = b.bearerSignedIn("usr_1", "poppy:read poppy:write", plain.EndpointURL(poppytest.EndpointMCP))
	m3 := newMCP(t, plain, plain.EndpointURL(poppytest.EndpointMCP), tok)
	m3.initialize("2025-11-25")
	r = m3.post("tools/call", map[string]any{"name": "request_exchange", "arguments": args})
	if r.Status != 200 || strings.Contains(string(r.Raw), `"operation"`) || len(plain.Operations().Performed()) != 1 {
		t.Errorf("without the extension: %d %s", r.Status, r.Raw)
	}
}
