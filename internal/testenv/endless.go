package testenv

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// EndlessTools is an http.RoundTripper in front of the fake that answers
// the MCP server's tools/list (a POST to the path SetPath gives) with
// pages of 50 tools and a nextCursor that always leads on (a new one each
// page, or the same one when Repeat), until Last pages: far past any
// bound, so that a client without one is seen to read them all, not to
// hang. Every other request goes to Base.
type EndlessTools struct {
	Base    http.RoundTripper
	Repeat  bool
	Padding int // bytes of description per tool
	Last    int // the last page; 0 means 5,000

	mu    sync.Mutex
	path  string
	pages int
}

// SetPath sets the MCP server's path.
func (h *EndlessTools) SetPath(p string) {
	h.mu.Lock()
	h.path = p
	h.mu.Unlock()
}

// Pages returns how many pages of tools were asked for.
func (h *EndlessTools) Pages() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pages
}

// ResetPages sets the count of pages back to 0.
func (h *EndlessTools) ResetPages() {
	h.mu.Lock()
	h.pages = 0
	h.mu.Unlock()
}

// RoundTrip answers a tools/list, or passes req on to Base.
func (h *EndlessTools) RoundTrip(req *http.Request) (*http.Response, error) {
	h.mu.Lock()
	path := h.path
	h.mu.Unlock()
	if req.URL.Path != path || req.Method != http.MethodPost {
		return h.Base.RoundTrip(req)
	}
	b, _ := io.ReadAll(req.Body)
	req.Body.Close()
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if json.Unmarshal(b, &msg) != nil || msg.Method != "tools/list" {
		req.Body = io.NopCloser(bytes.NewReader(b))
		return h.Base.RoundTrip(req)
	}
	h.mu.Lock()
	h.pages++
	page := h.pages
	h.mu.Unlock()
	tools := make([]any, 50)
	for i := range tools {
		tools[i] = map[string]any{"name": fmt.Sprintf("t%d_%d", page, i), "description": strings.Repeat("x", h.Padding),
			"inputSchema": map[string]any{"type": "object"}}
	}
	result := map[string]any{"tools": tools}
	if page < cmp.Or(h.Last, 5000) {
		result["nextCursor"] = fmt.Sprintf("page-%d", page+1)
		if h.Repeat {
			result["nextCursor"] = "again"
		}
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": result})
	return Answer(req, http.StatusOK, http.Header{"Content-Type": {"application/json"}}, string(body)), nil
}
