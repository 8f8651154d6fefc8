package poppytest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

// noCredentials fails if any response the fake sent for a mediated
// request carries a submitted credential value (CO-4.7-07).
func noCredentials(t *testing.T, rs ...*response) {
	t.Helper()
	for _, r := range rs {
		for _, v := range []string{"user@example.test", "correct horse", "wrong horse"} {
			hdr, _ := json.Marshal(r.Header)
			// CO-4.7-07
			if strings.Contains(string(r.Raw), v) || strings.Contains(string(hdr), v) {
				t.Errorf("response carries the credential %q: %s", v, r.Raw)
			}
		}
	}
}

func TestCO_4_7_MediatedSignIn(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	start := a.start("usr_1")
	sid, tok := start.str("session_id"), start.str("access_token")

	// CO-4.7-09: a wrong password fails and issues nothing.
	bad := a.mediated("", tok, map[string]any{"scope": "poppy:read", "credentials": map[string]any{"email": "user@example.test", "password": "wrong horse"}})
	if bad.Status != 200 || bad.str("status") != "failed" || bad.has("access_token") || bad.has("refresh_token") || bad.has("sign_in_id") {
		t.Fatalf("wrong password = %d %s", bad.Status, bad.Raw)
	}
	if si, _ := srv.Sessions().Get(sid); si.SignedIn {
		t.Fatal("signed in after a failed sign-in")
	}
	// CO-4.4-09: mediated lists only poppy:read.
	inv := a.mediated("", tok, map[string]any{"scope": "poppy:write", "credentials": creds()})
	if inv.Status != 400 || inv.str("error") != "invalid_scope" {
		t.Errorf("poppy:write = %d %s", inv.Status, inv.Raw)
	}
	// CO-4.4-07
	if r := a.mediated("", tok, map[string]any{"credentials": creds()}); r.Status != 400 || r.str("error") != "invalid_scope" {
		t.Errorf("no scope = %d %s", r.Status, r.Raw)
	}
	ok := a.mediated("", tok, map[string]any{"scope": "poppy:read", "credentials": creds()})
	// CO-4.7-01
	if ok.Status != 200 || ok.str("status") != "complete" || ok.str("token_type") != "DPoP" || ok.str("access_token") == "" ||
		!strings.HasPrefix(ok.str("refresh_token"), "pat_") || ok.str("scope") != "poppy:read" || ok.str("session_id") != sid ||
		ok.Body["signed_in"] != true || !ok.has("expires_in", "refresh_token_expires_in") {
		t.Fatalf("complete = %d %s", ok.Status, ok.Raw)
	}
	noCredentials(t, bad, inv, ok)
	in := ok.str("access_token")
	if info, _ := srv.Tokens().Get(in); info.JKT != srv.RequestsTo(poppytest.EndpointSignIn)[3].Proof.JKT || !info.SignedIn || info.Account != "acct_1" {
		t.Errorf("token record = %+v", info)
	}
	if c := a.call("GET", "/orders", in, ""); c.Status != 200 {
		t.Errorf("orders = %d", c.Status)
	}
	if info, _ := srv.Tokens().Account(ok.str("refresh_token")); info.Type != "mediated" || info.UserID != "usr_1" {
		t.Errorf("Account Token = %+v", info)
	}
}

