package poppytest_test

import (
	"net/http"
	"net/url"
	"strings"
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
	c := sessionCookie(t, join(t, srv, srv.BrowserSessionEndpoint(), url.Values{"assertion": {a.browserAssertion("usr_alice", sid)}}))
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
	cb := sessionCookie(t, join(t, srv, srv.BrowserSessionEndpoint(), url.Values{"assertion": {a.browserAssertion("usr_bob", other)}}))
	if code, _ := page(t, srv, http.MethodGet, u, cb); code != 404 {
		t.Fatalf("another User's Session: %d", code)
	}
	if code, _ := page(t, srv, http.MethodGet, "https://example.test/operations/op_nope", c); code != 404 {
		t.Fatalf("unknown operation: %d", code)
	}
}
