package poppytest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

func TestCO_6_APIErrors(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	start := a.start("usr_1")
	out := start.str("access_token")
	// CO-6-10
	r := a.call("GET", "/orders", out, "")
	if r.Status != 403 || r.wwwAuth() != `DPoP error="sign_in_required"` {
		t.Errorf("signed out /orders: %d %q", r.Status, r.wwwAuth())
	}
	in, err := srv.Sessions().SignIn(start.str("session_id"), "acct_1", "poppy:read")
	if err != nil {
		t.Fatal(err)
	}
	// CO-4.4-02
	if r := a.call("GET", "/orders", in, ""); r.Status != 200 {
		t.Errorf("read token /orders: %d %s", r.Status, r.Raw)
	}
	// CO-6-11, CO-4.4-02
	r = a.call("POST", "/orders/ord_7Hk2/exchanges", in, `{"item_id":"itm_4Qa"}`)
	if r.Status != 403 || r.wwwAuth() != `DPoP error="insufficient_scope", scope="poppy:read poppy:write"` {
		t.Errorf("read token exchange: %d %q", r.Status, r.wwwAuth())
	}
	// CO-4.4-13: the older signed-out token stays signed out.
	if r := a.call("GET", "/orders", out, ""); r.Status != 403 || !strings.Contains(r.wwwAuth(), "sign_in_required") {
		t.Errorf("old signed-out token after sign-in: %d %q", r.Status, r.wwwAuth())
	}
	// CO-4-01: a policy denial has no WWW-Authenticate.
	r = a.call("DELETE", "/orders/ord_7Hk2", in, "")
	if r.Status != 403 || r.wwwAuth() != "" || r.str("error") != "forbidden" {
		t.Errorf("DELETE: %d %q %s", r.Status, r.wwwAuth(), r.Raw)
	}
	// A Session signed out since then: the signed-in token acts signed out (spec 4.9).
	srv.Sessions().SignOut(start.str("session_id"))
	if r := a.call("GET", "/orders", in, ""); r.Status != 403 || !strings.Contains(r.wwwAuth(), "sign_in_required") {
		t.Errorf("signed-in token after sign-out: %d %q", r.Status, r.wwwAuth())
	}
	if _, err := srv.Sessions().SignIn(start.str("session_id"), "acct_2", "poppy:read"); err == nil || !strings.Contains(err.Error(), "account_mismatch") {
		t.Errorf("sign-in to another account: %v", err)
	}
}

func TestCO_6_WriteAndEcho(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	start := a.start("usr_1")
	in, err := srv.Sessions().SignIn(start.str("session_id"), "acct_1", "poppy:read", "poppy:write")
	if err != nil {
		t.Fatal(err)
	}
	info, _ := srv.Tokens().Get(in)
	if !info.SignedIn || info.Account != "acct_1" || len(info.Scopes) != 2 {
		t.Errorf("token info %+v", info)
	}
	// CO-6-03
	if r := a.call("POST", "/orders/ord_7Hk2/exchanges", in, `{"item_id":"itm_4Qa"}`); r.Status != 201 || r.str("order_id") != "ord_7Hk2" {
		t.Errorf("exchange: %d %s", r.Status, r.Raw)
	}
	body := `{"message":{"id":"msg_1","text":"héllo"},"n":[1,2,3]}`
	if r := a.call("POST", "/echo", in, body); r.Status != 200 || string(r.Raw) != body {
		t.Errorf("echo: %d %s", r.Status, r.Raw)
	}
	if r := a.call("GET", "/nope", in, ""); r.Status != 404 {
		t.Errorf("unknown path: %d", r.Status)
	}
}

func TestCO_6_02_OpenAPIDocument(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	r := get(t, srv, srv.EndpointURL(poppytest.EndpointAPI)+"/openapi.json")
	// CO-6-02
	if r.Status != 200 || r.Body["openapi"] != "3.1.0" {
		t.Fatalf("%d %s", r.Status, r.Raw)
	}
	paths := r.Body["paths"].(map[string]any)
	for _, p := range []string{"/products", "/orders", "/orders/{id}", "/orders/{id}/exchanges", "/echo"} {
		if paths[p] == nil {
			t.Errorf("openapi.json lacks %s", p)
		}
	}
}

func TestForceErrorAtResources(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	tok := a.start("usr_1").str("access_token")
	srv.Faults().ForceError(poppytest.EndpointAPI, poppytest.Fault{Code: "use_dpop_nonce", Times: 2})
	for range 2 {
		r := a.call("GET", "/products", tok, "")
		wantDPoPError(t, r, "use_dpop_nonce")
		if r.Header.Get("DPoP-Nonce") == "" {
			t.Error("forced use_dpop_nonce without DPoP-Nonce")
		}
	}
	srv.Faults().ForceError(poppytest.EndpointAPI, poppytest.Fault{Code: "insufficient_scope"})
	if r := a.call("GET", "/products", tok, ""); r.Status != 403 || r.wwwAuth() != `DPoP error="insufficient_scope", scope="poppy:read poppy:write"` {
		t.Errorf("forced insufficient_scope: %d %q", r.Status, r.wwwAuth())
	}
	srv.Faults().ForceError(poppytest.EndpointAPI, poppytest.Fault{Status: 503})
	if r := a.call("GET", "/products", tok, ""); r.Status != 503 {
		t.Errorf("forced 503: %d", r.Status)
	}
	srv.Faults().ForceError(poppytest.EndpointToken, poppytest.Fault{Code: "invalid_dpop_proof"})
	if r := a.token(a.startForm("usr_1")); r.Status != 400 || r.str("error") != "invalid_dpop_proof" || !strings.HasPrefix(r.wwwAuth(), "DPoP ") {
		t.Errorf("forced token error: %d %s", r.Status, r.Raw)
	}
	if r := a.call("GET", "/products", tok, ""); r.Status != 200 {
		t.Errorf("after forced errors: %d", r.Status)
	}
	reqs := srv.RequestsTo(poppytest.EndpointAPI)
	if reqs[0].ErrorCode != "use_dpop_nonce" || reqs[0].Status != 401 {
		t.Errorf("log: %+v", reqs[0])
	}
}

