package poppytest

// The MCP server itself: MCP's Streamable HTTP transport (MCP 2025-03-26
// "Transports"; 2025-06-18 and 2025-11-25 keep it) with a JSON response to
// each POST, JSON-RPC 2.0, sessions by Mcp-Session-Id, and the five tools.
// It is written for the fake rather than taken from an MCP library (see
// mcp.go) and holds to what a client may rely on:
//
//   - POST only, Content-Type application/json (else 415), an Accept that
//     names both application/json and text/event-stream (else 400), one
//     JSON-RPC message per POST (batches are refused since 2025-06-18);
//   - initialize answers the version asked for if the server speaks it,
//     else the latest it speaks, and a new Mcp-Session-Id; every later
//     request must carry it (400 without, 404 for an unknown or ended
//     one), and an MCP-Protocol-Version header, if sent, must be one the
//     server speaks (400);
//   - a notification or a response is accepted with 202 and no body;
//   - DELETE with the session ID ends the session (204);
//   - tools/list answers pages of mcpPageSize tools in name order, with an
//     opaque nextCursor; tools/call validates the arguments against the
//     tool's input schema and answers a tool's failure as a result with
//     isError (MCP 2025-11-25 "Error Handling"), not a JSON-RPC error.
//
// A method the server doesn't have, such as the stateless protocol's
// server/discover, is -32601, which makes a newer client fall back to
// initialize.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
)

// mcpVersions are the MCP versions the server speaks, newest first.
var mcpVersions = []string{"2025-11-25", "2025-06-18", "2025-03-26"}

// JSON-RPC 2.0 error codes (JSON-RPC 2.0 section 5.1).
const (
	rpcInvalidRequest = -32600
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
)

// mcpServer is one MCP server of the fake: its sessions and tools.
type mcpServer struct {
	s     *Server
	tools []mcpToolDef // in name order

	mu       sync.Mutex
	sessions map[string]string // Mcp-Session-Id → negotiated version
}

// mcpToolDef is a tool: what tools/list shows and what tools/call runs.
type mcpToolDef struct {
	name, description string
	input, output     map[string]any // JSON Schemas; output nil for none
	// checksOwnArgs leaves the arguments to call: they are not validated
	// against input first.
	checksOwnArgs bool
	// call runs the tool with validated arguments. A result is put in
	// structuredContent (and as JSON text in content) unless it is a
	// *toolResult, which is the whole result; an error is a result with
	// isError.
	call func(a *mcpAuth, args json.RawMessage) (any, error)
}

// toolResult is a tool's whole result, as sent.
type toolResult map[string]any

func (s *Server) newMCPServer() *mcpServer {
	m := &mcpServer{s: s, sessions: map[string]string{}}
	m.tools = s.mcpToolDefs()
	slices.SortFunc(m.tools, func(a, b mcpToolDef) int { return strings.Compare(a.name, b.name) })
	return m
}

