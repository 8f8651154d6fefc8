package llmtools_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poppyproto/poppy/internal/redact/readtest"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/llmtools"
	"github.com/poppyproto/poppy/operations"
)

// PA-4.8-08: across every tool — names, descriptions, schemas and the
// result of a call of each — nothing the model sees holds an Account
// Token, a Session Token, a proof, an assertion, a device or user code.
func TestPA_4_8_08_NoSecretsInAnyTool(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.SignIn(t)
	sess, _ := e.K.Session(domain)
	tok, err := sess.Token(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var outputs []string
	args := map[string]string{
		"poppy_discover_company": `{"domain":"example.test"}`, "poppy_sign_in": `{"domain":"example.test"}`,
		"poppy_list_operations": `{}`, exchangeMCP: argsMCP, exchangeAPI: argsAPI,
		"example_test__api_deleteOrder": `{"id":"ord_7Hk2"}`, "example_test__mcp_size_advice": `{"sku":"x","height_cm":170}`,
		"example_test__mcp_search_products": `{"query":"jacket"}`, "example_test__mcp_save_size_profile": `{"height_cm":170}`,
		// The worst case: the model was made to pass the token itself to a
		// Company that echoes it.
		"example_test__api_echo":   `{"body":{"authorization":"DPoP ` + tok.Value() + `"}}`,
		"poppy_start_conversation": `{"domain":"example.test","text":"I'd like to exchange my jacket for size M."}`,
	}
	var opID, convID string
	run := func(tool *llmtools.Tool, a string) {
		out, err := tool.Execute(ctx, json.RawMessage(a))
		if err != nil {
			t.Fatal(err)
		}
		outputs = append(outputs, string(out))
		var r map[string]any
		if json.Unmarshal(out, &r) == nil {
			if op, ok := r["operation"].(map[string]any); ok {
				opID, _ = op["operation_id"].(string)
			}
			if id, ok := r["conversation_id"].(string); ok {
				convID = id
			}
		}
	}
	for _, tool := range e.K.Tools() {
		outputs = append(outputs, tool.Name, tool.Description, string(tool.InputSchema))
		a, ok := args[tool.Name]
		if !ok {
			a = `{}`
		}
		run(tool, a)
	}
	if convID == "" {
		t.Fatal("poppy_start_conversation started nothing")
	}
	for name, a := range map[string]string{
		"poppy_send_message":      `{"domain":"example.test","conversation_id":"` + convID + `","text":"Thanks."}`,
		"poppy_read_conversation": `{"domain":"example.test","conversation_id":"` + convID + `"}`,
	} {
		tool, _ := e.K.Tool(name)
		run(tool, a)
	}
	for _, name := range []string{"poppy_get_operation", "poppy_request_approval"} {
		tool, _ := e.K.Tool(name)
		e.Gate.Answer(operations.Approve)
		run(tool, `{"domain":"example.test","operation_id":"`+opID+`"}`)
	}
	if !strings.Contains(strings.Join(outputs, ""), "[redacted]") {
		t.Error("the echoed token was not redacted")
	}
	secrets := secretsOf(e)
	if len(secrets) < 6 {
		t.Fatalf("only %d secrets collected", len(secrets))
	}
	for _, o := range outputs {
		for _, s := range secrets {
			if strings.Contains(o, s) {
				t.Errorf("a secret reached the model: %.80s…", o)
			}
		}
		if strings.Contains(o, "eyJ") {
			t.Errorf("a JWS-shaped string reached the model: %.80s…", o)
		}
	}
}

// secretsOf collects every token, proof, assertion and code the fake saw
// or holds, and what the prompter showed the User.
func secretsOf(e *env) []string {
	seen := map[string]bool{}
	add := func(s string) {
		if len(s) >= 6 {
			seen[s] = true
		}
	}
	for _, r := range e.Srv.Requests() {
		add(r.AccessToken)
		if r.Proof != nil {
			add(r.Proof.Compact)
		}
		if r.Form != nil {
			for _, k := range []string{"refresh_token", "assertion", "client_assertion", "device_code", "code", "user_code"} {
				add(r.Form.Get(k))
			}
		}
	}
	for _, info := range e.Srv.Sessions().All() {
		add(info.AccountToken)
	}
	for _, c := range e.Codes() {
		add(c)
	}
	var out []string
	for s := range seen {
		out = append(out, s)
	}
	return out
}

// The MCP server: a host lists the tools, discovers the Company and gets
// its tools, calls a Company tool, gets an operation approved by a
// scripted elicitation answer, and refused when the answer is decline or
// when it has no elicitation at all.
func TestMCPServer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		answer    string // "" means the host has no elicitation
		performed int
		note      string
	}{
		{"accept", "accept", 1, "The User's approval was given"},
		{"decline", "decline", 0, "DECLINED"},
		{"no elicitation", "", 0, "NOT APPROVED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, &llmtools.Options{Elicitation: true}, nil)
			e.SignIn(t)
			srv := llmtools.NewMCPServer(e.K, nil)
			st, ct := mcp.NewInMemoryTransports()
			ss, err := srv.Connect(ctx, st, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ss.Close()
			var copts mcp.ClientOptions
			var asked []string
			if tc.answer != "" {
				copts.ElicitationHandler = func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					asked = append(asked, req.Params.Message)
					return &mcp.ElicitResult{Action: tc.answer, Content: map[string]any{"approve": tc.answer == "accept"}}, nil
				}
			}
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "host", Version: "1"}, &copts).Connect(ctx, ct, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			callTool := func(name, args string) map[string]any {
				t.Helper()
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				var m map[string]any
				json.Unmarshal([]byte(res.Content[0].(*mcp.TextContent).Text), &m)
				return m
			}
			// The Company was discovered before the server started; a
			// discovery through the server refreshes the list too.
			callTool("poppy_discover_company", `{"domain":"example.test"}`)
			lt, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			found := map[string]bool{}
			for _, tool := range lt.Tools {
				found[tool.Name] = true
			}
			if !found["poppy_request_approval"] || !found[exchangeMCP] {
				t.Fatalf("tools: %v", found)
			}
			if r := callTool("example_test__mcp_search_products", `{"query":"fleece"}`); r["structured"] == nil {
				t.Errorf("search: %v", r)
			}
			r := callTool(exchangeMCP, argsMCP)
			id := r["operation"].(map[string]any)["operation_id"].(string)
			r = callTool("poppy_request_approval", `{"domain":"example.test","operation_id":"`+id+`"}`)
			if !strings.Contains(r["approval"].(string), tc.note) || e.Performed() != tc.performed {
				t.Fatalf("approval: %v, performed %d", r, e.Performed())
			}
			if tc.answer != "" && (len(asked) != 1 || !strings.Contains(asked[0], "Approve this operation")) {
				t.Errorf("elicitations: %q", asked)
			}
		})
	}
}

