package poppytest_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/poppyproto/poppy/poppytest"
)

// An operation's url shows it on the website in the same Session (OPS 3,
// spec 5), follows its state, and shows nothing to another Session.
func TestOperationPage(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := opsAgent(t, srv)
	sid, tok := signedIn(t, srv, a, "usr_alice", "acct_1")
	op := proposeRaw(t, a, tok, `{"item_id":"itm_4Qa"}`)
	u, _ := op["url"].(string)
	id, _ := op["operation_id"].(string)
	if u != "https://example.test/operations/"+id {
		t.Fatalf("url = %q", u)
	}
	c := sessionCookie(t, join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {a.browserAssertion("usr_alice", sid)}}))
	code, body := page(t, srv, http.MethodGet, u, c)
	if code != 200 || !strings.Contains(body, "Operation "+id) || !strings.Contains(body, "State: proposed, revision 1") ||
		!strings.Contains(body, strings.ReplaceAll(op["summary"].(string), "'", "&#39;")) {
		t.Fatalf("operation page: %d %s", code, body)
	}
	// The page follows the operation: after the confirm it shows the result.
	if r := confirmRaw(a, tok, id, 1, "user"); r.Status != 200 {
		t.Fatalf("confirm: %d %s", r.Status, r.Raw)
	}
	if _, body = page(t, srv, http.MethodGet, u, c); !strings.Contains(body, "State: succeeded") || !strings.Contains(body, `<p id="result">`) {
		t.Fatalf("page after the confirm: %s", body)
	}
	// Without the cookie, or with another User's Session, it isn't there.
	if code, _ := page(t, srv, http.MethodGet, u); code != 404 {
		t.Fatalf("without a Session cookie: %d", code)
	}
	other := a.start("usr_bob").str("session_id")
	cb := sessionCookie(t, join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {a.browserAssertion("usr_bob", other)}}))
	if code, _ := page(t, srv, http.MethodGet, u, cb); code != 404 {
		t.Fatalf("another User's Session: %d", code)
	}
	if code, _ := page(t, srv, http.MethodGet, "https://example.test/operations/op_nope", c); code != 404 {
		t.Fatalf("unknown operation: %d", code)
	}
}

// postPage posts form to a page of the website with the cookie, without
// following a redirect, and returns the status, Location and body.
func postPage(t *testing.T, srv *poppytest.Server, u string, form url.Values, c *http.Cookie) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if c != nil {
		req.AddCookie(c)
	}
	hc := &http.Client{Transport: srv.Transport(), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Location"), string(b)
}