// rpcMessage is a JSON-RPC 2.0 message: a request (ID and Method), a
// notification (Method only) or a response (ID only).
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// rpcError is a JSON-RPC error object.
type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (m *mcpServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if v := r.Header.Get("MCP-Protocol-Version"); v != "" && !slices.Contains(mcpVersions, v) {
		http.Error(w, "Bad Request: Unsupported protocol version (supported versions: "+strings.Join(mcpVersions, ",")+")", http.StatusBadRequest)
		return
	}
	switch r.Method {
	case http.MethodPost:
	case http.MethodDelete:
		if m.knownSession(w, r, true) {
			w.WriteHeader(http.StatusNoContent)
		}
		return
	default:
		w.Header().Set("Allow", "POST, DELETE")
		http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		http.Error(w, "Content-Type must be 'application/json'", http.StatusUnsupportedMediaType)
		return
	}
	if !accepts(r.Header.Values("Accept"), "application/json") || !accepts(r.Header.Values("Accept"), "text/event-stream") {
		http.Error(w, "Accept must contain both 'application/json' and 'text/event-stream'", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		http.Error(w, "Bad Request: unreadable body", http.StatusBadRequest)
		return
	}
	var msg rpcMessage
	if b := strings.TrimSpace(string(body)); strings.HasPrefix(b, "[") {
		http.Error(w, "Bad Request: JSON-RPC batches are not supported", http.StatusBadRequest)
		return
	}
	if err := json.Unmarshal(body, &msg); err != nil || msg.JSONRPC != "2.0" || (msg.Method == "" && len(msg.ID) == 0) {
		http.Error(w, "Bad Request: not a JSON-RPC 2.0 message", http.StatusBadRequest)
		return
	}
	if msg.Method == "initialize" && len(msg.ID) > 0 {
		m.initialize(w, msg)
		return
	}
	if !m.knownSession(w, r, false) {
		return
	}
	if len(msg.ID) == 0 || msg.Method == "" { // a notification or a response
		w.WriteHeader(http.StatusAccepted)
		return
	}
	result, rerr := m.call(r.Context(), msg)
	writeRPC(w, msg.ID, result, rerr)
}

// knownSession checks the request's Mcp-Session-Id: it answers 400
// without one and 404 for one the server doesn't hold, and reports whether
// it holds it. end ends the session.
func (m *mcpServer) knownSession(w http.ResponseWriter, r *http.Request, end bool) bool {
	id := r.Header.Get("Mcp-Session-Id")
	if id == "" {
		http.Error(w, "Bad Request: missing Mcp-Session-Id header", http.StatusBadRequest)
		return false
	}
	m.mu.Lock()
	_, ok := m.sessions[id]
	if end {
		delete(m.sessions, id)
	}
	m.mu.Unlock()
	if !ok {
		http.Error(w, "session not found", http.StatusNotFound)
	}
	return ok
}

// initialize starts a session (MCP "Lifecycle").
func (m *mcpServer) initialize(w http.ResponseWriter, msg rpcMessage) {
	var p struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(msg.Params, &p); err != nil || p.ProtocolVersion == "" {
		writeRPC(w, msg.ID, nil, &rpcError{Code: rpcInvalidParams, Message: "initialize needs params.protocolVersion"})
		return
	}
	v := mcpVersions[0]
	if slices.Contains(mcpVersions, p.ProtocolVersion) {
		v = p.ProtocolVersion
	}
	id := newID("mcps_", 16)
	m.mu.Lock()
	m.sessions[id] = v
	m.mu.Unlock()
	w.Header().Set("Mcp-Session-Id", id)
	writeRPC(w, msg.ID, map[string]any{
		"protocolVersion": v,
		"capabilities":    map[string]any{"tools": map[string]any{"listChanged": false}},
		"serverInfo":      map[string]any{"name": "poppytest-mcp", "version": "1.0.0"},
	}, nil)
}

// call answers a request of a session.
func (m *mcpServer) call(ctx context.Context, msg rpcMessage) (any, *rpcError) {
	switch msg.Method {
	case "ping":
		return map[string]any{}, nil
	case "tools/list":
		var p struct {
			Cursor string `json:"cursor"`
		}
		if len(msg.Params) > 0 && json.Unmarshal(msg.Params, &p) != nil {
			return nil, &rpcError{Code: rpcInvalidParams, Message: "invalid params"}
		}
		start := 0
		if p.Cursor != "" {
			after, err := base64.RawURLEncoding.DecodeString(p.Cursor)
			i := slices.IndexFunc(m.tools, func(t mcpToolDef) bool { return t.name == string(after) })
			if err != nil || i < 0 {
				return nil, &rpcError{Code: rpcInvalidParams, Message: "invalid cursor"}
			}
			start = i + 1
		}
		end := min(start+mcpPageSize, len(m.tools))
		tools := []any{}
		for _, t := range m.tools[start:end] {
			e := map[string]any{"name": t.name, "description": t.description, "inputSchema": t.input}
			if t.output != nil {
				e["outputSchema"] = t.output
			}
			tools = append(tools, e)
		}
		res := map[string]any{"tools": tools}
		if end < len(m.tools) {
			res["nextCursor"] = base64.RawURLEncoding.EncodeToString([]byte(m.tools[end-1].name))
		}
		return res, nil
	case "tools/call":
		var p struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
		}
		if json.Unmarshal(msg.Params, &p) != nil {
			return nil, &rpcError{Code: rpcInvalidParams, Message: "invalid params"}
		}
		i := slices.IndexFunc(m.tools, func(t mcpToolDef) bool { return t.name == p.Name })
		if i < 0 {
			return nil, &rpcError{Code: rpcInvalidParams, Message: fmt.Sprintf("unknown tool %q", p.Name)}
		}
		t := m.tools[i]
		if err := validateArgs(t.input, p.Arguments); err != nil && !t.checksOwnArgs {
			return toolError("validating \"arguments\": " + err.Error()), nil
		}
		out, err := t.call(mcpAuthFrom(ctx), p.Arguments)
		switch {
		case err != nil:
			return toolError(err.Error()), nil
		case out == nil:
			return toolResult{"content": []any{}}, nil
		}
		if tr, ok := out.(toolResult); ok {
			return tr, nil
		}
		b, err := json.Marshal(out)
		if err != nil {
			return toolError("marshaling output"), nil
		}
		return toolResult{"content": []any{textContent(string(b))}, "structuredContent": json.RawMessage(b)}, nil
	}
	return nil, &rpcError{Code: rpcMethodNotFound, Message: "method not found: " + msg.Method}
}