// echoTokens is a Company that, once armed, answers every call made with
// a Session Token by echoing that token, many times over, in its error:
// a 400 error_description for DPoP calls (the API, the operations and
// conversation endpoints), a JSON-RPC error message for an MCP tools/call.
// Whatever length a cut keeps, it falls inside a copy of the token.
type echoTokens struct {
	base  http.RoundTripper
	armed atomic.Bool
	mu    sync.Mutex
	seen  map[string]bool
	hits  map[string]int // echoed answers by kind
}

func (h *echoTokens) RoundTrip(req *http.Request) (*http.Response, error) {
	scheme, tok, _ := strings.Cut(req.Header.Get("Authorization"), " ")
	if !h.armed.Load() || tok == "" {
		return h.base.RoundTrip(req)
	}
	h.mu.Lock()
	h.seen[tok] = true
	h.mu.Unlock()
	echo := "the token you sent was " + strings.Repeat(tok, 24)
	if scheme == "Bearer" {
		if req.Method != http.MethodPost || req.Body == nil {
			return h.base.RoundTrip(req)
		}
		b, _ := io.ReadAll(req.Body)
		req.Body.Close()
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(b, &msg) != nil || msg.Method != "tools/call" {
			req.Body = io.NopCloser(bytes.NewReader(b))
			return h.base.RoundTrip(req)
		}
		h.count("mcp")
		body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "error": map[string]any{"code": -32000, "message": echo}})
		return testenv.Answer(req, http.StatusOK, http.Header{"Content-Type": {"application/json"}}, string(body)), nil
	}
	h.count(req.URL.Path)
	body, _ := json.Marshal(map[string]any{"error": "invalid_request", "error_description": echo})
	return testenv.Answer(req, http.StatusBadRequest, http.Header{"Content-Type": {"application/json"}}, string(body)), nil
}

