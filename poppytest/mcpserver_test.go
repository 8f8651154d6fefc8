package poppytest_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/poppytest"
)

// The MCP server holds a client to the Streamable HTTP transport (MCP
// 2025-06-18 "Transports"): the media types it sends and accepts, one
// message per POST, the session it was given, a version it speaks; and
// answers a tool's bad arguments as a tool error, not a JSON-RPC error.
func TestMCPTransport(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	sid := a.start("usr_1").str("session_id")
	tok := a.bearer("usr_1", sid, srv.EndpointURL(poppytest.EndpointMCP)).str("access_token")
	m := newMCP(t, srv, srv.EndpointURL(poppytest.EndpointMCP), tok)
	m.initialize("2099-01-01") // a version it doesn't speak: it answers its latest
	if m.version != "2025-11-25" || m.id == "" {
		t.Fatalf("initialize with an unknown version: %q, session %q", m.version, m.id)
	}
	send := func(body string, hdr ...string) *response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, m.url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", m.id)
		for i := 0; i+1 < len(hdr); i += 2 {
			if hdr[i+1] == "" {
				req.Header.Del(hdr[i])
			} else {
				req.Header.Set(hdr[i], hdr[i+1])
			}
		}
		return do(t, srv.Client(), req)
	}
	ping := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	if r := send(ping); r.Status != 200 || r.Header.Get("Content-Type") != "application/json" || r.Body["result"] == nil {
		t.Fatalf("ping: %d %s", r.Status, r.Raw)
	}
	for _, c := range []struct {
		name   string
		body   string
		hdr    []string
		status int
	}{
		{"another Content-Type", ping, []string{"Content-Type", "text/plain"}, http.StatusUnsupportedMediaType},
		{"an Accept without text/event-stream", ping, []string{"Accept", "application/json"}, http.StatusBadRequest},
		{"a batch", "[" + ping + "]", nil, http.StatusBadRequest},
		{"no session", ping, []string{"Mcp-Session-Id", ""}, http.StatusBadRequest},
		{"an unknown session", ping, []string{"Mcp-Session-Id", "mcps_unknown"}, http.StatusNotFound},
		{"a version it doesn't speak", ping, []string{"MCP-Protocol-Version", "2099-01-01"}, http.StatusBadRequest},
		{"not JSON-RPC", `{"id":1,"method":"ping"}`, nil, http.StatusBadRequest},
		{"a response", `{"jsonrpc":"2.0","id":7,"result":{}}`, nil, http.StatusAccepted},
	} {
		if r := send(c.body, c.hdr...); r.Status != c.status {
			t.Errorf("%s: %d, want %d: %s", c.name, r.Status, c.status, r.Raw)
		}
	}
	// A method it doesn't have (the stateless protocol's server/discover,
	// which makes a newer client fall back to initialize) is -32601.
	r := send(`{"jsonrpc":"2.0","id":2,"method":"server/discover"}`)
	if e, _ := r.Body["error"].(map[string]any); r.Status != 200 || e["code"] != float64(-32601) {
		t.Errorf("server/discover: %d %s", r.Status, r.Raw)
	}
	// Arguments that break the input schema are a tool error.
	r = m.post("tools/call", map[string]any{"name": "size_advice", "arguments": map[string]any{"sku": "stormline-m", "height_cm": "tall"}})
	if res, _ := r.Body["result"].(map[string]any); r.Status != 200 || res["isError"] != true || !strings.Contains(string(r.Raw), "height_cm") {
		t.Errorf("bad arguments: %d %s", r.Status, r.Raw)
	}
	r = m.post("tools/call", map[string]any{"name": "size_advice", "arguments": map[string]any{"sku": "stormline-m", "height_cm": 190, "colour": "red"}})
	if res, _ := r.Body["result"].(map[string]any); res["isError"] != true {
		t.Errorf("an unknown argument: %d %s", r.Status, r.Raw)
	}
	r = m.post("tools/call", map[string]any{"name": "size_advice", "arguments": map[string]any{"sku": "stormline-m", "height_cm": 190}})
	if res, _ := r.Body["result"].(map[string]any); res["isError"] == true || !strings.Contains(string(r.Raw), `"size":"L"`) {
		t.Errorf("size_advice: %d %s", r.Status, r.Raw)
	}
	// DELETE ends the session; it is then unknown.
	req, _ := http.NewRequest(http.MethodDelete, m.url, nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Mcp-Session-Id", m.id)
	if r := do(t, srv.Client(), req); r.Status != http.StatusNoContent {
		t.Errorf("DELETE: %d %s", r.Status, r.Raw)
	}
	if r := send(ping); r.Status != http.StatusNotFound {
		t.Errorf("ping after DELETE: %d %s", r.Status, r.Raw)
	}
}