// toolError is a tool's failure as a result.
func toolError(text string) toolResult {
	return toolResult{"content": []any{textContent(text)}, "isError": true}
}

func textContent(text string) map[string]any { return map[string]any{"type": "text", "text": text} }

// writeRPC writes a JSON-RPC response.
func writeRPC(w http.ResponseWriter, id json.RawMessage, result any, rerr *rpcError) {
	resp := map[string]any{"jsonrpc": "2.0", "id": id}
	if rerr != nil {
		resp["error"] = rerr
	} else {
		resp["result"] = result
	}
	b, err := json.Marshal(resp)
	if err != nil {
		http.Error(w, "poppytest: can't encode the response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// accepts reports whether the Accept header values name media type mt (or
// its type's wildcard, or */*).
func accepts(values []string, mt string) bool {
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			t, _, _ := mime.ParseMediaType(strings.TrimSpace(part))
			if t == mt || t == "*/*" || t == strings.SplitN(mt, "/", 2)[0]+"/*" {
				return true
			}
		}
	}
	return false
}

// validateArgs checks tool arguments against the small subset of JSON
// Schema the fake's input schemas use: an object whose properties are
// strings or integers, required ones, and no others.
func validateArgs(schema map[string]any, raw json.RawMessage) error {
	args := map[string]json.RawMessage{}
	if len(raw) > 0 && string(raw) != "null" {
		if err := json.Unmarshal(raw, &args); err != nil {
			return errors.New("arguments must be an object")
		}
	}
	props, _ := schema["properties"].(map[string]any)
	for _, name := range schemaRequired(schema) {
		if _, ok := args[name]; !ok {
			return fmt.Errorf("missing required property %q", name)
		}
	}
	for name, v := range args {
		p, ok := props[name].(map[string]any)
		if !ok {
			return fmt.Errorf("unexpected additional property %q", name)
		}
		switch p["type"] {
		case "string":
			var s string
			if json.Unmarshal(v, &s) != nil {
				return fmt.Errorf("property %q: want a string", name)
			}
		case "integer":
			var n json.Number
			if json.Unmarshal(v, &n) != nil || strings.ContainsAny(n.String(), ".eE") {
				return fmt.Errorf("property %q: want an integer", name)
			}
		}
	}
	return nil
}

func schemaRequired(schema map[string]any) []string {
	switch r := schema["required"].(type) {
	case []string:
		return r
	case []any:
		var out []string
		for _, v := range r {
			if s, ok := v.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// objectSchema is the JSON Schema of an object with exactly props, the
// names in required required.
func objectSchema(props map[string]any, required ...string) map[string]any {
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// prop is the schema of a property of type typ.
func prop(typ, description string) map[string]any {
	p := map[string]any{"type": typ}
	if description != "" {
		p["description"] = description
	}
	return p
}
