package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
)

// PA-6-01: an API of an unknown type is skipped, without error.
func TestPA_6_01_SkipsUnknownTypes(t *testing.T) {
	srv := poppytest.Options{Discovery: poppytest.DiscoveryOptions{DocumentFields: map[string]any{"apis": []any{
		map[string]any{"type": "graphql", "url": "https://api.example.test/graphql", "description": "GraphQL"},
		map[string]any{"type": "openapi", "url": "https://api.example.test/openapi.json", "description": "Orders"},
		map[string]any{"type": "mcp", "url": "http://mcp.example.test/mcp", "description": "not HTTPS"},
		map[string]any{"type": "mcp", "url": "https://mcp.example.test/mcp", "description": "Product search"},
	}}}}
	_, sess := setup(t, &srv)
	got := api.List(sess.Company())
	if len(got) != 2 || got[0].Type != "openapi" || got[1].Type != "mcp" || got[1].URL != "https://mcp.example.test/mcp" {
		t.Fatalf("List: %+v", got)
	}
	if got[0].Description != "Orders" {
		t.Errorf("description %q", got[0].Description)
	}
}

// Loading and indexing: operations with their parameters and request-body
// schemas, $refs resolved; the description is cached by its HTTP caching
// headers like a discovery document.
func TestLoadOpenAPI(t *testing.T) {
	env, sess := setup(t, nil)
	oa := loadOpenAPI(t, sess)
	if oa.ServerURL() != env.Srv.EndpointURL(poppytest.EndpointAPI) {
		t.Errorf("ServerURL %q", oa.ServerURL())
	}
	ex, ok := oa.Endpoint("exchangeItem")
	if !ok || ex.Method != "POST" || ex.Path != "/orders/{id}/exchanges" || !ex.ProposesOperation {
		t.Fatalf("exchangeItem: %+v", ex)
	}
	if len(ex.Parameters) != 1 || ex.Parameters[0].Name != "id" || ex.Parameters[0].In != "path" || !ex.Parameters[0].Required {
		t.Errorf("parameters: %+v", ex.Parameters)
	}
	if ex.Body == nil || !ex.Body.Required {
		t.Fatalf("body: %+v", ex.Body)
	}
	// The schema as the description gives it; ResolveSchema inlines it.
	if s, err := oa.ResolveSchema(ex.Body.Schema); err != nil || strings.Contains(string(s), "$ref") ||
		!strings.Contains(string(s), "replacement_sku") {
		t.Errorf("body schema %s resolved: %s, %v", ex.Body.Schema, s, err)
	}
	if got, ok := oa.Find("post", "/orders/ord_1/exchanges"); !ok || got != ex {
		t.Errorf("Find by path: %v", got)
	}
	if strings.Join(ex.Scopes, " ") != "poppy:read poppy:write" {
		t.Errorf("scopes %q", ex.Scopes)
	}
	if len(oa.Endpoints()) != 6 {
		t.Errorf("%d endpoints", len(oa.Endpoints()))
	}
	// Cached like poppy.json (spec 3): max-age=300 → no refetch within it.
	loadOpenAPI(t, sess)
	env.Srv.Clock().Advance(299 * time.Second)
	loadOpenAPI(t, sess)
	if n := descriptionFetches(env); n != 1 {
		t.Errorf("%d description fetches within max-age, want 1", n)
	}
	env.Srv.Clock().Advance(2 * time.Second)
	loadOpenAPI(t, sess)
	if n := descriptionFetches(env); n != 2 {
		t.Errorf("%d description fetches after max-age, want 2", n)
	}
}

func descriptionFetches(env interface {
	Requests(...poppytest.EndpointKind) []poppytest.Request
}) int {
	n := 0
	for _, r := range env.Requests(poppytest.EndpointAPI) {
		if r.Path == "/openapi.json" {
			n++
		}
	}
	return n
}

