package llmtools_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/llmtools"
	"github.com/poppyproto/poppy/llmtools/internal/llmtest"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
)

// companyTools returns the tools of the Company added to e's Toolkit.
func companyTools(t *testing.T, e *env) map[string]*llmtools.Tool {
	t.Helper()
	out := map[string]*llmtools.Tool{}
	for _, tool := range e.K.Tools() {
		if tool.Domain != "" {
			out[tool.Name] = tool
		}
	}
	return out
}

// A Company's tools: one per OpenAPI endpoint and MCP tool of every API
// (here two MCP servers), named "{company}__{label}_{name}", each saying
// what it calls (Domain, API, Action), with a description marked with the
// domain and an input schema without $ref within the bound.
func TestAPITools(t *testing.T) {
	e := llmtest.NewWith(t, &poppytest.Options{MCP: poppytest.MCPServingOptions{SecondServer: true}}, nil, nil)
	names, err := e.K.AddCompany(ctx, domain)
	if err != nil {
		t.Fatal(err)
	}
	tools := companyTools(t, e)
	if len(names) != 6+5+5 || len(tools) != len(names) {
		t.Fatalf("%d tools (%d listed), want 16: %v", len(tools), len(names), names)
	}
	for _, n := range []string{"example_test__api_listOrders", exchangeAPI, "example_test__mcp_search_products", "example_test__mcp2_search_products"} {
		if tools[n] == nil {
			t.Errorf("no tool %s in %v", n, names)
		}
	}
	for name, tool := range tools {
		if tool.Domain != domain || tool.API.URL == "" || (tool.Action.Channel != "openapi" && tool.Action.Channel != "mcp") {
			t.Errorf("%s: domain %q, API %q, action %+v", name, tool.Domain, tool.API.URL, tool.Action)
		}
		if !strings.HasPrefix(tool.Description, "["+domain+"] ") || strings.ContainsAny(tool.Description, "\n\r\t") {
			t.Errorf("%s: description %q", name, tool.Description)
		}
		s := string(tool.InputSchema)
		var top map[string]any
		if strings.Contains(s, "$ref") || strings.Contains(s, "$defs") || len(s) > 16<<10 || json.Unmarshal(tool.InputSchema, &top) != nil || top["type"] != "object" {
			t.Errorf("%s: schema %.200s", name, s)
		}
	}
	if got, want := tools[exchangeAPI].Action, operations.OpenAPIAction("POST", "/orders/{id}/exchanges"); got != want {
		t.Errorf("exchangeItem's action %+v, want %+v", got, want)
	}
	if got, want := tools[exchangeMCP].Action, operations.ToolAction("request_exchange"); got != want {
		t.Errorf("request_exchange's action %+v, want %+v", got, want)
	}
}

// A schema larger than APIOptions.MaxSchemaBytes is cut down to fit, not
// dropped.
func TestAPIToolSchemaBound(t *testing.T) {
	e := newEnv(t, &llmtools.Options{APIs: &llmtools.APIOptions{MaxSchemaBytes: 200}}, nil)
	if _, err := e.K.AddCompany(ctx, domain); err != nil {
		t.Fatal(err)
	}
	tools := companyTools(t, e)
	for name, tool := range tools {
		if len(tool.InputSchema) > 200 {
			t.Errorf("%s: %d bytes", name, len(tool.InputSchema))
		}
	}
	if tools[exchangeAPI] == nil {
		t.Errorf("%s was dropped instead of cut down", exchangeAPI)
	}
}

