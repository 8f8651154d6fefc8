package poppytest_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy/poppytest"
)

func TestCO_4_6_DeviceSignIn(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	a := newAgent(t, srv, "agent.test")
	sid := a.start("usr_1").str("session_id")
	d := a.deviceStart("poppy:read poppy:write")
	if d.Status != 200 || d.Header.Get("Cache-Control") != "no-store" || d.str("device_code") == "" ||
		d.str("verification_uri") != "https://auth.example.test/device" ||
		d.str("verification_uri_complete") != "https://auth.example.test/device?user_code="+d.str("user_code") ||
		d.Body["expires_in"] != float64(600) || d.Body["interval"] != float64(5) || len(d.str("user_code")) != 9 {
		t.Fatalf("device authorization = %d %s", d.Status, d.Raw)
	}
	// no proof was needed.
	if reqs := srv.RequestsTo(poppytest.EndpointDevice); reqs[0].Proof != nil || reqs[0].ClientAssertion == nil {
		t.Errorf("device request %+v", reqs[0])
	}
	dc := d.str("device_code")
	if r := a.poll("usr_1", dc, sid); r.Status != 400 || r.str("error") != "authorization_pending" {
		t.Fatalf("first poll = %d %s", r.Status, r.Raw)
	}
	// CO-4.6-02: opening the link decides nothing.
	srv.Clock().Advance(5 * time.Second)
	page := asBrowser(t, srv, "GET", d.str("verification_uri_complete"), nil)
	if page.Status != 200 || !strings.Contains(string(page.Raw), "Raw Agent") || !strings.Contains(string(page.Raw), "poppy:write") {
		t.Fatalf("verification page = %d %s", page.Status, page.Raw)
	}
	if r := a.poll("usr_1", dc, sid); r.str("error") != "authorization_pending" {
		t.Fatalf("poll after opening the page = %d %s", r.Status, r.Raw)
	}
	// CO-4.6-01: the page names the agent and shows the scopes; the User approves some.
	srv.SignIn().ApproveScopes("", "poppy:read")
	if loc := browse(t, srv, d.str("verification_uri_complete")); loc != nil {
		t.Errorf("device Browse redirected to %v", loc)
	}
	cs := srv.SignIn().Consents()
	if len(cs) != 1 || cs[0].Type != "device" || cs[0].ClientName != "Raw Agent" || cs[0].UserCode != d.str("user_code") ||
		!slices.Equal(cs[0].Scopes, []string{"poppy:read", "poppy:write"}) {
		t.Fatalf("consents = %+v", cs)
	}
	srv.Clock().Advance(5 * time.Second)
	r := a.poll("usr_1", dc, sid)
	// CO-4.4-11 via device: the spec 4.4 response, for the same Session.
	if r.Status != 200 || r.str("session_id") != sid || r.Body["signed_in"] != true || r.str("scope") != "poppy:read" ||
		!strings.HasPrefix(r.str("refresh_token"), "pat_") || !r.has("refresh_token_expires_in", "expires_in", "token_type", "access_token") {
		t.Fatalf("approved poll = %d %s", r.Status, r.Raw)
	}
	if info, _ := srv.Tokens().Account(r.str("refresh_token")); info.Type != "device" || info.UserID != "usr_1" {
		t.Errorf("Account Token %+v", info)
	}
	srv.Clock().Advance(5 * time.Second)
	if r := a.poll("usr_1", dc, sid); r.str("error") != "invalid_grant" {
		t.Errorf("poll after the exchange = %d %s", r.Status, r.Raw)
	}
	// The user code is used up too.
	if _, err := srv.Browse(context.Background(), d.str("verification_uri_complete")); err == nil {
		t.Error("Browse of a used code succeeded")
	}
}

