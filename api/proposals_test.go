package api_test

import (
	"context"
	"errors"
	"testing"

	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/operations"
)

// With OpenAPIOptions.Operations, a call that proposed an operation still
// open is not sent again: it returns the open operation in a
// *operations.PendingError, and the Company sees one proposal (OPS 6,
// PA-OPS6-04, A-38). A call that proposes nothing, and a GET, go as
// before; so does the same call once the operation is final.
func TestPA_OPS6_04_OpenAPICallsProposeOnce(t *testing.T) {
	ctx := context.Background()
	env, sess := setupOperations(t)
	srv := env.Srv
	oc, err := operations.New(sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	oa, err := api.LoadOpenAPI(ctx, sess, entry(t, sess.Company(), api.TypeOpenAPI), &api.OpenAPIOptions{Operations: oc})
	if err != nil {
		t.Fatal(err)
	}
	args := &api.Args{Body: map[string]any{"item_id": "itm_4Qa", "replacement_sku": "stormline-insulated-m"}}
	first, err := oa.CallPath(ctx, "POST", "/orders/ord_7Hk2/exchanges", args)
	if err != nil || first.Status != 202 || first.Operation == nil {
		t.Fatalf("first call: %+v, %v", first, err)
	}
	op, err := operations.Parse(first.Operation)
	if err != nil {
		t.Fatal(err)
	}
	_, err = oa.CallPath(ctx, "POST", "/orders/ord_7Hk2/exchanges", args)
	var pend *operations.PendingError
	if !errors.As(err, &pend) || pend.Operation.ID != op.ID || !errors.Is(err, operations.ErrOperationPending) {
		t.Fatalf("second call: %v, want the open operation %s", err, op.ID)
	}
	if n := len(srv.Operations()); n != 1 {
		t.Fatalf("%d proposals at the Company, want 1", n)
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
	if n := len(srv.Operations()); n != 2 {
		t.Fatalf("%d proposals at the Company, want 2", n)
	}
}
