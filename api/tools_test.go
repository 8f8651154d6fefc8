package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/poppytest"
)

var toolName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

func newToolset(t testing.TB, sess *poppy.Session, opts *api.ToolsOptions) *api.Toolset {
	t.Helper()
	ts, err := api.NewToolset(context.Background(), sess, opts)
	if err != nil {
		t.Fatalf("NewToolset: %v", err)
	}
	t.Cleanup(func() { ts.Close() })
	return ts
}

// Names are valid, unique and stable; schemas are objects without $ref
// that compile as JSON Schema; descriptions are clean.
func TestToolset(t *testing.T) {
	_, sess := setup(t, &poppytest.Options{MCP: poppytest.MCPOptions{SecondServer: true}})
	ts := newToolset(t, sess, nil)
	tools := ts.Tools()
	if len(tools) != 6+5+5 {
		t.Fatalf("%d tools, want 16", len(tools))
	}
	seen := map[string]bool{}
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
		if !toolName.MatchString(tool.Name) || seen[tool.Name] {
			t.Errorf("name %q invalid or taken", tool.Name)
		}
		seen[tool.Name] = true
		if tool.Description == "" || strings.ContainsAny(tool.Description, "\n\r\t") {
			t.Errorf("%s: description %q", tool.Name, tool.Description)
		}
		s := string(tool.InputSchema)
		if strings.Contains(s, "$ref") || strings.Contains(s, "$defs") || len(s) > 16<<10 {
			t.Errorf("%s: schema %s", tool.Name, s)
		}
		var top map[string]any
		if json.Unmarshal(tool.InputSchema, &top) != nil || top["type"] != "object" {
			t.Errorf("%s: schema is not an object schema: %s", tool.Name, s)
		}
		c := jsonschema.NewCompiler()
		doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(s))
		if err := c.AddResource("urn:t", doc); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Compile("urn:t"); err != nil {
			t.Errorf("%s: schema doesn't compile: %v", tool.Name, err)
		}
	}
	for _, want := range []string{"api_listOrders", "api_exchangeItem", "mcp_search_products", "mcp2_search_products"} {
		if !seen[want] {
			t.Errorf("no tool %s in %v", want, names)
		}
	}
	// Stable: the same Company gives the same names in the same order.
	again := newToolset(t, sess, nil)
	for i, tool := range again.Tools() {
		if tool.Name != names[i] {
			t.Errorf("tool %d: %q then %q", i, names[i], tool.Name)
		}
	}
}

// A schema larger than the bound is cut down to fit.
func TestToolSchemaBound(t *testing.T) {
	_, sess := setup(t, nil)
	ts := newToolset(t, sess, &api.ToolsOptions{MaxSchemaBytes: 200})
	for _, tool := range ts.Tools() {
		if len(tool.InputSchema) > 200 {
			t.Errorf("%s: %d bytes", tool.Name, len(tool.InputSchema))
		}
	}
	if _, ok := ts.Tool("api_exchangeItem"); !ok {
		t.Error("api_exchangeItem was dropped instead of cut down")
	}
}

func execute(t testing.TB, ts *api.Toolset, name, args string) map[string]any {
	t.Helper()
	tool, ok := ts.Tool(name)
	if !ok {
		t.Fatalf("no tool %s", name)
	}
	out, err := tool.Execute(context.Background(), json.RawMessage(args))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		t.Fatalf("%s: result is not a JSON object: %s", name, out)
	}
	return m
}

