package poppytest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

// opsAgent is a raw agent whose client metadata lists the operations
// extension.
func opsAgent(t *testing.T, srv *poppytest.Server) *rawAgent {
	a := newAgent(t, srv, "agent.test")
	a.setMeta(func(md map[string]any) {
		md["extensions"] = map[string]any{"operations": map[string]any{"version": "1"}}
	})
	return a
}

// signedIn starts a Session for user and signs it in to account with
// poppy:read and poppy:write; it returns the Session ID and the token.
func signedIn(t *testing.T, srv *poppytest.Server, a *rawAgent, user, account string, scopes ...string) (string, string) {
	t.Helper()
	sid := a.start(user).str("session_id")
	if len(scopes) == 0 {
		scopes = []string{"poppy:read", "poppy:write"}
	}
	tok, err := srv.Sessions().SignIn(sid, account, scopes...)
	if err != nil {
		t.Fatal(err)
	}
	return sid, tok
}

var twoAccounts = []poppytest.Account{
	{ID: "acct_1", Credentials: map[string]string{"email": "a@example.test", "password": "pw-one-1"}},
	{ID: "acct_2", Credentials: map[string]string{"email": "b@example.test", "password": "pw-two-2"}},
}

// proposeRaw posts the exchange and returns the operation of its 202.
func proposeRaw(t *testing.T, a *rawAgent, tok, body string) map[string]any {
	t.Helper()
	r := a.call("POST", "/orders/ord_7Hk2/exchanges", tok, body)
	// CO-OPS4-02
	op, _ := r.Body["operation"].(map[string]any)
	if r.Status != 202 || op == nil {
		t.Fatalf("exchange: %d %s", r.Status, r.Raw)
	}
	checkOp(t, op)
	return op
}

func opCall(a *rawAgent, tok, id, verb, body string) *response {
	p := "/poppy/operations/" + id
	method := "GET"
	if verb != "" {
		p += "/" + verb
		method = "POST"
	}
	return a.call(method, p, tok, body)
}

func confirmRaw(a *rawAgent, tok, id string, rev int, by string) *response {
	return opCall(a, tok, id, "confirm", fmt.Sprintf(`{"revision":%d,"approved_by":%q}`, rev, by))
}

// checkOp is the validator of CO-OPS3-01, CO-OPS3-03 and CO-OPS3-04 on an
// operation the fake emitted.
func checkOp(t *testing.T, op map[string]any) {
	t.Helper()
	id, _ := op["operation_id"].(string)
	rev, _ := op["revision"].(float64)
	state, _ := op["state"].(string)
	summary, _ := op["summary"].(string)
	if id == "" || rev < 1 || summary == "" {
		t.Errorf("CO-OPS3-01: operation lacks operation_id, revision or summary: %v", op)
	}
	conf, hasConf := op["confirmation"]
	res, hasRes := op["result"]
	if !hasConf || !hasRes {
		t.Errorf("CO-OPS3-01: confirmation and result must be present: %v", op)
	}
	final := state == "succeeded" || state == "failed" || state == "cancelled" || state == "expired"
	switch state {
	case "proposed":
		if _, err := time.Parse(time.RFC3339, fmt.Sprint(op["expires_at"])); err != nil {
			t.Errorf("CO-OPS3-01: proposed without expires_at: %v", op)
		}
	case "in_progress", "succeeded", "failed", "cancelled", "expired":
	default:
		t.Errorf("unknown state %q", state)
	}
	// CO-OPS3-03
	if c, ok := conf.(map[string]any); ok {
		if c["revision"] == nil || c["approved_by"] == nil || c["confirmed_at"] == nil {
			t.Errorf("CO-OPS3-03: confirmation %v", c)
		}
	} else if conf != nil || state == "in_progress" || state == "succeeded" {
		t.Errorf("CO-OPS3-03: confirmation %v in state %s", conf, state)
	}
	// CO-OPS3-04
	if final {
		if r, ok := res.(map[string]any); !ok || r["summary"] == "" || r["summary"] == nil {
			t.Errorf("CO-OPS3-04: final without result.summary: %v", op)
		}
	} else if res != nil {
		t.Errorf("CO-OPS3-04: result %v before final", res)
	}
}