func TestCO_4_7_OneTimeCode(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RequireCode: true}})
	a := newAgent(t, srv, "agent.test")
	start := a.start("usr_1")
	sid, tok := start.str("session_id"), start.str("access_token")
	begin := func() *response {
		t.Helper()
		r := a.mediated("", tok, map[string]any{"scope": "poppy:read", "credentials": creds()})
		if r.Status != 200 || r.str("status") != "code_required" {
			t.Fatalf("start = %d %s", r.Status, r.Raw)
		}
		return r
	}
	r := begin()
	// CO-4.7-02: sign_in_id, code.sent_to, expires_at; the code is in the outbox.
	exp, err := time.Parse(time.RFC3339, r.str("expires_at"))
	sentTo, _ := r.Body["code"].(map[string]any)["sent_to"].(string)
	if !strings.HasPrefix(r.str("sign_in_id"), "sgn_") || sentTo != "Text to the phone number ending in 71" || err != nil || !within(exp, srv.Clock().Now().Add(5*time.Minute), 2*time.Second) {
		t.Fatalf("code_required = %s", r.Raw)
	}
	out := srv.SignIn().Outbox()
	if len(out) != 1 || out[0].SignInID != r.str("sign_in_id") || len(out[0].Code) != 6 || out[0].Code != srv.SignIn().LastCode() || out[0].Account != "acct_1" {
		t.Fatalf("outbox = %+v", out)
	}
	codeURL := srv.EndpointURL(poppytest.EndpointSignIn) + "/" + r.str("sign_in_id")

	// CO-4.7-03: another Session can't finish it, and the sign-in survives.
	other := a.start("usr_1").str("access_token")
	if o := a.mediated(codeURL, other, map[string]any{"code": srv.SignIn().LastCode()}); o.Status != 404 || o.str("error") != "sign_in_not_found" {
		t.Errorf("code from another Session = %d %s", o.Status, o.Raw)
	}
	wantRules(t, srv, pa("4.7-09"))
	// A wrong code asks again.
	if w := a.mediated(codeURL, tok, map[string]any{"code": "000000x"}); w.str("status") != "code_required" || w.str("sign_in_id") != r.str("sign_in_id") {
		t.Errorf("wrong code = %s", w.Raw)
	}
	done := a.mediated(codeURL, tok, map[string]any{"code": srv.SignIn().LastCode()})
	// CO-4.7-03: the original Session finishes; CO-4.7-01.
	if done.Status != 200 || done.str("status") != "complete" || done.str("session_id") != sid || done.str("refresh_token") == "" {
		t.Fatalf("right code = %d %s", done.Status, done.Raw)
	}
	noCredentials(t, r, done)
	if again := a.mediated(codeURL, tok, map[string]any{"code": srv.SignIn().LastCode()}); again.Status != 404 {
		t.Errorf("code after completion = %d %s", again.Status, again.Raw)
	}

	// CO-4.7-04: three wrong codes with a limit of 3.
	r = begin()
	codeURL = srv.EndpointURL(poppytest.EndpointSignIn) + "/" + r.str("sign_in_id")
	var got []string
	for range 3 {
		got = append(got, a.mediated(codeURL, tok, map[string]any{"code": "999999x"}).str("status"))
	}
	if strings.Join(got, " ") != "code_required code_required failed" {
		t.Errorf("wrong codes = %v", got)
	}
	// CO-4.7-05: past expires_at.
	r = begin()
	srv.Clock().Advance(5*time.Minute + time.Second)
	if e := a.mediated(srv.EndpointURL(poppytest.EndpointSignIn)+"/"+r.str("sign_in_id"), tok, map[string]any{"code": srv.SignIn().LastCode()}); e.Status != 200 || e.str("status") != "expired" {
		t.Errorf("late code = %d %s", e.Status, e.Raw)
	}
	// Sending the credentials again with the code is a violation, and so is
	// any credential value outside the mediated endpoint's POST body.
	r = begin()
	a.mediated(srv.EndpointURL(poppytest.EndpointSignIn)+"/"+r.str("sign_in_id"), tok, map[string]any{"code": srv.SignIn().LastCode(), "credentials": creds()})
	wantRules(t, srv, pa("4.7-09"), pa("4.7-05"), pa("4.7-06"))
}

func TestCO_4_7_06_RateLimit(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	tok := a.start("usr_1").str("access_token")
	wrong := map[string]any{"scope": "poppy:read", "credentials": map[string]any{"email": "user@example.test", "password": "wrong horse"}}
	for i := range 5 {
		if r := a.mediated("", tok, wrong); r.str("status") != "failed" {
			t.Fatalf("attempt %d = %d %s", i+1, r.Status, r.Raw)
		}
		srv.Clock().Advance(time.Second)
	}
	r := a.mediated("", tok, map[string]any{"scope": "poppy:read", "credentials": creds()})
	// CO-4.7-06: the 6th attempt within a minute, even with the right password.
	if ra := r.Header.Get("Retry-After"); r.Status != 429 || r.str("error") != "rate_limited" || (ra != "55" && ra != "56") {
		t.Fatalf("6th attempt = %d %v %s", r.Status, r.Header, r.Raw)
	}
	noCredentials(t, r)
	// Another account isn't limited.
	if r := a.mediated("", tok, map[string]any{"scope": "poppy:read", "credentials": map[string]any{"email": "other@example.test", "password": "x"}}); r.Status != 200 {
		t.Errorf("other account = %d", r.Status)
	}
	srv.Clock().Advance(56 * time.Second)
	if r := a.mediated("", tok, map[string]any{"scope": "poppy:read", "credentials": creds()}); r.str("status") != "complete" {
		t.Errorf("after the window = %d %s", r.Status, r.Raw)
	}
}