func (h *echoTokens) count(kind string) {
	h.mu.Lock()
	h.hits[kind]++
	h.mu.Unlock()
}

// PA-4.8-08: a Company that echoes the Session Token in its
// errors gets no part of it into the model's context, on every tool path
// that returns an error to a model: the Company's OpenAPI and MCP tools,
// poppy_get_operation, poppy_request_approval, poppy_list_operations and
// the conversation tools. Each error is cut (by the Company's text bound,
// the error bound, the result bound) somewhere inside a copy of the
// token: the text is scrubbed before it is cut, and what an earlier cut
// left of a token is scrubbed too, so no stretch of 8 bytes of a token,
// no prefix of 4 where a cut ("…") left it, and no JWS-shaped string
// reaches the model.
func TestAttackCutSecretsInErrors(t *testing.T) {
	h := &echoTokens{seen: map[string]bool{}, hits: map[string]int{}}
	e := newEnv(t, nil, func(base http.RoundTripper) http.RoundTripper { h.base = base; return h })
	e.SignIn(t)
	// Before the attack: an operation proposed, a conversation started.
	r := e.Call(t, exchangeAPI, argsAPI)
	op, _ := r["operation"].(map[string]any)
	opID, _ := op["operation_id"].(string)
	r = e.Call(t, "poppy_start_conversation", `{"domain":"example.test","text":"Hello."}`)
	convID, _ := r["conversation_id"].(string)
	if opID == "" || convID == "" {
		t.Fatalf("operation %q, conversation %q", opID, convID)
	}
	h.armed.Store(true)
	var outputs []string
	for name, args := range map[string]string{
		exchangeAPI: strings.Replace(argsAPI, "insulated-m", "insulated-l", 1), "example_test__api_deleteOrder": `{"id":"ord_7Hk2"}`, "example_test__api_listOrders": `{}`,
		exchangeMCP: argsMCP, "example_test__mcp_search_products": `{"query":"jacket"}`,
		"poppy_get_operation":      `{"domain":"example.test","operation_id":"` + opID + `"}`,
		"poppy_request_approval":   `{"domain":"example.test","operation_id":"` + opID + `"}`,
		"poppy_list_operations":    `{}`,
		"poppy_start_conversation": `{"domain":"example.test","text":"Hello again."}`,
		"poppy_send_message":       `{"domain":"example.test","conversation_id":"` + convID + `","text":"Thanks."}`,
		"poppy_read_conversation":  `{"domain":"example.test","conversation_id":"` + convID + `"}`,
	} {
		out, err := e.K.Execute(ctx, name, json.RawMessage(args))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !strings.Contains(string(out), "error") {
			t.Errorf("%s: no error reached the model: %.200s", name, out)
		}
		outputs = append(outputs, name+": "+string(out))
	}
	t.Logf("echoed: %v", h.hits)
	if h.hits["mcp"] < 2 || len(h.hits) < 8 {
		t.Fatalf("the attack did not reach every path: %v", h.hits)
	}
	// The tokens: no stretch of one may reach the model; the other
	// secrets (codes, assertions) not whole.
	var tokens []string
	for _, r := range e.Srv.Requests() {
		if len(r.AccessToken) >= 16 {
			tokens = append(tokens, r.AccessToken)
		}
	}
	for _, info := range e.Srv.Sessions().All() {
		tokens = append(tokens, info.AccountToken)
	}
	h.mu.Lock()
	for tok := range h.seen {
		tokens = append(tokens, tok)
	}
	h.mu.Unlock()
	if len(tokens) < 3 {
		t.Fatalf("only %d tokens", len(tokens))
	}
	secrets := secretsOf(e)
	for _, o := range outputs {
		for _, s := range secrets {
			if strings.Contains(o, s) {
				t.Errorf("a secret reached the model: %.300s", o)
			}
		}
		for _, s := range tokens {
			for i := 0; i+8 <= len(s); i++ {
				if strings.Contains(o, s[i:i+8]) {
					t.Errorf("%d bytes of a secret from byte %d on reached the model: %.300s", fragmentLen(o, s, i), i, o)
					break
				}
			}
		}
		for _, s := range tokens {
			for k := 4; k < 8; k++ {
				if strings.Contains(o, s[:k]+"…") {
					t.Errorf("the first %d bytes of a token reached the model where a cut left them: %.300s", k, o)
				}
			}
		}
		if strings.Contains(o, "eyJ") {
			t.Errorf("a JWS-shaped string reached the model: %.300s", o)
		}
	}
}