func TestLoadOpenAPISizeCap(t *testing.T) {
	_, sess := setup(t, nil)
	_, err := api.LoadOpenAPI(context.Background(), sess, entry(t, sess.Company(), api.TypeOpenAPI), &api.OpenAPIOptions{MaxDescriptionBytes: 512})
	if !errors.Is(err, poppy.ErrResponseTooLarge) {
		t.Fatalf("LoadOpenAPI: %v, want ErrResponseTooLarge", err)
	}
}

// OpenAPI 3.0 loads too; a version other than 3.0 or 3.1 doesn't; nor
// does an external reference.
func TestOpenAPIVersions(t *testing.T) {
	_, sess := setup(t, nil)
	e := entry(t, sess.Company(), api.TypeOpenAPI)
	ctx := context.Background()
	d30 := `{"openapi":"3.0.3","info":{"title":"t","version":"1"},"servers":[{"url":"/"}],
	 "paths":{"/products":{"get":{"operationId":"listProducts","parameters":[{"name":"q","in":"query","schema":{"$ref":"#/components/schemas/Q"}}],
	 "responses":{"200":{"description":"ok"}}}}},
	 "components":{"schemas":{"Q":{"type":"integer","nullable":true,"maximum":10,"exclusiveMaximum":true}}}}`
	oa, err := api.NewOpenAPIFromBytes(ctx, sess, e, []byte(d30))
	if err != nil {
		t.Fatalf("3.0: %v", err)
	}
	op, _ := oa.Endpoint("listProducts")
	// 3.0 keywords become their JSON Schema 2020-12 form.
	if op == nil {
		t.Fatal("no listProducts")
	}
	if s, err := oa.ResolveSchema(op.Parameters[0].Schema); err != nil || string(s) != `{"exclusiveMaximum":10,"type":["integer","null"]}` {
		t.Fatalf("3.0 operation: %s resolved: %s, %v", op.Parameters[0].Schema, s, err)
	}
	if resp, err := oa.Call(ctx, "listProducts", &api.Args{Params: map[string]any{"q": 5}}); err != nil || resp.Status != 200 {
		t.Fatalf("3.0 call: %v", err)
	}
	yaml := "openapi: 3.0.3\ninfo: {title: t, version: '1'}\npaths:\n  /products:\n    get:\n      operationId: listProducts\n      responses:\n        '200': {description: ok}\n"
	if oa, err := api.NewOpenAPIFromBytes(ctx, sess, e, []byte(yaml)); err != nil || len(oa.Endpoints()) != 1 {
		t.Fatalf("YAML: %v", err)
	}
	for name, doc := range map[string]string{
		"2.0":      `{"swagger":"2.0","info":{"title":"t","version":"1"},"paths":{}}`,
		"external": `{"openapi":"3.1.0","info":{"title":"t","version":"1"},"paths":{"/a":{"get":{"responses":{"200":{"description":"ok","content":{"application/json":{"schema":{"$ref":"https://evil.test/s.json"}}}}}}}}}`,
		"http":     `{"openapi":"3.1.0","info":{"title":"t","version":"1"},"servers":[{"url":"http://api.example.test"}],"paths":{}}`,
	} {
		if _, err := api.NewOpenAPIFromBytes(ctx, sess, e, []byte(doc)); !errors.Is(err, api.ErrInvalidDescription) {
			t.Errorf("%s: %v, want ErrInvalidDescription", name, err)
		}
	}
}

// CO-6-03, PA-6-02: a call carries the DPoP token and a proof.
func TestPA_6_02_OpenAPICallWithDPoP(t *testing.T) {
	env, sess := setup(t, nil)
	oa := loadOpenAPI(t, sess)
	resp, err := oa.Call(context.Background(), "listProducts", &api.Args{Params: map[string]any{"q": "insulated", "limit": 5}})
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Products []struct{ SKU string } `json:"products"`
	}
	if err := resp.JSON(&out); err != nil || len(out.Products) != 1 || out.Products[0].SKU != "stormline-insulated-m" {
		t.Fatalf("%d %s", resp.Status, resp.Body)
	}
	var last poppytest.Request
	for _, r := range env.Requests(poppytest.EndpointAPI) {
		last = r
	}
	if last.AuthScheme != "DPoP" || last.Proof == nil || last.URL != env.Srv.EndpointURL(poppytest.EndpointAPI)+"/products?limit=5&q=insulated" {
		t.Errorf("request: %s scheme %q proof %v", last.URL, last.AuthScheme, last.Proof != nil)
	}
	if strings.Contains(last.URL, last.AccessToken) {
		t.Error("token in the URL") // PA-4.3-26
	}
}