func TestCO_4_7_08_UnusualOnNewKey(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{UnusualOnNewKey: true}})
	a := newAgent(t, srv, "agent.test")
	tok := a.start("usr_1").str("access_token")
	body := map[string]any{"scope": "poppy:read", "credentials": creds()}
	r := a.mediated("", tok, body)
	// CO-4.7-08
	if r.str("status") != "code_required" {
		t.Fatalf("first sign-in with a new key = %s", r.Raw)
	}
	a.mediated(srv.EndpointURL(poppytest.EndpointSignIn)+"/"+r.str("sign_in_id"), tok, map[string]any{"code": srv.SignIn().LastCode()})
	tok2 := a.start("usr_1").str("access_token") // same User, same key
	if r := a.mediated("", tok2, body); r.str("status") != "complete" {
		t.Errorf("known key = %s", r.Raw)
	}
}

func TestCO_4_7_RequestShape(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{MediatedFields: []poppytest.CredentialField{
		{Name: "email", Label: "Email"}, {Name: "password", Label: "Password", Secret: true}, {Name: "pin", Label: "PIN", Secret: true},
	}}})
	a := newAgent(t, srv, "agent.test")
	doc := get(t, srv, "https://example.test/.well-known/poppy.json")
	fields := doc.Body["auth"].(map[string]any)["mediated"].(map[string]any)["fields"].([]any)
	if len(fields) != 3 || fields[2].(map[string]any)["name"] != "pin" || fields[2].(map[string]any)["secret"] != true {
		t.Fatalf("fields = %v", fields)
	}
	start := a.start("usr_1")
	tok := start.str("access_token")
	// A missing field: invalid_request and a violation.
	if r := a.mediated("", tok, map[string]any{"scope": "poppy:read", "credentials": creds()}); r.Status != 400 || r.str("error") != "invalid_request" || strings.Contains(string(r.Raw), "correct horse") {
		t.Errorf("missing pin = %d %s", r.Status, r.Raw)
	}
	wantRules(t, srv, pa("4.7-01"))
	c := creds()
	c["pin"] = "4071"
	c["extra"] = "x"
	if r := a.mediated("", tok, map[string]any{"scope": "poppy:read", "credentials": c}); r.Status != 400 || r.str("error") != "invalid_request" {
		t.Errorf("extra field = %d %s", r.Status, r.Raw)
	}
	delete(c, "extra")
	// A Bearer Session Token is refused (CO-4.3-14), and so is a DPoP one sent as Bearer (CO-4.3-15).
	f := a.renewForm("usr_1", start.str("session_id"))
	f.Set("resource", srv.EndpointURL(poppytest.EndpointMCP))
	bearer := postForm(t, srv, srv.EndpointURL(poppytest.EndpointToken), f).str("access_token")
	for _, v := range []string{bearer, tok} {
		req, _ := http.NewRequest("POST", srv.EndpointURL(poppytest.EndpointSignIn), strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+v)
		// CO-4.3-14, CO-4.3-15
		if r := do(t, srv.Client(), req); r.Status != 401 || !strings.HasPrefix(r.wwwAuth(), "DPoP ") {
			t.Errorf("Bearer = %d %q", r.Status, r.wwwAuth())
		}
	}
	wantRules(t, srv, pa("4.3-19"), pa("4.3-01"))
	// The PIN sent anywhere else is a violation; inside another token it isn't.
	a.call("POST", "/echo", tok, `{"note":"pin 4071"}`)
	a.call("POST", "/echo", tok, `{"ts":1790940712}`)
	wantRules(t, srv, pa("4.7-05"))
	a.call("GET", "/products?email=user%40example.test", tok, "")
	wantRules(t, srv, pa("4.7-06"))
	if r := a.mediated("", tok, map[string]any{"scope": "poppy:read", "credentials": c}); r.str("status") != "complete" {
		t.Errorf("all three fields = %d %s", r.Status, r.Raw)
	}
}