func TestCO_4_6_PollAnswers(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{DeviceCodeTTL: 30 * time.Second}})
	a := newAgent(t, srv, "agent.test")
	sid := a.start("usr_1").str("session_id")

	t.Run("CO-4.6-03 slow_down", func(t *testing.T) {
		dc := a.deviceStart("poppy:read").str("device_code")
		a.poll("usr_1", dc, sid)
		srv.Clock().Advance(time.Second)
		r := a.poll("usr_1", dc, sid)
		// CO-4.6-03
		if r.Status != 400 || r.str("error") != "slow_down" {
			t.Fatalf("poll 1 s later = %d %s", r.Status, r.Raw)
		}
		// The interval is now 10 s: 6 s later is too soon again, and ignoring slow_down is a violation.
		srv.Clock().Advance(6 * time.Second)
		if r := a.poll("usr_1", dc, sid); r.str("error") != "slow_down" {
			t.Fatalf("poll 6 s after slow_down = %s", r.Raw)
		}
		wantRules(t, srv, pa("4.6-07"))
		srv.Clock().Advance(15 * time.Second)
		if r := a.poll("usr_1", dc, sid); r.str("error") != "authorization_pending" {
			t.Fatalf("poll 15 s later = %s", r.Raw)
		}
	})
	t.Run("CO-4.6-04 access_denied", func(t *testing.T) {
		d := a.deviceStart("poppy:read")
		srv.SignIn().Deny()
		defer srv.SignIn().SetUser(nil)
		browse(t, srv, d.str("verification_uri_complete"))
		r := a.poll("usr_1", d.str("device_code"), sid)
		// CO-4.6-04
		if r.Status != 400 || r.str("error") != "access_denied" {
			t.Fatalf("poll after decline = %d %s", r.Status, r.Raw)
		}
		srv.Clock().Advance(5 * time.Second)
		a.poll("usr_1", d.str("device_code"), sid)
		wantRules(t, srv, pa("4.6-09"))
	})
	t.Run("CO-4.6-05 expired_token", func(t *testing.T) {
		d := a.deviceStart("poppy:read")
		browse(t, srv, d.str("verification_uri_complete")) // approved, but too late
		srv.Clock().Advance(31 * time.Second)
		r := a.poll("usr_1", d.str("device_code"), sid)
		// CO-4.6-05
		if r.Status != 400 || r.str("error") != "expired_token" {
			t.Fatalf("poll after expires_in = %d %s", r.Status, r.Raw)
		}
		srv.Clock().Advance(5 * time.Second)
		a.poll("usr_1", d.str("device_code"), sid)
		wantRules(t, srv, pa("4.6-10"))
	})
	t.Run("CO-4.6-06 invalid_session", func(t *testing.T) {
		b := newAgent(t, srv, "other-agent.test")
		bsid := b.start("usr_1").str("session_id")
		d := a.deviceStart("poppy:read")
		browse(t, srv, d.str("verification_uri_complete"))
		r := a.poll("usr_1", d.str("device_code"), bsid)
		// CO-4.6-06
		if r.Status != 400 || r.str("error") != "invalid_session" {
			t.Fatalf("poll with another client's session = %d %s", r.Status, r.Raw)
		}
		// the request is still usable from the right Session.
		srv.Clock().Advance(5 * time.Second)
		if r := a.poll("usr_1", d.str("device_code"), sid); r.Status != 200 {
			t.Fatalf("poll with the right session = %d %s", r.Status, r.Raw)
		}
		// Another client can't poll A's device code.
		if r := b.poll("usr_1", d.str("device_code"), bsid); r.str("error") != "invalid_grant" {
			t.Errorf("other client's poll = %s", r.Raw)
		}
	})
	t.Run("scripted answers", func(t *testing.T) {
		s2 := a.start("usr_2").str("session_id")
		d := a.deviceStart("poppy:read")
		srv.SignIn().HoldDevicePolls(2)
		srv.SignIn().ScriptDevicePolls("slow_down")
		browse(t, srv, d.str("verification_uri_complete"))
		var got []string
		for range 4 {
			r := a.poll("usr_2", d.str("device_code"), s2)
			got = append(got, r.str("error"))
			srv.Clock().Advance(7 * time.Second)
		}
		if !slices.Equal(got, []string{"authorization_pending", "authorization_pending", "slow_down", ""}) {
			t.Errorf("answers = %q", got)
		}
	})
}

func TestCO_4_6_DeviceAuthorizationErrors(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{OmitInterval: true}})
	a := newAgent(t, srv, "agent.test")
	// CO-4.4-07
	if r := a.deviceStart(""); r.Status != 400 || r.str("error") != "invalid_scope" {
		t.Errorf("no scope: %d %s", r.Status, r.Raw)
	}
	// CO-4.4-08
	if r := a.deviceStart("poppy:admin"); r.Status != 400 || r.str("error") != "invalid_scope" {
		t.Errorf("unknown scope: %d %s", r.Status, r.Raw)
	}
	// CO-4.4-09: addresses is listed for direct only.
	if r := a.deviceStart("addresses"); r.Status != 400 || r.str("error") != "invalid_scope" {
		t.Errorf("scope of another type: %d %s", r.Status, r.Raw)
	}
	f := a.clientForm("scope", "poppy:read")
	f.Del("client_assertion")
	if r := postForm(t, srv, srv.EndpointURL(poppytest.EndpointDevice), f); r.Status != 401 || r.str("error") != "invalid_client" {
		t.Errorf("no client assertion: %d %s", r.Status, r.Raw)
	}
	// OmitInterval: no interval; the fake expects 5 s.
	d := a.deviceStart("poppy:read")
	if d.has("interval") {
		t.Errorf("interval present: %s", d.Raw)
	}
	sid := a.start("usr_1").str("session_id")
	a.poll("usr_1", d.str("device_code"), sid)
	srv.Clock().Advance(4 * time.Second)
	if r := a.poll("usr_1", d.str("device_code"), sid); r.str("error") != "slow_down" {
		t.Errorf("poll after 4 s = %s", r.Raw)
	}
	// A device_code in a URL is a violation; so is opening the page as the
	// agent, with what only it holds (here its Session Token).
	get(t, srv, srv.EndpointURL(poppytest.EndpointVerification)+"?user_code="+d.str("user_code")+"&x="+d.str("device_code"), "Authorization", "DPoP "+a.start("usr_1").str("access_token"))
	wantRules(t, srv, pa("4.6-03"), pa("4.4-02"))
	// verification_uri alone asks for the code.
	if _, err := srv.Browse(context.Background(), srv.EndpointURL(poppytest.EndpointVerification)); err == nil || !strings.Contains(err.Error(), "user code") {
		t.Errorf("Browse(verification_uri) = %v", err)
	}
	// A typed code is accepted in lower case without the dash.
	typed := strings.ToLower(strings.ReplaceAll(d.str("user_code"), "-", ""))
	browse(t, srv, srv.EndpointURL(poppytest.EndpointVerification)+"?user_code="+typed)
	srv.Clock().Advance(10 * time.Second)
	if r := a.poll("usr_1", d.str("device_code"), sid); r.Status != 200 {
		t.Errorf("poll after approval = %d %s", r.Status, r.Raw)
	}
}
