package poppycheck

// Step 5: the MCP servers (spec 6): RFC 9728 metadata naming the issuer,
// the Bearer Session Token (spec 4.3) and the Streamable HTTP transport.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/poppyproto/poppy/internal/jose"
)

const mcpVersion = "2025-06-18"

func (p *prober) mcpServer(ctx context.Context, s *session, api map[string]any) {
	p.step = "mcp"
	raw, _ := api["url"].(string)
	mu, err := url.Parse(raw)
	if ok, why := p.okURL(raw); err != nil || !ok {
		p.fail("CO-6-02", nil, "mcp url %q: %s", raw, why)
		return
	}
	// RFC 9728 section 3: the metadata of resource https://host/path is at
	// https://host/.well-known/oauth-protected-resource/path.
	prm := mu.Scheme + "://" + mu.Host + "/.well-known/oauth-protected-resource" + strings.TrimSuffix(mu.EscapedPath(), "/")
	req, _ := http.NewRequest(http.MethodGet, prm, nil)
	req.Header.Set("Accept", "application/json")
	if r, err := p.send(ctx, req, nil); err == nil {
		var m map[string]any
		_ = json.Unmarshal(r.body, &m)
		servers, _ := strings_(m["authorization_servers"])
		p.check("CO-6-07", r.status == http.StatusOK && slices.Contains(servers, p.c.issuer), r.ex,
			"protected resource metadata at %s: status %d, authorization_servers %v, issuer %q", prm, r.status, servers, p.c.issuer)
		if res, _ := m["resource"].(string); r.status == http.StatusOK && res != raw {
			p.note("the MCP server's protected resource metadata names resource %q, not its url %q (RFC 9728 section 3.3)", res, raw)
		}
	}
	// An unknown Bearer token.
	bad := "pct_" + jose.RandomID(24)
	p.secret(bad)
	if r, _, err := p.mcpCall(ctx, raw, bad, "", 1, "initialize", initParams()); err == nil {
		code, attrs, _ := challenge(r.header, "Bearer")
		p.check("CO-6-09", r.status == http.StatusUnauthorized && code == "invalid_token", r.ex,
			"an MCP request with a token the Company never issued answered %d, WWW-Authenticate %q", r.status, r.get("WWW-Authenticate"))
		if attrs["resource_metadata"] != "" {
			p.note("the MCP server's 401 names resource_metadata %q", attrs["resource_metadata"])
		}
	}
	// A Bearer Session Token for this server: the renewal without a proof
	// and with resource (spec 4.3).
	p.step = "mcp token"
	r, m, err := p.tokenRequest(ctx, s, url.Values{"grant_type": {grantJWTBearer}, "session_id": {s.id}, "resource": {raw}}, true)
	if err != nil || m == nil {
		if r != nil {
			p.fail("CO-4.3-11", r.ex, "a token request without a proof, for resource %s, answered %d %q", raw, r.status, errorCode(r.body))
		}
		return
	}
	typ, _ := m["token_type"].(string)
	tok, _ := m["access_token"].(string)
	p.check("CO-4.3-11", strings.EqualFold(typ, "Bearer") && tok != "", r.ex, "a token request without a proof got token_type %q", typ)
	if tok == "" {
		return
	}
	p.step = "mcp session"
	r, res, err := p.mcpCall(ctx, raw, tok, "", 1, "initialize", initParams())
	if err != nil {
		return
	}
	sid := r.get("Mcp-Session-Id")
	if needsSignIn(r) {
		// The server took the token but needs a sign-in even to start
		// (spec 6 lets a Company put any call behind one).
		p.notObserved("the MCP server answered initialize with a signed-out Session's token that it needs a sign-in", "CO-6-04")
		return
	}
	ok := r.status == http.StatusOK && res != nil && res["result"] != nil
	p.check("CO-6-04", ok, r.ex, "initialize with the Bearer Session Token answered %d", r.status)
	if !ok {
		p.check("CO-6-02", false, r.ex, "the MCP url doesn't answer initialize over Streamable HTTP: %d", r.status)
		return
	}
	if r, _, err := p.mcpCall(ctx, raw, tok, sid, 0, "notifications/initialized", map[string]any{}); err == nil && r.status >= 300 {
		p.note("the MCP server answered notifications/initialized with %d", r.status)
	}
	r, res, err = p.mcpCall(ctx, raw, tok, sid, 2, "tools/list", map[string]any{})
	if err == nil {
		result, _ := res["result"].(map[string]any)
		_, hasTools := result["tools"].([]any)
		p.check("CO-6-02", r.status == http.StatusOK && hasTools, r.ex, "tools/list over Streamable HTTP answered %d with tools %v", r.status, present(hasTools))
	}
	if sid != "" {
		req, _ := http.NewRequest(http.MethodDelete, raw, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("MCP-Protocol-Version", mcpVersion)
		_, _ = p.send(ctx, req, nil)
	}
}

func initParams() map[string]any {
	return map[string]any{"protocolVersion": mcpVersion, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "poppy-check", "version": "0.1"}}
}

// mcpCall posts one JSON-RPC message (a notification when id is 0) and
// reads the answer, JSON or a server-sent event stream.
func (p *prober) mcpCall(ctx context.Context, endpoint, token, sid string, id int, method string, params any) (*reply, map[string]any, error) {
	msg := map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
	if id != 0 {
		msg["id"] = id
	}
	req, _ := http.NewRequest(http.MethodPost, endpoint, nil)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("MCP-Protocol-Version", mcpVersion)
	}
	r, err := p.send(ctx, req, jsonBody(msg))
	if err != nil {
		return r, nil, err
	}
	var out map[string]any
	if strings.HasPrefix(strings.ToLower(r.get("Content-Type")), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(r.body))
		sc.Buffer(make([]byte, 64<<10), maxBody)
		var data []string
		for sc.Scan() {
			line := sc.Text()
			if v, ok := strings.CutPrefix(line, "data:"); ok {
				data = append(data, strings.TrimPrefix(v, " "))
			}
			if line == "" && len(data) > 0 {
				if json.Unmarshal([]byte(strings.Join(data, "\n")), &out) == nil && out["id"] != nil {
					break
				}
				data = nil
			}
		}
		if out == nil && len(data) > 0 {
			_ = json.Unmarshal([]byte(strings.Join(data, "\n")), &out)
		}
	} else {
		_ = json.Unmarshal(r.body, &out)
	}
	return r, out, nil
}
