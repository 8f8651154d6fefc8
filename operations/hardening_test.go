package operations_test

// Attacks on operations by a hostile Company, kept
// together so that the next attack finds its neighbours. Each test names
// its attack; each failed on the code before its fix (commit cd6a6e5).
//
// A hostile Company is played by the strict fake, with a transport in
// front of it that rewrites the operations it answers.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
)

// opRewriter rewrites every operation the fake answers with (an answer
// that is an operation, or holds one as "operation") through fn.
type opRewriter struct {
	base http.RoundTripper
	mu   sync.Mutex
	fn   func(op map[string]json.RawMessage)
}

func (r *opRewriter) set(fn func(op map[string]json.RawMessage)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fn = fn
}

func (r *opRewriter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	r.mu.Lock()
	fn := r.fn
	r.mu.Unlock()
	if err != nil || fn == nil || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return resp, err
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(b, &m) == nil {
		if _, ok := m["operation_id"]; ok {
			fn(m)
			b, _ = json.Marshal(m)
		} else if raw, ok := m["operation"]; ok {
			var op map[string]json.RawMessage
			if json.Unmarshal(raw, &op) == nil {
				fn(op)
				m["operation"], _ = json.Marshal(op)
				b, _ = json.Marshal(m)
			}
		}
	}
	testenv.SetBody(resp, b)
	return resp, nil
}

// hostileEnv is newEnv with the rewriter in front of the fake.
func hostileEnv(t *testing.T, opts *poppytest.Options) (*env, *opRewriter) {
	t.Helper()
	srv := poppytest.NewServer(t, opts)
	rw := &opRewriter{base: srv.Transport()}
	te := testenv.NewWithExtensions(t, srv, map[string]string{"operations": "1"}, &poppy.AgentOptions{HTTPClient: &http.Client{Transport: rw}})
	e := &env{Env: te, ap: &recorder{}}
	e.ap.e = e
	e.sess = te.Session("local-user")
	signIn(t, e.Env, e.sess)
	c, err := operations.New(e.sess, &operations.Options{Approver: e.ap})
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	return e, rw
}

func decline(*operations.ApprovalRequest) operations.Decision { return operations.Decline }