func opOf(t *testing.T, r *response) map[string]any {
	t.Helper()
	if r.Status != 200 {
		t.Fatalf("operations endpoint: %d %s", r.Status, r.Raw)
	}
	checkOp(t, r.Body)
	return r.Body
}

func TestCO_OPS2_Advertise(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	d := get(t, srv, "https://example.test/.well-known/poppy.json")
	ext, _ := d.Body["extensions"].(map[string]any)
	e, _ := ext["operations"].(map[string]any)
	// CO-OPS2-01
	if e["version"] != "1" || e["endpoint"] != srv.EndpointURL(poppytest.EndpointOperations) || !strings.HasPrefix(srv.EndpointURL(poppytest.EndpointOperations), "https://") {
		t.Errorf("extensions.operations = %v", e)
	}
}

// CO-OPS2-02: with a resource, the endpoint accepts only tokens for it.
func TestCO_OPS2_02_Resource(t *testing.T) {
	const res = "https://api.example.test/poppy/operations"
	srv := poppytest.NewServer(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Resource: res}})
	a := opsAgent(t, srv)
	sid, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	op := proposeRaw(t, a, tok, "{}")
	if r := opCall(a, tok, op["operation_id"].(string), "", ""); r.Status != 401 || !strings.Contains(r.wwwAuth(), "invalid_token") {
		t.Errorf("default token: %d %q", r.Status, r.wwwAuth())
	}
	d := get(t, srv, "https://example.test/.well-known/poppy.json")
	if e := d.Body["extensions"].(map[string]any)["operations"].(map[string]any); e["resource"] != res {
		t.Errorf("entry %v", e)
	}
	// A token issued for the resource passes (the Session has no such
	// operation: 404, not 401).
	f := a.startForm("usr_1")
	f.Set("resource", res)
	tr := a.token(f)
	if tr.Status != 200 {
		t.Fatalf("resource token: %d %s", tr.Status, tr.Raw)
	}
	if r := opCall(a, tr.str("access_token"), op["operation_id"].(string), "", ""); r.Status != 404 || r.str("error") != "operation_not_found" {
		t.Errorf("resource token: %d %s", r.Status, r.Raw)
	}
	_ = sid
}

// CO-OPS2-03, CO-OPS2-04: an agent that doesn't list the extension gets no
// operation: the exchange is performed, or refused with extension_required.
func TestCO_OPS2_03_NoOperationsWithoutExtension(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	_, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	r := a.call("POST", "/orders/ord_7Hk2/exchanges", tok, `{"item_id":"itm_4Qa"}`)
	if r.Status != 201 || strings.Contains(string(r.Raw), `"operation"`) {
		t.Errorf("CO-OPS2-03: %d %s", r.Status, r.Raw)
	}
	if acts := srv.Operations().Performed(); len(acts) != 1 || acts[0].OperationID != "" {
		t.Errorf("CO-OPS2-04: performed %v", acts)
	}
	srv2 := poppytest.NewServer(t, &poppytest.Options{Operations: poppytest.OperationsOptions{RequireOperations: true}})
	a2 := newAgent(t, srv2, "agent.test")
	_, tok2 := signedIn(t, srv2, a2, "usr_1", "acct_1")
	r = a2.call("POST", "/orders/ord_7Hk2/exchanges", tok2, `{}`)
	// CO-OPS2-04, CO-3.3-04, A-41
	if r.Status != 403 || r.str("error") != "extension_required" || r.str("extension") != "operations" || strings.Contains(string(r.Raw), `"operation"`) {
		t.Errorf("CO-OPS2-04 RequireOperations: %d %s", r.Status, r.Raw)
	}
	if len(srv2.Operations().Performed()) != 0 || len(srv2.Operations().All()) != 0 {
		t.Error("refused exchange did something")
	}
}