// PA-6-05: invalid_token → one renewal and one retry; a second 401 is the
// error.
func TestPA_6_05_OpenAPIInvalidToken(t *testing.T) {
	env, sess := setup(t, nil)
	oa := loadOpenAPI(t, sess)
	ctx := context.Background()
	tok, _ := sess.Token(ctx, nil)
	env.Srv.Tokens().Expire(tok.Value())
	before := len(env.Requests(poppytest.EndpointToken))
	if _, err := oa.Call(ctx, "listProducts", nil); err != nil {
		t.Fatalf("after an early expiry: %v", err)
	}
	if n := len(env.Requests(poppytest.EndpointToken)) - before; n != 1 {
		t.Errorf("%d renewals, want 1", n)
	}
	env.Srv.Faults().ForceError(poppytest.EndpointAPI, poppytest.Fault{Status: 0, Code: "invalid_token", Times: 2})
	_, err := oa.Call(ctx, "listProducts", nil)
	if !errors.Is(err, poppy.ErrInvalidToken) {
		t.Fatalf("second 401: %v, want ErrInvalidToken", err)
	}
}

// PA-6-06: sign_in_required without an Account Token is the error, naming
// the sign-in types, without a retry; with a stored one, the call goes
// through after a refresh.
func TestPA_6_06_OpenAPISignInRequired(t *testing.T) {
	env, sess := setup(t, nil)
	oa := loadOpenAPI(t, sess)
	ctx := context.Background()
	before := len(env.Requests(poppytest.EndpointAPI))
	_, err := oa.Call(ctx, "listOrders", nil)
	var pe *poppy.Error
	if !errors.Is(err, poppy.ErrSignInRequired) || !errors.As(err, &pe) || strings.Join(pe.SignInTypes, " ") != "direct device mediated" {
		t.Fatalf("signed out: %v", err)
	}
	if n := len(env.Requests(poppytest.EndpointAPI)) - before; n != 1 {
		t.Errorf("%d API requests, want 1 (no retry)", n)
	}
	signIn(t, env, sess, "poppy:read")
	env.Srv.Sessions().SignOut(sess.ID()) // the Company signed it out; the Account Token stays
	tokBefore := len(env.Requests(poppytest.EndpointToken))
	resp, err := oa.Call(ctx, "listOrders", nil)
	if err != nil || resp.Status != 200 {
		t.Fatalf("with a stored Account Token: %v", err)
	}
	grants := env.Requests(poppytest.EndpointToken)[tokBefore:]
	if len(grants) == 0 || grants[0].Form.Get("grant_type") != "refresh_token" {
		t.Errorf("token requests: %d", len(grants))
	}
}

// PA-6-07, A-21: insufficient_scope names the scopes and the sign-in types
// that list all of them; signing in for the union with the Session's
// scopes, the call then succeeds.
func TestPA_6_07_OpenAPIInsufficientScope(t *testing.T) {
	env, sess := setup(t, nil)
	oa := loadOpenAPI(t, sess)
	ctx := context.Background()
	signIn(t, env, sess, "poppy:read")
	args := &api.Args{Params: map[string]any{"id": "ord_7Hk2"}, Body: map[string]string{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}}
	_, err := oa.Call(ctx, "exchangeItem", args)
	var pe *poppy.Error
	if !errors.Is(err, poppy.ErrInsufficientScope) || !errors.As(err, &pe) {
		t.Fatalf("read-only exchange: %v", err)
	}
	if strings.Join(pe.Scope, " ") != "poppy:read poppy:write" || strings.Join(pe.SignInTypes, " ") != "direct device" {
		t.Fatalf("scope %q, types %q", pe.Scope, pe.SignInTypes)
	}
	so, types, ok := api.SignInFor(sess, err)
	if !ok || strings.Join(so.Scopes, " ") != "poppy:read poppy:write" || strings.Join(types, " ") != "direct device" {
		t.Fatalf("SignInFor: %+v %v %v", so, types, ok)
	}
	signIn(t, env, sess, so.Scopes...)
	if c := env.Srv.SignIn().Consents(); len(c) == 0 || strings.Join(c[len(c)-1].Scopes, " ") != "poppy:read poppy:write" {
		t.Errorf("the sign-in asked for %+v", c)
	}
	resp, err := oa.Call(ctx, "exchangeItem", args)
	if err != nil || resp.Status >= 300 {
		t.Fatalf("after signing in: %v", err)
	}
}

