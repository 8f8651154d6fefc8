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

// An endpoint's arguments as one JSON Schema object, the shape a model or
// a form fills in (package llmtools builds its tools on it), and a call
// with such an object.
func ExampleOpenAPI_InputSchema() {
	ctx := context.Background()
	company, sess := exampleSession(ctx)
	defer company.Close()
	oa, err := api.LoadOpenAPI(ctx, sess, api.List(sess.Company())[0], nil)
	if err != nil {
		log.Fatal(err)
	}
	ep, _ := oa.Endpoint("listProducts")
	schema, err := oa.InputSchema(ep, 0)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(schema))
	resp, err := oa.CallEndpoint(ctx, ep, ep.ArgsOf(map[string]any{"q": "insulated"}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Status, string(resp.Body))
	// Output:
	// {"additionalProperties":false,"properties":{"limit":{"description":"At most this many products","maximum":100,"minimum":1,"type":"integer"},"q":{"description":"Words to look for in product names","type":"string"}},"type":"object"}
	// 200 {"products":[{"name":"Stormline Insulated Jacket","price":190,"sku":"stormline-insulated-m"}]}
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