// CO-OPS3-02, CO-OPS3-06, CO-OPS3-07, CO-OPS3-09, CO-OPS4-02, CO-OPS3-03,
// CO-OPS3-04, CO-OPS5-06, CO-OPS3-11.
func TestCO_OPS3_Lifecycle(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := opsAgent(t, srv)
	_, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	op := proposeRaw(t, a, tok, `{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`)
	id := op["operation_id"].(string)
	// CO-OPS3-02
	if !strings.HasPrefix(id, "exc_") {
		t.Errorf("operation_id %q", id)
	}
	// CO-OPS3-06: every term value is in the summary.
	summary := op["summary"].(string)
	terms := op["terms"].(map[string]any)
	var walk func(m map[string]any)
	walk = func(m map[string]any) {
		for k, v := range m {
			if sub, ok := v.(map[string]any); ok {
				walk(sub)
				continue
			}
			if !strings.Contains(summary, fmt.Sprint(v)) {
				t.Errorf("CO-OPS3-06: term %s=%v not in summary %q", k, v, summary)
			}
		}
	}
	walk(terms)
	// CO-OPS3-09
	if n := len(srv.Operations().Performed()); n != 0 {
		t.Errorf("performed before confirm: %d", n)
	}
	// CO-OPS3-11: repeated reads show the same revision.
	for range 3 {
		got := opOf(t, opCall(a, tok, id, "", ""))
		if got["summary"] != summary || fmt.Sprint(got["terms"]) != fmt.Sprint(terms) || got["revision"] != float64(1) {
			t.Errorf("CO-OPS3-11: revision changed: %v", got)
		}
	}
	// CO-OPS6-03: no Idempotency-Key needed. CO-OPS5-06: fast → succeeded.
	done := opOf(t, confirmRaw(a, tok, id, 1, "user"))
	if done["state"] != "succeeded" {
		t.Fatalf("confirm: %v", done)
	}
	// CO-OPS3-08: the backend performed exactly the terms.
	acts := srv.Operations().Performed()
	if len(acts) != 1 || fmt.Sprint(acts[0].Terms) != fmt.Sprint(terms) {
		t.Fatalf("performed %v, terms %v", acts, terms)
	}
	// CO-OPS3-07: everything that affected the action is in the terms,
	// with the value it had: the order and the item the backend exchanged
	// (its action log), the jacket it shipped and the amount it charged
	// (its result), each compared with the terms the Company sent, not
	// with the backend's own copy of them.
	res, _ := done["result"].(map[string]any)
	resSummary, _ := res["summary"].(string)
	pd, _ := terms["price_difference"].(map[string]any)
	sku, _ := terms["replacement_sku"].(string)
	if want := fmt.Sprintf("%v %v", terms["order_id"], terms["item_id"]); acts[0].Key != want {
		t.Errorf("CO-OPS3-07: the backend exchanged %q, the terms say %q", acts[0].Key, want)
	}
	shipped := regexp.MustCompile(`The (.+?) ships today`).FindStringSubmatch(resSummary)
	if shipped == nil || sku == "" || !strings.Contains(summary, shipped[1]+" ("+sku+")") {
		t.Errorf("CO-OPS3-07: the backend shipped %q, the terms' replacement_sku is %q (summary %q)", shipped, sku, summary)
	}
	charged := regexp.MustCompile(`\$([0-9.]+) was charged|Nothing was charged`).FindStringSubmatch(resSummary)
	switch {
	case charged == nil || pd == nil || pd["currency"] != "USD":
		t.Errorf("CO-OPS3-07: the result %q, the terms' price_difference %v", resSummary, pd)
	case charged[1] == "" && pd["amount"] != "0.00", charged[1] != "" && pd["amount"] != charged[1]:
		t.Errorf("CO-OPS3-07: the backend charged %q, the terms' price_difference is %v", charged[0], pd)
	}
	// CO-OPS5-05, CO-OPS3-10: confirming or cancelling a final operation
	// changes nothing.
	again := opOf(t, confirmRaw(a, tok, id, 1, "user"))
	cancel := opOf(t, opCall(a, tok, id, "cancel", "{}"))
	if fmt.Sprint(again) != fmt.Sprint(done) || fmt.Sprint(cancel) != fmt.Sprint(done) {
		t.Errorf("final changed:\n%v\n%v\n%v", done, again, cancel)
	}
	if info, _ := srv.Operations().Get(id); info.Performed != 1 || len(srv.Operations().Performed()) != 1 {
		t.Errorf("performed %d", info.Performed)
	}
	// CO-OPS4-01: the same exchange again is a new operation only once
	// the first is final.
	next := proposeRaw(t, a, tok, `{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`)
	if next["operation_id"] == id {
		t.Error("a final operation was returned for a new proposal")
	}
	if again := proposeRaw(t, a, tok, `{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-l"}`); again["operation_id"] != next["operation_id"] {
		t.Errorf("CO-OPS4-01: the open operation was not returned: %v", again["operation_id"])
	}
}