// fragmentLen is the length of the longest stretch of s from byte i on
// found in o.
func fragmentLen(o, s string, i int) int {
	n := 8
	for i+n < len(s) && strings.Contains(o, s[i:i+n+1]) {
		n++
	}
	return n
}

// Options.Elicitation is one way of asking the User; with an Approver too
// it is refused rather than one silently winning.
func TestElicitationAndApproverRefused(t *testing.T) {
	e := newEnv(t, nil, nil)
	_, err := llmtools.New(e.Agent, "alice", &llmtools.Options{Elicitation: true, Approver: e.Gate})
	if err == nil {
		t.Fatal("New took both Elicitation and an Approver")
	}
}

// escapedEcho is a Company that, once armed, answers the API's /echo and
// the MCP tool search_products with the Session Token and the DPoP proof
// of the very request, written with the escapes a JSON decoder undoes:
// every byte as \u00xx, in lower-case hex, in upper-case, every other byte
// in mixed case, in a member name, in JSON text carried in a JSON string,
// with backslashes written \u005c; and, over MCP, in the text and the
// structured content of the tool's result, whose JSON-RPC the SDK decodes
// once, so that the escapes reach the model's JSON one level down.
type escapedEcho struct {
	base    http.RoundTripper
	armed   atomic.Bool
	mu      sync.Mutex
	secrets []string
	hits    map[string]int
}