// extension_required names the extension.
func TestOpenAPIExtensionRequired(t *testing.T) {
	env, sess := setup(t, nil)
	oa := loadOpenAPI(t, sess)
	env.Srv.Faults().ForceError(poppytest.EndpointAPI, poppytest.Fault{Status: 403, Code: "extension_required", Times: 1})
	_, err := oa.Call(context.Background(), "listProducts", nil)
	var xe poppy.ExtensionRequiredError
	if !errors.Is(err, poppy.ErrExtensionRequired) || !errors.As(err, &xe) || xe.Extension != "operations" {
		t.Fatalf("%v", err)
	}
}

// PA-4.3-27: a 429 is retried no sooner than Retry-After.
func TestOpenAPIRateLimit(t *testing.T) {
	env, sess := setup(t, nil)
	oa := loadOpenAPI(t, sess)
	env.Srv.Faults().RateLimit(poppytest.EndpointAPI, 1, "5")
	if _, err := oa.Call(context.Background(), "listProducts", nil); err != nil {
		t.Fatal(err)
	}
	var times []time.Time
	for _, r := range env.Requests(poppytest.EndpointAPI) {
		if r.Path == "/products" {
			times = append(times, r.Time)
		}
	}
	if len(times) != 2 || times[1].Sub(times[0]) < 5*time.Second {
		t.Fatalf("requests at %v", times)
	}
}

// PA-4.3-24: no Session, no call.
func TestPA_4_3_24_NoAnonymousCalls(t *testing.T) {
	env, sess := setup(t, nil)
	if _, err := api.LoadOpenAPI(context.Background(), nil, entry(t, sess.Company(), api.TypeOpenAPI), nil); !errors.Is(err, poppy.ErrNoSession) {
		t.Errorf("LoadOpenAPI: %v", err)
	}
	if _, err := api.ConnectMCP(context.Background(), nil, entry(t, sess.Company(), api.TypeMCP), nil); !errors.Is(err, poppy.ErrNoSession) {
		t.Errorf("ConnectMCP: %v", err)
	}
	_ = env
}

// OPS 4.1: a 202 carrying "operation" is handed back as an
// *operations.Operation, the one Parse reads from what the Company sent,
// as a proposal.
func TestOpenAPIProposedOperation(t *testing.T) {
	env, sess := setup(t, nil)
	op := `{"operation_id":"exc_5Rt2","revision":1,"state":"proposed","summary":"Exchange the jacket","confirmation":null,"result":null}`
	env.Srv.HandleAgent("shop.example.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.Header.Get("Authorization"), "DPoP ") || r.Header.Get("DPoP") == "" {
			http.Error(w, "no token", 401)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		if strings.Contains(r.URL.Path, "ord_broken") { // an operation without a summary
			w.Write([]byte(`{"operation":{"operation_id":"exc_6","revision":1,"state":"proposed"}}`))
			return
		}
		w.Write([]byte(`{"operation":` + op + `}`))
	}))
	desc := `{"openapi":"3.1.0","info":{"title":"t","version":"1"},"servers":[{"url":"https://shop.example.test"}],
	 "paths":{"/orders/{id}/exchanges":{"post":{"operationId":"exchangeItem","parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],
	 "requestBody":{"content":{"application/json":{"schema":{"type":"object"}}}},
	 "responses":{"202":{"description":"proposed"}}}}}}`
	oa, err := api.NewOpenAPIFromBytes(context.Background(), sess, entry(t, sess.Company(), api.TypeOpenAPI), []byte(desc))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := oa.CallPath(context.Background(), "POST", "/orders/ord_7Hk2/exchanges", &api.Args{Body: map[string]any{"item_id": "itm_4Qa"}})
	if err != nil {
		t.Fatal(err)
	}
	want, err := operations.Parse([]byte(op))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != 202 || !reflect.DeepEqual(resp.Operation, want) {
		t.Fatalf("%d operation %+v", resp.Status, resp.Operation)
	}
	// One that breaks the extension's rules is a typed error.
	if _, err := oa.CallPath(context.Background(), "POST", "/orders/ord_broken/exchanges", &api.Args{Body: map[string]any{"item_id": "itm_4Qa"}}); !errors.Is(err, operations.ErrProtocol) {
		t.Fatalf("a broken operation: %v", err)
	}
}