// CO-OPS3-05, CO-OPS3-08, CO-OPS3-13, CO-OPS5-03.
func TestCO_OPS3_05_Revisions(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := opsAgent(t, srv)
	_, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	op := proposeRaw(t, a, tok, "{}")
	id := op["operation_id"].(string)
	exp := []string{op["expires_at"].(string)}
	for want := 2; want <= 3; want++ {
		srv.Clock().Advance(time.Second)
		n, err := srv.Operations().Revise(id)
		if err != nil || n != want {
			t.Fatalf("Revise: %d %v", n, err)
		}
		got := opOf(t, opCall(a, tok, id, "", ""))
		if got["revision"] != float64(want) {
			t.Errorf("revision %v", got["revision"])
		}
		exp = append(exp, got["expires_at"].(string))
	}
	for i := 1; i < len(exp); i++ {
		a0, _ := time.Parse(time.RFC3339, exp[i-1])
		a1, _ := time.Parse(time.RFC3339, exp[i])
		if !a1.After(a0) {
			t.Errorf("CO-OPS3-05: expires_at %v not after %v", a1, a0)
		}
	}
	// CO-OPS5-03: an old revision gets 409 terms_changed with the current one.
	r := confirmRaw(a, tok, id, 2, "user")
	cur, _ := r.Body["operation"].(map[string]any)
	if r.Status != 409 || r.str("error") != "terms_changed" || cur["revision"] != float64(3) {
		t.Fatalf("old revision: %d %s", r.Status, r.Raw)
	}
	checkOp(t, cur)
	done := opOf(t, confirmRaw(a, tok, id, 3, "user"))
	// CO-OPS3-08: the backend's record is revision 3's terms.
	acts := srv.Operations().Performed()
	if done["state"] != "succeeded" || len(acts) != 1 || fmt.Sprint(acts[0].Terms) != fmt.Sprint(cur["terms"]) {
		t.Errorf("performed %v, want %v", acts, cur["terms"])
	}
	// CO-OPS3-13
	if _, err := srv.Operations().Revise(id); err == nil {
		t.Error("revised a confirmed operation")
	}
	if got := opOf(t, opCall(a, tok, id, "", "")); got["revision"] != float64(3) {
		t.Errorf("revision after confirm %v", got["revision"])
	}
}

