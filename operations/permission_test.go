package operations_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/poppyproto/poppy/operations"
)

// jacketTerms are the terms of the spec's jacket exchange.
const jacketTerms = `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"70.00","currency":"USD"}}`

func jacketOp(terms string) *operations.Operation {
	op := &operations.Operation{ID: "exc_5Rt2", Revision: 1, State: operations.StateProposed, Summary: "Exchange"}
	if terms != "" {
		op.Terms = json.RawMessage(terms)
	}
	return op
}

// fullPermission covers every term of the jacket exchange.
func fullPermission(now time.Time) operations.Permission {
	return operations.Permission{
		ID: "perm_1", Issuer: "https://auth.example.test", Account: "default", Action: exchangeAction,
		Expires: now.Add(time.Hour),
		Terms: []operations.Term{
			operations.Equal(operations.P("order_id"), "ord_7Hk2"),
			operations.AnyValue(operations.P("item_id")),
			operations.OneOf(operations.P("replacement_sku"), "stormline-insulated-m", "stormline-insulated-l"),
			operations.AtMost(operations.P("price_difference", "amount"), "80.00"),
			operations.Equal(operations.P("price_difference", "currency"), "USD"),
		},
	}
}

func subject(now time.Time, terms string) operations.Subject {
	return operations.Subject{Issuer: "https://auth.example.test", Account: "default", Action: exchangeAction, Operation: jacketOp(terms), Now: now}
}

// PA-OPS5-06..10: the matcher, and a refusal naming each term it doesn't
// cover.
func TestPermissionCheck(t *testing.T) {
	now := time.Now()
	p := fullPermission(now)
	if err := p.Check(subject(now, jacketTerms)); err != nil {
		t.Fatalf("full permission: %v", err)
	}
	refused := func(name string, p operations.Permission, sub operations.Subject, term string) {
		t.Helper()
		err := p.Check(sub)
		var me *operations.MismatchError
		if !errors.As(err, &me) || me.Term.String() != term {
			t.Errorf("%s: %v (want term %q)", name, err, term)
		}
	}
	// Each term left uncovered, and each predicate failing, names the term.
	for i, path := range []string{"order_id", "item_id", "replacement_sku", "price_difference.amount", "price_difference.currency"} {
		q := fullPermission(now)
		q.Terms = append(q.Terms[:i:i], q.Terms[i+1:]...)
		refused("uncovered "+path, q, subject(now, jacketTerms), path)
	}
	failing := map[string]string{
		"order_id":                  `{"order_id":"ord_OTHER","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"70.00","currency":"USD"}}`,
		"replacement_sku":           `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"parka-xl","price_difference":{"amount":"70.00","currency":"USD"}}`,
		"price_difference.amount":   `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"80.01","currency":"USD"}}`,
		"price_difference.currency": `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"70.00","currency":"EUR"}}`,
	}
	for term, terms := range failing {
		refused("failing "+term, p, subject(now, terms), term)
	}
	// PA-OPS5-09: an extra term nobody covers; terms absent.
	refused("extra term", p, subject(now, `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"70.00","currency":"USD"},"restocking_fee":{"amount":"5.00","currency":"USD"}}`), "restocking_fee.amount")
	refused("no terms", p, subject(now, ""), "")
	// An amount that isn't a number.
	refused("amount not a number", p, subject(now, `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"lots","currency":"USD"}}`), "price_difference.amount")
	// PA-OPS5-06: another Company.
	sub := subject(now, jacketTerms)
	sub.Issuer = "https://auth.other.test"
	refused("issuer", p, sub, "")
	// PA-OPS5-07: another account, or signed out.
	sub = subject(now, jacketTerms)
	sub.Account = "business"
	refused("account", p, sub, "")
	sub.Account = ""
	refused("signed out", p, sub, "")
	// PA-OPS5-08: another action.
	sub = subject(now, jacketTerms)
	sub.Action = operations.OpenAPIAction("POST", "/subscriptions/{id}/cancel")
	refused("action", p, sub, "")
	// PA-OPS5-10: expired.
	refused("expired", p, subject(now.Add(2*time.Hour), jacketTerms), "")
	// PA-OPS5-05: user_approval_required.
	sub = subject(now, jacketTerms)
	sub.Operation.UserApprovalRequired = true
	refused("user_approval_required", p, sub, "")
	// AnyValue of a subtree covers its leaves.
	q := fullPermission(now)
	q.Terms = append(q.Terms[:3:3], operations.AnyValue(operations.P("price_difference")))
	if err := q.Check(subject(now, jacketTerms)); err != nil {
		t.Errorf("subtree any: %v", err)
	}
}

