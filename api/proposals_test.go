package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
)

// setupProposals is setupOperations with an operations Client of the
// Session.
func setupProposals(t *testing.T) (*poppytest.Server, *poppy.Session, *operations.Client) {
	t.Helper()
	env, sess := setupOperations(t)
	oc, err := operations.New(sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	return env.Srv, sess, oc
}

// With OpenAPIOptions.Operations, a call that proposed an operation still
// open is not sent again: it returns the open operation in a
// *operations.PendingError, and the Company sees one proposal (OPS 6,
// PA-OPS6-04, A-38). A call that proposes nothing, and a GET, go as
// before; so does the same call once the operation is final.
func TestPA_OPS6_04_OpenAPICallsProposeOnce(t *testing.T) {
	ctx := context.Background()
	srv, sess, oc := setupProposals(t)
	oa, err := api.LoadOpenAPI(ctx, sess, entry(t, sess.Company(), api.TypeOpenAPI), &api.OpenAPIOptions{Operations: oc})
	if err != nil {
		t.Fatal(err)
	}
	args := &api.Args{Body: map[string]any{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}}
	first, err := oa.CallPath(ctx, "POST", "/orders/ord_7Hk2/exchanges", args)
	if err != nil || first.Status != 202 || first.Operation == nil {
		t.Fatalf("first call: %+v, %v", first, err)
	}
	op := first.Operation
	before := srv.Counts().Requests
	_, err = oa.CallPath(ctx, "POST", "/orders/ord_7Hk2/exchanges", args)
	var pend *operations.PendingError
	if !errors.As(err, &pend) || pend.Operation.ID != op.ID {
		t.Fatalf("second call: %v, want the open operation %s", err, op.ID)
	}
	// Nothing was sent.
	if n := srv.Counts().Requests - before; n != 0 {
		t.Fatalf("%d requests for the second call, want none", n)
	}
	// Calls that propose nothing are unaffected.
	if r, err := oa.CallPath(ctx, "POST", "/echo", &api.Args{Body: map[string]any{"a": "b"}}); err != nil || r.Status != 200 {
		t.Fatalf("echo: %+v, %v", r, err)
	}
	if r, err := oa.CallPath(ctx, "GET", "/orders", nil); err != nil || r.Status != 200 {
		t.Fatalf("GET: %+v, %v", r, err)
	}
	// Final (cancelled): the same call proposes anew.
	if _, err := oc.Cancel(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
	third, err := oa.CallPath(ctx, "POST", "/orders/ord_7Hk2/exchanges", args)
	if err != nil || third.Operation == nil {
		t.Fatalf("after cancelling: %+v, %v", third, err)
	}
	if n := len(srv.Operations().All()); n != 2 {
		t.Fatalf("%d proposals at the Company, want 2", n)
	}
}

// The same for MCP tools with MCPOptions.Operations: a second call of the
// tool with the same arguments, in any order, sends nothing while the
// operation the first proposed is open (PA-OPS6-04); other arguments are
// another call.
func TestPA_OPS6_04_MCPToolCallsProposeOnce(t *testing.T) {
	ctx := context.Background()
	srv, sess, oc := setupProposals(t)
	m, err := api.ConnectMCP(ctx, sess, entry(t, sess.Company(), api.TypeMCP), &api.MCPOptions{Operations: oc})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	first, err := m.CallTool(ctx, "request_exchange", map[string]any{"order_id": "ord_7Hk2", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"})
	if err != nil || first.Operation == nil {
		t.Fatalf("first call: %+v, %v", first, err)
	}
	op := first.Operation
	before := srv.Counts().Requests
	_, err = m.CallTool(ctx, "request_exchange", json.RawMessage(`{"replacement_sku": "stormline-insulated-m", "item_id":"itm_4Qa","order_id":"ord_7Hk2"}`))
	var pend *operations.PendingError
	if !errors.As(err, &pend) || pend.Operation.ID != op.ID {
		t.Fatalf("second call: %v, want the open operation %s", err, op.ID)
	}
	if n := srv.Counts().Requests - before; n != 0 {
		t.Fatalf("%d requests for the second call, want none", n)
	}
	if r, err := m.CallTool(ctx, "search_products", map[string]any{"query": "jacket"}); err != nil || r.IsError {
		t.Fatalf("search: %+v, %v", r, err)
	}
	if _, err := oc.Cancel(ctx, op.ID); err != nil {
		t.Fatal(err)
	}
	if r, err := m.CallTool(ctx, "request_exchange", map[string]any{"order_id": "ord_7Hk2", "item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}); err != nil || r.Operation == nil {
		t.Fatalf("after cancelling: %+v, %v", r, err)
	}
}

// A-38 for OpenAPI calls, as for MCP tools: the same call with its JSON
// body's members in another order or spacing (a json.RawMessage the
// caller wrote) sends nothing while the operation the first proposed is
// open (PA-OPS6-04); another value is another call. The call carries the
// Idempotency-Key the SDK journalled before sending it (OPS 6).
func TestPA_OPS6_04_OpenAPIBodyInAnyOrder(t *testing.T) {
	ctx := context.Background()
	srv, sess, oc := setupProposals(t)
	oa, err := api.LoadOpenAPI(ctx, sess, entry(t, sess.Company(), api.TypeOpenAPI), &api.OpenAPIOptions{Operations: oc})
	if err != nil {
		t.Fatal(err)
	}
	first, err := oa.CallPath(ctx, "POST", "/orders/ord_7Hk2/exchanges",
		&api.Args{Body: json.RawMessage(`{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`)})
	if err != nil || first.Operation == nil {
		t.Fatalf("first call: %+v, %v", first, err)
	}
	op := first.Operation
	var key string
	for _, r := range srv.Requests() {
		if r.Endpoint == poppytest.EndpointAPI && r.Method == "POST" {
			key = r.Header.Get("Idempotency-Key")
		}
	}
	if key == "" {
		t.Error("the proposing call carries no Idempotency-Key")
	}
	before := srv.Counts().Requests
	_, err = oa.CallPath(ctx, "POST", "/orders/ord_7Hk2/exchanges",
		&api.Args{Body: json.RawMessage("{ \"replacement_sku\": \"stormline-insulated-m\",\n \"item_id\": \"itm_4Qa\" }")})
	var pend *operations.PendingError
	if !errors.As(err, &pend) || pend.Operation.ID != op.ID {
		t.Fatalf("PA-OPS6-04: the reordered call: %v, want the open operation %s", err, op.ID)
	}
	if n := srv.Counts().Requests - before; n != 0 {
		t.Fatalf("PA-OPS6-04: %d requests for the reordered call, want none", n)
	}
	other, err := oa.CallPath(ctx, "POST", "/orders/ord_7Hk2/exchanges",
		&api.Args{Body: json.RawMessage(`{"item_id":"itm_9Zz","replacement_sku":"stormline-insulated-m"}`)})
	if err != nil || other.Operation == nil {
		t.Fatalf("another item: %+v, %v", other, err)
	}
}

// A proposing call whose answer is lost is an error matching
// operations.ErrProposalUnanswered through package api too, and the same
// call made again is sent with the same Idempotency-Key (OPS 6).
func TestOpenAPIProposalUnanswered(t *testing.T) {
	ctx := context.Background()
	srv, sess, oc := setupProposals(t)
	oa, err := api.LoadOpenAPI(ctx, sess, entry(t, sess.Company(), api.TypeOpenAPI), &api.OpenAPIOptions{Operations: oc})
	if err != nil {
		t.Fatal(err)
	}
	args := &api.Args{Body: map[string]any{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}}
	srv.Faults().ForceError(poppytest.EndpointAPI, poppytest.Fault{Status: 503})
	if _, err := oa.CallPath(ctx, "POST", "/orders/ord_7Hk2/exchanges", args); !errors.Is(err, operations.ErrProposalUnanswered) {
		t.Fatalf("a 503: %v", err)
	}
	r, err := oa.CallPath(ctx, "POST", "/orders/ord_7Hk2/exchanges", args)
	if err != nil || r.Operation == nil {
		t.Fatalf("again: %+v, %v", r, err)
	}
	var keys []string
	for _, q := range srv.Requests() {
		if q.Endpoint == poppytest.EndpointAPI && q.Method == "POST" {
			keys = append(keys, q.Header.Get("Idempotency-Key"))
		}
	}
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Errorf("Idempotency-Keys %q", keys)
	}
}

// OPS 4: with OpenAPIOptions.Operations, an operation that a safe method's
// 202 carries (a GET goes around Propose) is still handed to the Client:
// the same revision with other terms is a protocol error, not a new view.
func TestOpenAPISafeMethodOperationObserved(t *testing.T) {
	ctx := context.Background()
	env, sess := setupOperations(t)
	var calls atomic.Int32
	env.Srv.HandleAgent("shop.example.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusAccepted)
		amount := 10 + calls.Add(1) // other terms under the same revision each time
		fmt.Fprintf(w, `{"operation":{"operation_id":"exc_7Yp3","revision":1,"state":"proposed","summary":"Refund","terms":{"amount":%d},"confirmation":null,"result":null}}`, amount)
	}))
	desc := `{"openapi":"3.1.0","info":{"title":"t","version":"1"},"servers":[{"url":"https://shop.example.test"}],
	 "paths":{"/refunds/pending":{"get":{"operationId":"pendingRefund","responses":{"202":{"description":"proposed"}}}}}}`
	oc, err := operations.New(sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	oa, err := api.NewOpenAPIFromBytesWith(ctx, sess, entry(t, sess.Company(), api.TypeOpenAPI), []byte(desc), api.OpenAPIOptions{Operations: oc})
	if err != nil {
		t.Fatal(err)
	}
	first, err := oa.Call(ctx, "pendingRefund", nil)
	if err != nil || first.Operation == nil || first.Operation.ID != "exc_7Yp3" {
		t.Fatalf("first: %v %+v", err, first)
	}
	if _, err := oa.Call(ctx, "pendingRefund", nil); !errors.Is(err, operations.ErrProtocol) {
		t.Fatalf("the same revision with other terms: %v, want operations.ErrProtocol", err)
	}
}
