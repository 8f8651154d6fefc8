package signin_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

func polls(e *env) []poppytest.Request {
	return grants(e, "urn:ietf:params:oauth:grant-type:device_code")
}

func TestPA_4_6_DeviceSignIn(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, nil, &poppy.AgentOptions{Logger: logger})
	sess := e.Session("alice")
	b := e.browser()
	e.Srv.SignIn().HoldDevicePolls(3)
	res, err := signin.Device(ctx, sess, scopes("poppy:read", "poppy:write"), b)
	if err != nil {
		t.Fatal(err)
	}
	dev := e.Requests(poppytest.EndpointDevice)
	if len(dev) != 1 {
		t.Fatalf("%d device authorization requests", len(dev))
	}
	// PA-4.6-01: scope, client_id, client assertion; no proof.
	if dev[0].Form.Get("scope") != "poppy:read poppy:write" || dev[0].Form.Get("client_id") == "" || dev[0].ClientAssertion == nil || dev[0].Proof != nil {
		t.Fatalf("device request %v", dev[0].Form)
	}
	var answer struct {
		DeviceCode string `json:"device_code"`
		UserCode   string `json:"user_code"`
	}
	deviceCode := polls(e)[0].Form.Get("device_code")
	// PA-4.6-02: exactly what the Company returned.
	p := b.codes[0]
	if p.UserCode == "" || !strings.HasPrefix(p.VerificationURI, "https://") || !strings.Contains(p.VerificationURIComplete, p.UserCode) {
		t.Fatalf("prompt %+v", p)
	}
	_ = answer
	// PA-4.6-03: the device code is never shown or logged.
	if strings.Contains(fmt.Sprintf("%+v", *p), deviceCode) || strings.Contains(logs.String(), deviceCode) {
		t.Fatal("device_code shown or logged")
	}
	ps := polls(e)
	// PA-4.6-06: three pendings, then success on the fourth poll.
	if len(ps) != 4 || ps[3].Status != 200 {
		t.Fatalf("%d polls", len(ps))
	}
	for i, r := range ps {
		// PA-4.6-04: every parameter, and interval apart.
		if r.Form.Get("session_id") != sess.ID() || r.Proof == nil || r.ClientAssertion == nil || r.Form.Get("device_code") != deviceCode {
			t.Fatalf("poll %d form %v", i, r.Form)
		}
		if i > 0 && r.Time.Sub(ps[i-1].Time) < 5*time.Second {
			t.Fatalf("poll %d only %v after the previous", i, r.Time.Sub(ps[i-1].Time))
		}
	}
	// PA-4.6-08
	if !sess.SignedIn() || !has(res.Granted, "poppy:write") {
		t.Fatalf("signed in %v, granted %v", sess.SignedIn(), res.Granted)
	}
}

func TestPA_4_6_05_DefaultInterval(t *testing.T) {
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{OmitInterval: true}}, nil)
	sess := e.Session("alice")
	e.Srv.SignIn().HoldDevicePolls(2)
	if _, err := signin.Device(ctx, sess, scopes("poppy:read"), e.browser()); err != nil {
		t.Fatal(err)
	}
	ps := polls(e)
	for i := 1; i < len(ps); i++ {
		// PA-4.6-05
		if gap := ps[i].Time.Sub(ps[i-1].Time); gap < 5*time.Second {
			t.Fatalf("gap %v without interval", gap)
		}
	}
}

func TestPA_4_6_07_SlowDown(t *testing.T) {
	e := newEnv(t, nil, nil)
	sess := e.Session("alice")
	e.Srv.SignIn().ScriptDevicePolls("authorization_pending", "slow_down", "authorization_pending", "authorization_pending")
	if _, err := signin.Device(ctx, sess, scopes("poppy:read"), e.browser()); err != nil {
		t.Fatal(err)
	}
	ps := polls(e)
	if len(ps) != 5 {
		t.Fatalf("%d polls", len(ps))
	}
	// PA-4.6-07: after slow_down on poll 2, every later gap is at least 10 s.
	for i := 2; i < len(ps); i++ {
		if gap := ps[i].Time.Sub(ps[i-1].Time); gap < 10*time.Second {
			t.Fatalf("gap %d = %v after slow_down", i, gap)
		}
	}
}

func TestPA_4_6_09_AccessDenied(t *testing.T) {
	e := newEnv(t, nil, nil)
	sess := e.Session("alice")
	e.Srv.SignIn().Deny()
	_, err := signin.Device(ctx, sess, scopes("poppy:read"), e.browser())
	// PA-4.6-09
	if !errors.Is(err, signin.ErrAccessDenied) {
		t.Fatalf("err = %v", err)
	}
	n := len(polls(e))
	e.Srv.Clock().Advance(10 * time.Minute)
	if len(polls(e)) != n {
		t.Fatal("polled after access_denied")
	}
	if sess.SignedIn() {
		t.Fatal("signed in")
	}
}

func TestPA_4_6_10_and_11_Expiry(t *testing.T) {
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{DeviceCodeTTL: time.Minute}}, nil)
	sess := e.Session("alice")
	e.Srv.SignIn().NeverAnswer()
	_, err := signin.Device(ctx, sess, scopes("poppy:read"), e.browser())
	// PA-4.6-11: stops by itself at expires_in (PA-4.6-10 when the Company
	// says expired_token first).
	if !errors.Is(err, signin.ErrDeviceCodeExpired) {
		t.Fatalf("err = %v", err)
	}
	ps := polls(e)
	if last := ps[len(ps)-1]; last.Time.Sub(e.Requests(poppytest.EndpointDevice)[0].Time) > time.Minute+time.Second {
		t.Fatalf("polled past expires_in: %v", last.Time.Sub(e.Requests(poppytest.EndpointDevice)[0].Time))
	}
}

func TestPA_4_6_10_ExpiredToken(t *testing.T) {
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{DeviceCodeTTL: time.Minute}}, nil)
	sess := e.Session("alice")
	b := e.browser()
	b.noVisit = true
	e.Srv.Faults().ForceError(poppytest.EndpointToken, poppytest.Fault{Status: 400, Code: "expired_token"})
	_, err := signin.Device(ctx, sess, scopes("poppy:read"), b)
	// PA-4.6-10
	if !errors.Is(err, signin.ErrDeviceCodeExpired) {
		t.Fatalf("err = %v", err)
	}
	if n := len(polls(e)); n != 1 {
		t.Fatalf("%d polls, want 1", n)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *strings.Builder
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
