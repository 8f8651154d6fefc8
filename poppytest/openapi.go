package poppytest

// The OpenAPI 3.1 description of the fake's resource server (CO-6-02),
// served at GET https://api.{primary}/openapi.json without a token.
//
// It describes every endpoint of the API, with schemas under
// components/schemas referenced by $ref, the token errors of spec 6, and
// the 202 + operation answer of POST /orders/{id}/exchanges (OPS 4.1: "The
// Company SHOULD say in its OpenAPI description which endpoints return
// operations"). Addresses need the custom scope "addresses".

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// addressScope is the custom scope the address endpoints need.
const addressScope = "addresses"

func openAPIDescription(origin, read, write string, addresses bool) []byte {
	ref := func(name string) map[string]any { return map[string]any{"$ref": "#/components/schemas/" + name} }
	jsonBody := func(schema any) map[string]any {
		return map[string]any{"application/json": map[string]any{"schema": schema}}
	}
	tokenError := map[string]any{
		"description": "Token error (spec 6): see WWW-Authenticate",
		"headers": map[string]any{"WWW-Authenticate": map[string]any{
			"description": `DPoP error="invalid_token" | "sign_in_required" | "insufficient_scope" (with scope)`,
			"schema":      map[string]any{"type": "string"},
		}},
		"content": jsonBody(ref("Error")),
	}
	rateLimited := map[string]any{
		"description": "Rate limited (spec 4.3)",
		"headers":     map[string]any{"Retry-After": map[string]any{"schema": map[string]any{"type": "integer"}}},
		"content":     jsonBody(ref("Error")),
	}
	errs := func(codes ...string) map[string]any {
		m := map[string]any{"401": tokenError, "429": rateLimited}
		for _, c := range codes {
			m[c] = tokenError
		}
		return m
	}
	with := func(m map[string]any, code string, v any) map[string]any {
		m[code] = v
		return m
	}
	idParam := map[string]any{"name": "id", "in": "path", "required": true, "description": "The order ID",
		"schema": map[string]any{"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}}
	security := func(scopes ...string) []any {
		return []any{map[string]any{"poppySession": scopes}}
	}
	money := map[string]any{"type": "object", "required": []any{"amount", "currency"}, "properties": map[string]any{
		"amount": map[string]any{"type": "string"}, "currency": map[string]any{"type": "string"},
	}}
	schemas := map[string]any{
		"Error": map[string]any{"type": "object", "required": []any{"error"}, "properties": map[string]any{
			"error":             map[string]any{"type": "string"},
			"error_description": map[string]any{"type": "string"},
			"scope":             map[string]any{"type": "string"},
			"extension":         map[string]any{"type": "string"},
		}},
		"Product": map[string]any{"type": "object", "required": []any{"sku", "name", "price"}, "properties": map[string]any{
			"sku": map[string]any{"type": "string"}, "name": map[string]any{"type": "string"}, "price": map[string]any{"type": "integer"},
		}},
		"ProductList": map[string]any{"type": "object", "required": []any{"products"}, "properties": map[string]any{
			"products": map[string]any{"type": "array", "items": ref("Product")},
		}},
		"Order": map[string]any{"type": "object", "required": []any{"id", "status"}, "properties": map[string]any{
			"id": map[string]any{"type": "string"}, "number": map[string]any{"type": "string"},
			"status": map[string]any{"type": "string"}, "account": map[string]any{"type": "string"},
		}},
		"OrderList": map[string]any{"type": "object", "required": []any{"orders"}, "properties": map[string]any{
			"orders": map[string]any{"type": "array", "items": ref("Order")},
		}},
		"ExchangeRequest": map[string]any{"type": "object", "required": []any{"item_id", "replacement_sku"}, "properties": map[string]any{
			"item_id":         map[string]any{"type": "string", "description": "The item of the order to exchange"},
			"replacement_sku": map[string]any{"type": "string", "description": "The SKU to exchange it for"},
		}},
		"Exchange": map[string]any{"type": "object", "required": []any{"exchange_id", "order_id", "status"}, "properties": map[string]any{
			"exchange_id": map[string]any{"type": "string"}, "order_id": map[string]any{"type": "string"},
			"status": map[string]any{"type": "string"}, "request": map[string]any{"type": "object"},
		}},
		// OPS 3: the operation object.
		"Operation": map[string]any{"type": "object",
			"required": []any{"operation_id", "revision", "state", "summary", "confirmation", "result"},
			"properties": map[string]any{
				"operation_id": map[string]any{"type": "string"},
				"revision":     map[string]any{"type": "integer", "minimum": 1},
				"state": map[string]any{"type": "string",
					"enum": []any{"proposed", "in_progress", "succeeded", "failed", "cancelled", "expired"}},
				"summary":                map[string]any{"type": "string"},
				"terms":                  map[string]any{"type": "object"},
				"expires_at":             map[string]any{"type": "string", "format": "date-time"},
				"user_approval_required": map[string]any{"type": "boolean"},
				"url":                    map[string]any{"type": "string", "format": "uri"},
				"confirmation": map[string]any{"type": []any{"object", "null"}, "properties": map[string]any{
					"revision":     map[string]any{"type": "integer"},
					"approved_by":  map[string]any{"type": "string", "enum": []any{"user", "standing_permission"}},
					"confirmed_at": map[string]any{"type": "string", "format": "date-time"},
				}},
				"result": map[string]any{"type": []any{"object", "null"}, "properties": map[string]any{
					"summary": map[string]any{"type": "string"},
					"data":    map[string]any{"type": "object"},
				}},
			}},
		"ProposedOperation": map[string]any{"type": "object", "required": []any{"operation"}, "properties": map[string]any{
			"operation": ref("Operation"),
		}},
		"Money": money,
		"Address": map[string]any{"type": "object", "required": []any{"id", "line1", "city", "country"}, "properties": map[string]any{
			"id": map[string]any{"type": "string"}, "name": map[string]any{"type": "string"},
			"line1": map[string]any{"type": "string"}, "city": map[string]any{"type": "string"},
			"postal_code": map[string]any{"type": "string"}, "country": map[string]any{"type": "string", "minLength": 2, "maxLength": 2},
		}},
		"AddressList": map[string]any{"type": "object", "required": []any{"addresses"}, "properties": map[string]any{
			"addresses": map[string]any{"type": "array", "items": ref("Address")},
		}},
	}
	paths := map[string]any{
		"/products": map[string]any{"get": map[string]any{
			"operationId": "listProducts", "summary": "List products (signed in or out)",
			"parameters": []any{
				map[string]any{"name": "q", "in": "query", "description": "Words to look for in product names", "schema": map[string]any{"type": "string"}},
				map[string]any{"name": "limit", "in": "query", "description": "At most this many products", "schema": map[string]any{"type": "integer", "minimum": 1, "maximum": 100}},
			},
			"security":  security(),
			"responses": with(errs(), "200", map[string]any{"description": "Products", "content": jsonBody(ref("ProductList"))}),
		}},
		"/orders": map[string]any{"get": map[string]any{
			"operationId": "listOrders", "summary": "List the account's orders (" + read + ")",
			"security":  security(read),
			"responses": with(errs("403"), "200", map[string]any{"description": "Orders", "content": jsonBody(ref("OrderList"))}),
		}},
		"/orders/{id}": map[string]any{"delete": map[string]any{
			"operationId": "deleteOrder", "summary": "Delete an order: always denied to Personal Agents",
			"parameters": []any{idParam},
			"security":   security(read, write),
			"responses":  with(errs(), "403", map[string]any{"description": "Denied by policy", "content": jsonBody(ref("Error"))}),
		}},
		"/orders/{id}/exchanges": map[string]any{"post": map[string]any{
			"operationId":       "exchangeItem",
			"summary":           "Exchange an item of an order (" + read + " " + write + ")",
			"description":       "With the operations extension, the Company proposes the exchange as an operation (202); the Personal Agent confirms it at the operations endpoint after the User approves. Without the extension, the exchange is requested at once (201).",
			"parameters":        []any{idParam},
			"requestBody":       map[string]any{"required": true, "content": jsonBody(ref("ExchangeRequest"))},
			"security":          security(read, write),
			"x-poppy-operation": true,
			"responses": with(with(errs("403"), "201", map[string]any{"description": "Exchange requested", "content": jsonBody(ref("Exchange"))}),
				"202", map[string]any{"description": "Exchange proposed as an operation (OPS 4.1); nothing has happened yet", "content": jsonBody(ref("ProposedOperation"))}),
		}},
		"/echo": map[string]any{"post": map[string]any{
			"operationId": "echo", "summary": "Echo the JSON body",
			"requestBody": map[string]any{"required": true, "content": jsonBody(map[string]any{})},
			"security":    security(),
			"responses":   with(errs(), "200", map[string]any{"description": "The body, verbatim", "content": jsonBody(map[string]any{})}),
		}},
	}
	if addresses {
		paths["/addresses"] = map[string]any{
			"get": map[string]any{
				"operationId": "listAddresses", "summary": "List the account's saved shipping addresses (" + addressScope + ")",
				"security":  security(addressScope),
				"responses": with(errs("403"), "200", map[string]any{"description": "Addresses", "content": jsonBody(ref("AddressList"))}),
			},
		}
	}
	doc := map[string]any{
		"openapi":           "3.1.0",
		"jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
		"info": map[string]any{"title": "Example Company API", "version": "1.0.0",
			"description": "Orders, returns, and exchanges. Every request carries a Poppy Session Token with a DPoP proof (spec 4.3)."},
		"servers": []any{map[string]any{"url": strings.TrimSuffix(origin, "/")}},
		"components": map[string]any{
			"schemas": schemas,
			"securitySchemes": map[string]any{
				"poppySession": map[string]any{"type": "http", "scheme": "DPoP",
					"description": "Poppy Session Token with a DPoP proof (spec 4.3)"},
			},
		},
		"security": security(),
		"paths":    paths,
	}
	b, _ := json.MarshalIndent(doc, "", "  ")
	return b
}

// serveAddresses answers GET /addresses, which needs the custom scope
// "addresses" (CO-4.4-02). It reports false for paths it doesn't serve.
func (s *Server) serveAddresses(w http.ResponseWriter, r *http.Request, a *auth) bool {
	if r.URL.Path != "/addresses" || !s.hasAddressScope() {
		return false
	}
	if r.Method != http.MethodGet {
		exchangeOf(r).errorCode = "method_not_allowed"
		s.writeJSON(w, r, http.StatusMethodNotAllowed, map[string]any{"error": "method_not_allowed"})
		return true
	}
	if !s.require(w, r, a, addressScope) {
		return true
	}
	s.writeJSON(w, r, http.StatusOK, map[string]any{"addresses": []any{
		map[string]any{"id": "adr_1", "name": "Home", "line1": "1 Example Street", "city": "Springfield", "postal_code": "12345", "country": "US"},
	}})
	return true
}

func (s *Server) hasAddressScope() bool {
	_, ok := s.opts.SignIn.CustomScopes[addressScope]
	return ok
}

// products answers GET /products: q filters by name or SKU, limit caps the
// count.
func (s *Server) products(q url.Values) []any {
	out := []any{}
	want := strings.ToLower(strings.TrimSpace(q.Get("q")))
	limit, _ := strconv.Atoi(q.Get("limit"))
	for _, p := range fakeProducts[:2] {
		if want != "" && !strings.Contains(strings.ToLower(p.Name), want) && !strings.Contains(p.SKU, want) {
			continue
		}
		if limit > 0 && len(out) >= limit {
			break
		}
		out = append(out, map[string]any{"sku": p.SKU, "name": p.Name, "price": p.Price})
	}
	return out
}