// CO-OPS3-14, CO-OPS3-16, CO-OPS5-01, CO-OPS9-02: who can use an operation.
func TestCO_OPS3_14_Ownership(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{Accounts: twoAccounts}})
	a := opsAgent(t, srv)
	_, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	id := proposeRaw(t, a, tok, "{}")["operation_id"].(string)
	// CO-OPS3-14: another Session of the same User and account.
	_, same := signedIn(t, srv, a, "usr_1", "acct_1")
	if r := opCall(a, same, id, "", ""); r.Status != 200 {
		t.Errorf("same account: %d %s", r.Status, r.Raw)
	}
	// CO-OPS3-16: other User, other account, signed out, other client,
	// and an unknown ID all get the same 404.
	_, otherUser := signedIn(t, srv, a, "usr_2", "acct_1")
	_, otherAcct := signedIn(t, srv, a, "usr_1", "acct_2")
	signedOut := a.start("usr_1").str("access_token")
	b := newAgent(t, srv, "other-agent.test")
	b.setMeta(func(md map[string]any) {
		md["extensions"] = map[string]any{"operations": map[string]any{"version": "1"}}
	})
	_, otherClient := signedIn(t, srv, b, "usr_1", "acct_1")
	var bodies []string
	for _, c := range []struct {
		name string
		a    *rawAgent
		tok  string
		id   string
	}{{"other user", a, otherUser, id}, {"other account", a, otherAcct, id}, {"signed out", a, signedOut, id}, {"other client", b, otherClient, id}, {"unknown", a, tok, "exc_unknown1"}} {
		r := opCall(c.a, c.tok, c.id, "", "")
		if r.Status != 404 || r.str("error") != "operation_not_found" || r.Header.Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %s", c.name, r.Status, r.Raw)
		}
		bodies = append(bodies, strings.ReplaceAll(string(r.Raw), c.id, "ID"))
		// CO-OPS5-01
		if r := confirmRaw(c.a, c.tok, c.id, 1, "user"); r.Status != 404 || r.str("error") != "operation_not_found" {
			t.Errorf("%s confirm: %d %s", c.name, r.Status, r.Raw)
		}
	}
	for _, body := range bodies[1:] {
		if body != bodies[0] {
			t.Errorf("404 bodies differ: %s vs %s", body, bodies[0])
		}
	}
	if info, _ := srv.Operations().Get(id); info.Performed != 0 || info.State != "proposed" {
		t.Errorf("%+v", info)
	}
}

// CO-OPS5-02: a read-only token can't confirm.
func TestCO_OPS5_02_Scopes(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := opsAgent(t, srv)
	_, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	id := proposeRaw(t, a, tok, "{}")["operation_id"].(string)
	_, ro := signedIn(t, srv, a, "usr_1", "acct_1", "poppy:read")
	r := confirmRaw(a, ro, id, 1, "user")
	// CO-OPS9-01: token errors use WWW-Authenticate.
	if r.Status != 403 || r.wwwAuth() != `DPoP error="insufficient_scope", scope="poppy:read poppy:write"` {
		t.Errorf("read-only confirm: %d %q %s", r.Status, r.wwwAuth(), r.Raw)
	}
	if info, _ := srv.Operations().Get(id); info.Performed != 0 {
		t.Error("performed")
	}
}

// CO-OPS5-04: standing_permission on a user_approval_required operation.
func TestCO_OPS5_04_UserApprovalRequired(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Operations: poppytest.OperationsOptions{UserApprovalRequired: true}})
	a := opsAgent(t, srv)
	_, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	op := proposeRaw(t, a, tok, "{}")
	id := op["operation_id"].(string)
	if op["user_approval_required"] != true {
		t.Fatalf("flag %v", op["user_approval_required"])
	}
	r := confirmRaw(a, tok, id, 1, "standing_permission")
	// CO-OPS9-01
	if r.Status != 403 || r.str("error") != "user_approval_required" || r.Header.Get("Content-Type") != "application/json" {
		t.Errorf("%d %s", r.Status, r.Raw)
	}
	if got := opOf(t, confirmRaw(a, tok, id, 1, "user")); got["state"] != "succeeded" {
		t.Errorf("%v", got)
	}
	// A malformed confirm is 400 invalid_request.
	if r := opCall(a, tok, id, "confirm", `{"revision":"1"}`); r.Status != 400 || r.str("error") != "invalid_request" {
		t.Errorf("malformed: %d %s", r.Status, r.Raw)
	}
}