// OPS 4.4: the page of a proposed operation has confirm and cancel forms,
// and they act on the same operation as the endpoint, with the endpoint's
// checks: the Session of the cookie must be able to use it (CO-OPS5-01:
// another Session gets a 404), with the action's scopes (CO-OPS5-02), for
// the latest revision (CO-OPS5-03: 409 with the current one) and an
// approved_by the operation allows (CO-OPS5-04). A confirm the website
// accepts moves it to in_progress and performs it (CO-OPS5-06); a repeated
// one, on either channel, finds it as it is (CO-OPS5-05).
func TestOPS4_4_WebsiteConfirm(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Operations: poppytest.OperationsOptions{UserApprovalRequired: true}})
	a := opsAgent(t, srv)
	sid, tok := signedIn(t, srv, a, "usr_alice", "acct_1")
	op := proposeRaw(t, a, tok, `{"item_id":"itm_4Qa"}`)
	id, u := op["operation_id"].(string), op["url"].(string)
	c := sessionCookie(t, join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {a.browserAssertion("usr_alice", sid)}}))
	_, body := page(t, srv, http.MethodGet, u, c)
	if !strings.Contains(body, `action="/operations/`+id+`/confirm"`) || !strings.Contains(body, `name="revision" value="1"`) ||
		!strings.Contains(body, `action="/operations/`+id+`/cancel"`) {
		t.Fatalf("no forms on the page of a proposed operation: %s", body)
	}
	// CO-OPS5-01: another User's Session can't confirm it.
	other := a.start("usr_bob").str("session_id")
	cb := sessionCookie(t, join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {a.browserAssertion("usr_bob", other)}}))
	if code, _, _ := postPage(t, srv, u+"/confirm", url.Values{"revision": {"1"}}, cb); code != 404 {
		t.Errorf("CO-OPS5-01: another Session's confirm: %d", code)
	}
	// CO-OPS5-03: an older revision.
	if _, err := srv.Operations().Revise(id); err != nil {
		t.Fatal(err)
	}
	if code, _, body := postPage(t, srv, u+"/confirm", url.Values{"revision": {"1"}}, c); code != 409 || !strings.Contains(body, `name="revision" value="2"`) {
		t.Errorf("CO-OPS5-03: a confirm of revision 1: %d %s", code, body)
	}
	// CO-OPS5-04: a standing permission where the User's approval is required.
	if code, _, _ := postPage(t, srv, u+"/confirm", url.Values{"revision": {"2"}, "approved_by": {"standing_permission"}}, c); code != 403 {
		t.Errorf("CO-OPS5-04: %d", code)
	}
	if code, _, _ := postPage(t, srv, u+"/confirm", url.Values{"revision": {"x"}}, c); code != 400 {
		t.Errorf("a bad form: %d", code)
	}
	if info, _ := srv.Operations().Get(id); info.State != "proposed" || info.Performed != 0 {
		t.Fatalf("after refused confirms: %s, performed %d", info.State, info.Performed)
	}
	// Accepted: 303 to the page, which shows the result.
	code, loc, _ := postPage(t, srv, u+"/confirm", url.Values{"revision": {"2"}, "approved_by": {"user"}}, c)
	if code != http.StatusSeeOther || loc != "/operations/"+id {
		t.Fatalf("confirm: %d %q", code, loc)
	}
	info, _ := srv.Operations().Get(id)
	if info.State != "succeeded" || info.Performed != 1 || info.ConfirmedVia != "website" || info.WebsiteConfirms != 4 || info.Confirms != 0 {
		t.Errorf("after the website confirm: %s, performed %d, via %q, %d website confirms, %d endpoint confirms",
			info.State, info.Performed, info.ConfirmedVia, info.WebsiteConfirms, info.Confirms)
	}
	var m map[string]any
	json.Unmarshal(info.JSON, &m)
	checkOp(t, m)
	if conf, _ := m["confirmation"].(map[string]any); conf["revision"] != float64(2) || conf["approved_by"] != "user" {
		t.Errorf("confirmation %v", m["confirmation"])
	}
	if _, body := page(t, srv, http.MethodGet, u, c); !strings.Contains(body, "State: succeeded") || strings.Contains(body, "confirm-form") {
		t.Errorf("page after: %s", body)
	}
	// CO-OPS5-05: repeated on either channel, it is as it is.
	if code, _, _ := postPage(t, srv, u+"/confirm", url.Values{"revision": {"2"}}, c); code != http.StatusSeeOther {
		t.Errorf("repeated on the website: %d", code)
	}
	if r := confirmRaw(a, tok, id, 2, "user"); r.Status != 200 || r.Body["state"] != "succeeded" {
		t.Errorf("repeated at the endpoint: %d %s", r.Status, r.Raw)
	}
	if info, _ := srv.Operations().Get(id); info.Performed != 1 || len(srv.Operations().Performed()) != 1 {
		t.Errorf("performed %d times", info.Performed)
	}

	// The cancel form declines a proposal (CO-OPS7-01).
	op2 := proposeRaw(t, a, tok, `{"item_id":"itm_5Qa"}`)
	if code, _, _ := postPage(t, srv, op2["url"].(string)+"/cancel", nil, c); code != http.StatusSeeOther {
		t.Errorf("cancel: %d", code)
	}
	if info, _ := srv.Operations().Get(op2["operation_id"].(string)); info.State != "cancelled" || info.WebsiteCancels != 1 {
		t.Errorf("after the cancel form: %s, %d website cancels", info.State, info.WebsiteCancels)
	}
}