// escapings writes s in each of the ways listed above, as JSON string
// contents.
func escapings(s string) []string {
	nested, _ := json.Marshal(`{"t":"` + readtest.Escape(s, nil, false) + `"}`)
	return []string{
		readtest.Escape(s, nil, false), readtest.Escape(s, nil, true),
		readtest.Escape(s, []byte{0x55}, false), readtest.Escape(s, []byte{0xaa}, true),
		string(nested[1 : len(nested)-1]),
		strings.ReplaceAll(readtest.Escape(s, nil, false), `\`, `\u005c`),
	}
}

func (h *escapedEcho) RoundTrip(req *http.Request) (*http.Response, error) {
	_, tok, _ := strings.Cut(req.Header.Get("Authorization"), " ")
	if !h.armed.Load() || tok == "" || req.Method != http.MethodPost || req.Body == nil {
		return h.base.RoundTrip(req)
	}
	proof := req.Header.Get("DPoP")
	var fields []string
	for k, s := range []string{tok, proof} {
		if s == "" {
			continue
		}
		for i, e := range escapings(s) {
			fields = append(fields, fmt.Sprintf(`"%c%d":"%s"`, "tp"[k], i, e))
		}
		fields = append(fields, `"`+readtest.Escape(s, []byte{0x92}, true)+`":1`)
	}
	if strings.HasSuffix(req.URL.Path, "/echo") {
		h.record("api", tok, proof)
		return testenv.Answer(req, http.StatusOK, http.Header{"Content-Type": {"application/json"}}, "{"+strings.Join(fields, ",")+"}"), nil
	}
	b, _ := io.ReadAll(req.Body)
	req.Body.Close()
	var msg struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	if json.Unmarshal(b, &msg) != nil || msg.Method != "tools/call" || msg.Params.Name != "search_products" {
		req.Body = io.NopCloser(bytes.NewReader(b))
		return h.base.RoundTrip(req)
	}
	h.record("mcp", tok, proof)
	text := "Your token: " + strings.Join(escapings(tok), " and ") // not JSON: kept as text
	structured := json.RawMessage("{" + strings.Join(fields, ",") + "}")
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": msg.ID, "result": map[string]any{
		"content": []map[string]any{{"type": "text", "text": text}}, "structuredContent": map[string]any{"note": string(structured)},
	}})
	return testenv.Answer(req, http.StatusOK, http.Header{"Content-Type": {"application/json"}}, string(body)), nil
}

func (h *escapedEcho) record(kind string, secrets ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.hits[kind]++
	for _, s := range secrets {
		if s != "" {
			h.secrets = append(h.secrets, s)
		}
	}
}

// PA-4.8-08: a Company that writes the Session Token and the DPoP proof
// back JSON-escaped (escapedEcho) gets no part of either into what the
// model reads: the model reads the result as a JSON decoder does, so the
// test reads it so too (readtest, built on encoding/json), string by
// string and nested JSON by nested JSON, and finds no stretch of 8 bytes
// of a token or proof and no JWS-shaped string. On 4653b61 the Toolkit
// matched the result's bytes only: both came through.
func TestPA_4_8_08_EscapedSecretsInResults(t *testing.T) {
	h := &escapedEcho{hits: map[string]int{}}
	e := newEnv(t, nil, func(base http.RoundTripper) http.RoundTripper { h.base = base; return h })
	e.SignIn(t)
	h.armed.Store(true)
	var outputs []string
	for _, c := range []struct{ tool, args string }{
		{"example_test__api_echo", `{"body":{"note":"hello"}}`},
		{"example_test__mcp_search_products", `{"query":"jacket"}`},
	} {
		out, err := e.K.Execute(ctx, c.tool, json.RawMessage(c.args))
		if err != nil {
			t.Fatalf("%s: %v", c.tool, err)
		}
		outputs = append(outputs, string(out))
	}
	h.mu.Lock()
	hits, secrets := maps.Clone(h.hits), slices.Clone(h.secrets)
	h.mu.Unlock()
	if hits["api"] != 1 || hits["mcp"] != 1 || len(secrets) != 3 {
		t.Fatalf("the Company echoed %v: %d secrets", hits, len(secrets))
	}
	for _, o := range outputs {
		if !strings.Contains(o, "[redacted]") || !json.Valid([]byte(o)) {
			t.Errorf("nothing redacted, or not JSON: %.300s", o)
		}
		// PA-4.8-08
		if l := readtest.Leak(o, 10, append(secrets, secretsOf(e)...)...); l != "" {
			t.Errorf("%q of a secret reached the model: %.300s", l, o)
		}
		for _, r := range readtest.Readings(o, 10) {
			if strings.Contains(r, "eyJ") {
				t.Errorf("a JWS-shaped string reached the model: %.300s", r)
			}
		}
	}
}