func TestToolExecute(t *testing.T) {
	env, sess := setup(t, nil)
	ts := newToolset(t, sess, nil)
	r := execute(t, ts, "api_listProducts", `{"q":"insulated"}`)
	if r["status"] != float64(200) || !strings.Contains(mustJSON(r["body"]), "stormline-insulated-m") {
		t.Errorf("listProducts: %v", r)
	}
	r = execute(t, ts, "api_listProducts", `{"limit":"many"}`)
	if r["error"] != "invalid_arguments" {
		t.Errorf("bad arguments: %v", r)
	}
	r = execute(t, ts, "api_listOrders", `{}`)
	if r["error"] != "sign_in_required" || r["sign_in_types"] == nil {
		t.Errorf("signed out: %v", r)
	}
	r = execute(t, ts, "mcp_size_advice", `{"sku":"stormline-m","height_cm":190}`)
	if !strings.Contains(mustJSON(r["structured"]), `"size":"L"`) {
		t.Errorf("size_advice: %v", r)
	}
	r = execute(t, ts, "mcp_list_orders", `{}`)
	if r["error"] != "sign_in_required" {
		t.Errorf("mcp_list_orders signed out: %v", r)
	}
	signIn(t, env, sess, "poppy:read", "poppy:write")
	r = execute(t, ts, "mcp_list_orders", `{}`)
	if !strings.Contains(mustJSON(r), "ord_7Hk2") {
		t.Errorf("mcp_list_orders signed in: %v", r)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// OPS 5.1: no tool may confirm or cancel an operation.
func TestToolsLeaveOutOperationsEndpoint(t *testing.T) {
	_, sess := setup(t, nil)
	desc := `{"openapi":"3.1.0","info":{"title":"t","version":"1"},"servers":[{"url":"https://api.example.test"}],
	 "paths":{"/poppy/operations/{id}/confirm":{"post":{"operationId":"confirmOperation","parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],"responses":{"200":{"description":"ok"}}}},
	 "/products":{"get":{"operationId":"listProducts","responses":{"200":{"description":"ok"}}}}}}`
	oa, err := api.NewOpenAPIFromBytes(context.Background(), sess, entry(t, sess.Company(), api.TypeOpenAPI), []byte(desc))
	if err != nil {
		t.Fatal(err)
	}
	ts, err := api.ToolsetOf(context.Background(), sess, oa)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := ts.Tool("api_confirmOperation"); ok || len(ts.Tools()) != 1 {
		t.Fatalf("tools: %d, confirm offered: %v", len(ts.Tools()), ok)
	}
}

// PA-4.8-08: no Account Token, Session Token or DPoP proof in any tool
// description or result, even when the Company echoes one back.
func TestPA_4_8_08_NoSecretsForTheModel(t *testing.T) {
	env, sess := setup(t, nil)
	signIn(t, env, sess, "poppy:read", "poppy:write")
	ts := newToolset(t, sess, nil)
	ctx := context.Background()
	tok, err := sess.Token(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var outputs []string
	for _, tool := range ts.Tools() {
		outputs = append(outputs, tool.Name, tool.Description, string(tool.InputSchema))
	}
	calls := map[string]string{
		"api_listProducts": `{}`, "api_listOrders": `{}`, "api_deleteOrder": `{"id":"ord_7Hk2"}`,
		"api_exchangeItem":  `{"id":"ord_7Hk2","body":{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}}`,
		"api_listAddresses": `{}`, "mcp_search_products": `{"query":"jacket"}`, "mcp_size_advice": `{"sku":"x","height_cm":170}`,
		"mcp_list_orders": `{}`, "mcp_save_size_profile": `{"height_cm":170}`,
		"mcp_request_exchange": `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`,
		// A Company that echoes what it got: here the model was made to
		// pass the token itself, the worst case.
		"api_echo": `{"body":{"authorization":"DPoP ` + tok.Value() + `"}}`,
	}
	for _, tool := range ts.Tools() {
		args, ok := calls[tool.Name]
		if !ok {
			t.Fatalf("no call for %s", tool.Name)
		}
		out, err := tool.Execute(ctx, json.RawMessage(args))
		if err != nil {
			t.Fatal(err)
		}
		outputs = append(outputs, string(out))
	}
	if !strings.Contains(strings.Join(outputs, ""), "[redacted]") {
		t.Error("the echoed token was not redacted")
	}
	secrets := secretsOf(env, sess)
	if len(secrets) < 4 {
		t.Fatalf("only %d secrets collected", len(secrets))
	}
	for _, o := range outputs {
		for _, s := range secrets {
			if strings.Contains(o, s) {
				t.Errorf("a secret reached the model: %.60s…", o)
			}
		}
	}
}

// secretsOf collects every token, proof and Account Token the fake saw or
// holds for sess.
func secretsOf(env *testenv.Env, sess *poppy.Session) []string {
	seen := map[string]bool{}
	add := func(s string) {
		if len(s) >= 16 {
			seen[s] = true
		}
	}
	for _, r := range env.Srv.Requests() {
		add(r.AccessToken)
		if r.Proof != nil {
			add(r.Proof.Compact)
		}
		if r.Form != nil {
			add(r.Form.Get("refresh_token"))
			add(r.Form.Get("assertion"))
			add(r.Form.Get("client_assertion"))
		}
	}
	if info, ok := env.Srv.Session(sess.ID()); ok {
		add(info.AccountToken)
	}
	var out []string
	for s := range seen {
		out = append(out, s)
	}
	return out
}

// A result larger than MaxResultBytes is cut and marked.
func TestToolResultBound(t *testing.T) {
	_, sess := setup(t, nil)
	ts := newToolset(t, sess, &api.ToolsOptions{MaxResultBytes: 200})
	big := strings.Repeat("x", 1000)
	tool, _ := ts.Tool("api_echo")
	out, err := tool.Execute(context.Background(), json.RawMessage(`{"body":{"text":"`+big+`"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var r map[string]any
	if json.Unmarshal(out, &r) != nil || r["truncated"] != true || len(out) > 400 {
		t.Fatalf("%d bytes: %.100s", len(out), out)
	}
}

// An API that fails to load is left out, its error returned with the
// tools of the others.
func TestToolsetPartial(t *testing.T) {
	_, sess := setup(t, &poppytest.Options{MCP: poppytest.MCPOptions{AuthorizationServers: []string{"https://auth.other.test"}}})
	ts, err := api.NewToolset(context.Background(), sess, nil)
	if !errors.Is(err, api.ErrIssuerNotListed) || ts == nil {
		t.Fatalf("NewToolset: %v", err)
	}
	defer ts.Close()
	if n := len(ts.Tools()); n != 6 {
		t.Errorf("%d tools, want the 6 OpenAPI ones", n)
	}
}