// CO-OPS5-06, CO-OPS6-01, CO-OPS5-07, CO-OPS3-17, CO-OPS6-04.
func TestCO_OPS5_06_Slow(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Perform: poppytest.PerformSlow, SlowFor: 10 * time.Second, RetryAfter: 3}})
	a := opsAgent(t, srv)
	sid, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	id := proposeRaw(t, a, tok, "{}")["operation_id"].(string)
	r := confirmRaw(a, tok, id, 1, "user")
	if got := opOf(t, r); got["state"] != "in_progress" || r.Header.Get("Retry-After") != "3" {
		t.Fatalf("slow confirm: %v %q", got["state"], r.Header.Get("Retry-After"))
	}
	// CO-OPS5-07: the User signs out; the operation carries on.
	srv.Sessions().SignOut(sid)
	if r := opCall(a, tok, id, "", ""); r.Status != 200 || r.Header.Get("Retry-After") != "3" || r.Body["state"] != "in_progress" {
		t.Errorf("CO-OPS6-01: %d %q %v", r.Status, r.Header.Get("Retry-After"), r.Body["state"])
	}
	srv.Clock().Advance(11 * time.Second)
	if got := opOf(t, opCall(a, tok, id, "", "")); got["state"] != "succeeded" {
		t.Errorf("after SignOut: %v", got["state"])
	}

	// CO-OPS6-04, CO-OPS3-17: unknown outcome stays in_progress, readable
	// after 30 days, until resolved.
	srv2 := poppytest.NewServer(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Perform: poppytest.PerformUnknown}, Tokens: poppytest.TokenPolicy{TTL: 1000 * time.Hour}})
	a2 := opsAgent(t, srv2)
	_, tok2 := signedIn(t, srv2, a2, "usr_1", "acct_1")
	id2 := proposeRaw(t, a2, tok2, "{}")["operation_id"].(string)
	opOf(t, confirmRaw(a2, tok2, id2, 1, "user"))
	srv2.Clock().Advance(30 * 24 * time.Hour)
	if got := opOf(t, opCall(a2, tok2, id2, "", "")); got["state"] != "in_progress" {
		t.Errorf("after 30 days: %v", got["state"])
	}
	if err := srv2.Operations().Resolve(id2, "succeeded"); err != nil {
		t.Fatal(err)
	}
	if got := opOf(t, opCall(a2, tok2, id2, "", "")); got["state"] != "succeeded" {
		t.Errorf("resolved: %v", got["state"])
	}
}

// CO-OPS6-02: concurrent confirms perform once.
func TestCO_OPS6_02_ConcurrentConfirms(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := opsAgent(t, srv)
	_, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	id := proposeRaw(t, a, tok, "{}")["operation_id"].(string)
	var wg sync.WaitGroup
	states := make([]any, 5)
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			states[i] = confirmRaw(a, tok, id, 1, "user").Body["state"]
		}()
	}
	wg.Wait()
	for _, s := range states {
		if s != "succeeded" {
			t.Errorf("states %v", states)
		}
	}
	if info, _ := srv.Operations().Get(id); info.Performed != 1 || info.Confirms != 5 || len(srv.Operations().Performed()) != 1 {
		t.Errorf("performed %d of %d confirms", info.Performed, info.Confirms)
	}
}

// CO-OPS6-05: a partial failure's summary names what was done.
func TestCO_OPS6_05_PartialFailure(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Perform: poppytest.PerformFailPartway}})
	a := opsAgent(t, srv)
	_, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	id := proposeRaw(t, a, tok, "{}")["operation_id"].(string)
	got := opOf(t, confirmRaw(a, tok, id, 1, "user"))
	if got["state"] != "failed" || !strings.Contains(got["result"].(map[string]any)["summary"].(string), "label") {
		t.Errorf("%v", got)
	}
}

// CO-OPS7-01..03.
func TestCO_OPS7_Cancel(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Operations: poppytest.OperationsOptions{SlowFor: 5 * time.Second}})
	a := opsAgent(t, srv)
	_, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	id := proposeRaw(t, a, tok, "{}")["operation_id"].(string)
	// CO-OPS7-01
	if got := opOf(t, opCall(a, tok, id, "cancel", "")); got["state"] != "cancelled" {
		t.Fatalf("%v", got)
	}
	if got := opOf(t, confirmRaw(a, tok, id, 1, "user")); got["state"] != "cancelled" {
		t.Errorf("confirm after cancel: %v", got["state"])
	}
	// CO-OPS7-02: in progress → stays until known, then cancelled.
	srv.Operations().SetPerform(poppytest.PerformSlow)
	id2 := proposeRaw(t, a, tok, `{"item_id":"itm_2"}`)["operation_id"].(string)
	opOf(t, confirmRaw(a, tok, id2, 1, "user"))
	if got := opOf(t, opCall(a, tok, id2, "cancel", "{}")); got["state"] != "in_progress" {
		t.Errorf("cancel in progress: %v", got["state"])
	}
	srv.Clock().Advance(6 * time.Second)
	if got := opOf(t, opCall(a, tok, id2, "", "")); got["state"] != "cancelled" {
		t.Errorf("later: %v", got["state"])
	}
	// CO-OPS7-03
	srv.Operations().SetPerform(poppytest.PerformSucceed)
	id3 := proposeRaw(t, a, tok, `{"item_id":"itm_3"}`)["operation_id"].(string)
	opOf(t, confirmRaw(a, tok, id3, 1, "user"))
	if got := opOf(t, opCall(a, tok, id3, "cancel", "{}")); got["state"] != "succeeded" {
		t.Errorf("cancel succeeded: %v", got["state"])
	}
}