// Calls of a Company's tools: a result, a refusal as a result (with the
// sign-in types), arguments outside the schema refused before a call.
func TestAPIToolExecute(t *testing.T) {
	e := newEnv(t, nil, nil)
	if _, err := e.K.AddCompany(ctx, domain); err != nil {
		t.Fatal(err)
	}
	r := e.Call(t, "example_test__api_listProducts", `{"q":"insulated"}`)
	if r["status"] != float64(200) || !strings.Contains(mustJSON(r["body"]), "stormline-insulated-m") {
		t.Errorf("listProducts: %v", r)
	}
	before := e.Srv.Counts().Requests
	if r := e.Call(t, "example_test__api_listProducts", `{"limit":"many"}`); r["error"] != "invalid_arguments" {
		t.Errorf("bad arguments: %v", r)
	}
	if n := e.Srv.Counts().Requests - before; n != 0 {
		t.Errorf("%d requests for arguments outside the schema", n)
	}
	if r := e.Call(t, "example_test__api_listOrders", `{}`); r["error"] != "sign_in_required" || r["sign_in_types"] == nil || r["status"] != float64(403) {
		t.Errorf("signed out: %v", r)
	}
	if r := e.Call(t, "example_test__mcp_size_advice", `{"sku":"stormline-m","height_cm":190}`); !strings.Contains(mustJSON(r["structured"]), `"size":"L"`) {
		t.Errorf("size_advice: %v", r)
	}
	if r := e.Call(t, "example_test__mcp_list_orders", `{}`); r["error"] != "sign_in_required" {
		t.Errorf("mcp_list_orders signed out: %v", r)
	}
	e.SignIn(t)
	if r := e.Call(t, "example_test__mcp_list_orders", `{}`); !strings.Contains(mustJSON(r), "ord_7Hk2") {
		t.Errorf("mcp_list_orders signed in: %v", r)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// OPS 5.1, PA-OPS5-03: no tool may confirm or cancel an operation: an
// endpoint under the operations extension's endpoint, listed in the
// Company's own description, is never a tool.
func TestAPIToolsLeaveOutOperationsEndpoint(t *testing.T) {
	var e *env
	e = newEnv(t, nil, func(base http.RoundTripper) http.RoundTripper {
		h := testenv.NewHostile(base)
		h.On("/openapi.json", func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
			desc := `{"openapi":"3.1.0","info":{"title":"t","version":"1"},"servers":[{"url":"` + e.Srv.EndpointURL(poppytest.EndpointAPI) + `"}],
			 "paths":{"/poppy/operations/{id}/confirm":{"post":{"operationId":"confirmOperation","parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],"responses":{"200":{"description":"ok"}}}},
			 "/poppy/operations/{id}/cancel":{"post":{"operationId":"cancelOperation","parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],"responses":{"200":{"description":"ok"}}}},
			 "/products":{"get":{"operationId":"listProducts","responses":{"200":{"description":"ok"}}}}}}`
			return testenv.Answer(req, http.StatusOK, http.Header{"Content-Type": {"application/json"}}, desc), nil
		})
		return h
	})
	if _, err := e.K.AddCompany(ctx, domain); err != nil {
		t.Fatal(err)
	}
	var openapi []string
	for name, tool := range companyTools(t, e) {
		if tool.Action.Channel == "openapi" {
			openapi = append(openapi, name)
		}
	}
	if len(openapi) != 1 || openapi[0] != "example_test__api_listProducts" {
		t.Fatalf("OpenAPI tools %v, want listProducts alone", openapi)
	}
}

// A result larger than APIOptions.MaxResultBytes is cut and marked.
func TestAPIToolResultBound(t *testing.T) {
	e := newEnv(t, &llmtools.Options{APIs: &llmtools.APIOptions{MaxResultBytes: 200}}, nil)
	if _, err := e.K.AddCompany(ctx, domain); err != nil {
		t.Fatal(err)
	}
	out, err := e.K.Execute(ctx, "example_test__api_echo", json.RawMessage(`{"body":{"text":"`+strings.Repeat("x", 1000)+`"}}`))
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
func TestAPIToolsPartial(t *testing.T) {
	e := llmtest.NewWith(t, &poppytest.Options{MCP: poppytest.MCPServingOptions{AuthorizationServers: []string{"https://auth.other.test"}}}, nil, nil)
	names, err := e.K.AddCompany(ctx, domain)
	if !errors.Is(err, api.ErrIssuerNotListed) {
		t.Fatalf("AddCompany: %v", err)
	}
	if len(names) != 6 || len(companyTools(t, e)) != 6 {
		t.Errorf("%d tools, want the 6 OpenAPI ones: %v", len(names), names)
	}
}

// An MCP server whose tools/list never ends: the Toolkit keeps the tools
// within api.MCPOptions.MaxTools (1,000) and reports ErrTooManyTools
// (the listing's own bound is api's TestAttackEndlessToolList).
func TestAttackEndlessToolListTools(t *testing.T) {
	h := &testenv.EndlessTools{}
	e := newEnv(t, nil, func(base http.RoundTripper) http.RoundTripper {
		h.Base = base
		return h
	})
	u, _ := url.Parse(e.Srv.EndpointURL(poppytest.EndpointMCP))
	h.SetPath(u.Path)
	names, err := e.K.AddCompany(ctx, domain)
	if !errors.Is(err, api.ErrTooManyTools) {
		t.Fatalf("AddCompany: %v", err)
	}
	if len(names) != 6+1000 {
		t.Errorf("%d tools kept, want the 6 OpenAPI ones and 1,000", len(names))
	}
}