// The committed description is what the fake serves: go generate is up to
// date.
func TestGeneratedDescriptionCurrent(t *testing.T) {
	env, _ := setup(t, nil)
	resp, err := env.Srv.Client().Get(env.Srv.EndpointURL(poppytest.EndpointAPI) + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var served, committed any
	json.NewDecoder(resp.Body).Decode(&served)
	b, err := os.ReadFile("internal/fakeclient/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(b, &committed)
	sb, _ := json.Marshal(served)
	cb, _ := json.Marshal(committed)
	if string(sb) != string(cb) {
		t.Fatal("internal/fakeclient/openapi.json differs from the fake's description: run go generate github.com/poppyproto/poppy/api/...")
	}
}

// PA-4.3-22: an OpenAPI entry with a resource gets a token issued for it.
func TestOpenAPIEntryResource(t *testing.T) {
	env, sess := setup(t, &poppytest.Options{API: poppytest.OpenAPIServerOptions{Resource: "https://api.example.test/orders-api"}})
	oa := loadOpenAPI(t, sess)
	if _, err := oa.Call(context.Background(), "listProducts", nil); err != nil {
		t.Fatal(err)
	}
	var last poppytest.Request
	for _, r := range env.Requests(poppytest.EndpointAPI) {
		last = r
	}
	if info, _ := env.Srv.Tokens().Get(last.AccessToken); info.Resource != "https://api.example.test/orders-api" {
		t.Errorf("token issued for %q", info.Resource)
	}
}

// PA-4.3-22: with a resource that isn't a URL over the API, the token is
// still issued for the entry's resource, for the generated client too.
func TestOpenAPIEntryResourceURN(t *testing.T) {
	const res = "urn:example:orders"
	// The entry's description is elsewhere than its server, so only the
	// entry's resource can tell which token the server wants.
	env, sess := setup(t, &poppytest.Options{API: poppytest.OpenAPIServerOptions{Resource: res}, Discovery: poppytest.DiscoveryOptions{DocumentFields: map[string]any{"apis": []any{
		map[string]any{"type": "openapi", "url": "https://example.test/docs/openapi.json", "description": "Orders", "resource": res},
	}}}})
	desc := `{"openapi":"3.1.0","info":{"title":"t","version":"1"},"servers":[{"url":"https://api.example.test"}],
	 "paths":{"/products":{"get":{"operationId":"listProducts","responses":{"200":{"description":"ok"}}}}}}`
	e := entry(t, sess.Company(), api.TypeOpenAPI)
	oa, err := api.NewOpenAPIFromBytes(context.Background(), sess, e, []byte(desc))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oa.Call(context.Background(), "listProducts", nil); err != nil {
		t.Fatal(err)
	}
	resp, err := oa.HTTPClient().Get(oa.ServerURL() + "/products")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("HTTPClient: %v", err)
	}
	resp.Body.Close()
	for _, r := range env.Requests(poppytest.EndpointAPI) {
		if info, _ := env.Srv.Tokens().Get(r.AccessToken); info.Resource != res {
			t.Errorf("%s with a token for %q", r.Path, info.Resource)
		}
	}
}
