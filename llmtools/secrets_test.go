package llmtools_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/poppyproto/poppy/llmtools"
	"github.com/poppyproto/poppy/operations"
)

// PA-4.8-08: across every tool — names, descriptions, schemas and the
// result of a call of each — nothing the model sees holds an Account
// Token, a Session Token, a proof, an assertion, a device or user code.
func TestPA_4_8_08_NoSecretsInAnyTool(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.signIn(t)
	sess, _ := e.k.Session(domain)
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
	for _, tool := range e.k.Tools() {
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
		tool, _ := e.k.Tool(name)
		run(tool, a)
	}
	for _, name := range []string{"poppy_get_operation", "poppy_request_approval"} {
		tool, _ := e.k.Tool(name)
		e.gate.answer(operations.Approve)
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
	for _, info := range e.Srv.Sessions() {
		add(info.AccountToken)
	}
	e.codeMu.Lock()
	for _, c := range e.codes {
		add(c)
	}
	e.codeMu.Unlock()
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
			e := newEnv(t, &llmtools.Options{Approver: llmtools.ElicitationApprover}, nil)
			e.signIn(t)
			srv := llmtools.NewMCPServer(e.k, nil)
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
			if !strings.Contains(r["approval"].(string), tc.note) || e.performed() != tc.performed {
				t.Fatalf("approval: %v, performed %d", r, e.performed())
			}
			if tc.answer != "" && (len(asked) != 1 || !strings.Contains(asked[0], "Approve this operation")) {
				t.Errorf("elicitations: %q", asked)
			}
		})
	}
}
