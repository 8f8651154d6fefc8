package poppy_test

// The sign-in flows' token-endpoint steps, which live beside the Session
// (deviceauth.go, authcode.go, mediated.go): each does only its protocol
// step, for the Session it belongs to. Package signin's tests run the
// whole flows on them.

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
)

// PA-4.6-03: the device code never leaves the DeviceAuthorization: not in
// String, %v, %#v or a log record; and a DeviceAuthorization polls only
// for the Session that asked for it.
func TestDeviceAuthorizationSteps(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	other, err := e.company("example.test").Session(ctx, "bob", nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := &poppy.SignInOptions{Scopes: []string{"poppy:read"}}
	da, err := s.AuthorizeDevice(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if da.UserCode == "" || da.VerificationURI == "" || da.Interval < 1e9 || !da.Expires.After(e.srv.Clock().Now()) {
		t.Fatalf("DeviceAuthorization %+v", da)
	}
	before := len(sdkRequests(e.srv, poppytest.EndpointToken))
	if _, err := other.PollDevice(ctx, da); err == nil {
		t.Fatal("another Session polled with the device code")
	}
	if _, err := s.PollDevice(ctx, nil); err == nil {
		t.Fatal("PollDevice(nil) succeeded")
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointToken)) - before; n != 0 {
		t.Fatalf("%d token requests for refused polls", n)
	}
	e.srv.Clock().Advance(da.Interval)
	_, _ = s.PollDevice(ctx, da) // approved or pending: either way, one poll
	var code string
	for _, r := range sdkRequests(e.srv, poppytest.EndpointToken) {
		if c := r.Form.Get("device_code"); c != "" {
			code = c
		}
	}
	if code == "" {
		t.Fatal("no poll carried a device code")
	}
	var logs strings.Builder
	slog.New(slog.NewTextHandler(&logs, nil)).Info("x", "da", da)
	for _, out := range []string{da.String(), fmt.Sprint(da), fmt.Sprintf("%+v %#v %s", da, da, da), logs.String()} {
		if strings.Contains(out, code) {
			t.Fatalf("the device code shows in %q", out)
		}
	}
}

// PA-4.5-04: ExchangeCode sends a redirect_uri only when it is one of the
// identity's, byte for byte; nothing is sent otherwise.
func TestExchangeCodeRedirectURI(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	before := len(sdkRequests(e.srv, poppytest.EndpointToken))
	opts := &poppy.SignInOptions{Scopes: []string{"poppy:read"}}
	for _, ru := range []string{"https://evil.test/callback", testRedirect + "/", strings.ToUpper(testRedirect), ""} {
		if _, err := s.ExchangeCode(ctx, "code", ru, "verifier", opts); err == nil {
			t.Errorf("ExchangeCode with redirect_uri %q succeeded", ru)
		}
	}
	if _, err := s.ExchangeCode(ctx, "", testRedirect, "verifier", opts); err == nil {
		t.Error("ExchangeCode without a code succeeded")
	}
	if _, err := s.ExchangeCode(ctx, "code", testRedirect, "", opts); err == nil {
		t.Error("ExchangeCode without a code_verifier succeeded")
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointToken)) - before; n != 0 {
		t.Fatalf("%d token requests", n)
	}
}

// PA-4.7-09: a one-time code goes only with the code_required step of the
// Session that sent the credentials.
func TestMediatedCodeStepOwnership(t *testing.T) {
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RequireCode: true}}, nil)
	s := e.session("alice")
	other, err := e.company("example.test").Session(ctx, "bob", nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := &poppy.SignInOptions{Scopes: []string{"poppy:read"}}
	fields := map[string]string{}
	for _, f := range e.company("example.test").Document().Auth.Mediated.Fields {
		fields[f.Name] = mediatedValue(f.Name)
	}
	step, err := s.SendMediatedCredentials(ctx, fields, opts)
	if err != nil {
		t.Fatal(err)
	}
	if step.Status != "code_required" || step.Result != nil {
		t.Fatalf("step %+v, want code_required", step)
	}
	before := len(sdkRequests(e.srv, poppytest.EndpointSignIn))
	if _, err := other.SendMediatedCode(ctx, step, e.srv.SignIn().LastCode()); err == nil {
		t.Fatal("another Session sent the code")
	}
	if _, err := s.SendMediatedCode(ctx, nil, e.srv.SignIn().LastCode()); err == nil {
		t.Fatal("SendMediatedCode(nil) succeeded")
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointSignIn)) - before; n != 0 {
		t.Fatalf("%d requests for refused codes", n)
	}
	done, err := s.SendMediatedCode(ctx, step, e.srv.SignIn().LastCode())
	if err != nil || done.Status != "complete" || done.Result == nil || !s.SignedIn() {
		t.Fatalf("SendMediatedCode = %+v, %v; signed in %v", done, err, s.SignedIn())
	}
	if _, err := s.SendMediatedCode(ctx, done, "123456"); err == nil {
		t.Fatal("a code for a complete sign-in was sent")
	}
	// PA-4.7-01: a listed field missing is an error, and nothing is sent.
	delete(fields, e.company("example.test").Document().Auth.Mediated.Fields[0].Name)
	before = len(sdkRequests(e.srv, poppytest.EndpointSignIn))
	if _, err := other.SendMediatedCredentials(ctx, fields, opts); err == nil {
		t.Fatal("credentials without a listed field were sent")
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointSignIn)) - before; n != 0 {
		t.Fatalf("%d requests", n)
	}
}

// mediatedValue is the fake's default account's credential for field.
func mediatedValue(field string) string {
	return map[string]string{"email": "user@example.test", "password": "correct horse"}[field]
}
