package operations_test

import (
	"strings"
	"sync/atomic"
	"testing"

	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
)

// Recover in one process: a journalled confirm that never got through is
// sent again, once the Company is reachable, and tracked; the operation is
// performed once.
func TestRecoverResendsJournalledConfirm(t *testing.T) {
	var cut atomic.Bool
	cut.Store(true)
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Faults: func(r poppytest.OperationRequest) poppytest.OperationFault {
		if cut.Load() {
			return poppytest.FaultCut
		}
		return poppytest.FaultNone
	}}}, nil)
	op := e.propose("itm_4Qa")
	a, _ := e.c.Approve(ctx, op)
	if _, err := e.c.Confirm(ctx, a, nil); err == nil {
		t.Fatal("Confirm succeeded through cut connections")
	}
	if info(t, e.Srv, op.ID).Performed != 0 {
		t.Fatal("performed")
	}
	cut.Store(false)
	// A new process: same store, a fresh Client.
	c2, err := operations.New(e.sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := c2.Recover(ctx)
	if err != nil || len(ops) != 1 || ops[0].State != operations.StateSucceeded {
		t.Fatalf("Recover: %v %v", ops, err)
	}
	if info(t, e.Srv, op.ID).Performed != 1 {
		t.Error("not performed once")
	}
	// The recovered confirm is the journalled one.
	cs := e.confirms()
	if string(cs[0].Body) != string(cs[len(cs)-1].Body) {
		t.Errorf("bodies differ: %s %s", cs[0].Body, cs[len(cs)-1].Body)
	}
	// Nothing left to recover.
	if ops, err := c2.Recover(ctx); err != nil || len(ops) != 0 {
		t.Errorf("second Recover: %v %v", ops, err)
	}
}

// PA-OPS5-10 across a restart: a confirm journalled under a standing
// permission the User revoked since is not sent again.
func TestRecoverRevokedPermission(t *testing.T) {
	var cut atomic.Bool
	cut.Store(true)
	e := newEnv(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Faults: func(r poppytest.OperationRequest) poppytest.OperationFault {
		if cut.Load() {
			return poppytest.FaultCut
		}
		return poppytest.FaultNone
	}}}, nil)
	g := grantExchange(t, e, nil)
	op := e.propose("itm_4Qa")
	a, err := e.c.Approve(ctx, op)
	if err != nil || a.By() != operations.ApprovedByStandingPermission {
		t.Fatalf("%v %v", a, err)
	}
	if _, err := e.c.Confirm(ctx, a, nil); err == nil {
		t.Fatal("Confirm through cut connections")
	}
	cut.Store(false)
	if err := e.c.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	n := len(e.confirms())
	c2, _ := operations.New(e.sess, nil)
	if ops, err := c2.Recover(ctx); err == nil {
		t.Errorf("Recover confirmed under a revoked permission: %v", ops)
	}
	if len(e.confirms()) != n || info(t, e.Srv, op.ID).Performed != 0 {
		t.Error("a confirm went out")
	}
}

// The journal and the permissions hold no token, proof or key: nothing a
// Session sent in a header appears in their records.
func TestJournalHoldsNoSecrets(t *testing.T) {
	e := newEnv(t, nil, nil)
	grantExchange(t, e, nil)
	if _, err := e.c.Handle(ctx, e.propose("itm_4Qa"), nil); err != nil {
		t.Fatal(err)
	}
	var secrets []string
	for _, r := range e.Requests() {
		if r.AccessToken != "" {
			secrets = append(secrets, r.AccessToken)
		}
		if v := r.Header.Get("DPoP"); v != "" {
			secrets = append(secrets, v)
		}
		if v := r.Form.Get("refresh_token"); v != "" {
			secrets = append(secrets, v)
		}
	}
	if len(secrets) == 0 {
		t.Fatal("no secrets seen")
	}
	n := 0
	for _, kind := range []keystore.Kind{keystore.KindOperation, keystore.KindPermission} {
		keys, err := e.Store.List(ctx, kind, "local-user", e.Srv.Issuer())
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			b, err := e.Store.Get(ctx, k)
			if err != nil {
				t.Fatal(err)
			}
			n++
			for _, s := range secrets {
				if strings.Contains(string(b), s) {
					t.Errorf("%s holds a secret", k)
				}
			}
		}
	}
	if n != 2 {
		t.Errorf("%d records, want a journal entry and a permission", n)
	}
}