// CO-OPS5-02 on the website: a Session without the action's scopes can't
// confirm there either.
func TestOPS4_4_WebsiteConfirmScopes(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := opsAgent(t, srv)
	sid, tok := signedIn(t, srv, a, "usr_alice", "acct_1")
	op := proposeRaw(t, a, tok, `{"item_id":"itm_4Qa"}`)
	c := sessionCookie(t, join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {a.browserAssertion("usr_alice", sid)}}))
	if _, err := srv.Sessions().SignIn(sid, "acct_1", "poppy:read"); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := postPage(t, srv, op["url"].(string)+"/confirm", url.Values{"revision": {"1"}}, c); code != http.StatusForbidden {
		t.Errorf("CO-OPS5-02: a read-only Session's confirm: %d", code)
	}
	if info, _ := srv.Operations().Get(op["operation_id"].(string)); info.State != "proposed" {
		t.Errorf("state %s", info.State)
	}
}

// CO-OPS6-02 (OPS 4.4, 6): five concurrent confirms at the endpoint and
// one on the website, at once: the operation is performed once. The
// performer leaves it in_progress (its outcome unknown), so a second
// perform would show in the count. Then one after the other, in both
// orders: the second finds it as it is.
func TestCO_OPS6_02_WebsiteAndEndpointConfirms(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Operations: poppytest.OperationsOptions{Perform: poppytest.PerformUnknown}})
	a := opsAgent(t, srv)
	sid, tok := signedIn(t, srv, a, "usr_1", "acct_1")
	c := sessionCookie(t, join(t, srv, srv.EndpointURL(poppytest.EndpointBrowserSession), url.Values{"assertion": {a.browserAssertion("usr_1", sid)}}))
	for round := range 3 {
		op := proposeRaw(t, a, tok, fmt.Sprintf(`{"item_id":"itm_%d"}`, round))
		id := op["operation_id"].(string)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				confirmRaw(a, tok, id, 1, "user")
			}()
		}
		var code int
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			code, _, _ = postPage(t, srv, op["url"].(string)+"/confirm", url.Values{"revision": {"1"}}, c)
		}()
		close(start)
		wg.Wait()
		info, _ := srv.Operations().Get(id)
		// CO-OPS6-02
		if info.Performed != 1 || info.Confirms != 5 || info.WebsiteConfirms != 1 || info.State != "in_progress" || code != http.StatusSeeOther {
			t.Fatalf("CO-OPS6-02: performed %d times after %d endpoint and %d website confirms (%s, website %d)",
				info.Performed, info.Confirms, info.WebsiteConfirms, info.State, code)
		}
		if err := srv.Operations().Resolve(id, "succeeded"); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(srv.Operations().Performed()); n != 3 {
		t.Errorf("CO-OPS6-02: %d actions for 3 operations", n)
	}

	// Confirmed at the endpoint first: a website confirm finds it as it is.
	first := proposeRaw(t, a, tok, `{"item_id":"itm_endpoint"}`)
	if r := confirmRaw(a, tok, first["operation_id"].(string), 1, "user"); r.Status != 200 || r.Body["state"] != "in_progress" {
		t.Fatalf("endpoint confirm: %d %s", r.Status, r.Raw)
	}
	if code, _, _ := postPage(t, srv, first["url"].(string)+"/confirm", url.Values{"revision": {"1"}}, c); code != http.StatusSeeOther {
		t.Errorf("website confirm after the endpoint's: %d", code)
	}
	if info, _ := srv.Operations().Get(first["operation_id"].(string)); info.Performed != 1 || info.ConfirmedVia != "endpoint" {
		t.Errorf("CO-OPS6-02: performed %d times, confirmed via %q", info.Performed, info.ConfirmedVia)
	}

	op := proposeRaw(t, a, tok, `{"item_id":"itm_web"}`)
	id := op["operation_id"].(string)
	if code, _, _ := postPage(t, srv, op["url"].(string)+"/confirm", url.Values{"revision": {"1"}}, c); code != http.StatusSeeOther {
		t.Fatalf("website confirm: %d", code)
	}
	for range 3 {
		if r := confirmRaw(a, tok, id, 1, "user"); r.Status != 200 || r.Body["state"] != "in_progress" {
			t.Errorf("endpoint confirm after the website's: %d %s", r.Status, r.Raw)
		}
	}
	if info, _ := srv.Operations().Get(id); info.Performed != 1 || info.ConfirmedVia != "website" {
		t.Errorf("CO-OPS6-02: performed %d times, confirmed via %q", info.Performed, info.ConfirmedVia)
	}
}