// Expiry: a proposed operation past expires_at reads as expired and
// can't be confirmed.
func TestCO_OPS3_Expiry(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := opsAgent(t, srv)
	_, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	id := proposeRaw(t, a, tok, "{}")["operation_id"].(string)
	srv.Clock().Advance(16 * time.Minute)
	if got := opOf(t, confirmRaw(a, tok, id, 1, "user")); got["state"] != "expired" {
		t.Errorf("%v", got["state"])
	}
	if info, _ := srv.Operations().Get(id); info.Performed != 0 {
		t.Error("performed")
	}
}

// CO-OPS4-03: the OpenAPI description says which endpoint returns
// operations.
func TestCO_OPS4_03_OpenAPI(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	r := get(t, srv, srv.EndpointURL(poppytest.EndpointAPI)+"/openapi.json")
	paths := r.Body["paths"].(map[string]any)
	resp := paths["/orders/{id}/exchanges"].(map[string]any)["post"].(map[string]any)["responses"].(map[string]any)
	if d, _ := resp["202"].(map[string]any)["description"].(string); !strings.Contains(d, "operation") {
		t.Errorf("202 response %v", resp["202"])
	}
}

// CO-OPS8-01: a Company may revoke a client_id that confirms without the
// approval it claims.
func TestCO_OPS8_01_RevokeClient(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := opsAgent(t, srv)
	a.start("usr_1")
	srv.Sessions().RevokeClient(a.clientID)
	r := a.token(a.startForm("usr_2"))
	if r.Status != 401 || r.str("error") != "invalid_client" {
		t.Errorf("%d %s", r.Status, r.Raw)
	}
}

// The endpoint refuses what it doesn't serve.
func TestOperationsEndpointRoutes(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := opsAgent(t, srv)
	_, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	for _, c := range []struct{ method, path string }{{"GET", "/poppy/operations"}, {"DELETE", "/poppy/operations/x"}, {"POST", "/poppy/operations/x/perform"}} {
		if r := a.call(c.method, c.path, tok, ""); r.Status != 404 {
			t.Errorf("%s %s: %d", c.method, c.path, r.Status)
		}
	}
	req, _ := http.NewRequest("GET", srv.EndpointURL(poppytest.EndpointOperations)+"/x", nil)
	if r := do(t, srv.Client(), req); r.Status != 401 {
		t.Errorf("no token: %d", r.Status)
	}
	wantRules(t, srv, pa("4.3-23"))
	_ = json.Valid
}

// callWith is rawAgent.call with extra request headers.
func callWith(a *rawAgent, method, path, tok, body string, hdr http.Header) *response {
	a.t.Helper()
	u := a.srv.EndpointURL(poppytest.EndpointAPI) + path
	req, _ := http.NewRequest(method, u, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "DPoP "+tok)
	info, _ := a.srv.Tokens().Get(tok)
	req.Header.Set("DPoP", a.proof(method, u, a.userKey(info.UserID), withToken(tok)))
	return do(a.t, a.srv.Client(), req)
}

