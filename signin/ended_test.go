package signin_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// Signing in on a Session the Company has ended (a stale keystore, or
// EndSessionsOnSignOut): the sign-in is completed on a new Session, the
// replacement is reported, and the User is asked once (PA-4.2-16, spec 4.5,
// 4.6, 4.7).

// replacements records OnSessionReplaced calls.
type replacements struct {
	mu    sync.Mutex
	pairs [][2]string
}

func (r *replacements) record(o, n string) {
	r.mu.Lock()
	r.pairs = append(r.pairs, [2]string{o, n})
	r.mu.Unlock()
}

func (r *replacements) check(t *testing.T, old string, sess *poppy.Session) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pairs) != 1 || r.pairs[0][0] != old || r.pairs[0][1] != sess.ID() || sess.ID() == old {
		t.Fatalf("OnSessionReplaced calls %v; ended Session %q, now %q", r.pairs, old, sess.ID())
	}
}

func endedEnv(t *testing.T, opts *poppytest.Options) (*env, *poppy.Session, *replacements, string) {
	r := &replacements{}
	e := newEnv(t, opts, &poppy.AgentOptions{OnSessionReplaced: r.record})
	sess := e.Session("alice")
	old := sess.ID()
	e.Srv.Sessions().End(old)
	return e, sess, r, old
}

func TestPA_4_2_16_DeviceSignInOnEndedSession(t *testing.T) {
	e, sess, r, old := endedEnv(t, nil)
	b := e.browser()
	e.Srv.SignIn().HoldDevicePolls(1)
	res, err := signin.Device(ctx, sess, scopes("poppy:read"), b)
	if err != nil {
		t.Fatal(err)
	}
	// PA-4.2-16: one prompt, the same device code completed on a new Session.
	if len(b.codes) != 1 || len(e.Requests(poppytest.EndpointDevice)) != 1 {
		t.Fatalf("%d prompts, %d device authorizations", len(b.codes), len(e.Requests(poppytest.EndpointDevice)))
	}
	if !sess.SignedIn() || res.SessionID != sess.ID() {
		t.Fatalf("signed in %v, result Session %q, Session %q", sess.SignedIn(), res.SessionID, sess.ID())
	}
	r.check(t, old, sess)
	ps := polls(e)
	if last := ps[len(ps)-1]; last.Form.Get("session_id") != sess.ID() || last.Status != 200 {
		t.Fatalf("last poll for %q answered %d", last.Form.Get("session_id"), last.Status)
	}
	if ps[0].Form.Get("device_code") != ps[len(ps)-1].Form.Get("device_code") {
		t.Fatal("a second device code")
	}
	// RFC 8628 3.5: the poll on the new Session still waits the interval.
	for i := 1; i < len(ps); i++ {
		if d := ps[i].Time.Sub(ps[i-1].Time); d < 5*time.Second {
			t.Fatalf("poll %d only %v after the previous", i, d)
		}
	}
}

func TestPA_4_2_16_DirectSignInOnEndedSession(t *testing.T) {
	e, sess, r, old := endedEnv(t, nil)
	b := e.browser()
	res, err := e.direct.SignIn(ctx, sess, scopes("poppy:read"), b)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.urls) != 1 {
		t.Fatalf("the User was sent to %d consent pages", len(b.urls))
	}
	if !sess.SignedIn() || res.SessionID != sess.ID() {
		t.Fatalf("signed in %v, result Session %q, Session %q", sess.SignedIn(), res.SessionID, sess.ID())
	}
	r.check(t, old, sess)
	ex := grants(e, "authorization_code")
	if len(ex) != 2 || ex[0].ErrorCode != "invalid_session" || ex[1].Status != 200 || ex[1].Form.Get("code") != ex[0].Form.Get("code") {
		t.Fatalf("exchanges %v", ex)
	}
}

func TestPA_4_2_16_MediatedSignInOnEndedSession(t *testing.T) {
	e, sess, r, old := endedEnv(t, nil)
	b := e.browser()
	if _, err := signin.Mediated(ctx, sess, scopes("poppy:read"), b); err != nil {
		t.Fatal(err)
	}
	if len(b.creds) != 1 || !sess.SignedIn() {
		t.Fatalf("%d credential prompts, signed in %v", len(b.creds), sess.SignedIn())
	}
	r.check(t, old, sess)
}