// grantExchange stores a permission covering the fake's jacket exchange.
func grantExchange(t *testing.T, e *env, mod func(*operations.Permission)) operations.Permission {
	t.Helper()
	p := fullPermission(e.Srv.Clock().Now())
	p.ID = ""
	p.Issuer = ""
	if mod != nil {
		mod(&p)
	}
	g, err := e.c.Grant(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// End to end: a matching permission confirms as standing_permission
// without asking; each non-matching one falls back to the User
// (PA-OPS5-06..10, PA-OPS5-12).
func TestStandingPermission(t *testing.T) {
	e := newEnv(t, nil, nil)
	g := grantExchange(t, e, nil)
	list, err := e.c.Permissions(ctx)
	if err != nil || len(list) != 1 || list[0].ID != g.ID || list[0].Issuer != "https://auth.example.test" {
		t.Fatalf("Permissions: %v %v", list, err)
	}
	done, err := e.c.Handle(ctx, e.propose("itm_4Qa"), nil)
	if err != nil || done.State != operations.StateSucceeded {
		t.Fatalf("%v %v", done, err)
	}
	if len(e.ap.asked()) != 0 {
		t.Error("the Approver was asked although a permission covers the terms")
	}
	if b := confirmBody(t, e.confirms()[0]); b["approved_by"] != "standing_permission" {
		t.Errorf("approved_by %v", b["approved_by"])
	}
	// Revoked (PA-OPS5-10): the User is asked.
	if err := e.c.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if list, _ := e.c.Permissions(ctx); len(list) != 0 {
		t.Errorf("after Revoke: %v", list)
	}
	// Non-matching permissions: each is skipped with its reason.
	grantExchange(t, e, func(p *operations.Permission) { p.Account = "business" })
	grantExchange(t, e, func(p *operations.Permission) { p.Terms = p.Terms[:4] })
	grantExchange(t, e, func(p *operations.Permission) { p.Expires = e.Srv.Clock().Now().Add(time.Minute) })
	e.Srv.Clock().Advance(2 * time.Minute)
	if _, err := e.c.Handle(ctx, e.propose("itm_9Zz"), nil); err != nil {
		t.Fatal(err)
	}
	asked := e.ap.asked()
	if len(asked) != 1 || asked[0].Permission == nil {
		t.Fatalf("asked %v", asked)
	}
	var me *operations.MismatchError
	if !errors.As(asked[0].Permission, &me) {
		t.Errorf("reason %v", asked[0].Permission)
	}
	if b := confirmBody(t, e.confirms()[1]); b["approved_by"] != "user" {
		t.Errorf("approved_by %v", b["approved_by"])
	}
	// Grant refuses a permission without account, action, expiry or terms.
	for _, bad := range []func(*operations.Permission){
		func(p *operations.Permission) { p.Account = "" },
		func(p *operations.Permission) { p.Action = operations.Action{} },
		func(p *operations.Permission) { p.Expires = time.Time{} },
		func(p *operations.Permission) { p.Terms = nil },
	} {
		p := fullPermission(time.Now())
		bad(&p)
		if _, err := e.c.Grant(ctx, p); err == nil {
			t.Errorf("Grant accepted %+v", p)
		}
	}
}