// A proposing request with an Idempotency-Key the fake answered before
// gets the operation that key proposed, even with ProposeAgain (which
// makes every other request a new operation) and once it is final; the
// same key for another request is refused (422); another User's key is
// another key. ProposeFaults sees every proposing request, and
// FaultLoseResponse proposes without answering.
func TestProposalIdempotencyKey(t *testing.T) {
	lost := 0
	srv := poppytest.NewServer(t, &poppytest.Options{Operations: poppytest.OperationsOptions{ProposeAgain: true,
		ProposeFaults: func(r poppytest.OperationRequest) poppytest.OperationFault {
			if r.Kind != "propose" || r.OperationID != "" || r.Action != "ord_7Hk2 itm_4Qa" {
				t.Errorf("ProposeFaults got %+v", r)
			}
			if r.Attempt == 1 {
				lost++
				return poppytest.FaultLoseResponse
			}
			return poppytest.FaultNone
		}}})
	a := opsAgent(t, srv)
	_, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	key := http.Header{"Idempotency-Key": {`"k-1"`}}
	body := `{"item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m"}`
	// The first answer is lost, but the Company proposed.
	req, _ := http.NewRequest("POST", srv.EndpointURL(poppytest.EndpointAPI)+"/orders/ord_7Hk2/exchanges", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", `"k-1"`)
	req.Header.Set("Authorization", "DPoP "+tok)
	info0, _ := srv.Tokens().Get(tok)
	req.Header.Set("DPoP", a.proof("POST", req.URL.String(), a.userKey(info0.UserID), withToken(tok)))
	if _, err := srv.Client().Do(req); err == nil || lost != 1 || len(srv.Operations().All()) != 1 {
		t.Fatalf("lost answer: %v, %d lost, %d operations", err, lost, len(srv.Operations().All()))
	}
	id := srv.Operations().All()[0].ID
	// The retry, members reordered: the same operation.
	r := callWith(a, "POST", "/orders/ord_7Hk2/exchanges", tok, `{"replacement_sku":"stormline-insulated-m","item_id":"itm_4Qa"}`, key)
	if r.Status != 202 || r.Body["operation"].(map[string]any)["operation_id"] != id {
		t.Fatalf("retry: %d %s", r.Status, r.Raw)
	}
	// Without the key, ProposeAgain proposes anew.
	if r := callWith(a, "POST", "/orders/ord_7Hk2/exchanges", tok, body, nil); r.Status != 202 || r.Body["operation"].(map[string]any)["operation_id"] == id {
		t.Fatalf("without a key: %d %s", r.Status, r.Raw)
	}
	// The same key for another request.
	if r := callWith(a, "POST", "/orders/ord_7Hk2/exchanges", tok, `{"item_id":"itm_4Qa","replacement_sku":"stormline-l"}`, key); r.Status != 422 {
		t.Errorf("the key reused for another request: %d %s", r.Status, r.Raw)
	}
	// Final: the key still answers with it, as it is.
	if rr := confirmRaw(a, tok, id, 1, "user"); rr.Status != 200 {
		t.Fatal(rr.Status)
	}
	if r := callWith(a, "POST", "/orders/ord_7Hk2/exchanges", tok, body, key); r.Status != 202 || r.Body["operation"].(map[string]any)["state"] != "succeeded" {
		t.Errorf("after final: %d %s", r.Status, r.Raw)
	}
	info, _ := srv.Operations().Get(id)
	if info.Proposals != 3 || len(info.IdempotencyKeys) != 3 || info.IdempotencyKeys[0] != `"k-1"` {
		t.Errorf("proposals %d, keys %q", info.Proposals, info.IdempotencyKeys)
	}
	// Another User with the same key value: another key.
	_, tok2 := signedIn(t, srv, a, "usr_2", "acct_1")
	if r := callWith(a, "POST", "/orders/ord_7Hk2/exchanges", tok2, body, key); r.Status != 202 || r.Body["operation"].(map[string]any)["operation_id"] == id {
		t.Errorf("another User: %d %s", r.Status, r.Raw)
	}
	if r := callWith(a, "POST", "/orders/ord_7Hk2/exchanges", tok, body, http.Header{"Idempotency-Key": {strings.Repeat("k", 300)}}); r.Status != 400 {
		t.Errorf("a 300-byte key: %d", r.Status)
	}
}