// The Company ends the Session while the User types the one-time code: the
// sign-in belongs to the ended Session, so it can't be finished on a new
// one without asking the User again. The SDK says so instead of asking.
func TestMediatedSignInSessionEndedDuringCode(t *testing.T) {
	r := &replacements{}
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RequireCode: true}}, &poppy.AgentOptions{OnSessionReplaced: r.record})
	sess := e.Session("alice")
	b := e.browser()
	old := sess.ID()
	b.code = func() string {
		e.Srv.Sessions().End(old)
		return e.Srv.SignIn().LastCode()
	}
	_, err := signin.Mediated(ctx, sess, scopes("poppy:read"), b)
	if !errors.Is(err, signin.ErrSessionEnded) {
		t.Fatalf("err = %v, want ErrSessionEnded", err)
	}
	if len(b.creds) != 1 || len(b.otps) != 1 {
		t.Fatalf("asked %d times for credentials, %d for codes", len(b.creds), len(b.otps))
	}
	r.check(t, old, sess)
}

// A Company that uses up the code when it answers invalid_session: the
// exchange on the new Session gets invalid_grant, and the sign-in fails
// with ErrSessionEnded without asking the User again.
func TestDirectSignInEndedSessionCodeUsedUp(t *testing.T) {
	r := &replacements{}
	var e *env
	e = newEnv(t, nil, &poppy.AgentOptions{OnSessionReplaced: func(o, n string) {
		r.record(o, n)
		e.Srv.Faults().ForceError(poppytest.EndpointToken, poppytest.Fault{Code: "invalid_grant"})
	}})
	sess := e.Session("alice")
	old := sess.ID()
	e.Srv.Sessions().End(old)
	b := e.browser()
	_, err := e.direct.SignIn(ctx, sess, scopes("poppy:read"), b)
	if !errors.Is(err, signin.ErrSessionEnded) {
		t.Fatalf("err = %v, want ErrSessionEnded", err)
	}
	if len(b.urls) != 1 || sess.SignedIn() {
		t.Fatalf("%d consent pages, signed in %v", len(b.urls), sess.SignedIn())
	}
	r.check(t, old, sess)
}

// Signing in again for scopes the Session already holds, with a valid
// signed-in Session Token, sends nothing (spec 4.4).
func TestPA_4_4_15_SignInReusesSignedInSession(t *testing.T) {
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RotateAccountTokens: true}}, nil)
	sess := e.Session("alice")
	b := e.browser()
	if _, err := signin.Device(ctx, sess, scopes("poppy:read", "poppy:write"), b); err != nil {
		t.Fatal(err)
	}
	before := len(e.Requests())
	for i := range 3 {
		for _, f := range []func() (*poppy.SignInResult, error){
			func() (*poppy.SignInResult, error) { return signin.Device(ctx, sess, scopes("poppy:read"), b) },
			func() (*poppy.SignInResult, error) {
				return e.direct.SignIn(ctx, sess, scopes("poppy:read", "poppy:write"), b)
			},
			func() (*poppy.SignInResult, error) { return signin.Mediated(ctx, sess, scopes("poppy:write"), b) },
		} {
			res, err := f()
			if err != nil {
				t.Fatal(err)
			}
			if res == nil || !res.Reused || res.SessionID != sess.ID() || !has(res.Granted, "poppy:write") {
				t.Fatalf("round %d: result %+v", i, res)
			}
		}
	}
	if got := e.Requests()[before:]; len(got) != 0 {
		t.Fatalf("%d requests, first %s %s", len(got), got[0].Method, got[0].URL)
	}
	if len(b.codes) != 1 || len(b.urls) != 0 || len(b.creds) != 0 {
		t.Fatal("the User was asked again")
	}
	// Once the token is due for renewal, the Account Token is used (one
	// refresh), and then reused again.
	e.Srv.Clock().Advance(time.Hour)
	for range 2 {
		res, err := signin.Device(ctx, sess, scopes("poppy:read"), b)
		if err != nil || !res.Reused {
			t.Fatalf("after expiry: %+v, %v", res, err)
		}
	}
	if n := len(grants(e, "refresh_token")); n != 1 {
		t.Fatalf("%d refresh grants after expiry, want 1", n)
	}
}
