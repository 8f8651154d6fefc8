package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/poppytest"
)

// exampleSession starts a fake Company and a Session at it.
func exampleSession(ctx context.Context) (*poppytest.Server, *poppy.Session) {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	key, _ := poppy.GenerateSigningKey()
	identity, _ := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID: "https://agent.test/agent.json", JWKSURI: "https://agent.test/jwks.json", Keys: []*poppy.SigningKey{key},
	})
	company.HandleAgent("agent.test", identity.Handler(nil))
	agent, _ := poppy.NewAgent(identity, &poppy.AgentOptions{HTTPClient: company.Client(), Clock: company.Clock()})
	c, err := agent.Company(ctx, "example.test")
	if err != nil {
		log.Fatal(err)
	}
	sess, err := c.Session(ctx, "local-user-42", nil)
	if err != nil {
		log.Fatal(err)
	}
	return company, sess
}

// List the Company's APIs, call an OpenAPI operation and an MCP tool.
func Example() {
	ctx := context.Background()
	company, sess := exampleSession(ctx)
	defer company.Close()

	for _, e := range api.List(sess.Company()) {
		fmt.Println(e.Type, e.URL)
		switch e.Type {
		case api.TypeOpenAPI:
			oa, err := api.LoadOpenAPI(ctx, sess, e, nil)
			if err != nil {
				log.Fatal(err)
			}
			resp, err := oa.Call(ctx, "listProducts", &api.Args{Params: map[string]any{"q": "insulated"}})
			if err != nil {
				log.Fatal(err)
			}
			fmt.Println(resp.Status, string(resp.Body))
		case api.TypeMCP:
			m, err := api.ConnectMCP(ctx, sess, e, nil)
			if err != nil {
				log.Fatal(err)
			}
			res, err := m.CallTool(ctx, "size_advice", map[string]any{"sku": "stormline-m", "height_cm": 178})
			if err != nil {
				log.Fatal(err)
			}
			out, _ := json.Marshal(res.StructuredContent)
			fmt.Println(string(out))
			m.Close()
		}
	}
	// Output:
	// openapi https://api.example.test/openapi.json
	// 200 {"products":[{"name":"Stormline Insulated Jacket","price":190,"sku":"stormline-insulated-m"}]}
	// mcp https://mcp.example.test/mcp
	// {"advice":"Size M fits a height of 178 cm.","size":"M"}
}

// A generated OpenAPI client (oapi-codegen, or any other taking an
// *http.Client) runs unchanged over the Session: every answer comes back
// as a response, and poppy.ResponseError reads the Company's error.
func ExampleOpenAPI_HTTPClient() {
	ctx := context.Background()
	company, sess := exampleSession(ctx)
	defer company.Close()
	oa, err := api.LoadOpenAPI(ctx, sess, api.List(sess.Company())[0], nil)
	if err != nil {
		log.Fatal(err)
	}
	// gen.NewClientWithResponses(oa.ServerURL(), gen.WithHTTPClient(oa.HTTPClient()))
	resp, err := oa.HTTPClient().Get(oa.ServerURL() + "/orders")
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var pe *poppy.Error
	if err := poppy.ResponseError(resp); err != nil {
		pe, _ = err.(*poppy.Error)
	}
	fmt.Println(resp.StatusCode, pe.Code, pe.SignInTypes)
	// Output:
	// 403 sign_in_required [direct device mediated]
}

// Tools for an LLM runtime: a name, a description and an input schema per
// operation and MCP tool, and Execute for the model's calls.
func ExampleNewToolset() {
	ctx := context.Background()
	company, sess := exampleSession(ctx)
	defer company.Close()
	ts, err := api.NewToolset(ctx, sess, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer ts.Close()
	for _, t := range ts.Tools() {
		fmt.Println(t.Name)
	}
	tool, _ := ts.Tool("mcp_search_products")
	out, err := tool.Execute(ctx, json.RawMessage(`{"query":"fleece"}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(out))
	out, _ = ts.Tools()[2].Execute(ctx, json.RawMessage(`{}`)) // api_listOrders, signed out
	fmt.Println(string(out))
	// Output:
	// api_listAddresses
	// api_echo
	// api_listOrders
	// api_deleteOrder
	// api_exchangeItem
	// api_listProducts
	// mcp_list_orders
	// mcp_request_exchange
	// mcp_save_size_profile
	// mcp_search_products
	// mcp_size_advice
	// {"structured":{"products":[{"name":"Trailhead Fleece","price":80,"sku":"trailhead-fleece-m"}]}}
	// {"error":"sign_in_required","hint":"The User must sign in to this Company in the agent's own interface (sign_in_types); the model can't do it.","message":"this request needs a signed-in Session Token","sign_in_types":["direct","device","mediated"],"status":403}
}

// The operations of an OpenAPI description, with their parameters.
func ExampleLoadOpenAPI() {
	ctx := context.Background()
	company, sess := exampleSession(ctx)
	defer company.Close()
	oa, err := api.LoadOpenAPI(ctx, sess, api.List(sess.Company())[0], nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, ep := range oa.Endpoints() {
		var params []string
		for _, p := range ep.Parameters {
			params = append(params, p.In+":"+p.Name)
		}
		fmt.Println(ep.Method, ep.Path, ep.ID, params, ep.Body != nil)
	}
	// Output:
	// GET /addresses listAddresses [] false
	// POST /echo echo [] true
	// GET /orders listOrders [] false
	// DELETE /orders/{id} deleteOrder [path:id] false
	// POST /orders/{id}/exchanges exchangeItem [path:id] true
	// GET /products listProducts [query:q query:limit] false
}

// An MCP server's tools, listed page by page.
func ExampleConnectMCP() {
	ctx := context.Background()
	company, sess := exampleSession(ctx)
	defer company.Close()
	m, err := api.ConnectMCP(ctx, sess, api.List(sess.Company())[1], nil)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	for tool, err := range m.Tools(ctx) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(tool.Name)
	}
	// Output:
	// list_orders
	// request_exchange
	// save_size_profile
	// search_products
	// size_advice
}

// After sign_in_required, what to sign in for.
func ExampleSignInFor() {
	ctx := context.Background()
	company, sess := exampleSession(ctx)
	defer company.Close()
	oa, err := api.LoadOpenAPI(ctx, sess, api.List(sess.Company())[0], nil)
	if err != nil {
		log.Fatal(err)
	}
	op, _ := oa.Endpoint("listOrders")
	_, err = oa.Call(ctx, op.ID, nil)
	if opts, types, ok := api.SignInFor(sess, err, op.Scopes...); ok {
		fmt.Println(opts.Scopes, types)
	}
	// Output:
	// [poppy:read] [direct device mediated]
}