// crafted is an operation a Company might send in a message or tool
// result, with the given terms, open for ten minutes of e's clock.
func crafted(t *testing.T, e *env, id, terms string) *operations.Operation {
	t.Helper()
	raw := fmt.Sprintf(`{"operation_id":%q,"revision":1,"state":"proposed","summary":"Exchange","terms":%s,"expires_at":%q,"confirmation":null,"result":null}`,
		id, terms, e.Srv.Clock().Now().Add(10*time.Minute).Format(time.RFC3339))
	op, err := operations.Parse([]byte(raw))
	if err != nil {
		t.Fatalf("Parse %s: %v", raw, err)
	}
	v, err := e.c.Observe(op, exchangeAction)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A standing permission "at most 100.00 USD" and a Company that proposes
// 9,999.00 USD with a decoy member "total.amount" beside total's amount:
// the terms read two ways, so no standing permission covers
// them, every time (200 of 200), and the Approver is told. On cd6a6e5 the
// checker joined nested names with "." and read the decoy or the real
// amount as Go's map order fell: most attempts were confirmed as
// standing_permission without asking the User.
func TestAttackDottedKeyCollides(t *testing.T) {
	const attack = `{"total": {"amount": "9999.00", "currency": "USD"}, "total.amount": "1.00"}`
	e, rw := hostileEnv(t, nil)
	rw.set(func(op map[string]json.RawMessage) { op["terms"] = json.RawMessage(attack) })
	e.ap.answer = decline
	grantExchange(t, e, func(p *operations.Permission) {
		p.Terms = []operations.Term{
			operations.AtMost(operations.P("total", "amount"), "100.00"),
			operations.Equal(operations.P("total", "currency"), "USD"),
			// Even covering the decoy by its own name changes nothing.
			operations.AtMost(operations.P("total.amount"), "100.00"),
		}
	})
	const attempts = 200
	for i := range attempts {
		op := e.propose("itm_4Qa")
		if string(op.Terms) != `{"total":{"amount":"9999.00","currency":"USD"},"total.amount":"1.00"}` {
			t.Fatalf("terms %s", op.Terms)
		}
		// PA-OPS5-09: the check itself, on the Client's view.
		p := fullPermission(e.Srv.Clock().Now())
		p.Terms = []operations.Term{operations.AtMost(operations.P("total", "amount"), "100.00"),
			operations.Equal(operations.P("total", "currency"), "USD"), operations.AtMost(operations.P("total.amount"), "100.00")}
		sub := subject(e.Srv.Clock().Now(), "")
		sub.Operation = op
		if err := p.Check(sub); !isAmbiguous(err) {
			t.Fatalf("attempt %d: Check: %v", i, err)
		}
		if _, err := e.c.Handle(ctx, op, nil); !errors.Is(err, operations.ErrDeclined) {
			t.Fatalf("attempt %d: Handle: %v", i, err)
		}
	}
	standing := 0
	for _, c := range e.confirms() {
		if confirmBody(t, c)["approved_by"] == "standing_permission" {
			standing++
		}
	}
	asked := e.ap.asked()
	if standing != 0 || len(e.confirms()) != 0 || len(asked) != attempts {
		t.Fatalf("%d of %d confirmed by the standing permission, %d confirms in all, the Approver asked %d times",
			standing, attempts, len(e.confirms()), len(asked))
	}
	// The Approver is told why, at the decoy.
	var ae *operations.AmbiguousTermsError
	for _, req := range asked {
		if !errors.As(req.Ambiguity, &ae) || !ae.Path.Equal(operations.P("total.amount")) {
			t.Fatalf("Ambiguity %v", req.Ambiguity)
		}
	}
}

// A member name twice, at any depth, spelt the same or escaped: the
// checker, a UI and the Company could each read another value. On cd6a6e5 the
// checker read the last ("1.00") and the permission
// covered it.
func TestAttackDuplicateNames(t *testing.T) {
	e := newEnv(t, nil, nil)
	grantExchange(t, e, nil)
	grantExchange(t, e, func(p *operations.Permission) {
		p.Terms = append(p.Terms, operations.AnyValue(operations.P("items")))
	})
	for i, terms := range []string{
		`{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"9999.00","currency":"USD","amount":"1.00"}}`,
		`{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"9999.00","currency":"USD","am\u006funt":"1.00"}}`,
		`{"order_id":"ord_EVIL","order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"70.00","currency":"USD"}}`,
		`{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"70.00","currency":"USD"},"items":[{"qty":100,"qty":1}]}`,
	} {
		v := crafted(t, e, fmt.Sprintf("dup_%d", i), terms)
		var ae *operations.AmbiguousTermsError
		if !errors.As(v.Ambiguity(), &ae) || !strings.Contains(ae.Reason, "appears twice") || v.TermsMap() != nil {
			t.Errorf("%d: Ambiguity %v, TermsMap %v", i, v.Ambiguity(), v.TermsMap())
		}
		a, err := e.c.Approve(ctx, v)
		if err != nil {
			t.Fatal(err)
		}
		if a.By() != operations.ApprovedByUser {
			t.Errorf("%d: approved by %s: %s", i, a.By(), terms)
		}
	}
	asked := e.ap.asked()
	if len(asked) != 4 {
		t.Fatalf("the Approver was asked %d times, want 4", len(asked))
	}
	for _, req := range asked {
		if !isAmbiguous(req.Ambiguity) || !isAmbiguous(req.Permission) {
			t.Errorf("Ambiguity %v, Permission %v", req.Ambiguity, req.Permission)
		}
	}
}

// Amounts outside the decimal grammar: on cd6a6e5,
// decimal() read "0x10" as 16, "0b101" as 5, "0o17" as 15 and "0x1p4" as
// 16, all "at most 80.00". A term holding one is not covered; a bound
// holding one is refused by Grant and by the check; a number token outside
// the grammar makes the terms ambiguous.
func TestAttackNonDecimalNumbers(t *testing.T) {
	now := time.Now()
	p := fullPermission(now)
	terms := func(amount string) string {
		return `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":` + amount + `,"currency":"USD"}}`
	}
	amount := operations.P("price_difference", "amount")
	for _, s := range []string{"0x10", "0b101", "0o17", "0x1p4", "0X10", "1e1", "070", "+5", " 5", "5 ", ".5", "5.", "1_0", "٥", "1/2", "Inf", "NaN", "-", ""} {
		err := p.Check(subject(now, terms(`"`+s+`"`)))
		var me *operations.MismatchError
		if !errors.As(err, &me) || !me.Term.Equal(amount) || !strings.Contains(me.Reason, "not a decimal number") {
			t.Errorf("amount %q: %v", s, err)
		}
	}
	// Within the grammar, as a string or a number.
	for _, s := range []string{`"70.00"`, `70`, `"-3"`, `0`, `"0.5"`, `79.999999999`} {
		if err := p.Check(subject(now, terms(s))); err != nil {
			t.Errorf("amount %s: %v", s, err)
		}
	}
	// A number token with an exponent, or too long to be an amount, can
	// be read as another number: the terms are ambiguous.
	for _, s := range []string{`7e1`, `70E0`, `1234567890123456789012345678901234567890.5`} {
		if err := p.Check(subject(now, terms(s))); !isAmbiguous(err) {
			t.Errorf("amount %s: %v", s, err)
		}
	}
	// A bound outside the grammar.
	e := newEnv(t, nil, nil)
	for _, bound := range []string{"0x1p4", "0b101", "1e9", "100.00.00"} {
		q := fullPermission(now)
		q.Terms[3] = operations.AtMost(amount, bound)
		if _, err := e.c.Grant(ctx, q); err == nil {
			t.Errorf("Grant accepted the bound %q", bound)
		}
		if err := q.Check(subject(now, terms(`"0"`))); err == nil || !strings.Contains(err.Error(), "the bound is not a decimal number") {
			t.Errorf("bound %q: %v", bound, err)
		}
	}
}

// A revision that passes from one reading to another: the
// Company first sends terms with a duplicate name, then the same revision
// with only the low amount. On cd6a6e5 both read as the same terms (the
// last duplicate wins), so the second view replaced the first and the
// standing permission covered it. The second view is a changed revision
// (PA-OPS3-09): the operation is never confirmed.
func TestAttackRevisionChangesReading(t *testing.T) {
	e := newEnv(t, nil, nil)
	grantExchange(t, e, nil)
	crafted(t, e, "swap_1", `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"9999.00","currency":"USD","amount":"70.00"}}`)
	clean := fmt.Sprintf(`{"operation_id":"swap_1","revision":1,"state":"proposed","summary":"Exchange","terms":{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"currency":"USD","amount":"70.00"}},"expires_at":%q,"confirmation":null,"result":null}`,
		e.Srv.Clock().Now().Add(10*time.Minute).Format(time.RFC3339))
	op, err := operations.Parse([]byte(clean))
	if err != nil {
		t.Fatal(err)
	}
	v, err := e.c.Observe(op, exchangeAction)
	if !errors.Is(err, operations.ErrProtocol) {
		t.Errorf("Observe: %v", err)
	}
	if a, err := e.c.Approve(ctx, v); a != nil || !errors.Is(err, operations.ErrProtocol) {
		t.Errorf("Approve: %v %v", a, err)
	}
	// The same terms with members in another order are the same revision.
	crafted(t, e, "order_1", jacketTerms)
	op, _ = operations.Parse([]byte(strings.Replace(strings.Replace(clean, "swap_1", "order_1", 1), `"price_difference":{"currency":"USD","amount":"70.00"}`, `"price_difference":{"amount":"70.00","currency":"USD"}`, 1)))
	if _, err := e.c.Observe(op, exchangeAction); err != nil {
		t.Errorf("reordered members: %v", err)
	}
}

// The terms are read once: what the permission check
// compares, what the Approver is shown and what the journal keeps are the
// same canonical bytes. On cd6a6e5 the journal and the Approver got the
// Company's bytes (escapes and all) while the checker read a map.
func TestTermsOneReading(t *testing.T) {
	const sent = `{ "order_id" : "ord_7Hk2", "item_id":"itm_4Qa", "replacement_sku":"stormline-insulated-m",
		"price_difference": {"amount":"70.00","currency":"\u0055SD"}, "note": "a\u0026b\/c\u00e9" }`
	const canonical = `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference":{"amount":"70.00","currency":"USD"},"note":"a\u0026b/cé"}`
	e, rw := hostileEnv(t, nil)
	rw.set(func(op map[string]json.RawMessage) { op["terms"] = json.RawMessage(sent) })
	e.ap.answer = decline
	grantExchange(t, e, func(p *operations.Permission) {
		p.Terms = append(p.Terms, operations.Equal(operations.P("note"), "a&b/cé"))
	})
	op := e.propose("itm_4Qa")
	if string(op.Terms) != canonical || op.Ambiguity() != nil {
		t.Fatalf("terms %s (%v)", op.Terms, op.Ambiguity())
	}
	// The journal keeps the same bytes.
	// (The journal also holds the proposing request's record, which names
	// no terms: only the operation's record is read here.)
	keys, err := e.Store.List(ctx, keystore.KindOperation, e.sess.User(), e.sess.Company().Issuer())
	var opKey *keystore.Key
	for i := range keys {
		if strings.HasPrefix(keys[i].ID, "op_") {
			opKey = &keys[i]
		}
	}
	if err != nil || opKey == nil {
		t.Fatalf("journal: %v %v", keys, err)
	}
	rec, err := e.Store.Get(ctx, *opKey)
	if err != nil {
		t.Fatal(err)
	}
	var jr struct {
		Operation struct {
			Terms json.RawMessage `json:"terms"`
		} `json:"operation"`
	}
	if err := json.Unmarshal(rec, &jr); err != nil || string(jr.Operation.Terms) != canonical {
		t.Fatalf("journal terms %s %v", jr.Operation.Terms, err)
	}
	// The permission covers that reading; remove it and the Approver is
	// shown the same bytes.
	a, err := e.c.Approve(ctx, op)
	if err != nil || a.By() != operations.ApprovedByStandingPermission {
		t.Fatalf("Approve: %v %v", a, err)
	}
	perms, _ := e.c.Permissions(ctx)
	for _, p := range perms {
		e.c.Revoke(ctx, p.ID)
	}
	if _, err := e.c.Approve(ctx, op); !errors.Is(err, operations.ErrDeclined) {
		t.Fatal(err)
	}
	if asked := e.ap.asked(); len(asked) != 1 || !bytes.Equal(asked[0].Terms, op.Terms) || asked[0].Ambiguity != nil {
		t.Fatalf("asked %v", asked)
	}
}

// A permission stored with a dotted string path, as cd6a6e5 stored them,
// is read as names split at every ".": it still covers
// total's amount, and never a member named "total.amount". On cd6a6e5
// the dotted path matched flat members "price_difference.amount" and
// "price_difference.currency" as well as the nested ones.
func TestStoredDottedPath(t *testing.T) {
	e := newEnv(t, nil, nil)
	now := e.Srv.Clock().Now()
	stored := fmt.Sprintf(`{"id":"perm_old","issuer":%q,"account":"default","action":{"channel":"openapi","name":"POST /orders/{id}/exchanges"},
		"terms":[{"path":"order_id","op":"eq","values":["ord_7Hk2"]},{"path":"item_id","op":"any"},{"path":"replacement_sku","op":"any"},
		{"path":"price_difference.amount","op":"at_most","values":["80.00"]},{"path":"price_difference.currency","op":"eq","values":["USD"]}],
		"expires":%q,"granted":%q}`, e.sess.Company().Issuer(), now.Add(time.Hour).Format(time.RFC3339), now.Format(time.RFC3339))
	key := keystore.Key{Kind: keystore.KindPermission, User: e.sess.User(), Issuer: e.sess.Company().Issuer(), ID: "perm_old"}
	if err := e.Store.Update(ctx, key, func([]byte) ([]byte, error) { return []byte(stored), nil }); err != nil {
		t.Fatal(err)
	}
	perms, err := e.c.Permissions(ctx)
	if err != nil || len(perms) != 1 || !perms[0].Terms[3].Path.Equal(operations.P("price_difference", "amount")) {
		t.Fatalf("Permissions: %+v %v", perms, err)
	}
	nested := crafted(t, e, "old_1", jacketTerms)
	if a, err := e.c.Approve(ctx, nested); err != nil || a.By() != operations.ApprovedByStandingPermission || a.PermissionID() != "perm_old" {
		t.Errorf("nested terms: %v %v", a, err)
	}
	flat := crafted(t, e, "old_2", `{"order_id":"ord_7Hk2","item_id":"itm_4Qa","replacement_sku":"stormline-insulated-m","price_difference.amount":"70.00","price_difference.currency":"USD"}`)
	if a, err := e.c.Approve(ctx, flat); err != nil || a.By() != operations.ApprovedByUser {
		t.Errorf("flat dotted members: %v %v", a, err)
	}
	// A stored path with an empty name makes the permission unreadable:
	// it is never applied.
	bad := strings.Replace(stored, `"path":"item_id"`, `"path":"item_id."`, 1)
	if err := e.Store.Update(ctx, key, func([]byte) ([]byte, error) { return []byte(bad), nil }); err != nil {
		t.Fatal(err)
	}
	if perms, _ := e.c.Permissions(ctx); len(perms) != 0 {
		t.Errorf("unreadable permission listed: %+v", perms)
	}
}

// An operation's url on another origin reaches no one as the Company's:
// on cd6a6e5 https://evil-test-billing.example/… was handed to the
// Approver as the Company's page. A Client keeps a url only on an origin
// the Company's documents name.
func TestAttackForeignOperationURL(t *testing.T) {
	e, rw := hostileEnv(t, nil)
	e.ap.answer = decline
	for _, c := range []struct {
		url  string
		keep bool
	}{
		{"https://evil-test-billing.example/orders/ord_7Hk2/pay", false},
		{"https://example.test:8443/operations/x", false},                      // a port no document names
		{"https://example.test@evil-test-billing.example/operations/x", false}, // user information
		{"https://example.test.evil-test-billing.example/operations/x", false},
		{"https://evil-test-billing.example@example.test/operations/x", false},
		{"", true}, // the fake's own url, on example.test
		{"https://EXAMPLE.test:443/operations/x", true},
		{"https://www.example.test/operations/x", true},
		{"https://api.example.test/orders/ord_7Hk2", true}, // a host poppy.json names
	} {
		rw.set(func(op map[string]json.RawMessage) {
			if c.url != "" {
				op["url"], _ = json.Marshal(c.url)
			}
		})
		op := e.propose("itm_4Qa")
		sent, _ := operations.Parse(mustOpJSON(t, op, c.url))
		if _, err := e.c.Handle(ctx, op, nil); !errors.Is(err, operations.ErrDeclined) {
			t.Fatalf("%s: %v", c.url, err)
		}
		asked := e.ap.asked()
		got := asked[len(asked)-1].URL
		switch {
		case c.keep && (got == "" || got != op.URL || c.url != "" && got != c.url):
			t.Errorf("%q: the Approver got %q, the view %q", c.url, got, op.URL)
		case !c.keep && (got != "" || op.URL != ""):
			t.Errorf("%q reached the Approver as %q, the view as %q", c.url, got, op.URL)
		}
		if !c.keep && sent.URL == "" {
			t.Errorf("%q: the test's own parse dropped it", c.url)
		}
	}
}

// mustOpJSON is op's wire form with url set to u (when not "").
func mustOpJSON(t *testing.T, op *operations.Operation, u string) []byte {
	t.Helper()
	b, err := json.Marshal(op)
	if err != nil {
		t.Fatal(err)
	}
	if u == "" {
		return b
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	m["url"] = u
	b, _ = json.Marshal(m)
	return b
}

// PA-OPS3-09: a confirm answered 409 terms_changed with a revision that is
// not later than the one confirmed (a stale revision, or the confirmed one
// again) is the Company's error, refused at once: the User is asked once,
// for the revision confirmed, and the confirm is sent once. On 4653b61 the
// SDK asked the User again and confirmed the same revision again, 16 times,
// then reported too many revisions.
func TestPA_OPS3_09_StaleTermsChanged(t *testing.T) {
	for _, stale := range []int{1, 2} { // below the confirmed 2, and 2 itself
		t.Run(fmt.Sprintf("revision %d", stale), func(t *testing.T) {
			e, rw := hostileEnv(t, nil)
			op := e.propose("itm_4Qa")
			seen := map[int][]byte{1: mustOpJSON(t, op, "")}
			if _, err := e.Srv.Operations().Revise(op.ID); err != nil {
				t.Fatal(err)
			}
			op2, err := e.c.Get(ctx, op.ID)
			if err != nil || op2.Revision != 2 {
				t.Fatalf("Get: %s %v", brief(op2), err)
			}
			seen[2] = mustOpJSON(t, op2, "")
			// Revision 3, which the SDK never sees: the fake answers the
			// confirm of 2 with terms_changed and 3, which the Company
			// rewrites to an earlier one.
			if _, err := e.Srv.Operations().Revise(op.ID); err != nil {
				t.Fatal(err)
			}
			rw.set(func(m map[string]json.RawMessage) {
				if string(m["revision"]) != "3" {
					return
				}
				var old map[string]json.RawMessage
				json.Unmarshal(seen[stale], &old)
				clear(m)
				for k, v := range old {
					m[k] = v
				}
			})
			done, err := e.c.Handle(ctx, op2, nil)
			// PA-OPS3-09
			if !errors.Is(err, operations.ErrProtocol) || testenv.Code(err) == "terms_changed" {
				t.Errorf("Handle: %s %v", brief(done), err)
			}
			if n, m := len(e.ap.asked()), len(e.confirms()); n != 1 || m != 1 {
				t.Fatalf("PA-OPS3-09: the User was asked %d times and %d confirms were sent, want 1 and 1", n, m)
			}
			// The Company refused without acting: nothing left to recover.
			if _, err := e.c.Recover(ctx); err != nil {
				t.Errorf("Recover: %v", err)
			}
			if m := len(e.confirms()); m != 1 || info(t, e.Srv, op.ID).Performed != 0 {
				t.Errorf("after Recover: %d confirms, performed %d", m, info(t, e.Srv, op.ID).Performed)
			}
		})
	}
}

// PA-OPS3-02: a proposed revision's expires_at is required. One absent,
// null, of the zero time (which Go reads as no time), or not after now is
// refused before the User is asked, and no confirm is sent; a revision
// that loses its expires_at after it was approved is not confirmed. On
// 4653b61 "0001-01-01T00:00:00Z" and an absent expires_at read as "no
// expiry": the User was asked and the revision confirmed.
func TestPA_OPS3_02_ExpiresAtRequired(t *testing.T) {
	e, rw := hostileEnv(t, nil)
	now := e.Srv.Clock().Now()
	for i, c := range []struct {
		name, value string // value "" deletes the member
		want        error
	}{
		{"absent", "", operations.ErrProtocol},
		{"null", `null`, operations.ErrProtocol},
		{"year one", `"0001-01-01T00:00:00Z"`, operations.ErrProtocol},
		{"year one, east of UTC", `"0001-01-01T00:00:00+01:00"`, operations.ErrOperationExpired},
		{"past", fmt.Sprintf("%q", now.Add(-time.Second).Format(time.RFC3339)), operations.ErrOperationExpired},
		{"now", fmt.Sprintf("%q", now.Format(time.RFC3339)), operations.ErrOperationExpired},
	} {
		rw.set(func(m map[string]json.RawMessage) {
			if c.value == "" {
				delete(m, "expires_at")
			} else {
				m["expires_at"] = json.RawMessage(c.value)
			}
		})
		op := e.propose(fmt.Sprintf("itm_%d", i))
		asked, confirms := len(e.ap.asked()), len(e.confirms())
		// PA-OPS3-02
		if _, err := e.c.Handle(ctx, op, nil); !errors.Is(err, c.want) {
			t.Errorf("%s: Handle: %v, want %v", c.name, err, c.want)
		}
		if a, err := e.c.Approve(ctx, op); a != nil || !errors.Is(err, c.want) {
			t.Errorf("%s: Approve: %v", c.name, err)
		}
		if n, m := len(e.ap.asked())-asked, len(e.confirms())-confirms; n != 0 || m != 0 {
			t.Errorf("%s: PA-OPS3-02: the User was asked %d times, %d confirms sent", c.name, n, m)
		}
	}
	// Approved with an expires_at, then read again without one.
	rw.set(nil)
	op := e.propose("itm_late")
	a, err := e.c.Approve(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	rw.set(func(m map[string]json.RawMessage) { delete(m, "expires_at") })
	if v, err := e.c.Get(ctx, op.ID); err != nil || !v.ExpiresAt.IsZero() {
		t.Fatalf("Get: %v %v", v, err)
	}
	confirms := len(e.confirms())
	// PA-OPS3-02
	if _, err := e.c.Confirm(ctx, a, nil); !errors.Is(err, operations.ErrProtocol) || len(e.confirms()) != confirms {
		t.Errorf("Confirm of a revision without expires_at: %v, %d confirms sent", err, len(e.confirms())-confirms)
	}
}