func TestTokenResponseKnobs(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	srv.Tokens().SetType("Bearer")
	if r := a.token(a.startForm("usr_1")); r.str("token_type") != "Bearer" {
		t.Errorf("SetTokenType: %s", r.Raw)
	}
	if r := a.token(a.startForm("usr_1")); r.str("token_type") != "DPoP" {
		t.Errorf("SetTokenType applies once: %s", r.Raw)
	}
	srv.Tokens().SetExpiresIn(0, 1)
	if r := a.token(a.startForm("usr_1")); r.Body["expires_in"] != float64(0) {
		t.Errorf("SetExpiresIn(0): %s", r.Raw)
	}
	srv.Tokens().SetExpiresIn(5, 1)
	r := a.token(a.startForm("usr_1"))
	if r.Body["expires_in"] != float64(5) {
		t.Errorf("SetExpiresIn(5): %s", r.Raw)
	}
	srv.Clock().Advance(6 * time.Second)
	if c := a.call("GET", "/products", r.str("access_token"), ""); c.Status != 401 {
		t.Errorf("5 s token after 6 s: %d", c.Status)
	}
}

func TestRevokeOnReissue(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{RevokeOnReissue: true}})
	a := newAgent(t, srv, "agent.test")
	first := a.start("usr_1")
	sid := first.str("session_id")
	f := a.renewForm("usr_1", sid)
	f.Set("resource", srv.EndpointURL(poppytest.EndpointMCP))
	postForm(t, srv, srv.EndpointURL(poppytest.EndpointToken), f) // a Bearer token doesn't revoke the DPoP one
	if c := a.call("GET", "/products", first.str("access_token"), ""); c.Status != 200 {
		t.Fatalf("DPoP token after Bearer issue: %d", c.Status)
	}
	second := a.token(a.renewForm("usr_1", sid))
	if c := a.call("GET", "/products", first.str("access_token"), ""); c.Status != 401 || !strings.Contains(c.wwwAuth(), "invalid_token") {
		t.Errorf("old token after renewal: %d", c.Status)
	}
	if c := a.call("GET", "/products", second.str("access_token"), ""); c.Status != 200 {
		t.Errorf("new token: %d", c.Status)
	}
}

func TestClockSleep(t *testing.T) {
	var c poppytest.OffsetClock
	before := c.Now()
	if err := c.Sleep(context.Background(), 7*time.Second); err != nil {
		t.Fatal(err)
	}
	if c.Offset() != 7*time.Second || c.Now().Sub(before) < 7*time.Second {
		t.Errorf("offset %v", c.Offset())
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sleep(ctx, time.Second); err == nil || c.Offset() != 7*time.Second {
		t.Errorf("Sleep on a done context: %v %v", err, c.Offset())
	}
}

func TestViolationsReportedAtCleanup(t *testing.T) {
	var errs []string
	rec := &errorRecorder{TB: t, errs: &errs}
	srv := poppytest.NewServer(rec, nil)
	get(t, srv, srv.EndpointURL(poppytest.EndpointAPI)+"/products") // a request without a Session Token
	for _, f := range rec.cleanups {
		f()
	}
	if len(errs) != 1 || !strings.Contains(errs[0], pa("4.3-23")) {
		t.Fatalf("cleanup errors = %q", errs)
	}
}

type errorRecorder struct {
	testing.TB
	errs     *[]string
	cleanups []func()
}

func (e *errorRecorder) Helper()          {}
func (e *errorRecorder) Cleanup(f func()) { e.cleanups = append(e.cleanups, f) }
func (e *errorRecorder) Errorf(format string, args ...any) {
	*e.errs = append(*e.errs, fmt.Sprintf(format, args...))
}

// TestEnvChildProcess runs this test binary as a child that reaches the
// fake through ClientFromEnv.
func TestEnvChildProcess(t *testing.T) {
	if os.Getenv("POPPYTEST_CHILD") == "1" {
		c, err := poppytest.ClientFromEnv()
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Get("https://example.test/.well-known/poppy.json")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		c.CloseIdleConnections()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if off := poppytest.ClockFromEnv().Offset(); off != time.Hour {
			t.Fatalf("clock offset %v", off)
		}
		return
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	srv := poppytest.NewServer(t, nil)
	srv.Clock().Advance(time.Hour)
	cmd := exec.Command(os.Args[0], "-test.run=^TestEnvChildProcess$", "-test.count=1")
	cmd.Env = append(append(os.Environ(), srv.Env()...), "POPPYTEST_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if n := len(srv.RequestsTo(poppytest.EndpointPoppyJSON)); n != 1 {
		t.Errorf("fake saw %d requests from the child", n)
	}
}
