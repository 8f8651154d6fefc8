package signin_test

// Attacks on sign-in by a hostile Company, kept together. Each
// failed on the code before its fix (commit b9fcb33). The hostile Company
// is the strict fake behind a transport that rewrites its answers.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// hostileEnv is newEnv whose agent reaches the fake through a Hostile.
func hostileEnv(t *testing.T, opts *poppytest.Options, aopts *poppy.AgentOptions) (*env, *testenv.Hostile) {
	t.Helper()
	e := newEnv(t, opts, aopts)
	h := testenv.NewHostile(e.Srv.Transport())
	var o poppy.AgentOptions
	if aopts != nil {
		o = *aopts
	}
	o.HTTPClient = &http.Client{Transport: h}
	e.Agent = e.NewAgent(&o)
	return e, h
}

const devicePath = "/oauth/device"

// Item 1, PA-4.6-04: "interval": 10000000000 overflowed time.Duration into
// a negative wait: 8,590 polls in 2 s, each freshly signed. Now an interval
// is honoured as sent, and one longer than expires_in
// (here, an hour) is the Company's error: refused before the User sees a
// code, with no poll at all.
func TestAttackDeviceIntervalOverflow(t *testing.T) {
	for _, v := range []json.Number{"10000000000", "1e300", "99999999999999999999999"} {
		e, h := hostileEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{DeviceCodeTTL: time.Hour}}, nil)
		h.OnJSON(devicePath, func(m map[string]any) { m["interval"] = v })
		sess := e.Session("alice")
		b := e.browser()
		b.noVisit = true // the User never finishes
		bound, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := signin.Device(bound, sess, scopes("poppy:read"), b)
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) || len(b.codes) != 0 || len(polls(e)) != 0 {
			t.Fatalf("interval %s: %v, %d prompts, %d polls; want the response refused", v, err, len(b.codes), len(polls(e)))
		}
	}
}

// Item 1: a missing expires_in (RFC 8628 requires it) polled until ctx
// ended. It is an invalid response: the User is not even shown the code.
func TestAttackDeviceMissingExpiresIn(t *testing.T) {
	for _, v := range []any{nil, json.Number("0"), json.Number("-1"), "600"} {
		e, h := hostileEnv(t, nil, nil)
		h.OnJSON(devicePath, func(m map[string]any) {
			if v == nil {
				delete(m, "expires_in")
			} else {
				m["expires_in"] = v
			}
		})
		sess := e.Session("alice")
		b := e.browser()
		bound, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := signin.Device(bound, sess, scopes("poppy:read"), b)
		cancel()
		if err == nil || errors.Is(err, context.DeadlineExceeded) || len(b.codes) != 0 || len(polls(e)) != 0 {
			t.Fatalf("expires_in %v: %v, %d prompts, %d polls", v, err, len(b.codes), len(polls(e)))
		}
	}
}

// Item 10: verification_uri was checked by its scheme only, so
// "https:javascript:…" and "https:///device" reached the User.
func TestAttackVerificationURI(t *testing.T) {
	for _, bad := range []string{
		"https:javascript:alert(1)", "https:///device", "https://user@evil.test/device",
		"javascript:alert(1)", "http://evil.test/device", "//evil.test/device", "https://",
	} {
		for _, field := range []string{"verification_uri", "verification_uri_complete"} {
			e, h := hostileEnv(t, nil, nil)
			h.OnJSON(devicePath, func(m map[string]any) { m[field] = bad })
			sess := e.Session("alice")
			b := e.browser()
			_, err := signin.Device(ctx, sess, scopes("poppy:read"), b)
			if !errors.Is(err, poppy.ErrInsecureURL) || len(b.codes) != 0 {
				t.Fatalf("%s %q: %v, %d prompts: want ErrInsecureURL before the User sees it", field, bad, err, len(b.codes))
			}
		}
	}
}

var errShown = errors.New("shown")

// Item 12: signin.Device refused an http:// loopback verification_uri, and
// signin.Mediated an http:// loopback auth.mediated.endpoint, though the
// rest of the SDK honours UnsafeAllowLoopbackHTTP.
func TestAttackSignInHonoursLoopbackOption(t *testing.T) {
	const local = "http://127.0.0.1:8080/device"
	for _, allow := range []bool{false, true} {
		e, h := hostileEnv(t, nil, &poppy.AgentOptions{UnsafeAllowLoopbackHTTP: allow})
		h.OnJSON(devicePath, func(m map[string]any) {
			m["verification_uri"] = local
			delete(m, "verification_uri_complete")
		})
		sess := e.Session("alice")
		var shown string
		p := signin.PrompterFuncs{ShowCodeFunc: func(_ context.Context, c *signin.CodePrompt) error {
			shown = c.VerificationURI
			return errShown
		}}
		_, err := signin.Device(ctx, sess, scopes("poppy:read"), p)
		switch {
		case allow && (!errors.Is(err, errShown) || shown != local):
			t.Fatalf("Device with UnsafeAllowLoopbackHTTP: %v (shown %q)", err, shown)
		case !allow && !errors.Is(err, poppy.ErrInsecureURL):
			t.Fatalf("Device without the option: %v", err)
		}
	}

	// Mediated: the endpoint on loopback over http.
	const mediated = "http://127.0.0.1:8080/poppy/sign-in"
	for _, allow := range []bool{false, true} {
		e, h := hostileEnv(t, nil, &poppy.AgentOptions{UnsafeAllowLoopbackHTTP: allow})
		h.OnJSON("/.well-known/poppy.json", func(m map[string]any) {
			m["auth"].(map[string]any)["mediated"].(map[string]any)["endpoint"] = mediated
		})
		if !allow {
			// Discovery itself refuses the document: an http:// mediated
			// endpoint without the option.
			if _, err := e.Agent.Company(ctx, "example.test"); !errors.Is(err, poppy.ErrInvalidDocument) {
				t.Fatalf("discovery of an http mediated endpoint without the option: %v", err)
			}
			continue
		}
		sess := e.Session("alice")
		b := e.browser()
		_, err := signin.Mediated(ctx, sess, scopes("poppy:read"), b)
		// The credentials were asked for and sent towards the endpoint;
		// the fake serves no http://127.0.0.1:8080, so the POST fails.
		if len(b.creds) != 1 || err == nil || errors.Is(err, poppy.ErrInsecureURL) {
			t.Fatalf("Mediated with UnsafeAllowLoopbackHTTP: %v (%d prompts)", err, len(b.creds))
		}
	}
}
