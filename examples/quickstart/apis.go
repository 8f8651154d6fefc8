package main

import (
	"context"
	"encoding/json"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
)

// apis lists the Company's APIs (spec 6), calls one OpenAPI operation by
// its operationId and one MCP tool, in the signed-in Session.
func apis(ctx context.Context, sess *poppy.Session, step func(string, ...any)) error {
	var openapi, mcp poppy.API
	for _, e := range api.List(sess.Company()) {
		step("API %s at %s: %s", e.Type, e.URL, e.Description)
		switch e.Type {
		case api.TypeOpenAPI:
			openapi = e
		case api.TypeMCP:
			mcp = e
		}
	}

	// OpenAPI: the description is loaded (and cached) with kin-openapi;
	// the call carries the DPoP token and a proof.
	oa, err := api.LoadOpenAPI(ctx, sess, openapi, nil)
	if err != nil {
		return err
	}
	step("  %d endpoints, e.g. listOrders: %s", len(oa.Endpoints()), must(oa.Endpoint("listOrders")).Summary)
	resp, err := oa.Call(ctx, "listOrders", nil)
	if err != nil {
		return err
	}
	step("OpenAPI listOrders → %d %s", resp.Status, resp.Body)

	// MCP: protected resource metadata checked, then a Bearer Session
	// Token for exactly that server.
	m, err := api.ConnectMCP(ctx, sess, mcp, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	res, err := m.CallTool(ctx, "search_products", map[string]any{"query": "insulated"})
	if err != nil {
		return err
	}
	out, err := json.Marshal(res.StructuredContent)
	if err != nil {
		return err
	}
	step("MCP search_products (protocol %s) → %s", m.ProtocolVersion(), out)
	return nil
}

func must[T any](v T, _ bool) T { return v }
