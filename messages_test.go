package poppy_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
)

// Messages a new user of the SDK reads: each says its package once, names
// what it is about, and leaves out what doesn't belong in a log.

func TestIdentityURLErrorPrefixOnce(t *testing.T) {
	key, _ := poppy.GenerateSigningKey()
	_, err := poppy.NewIdentity(poppy.IdentityConfig{ClientID: "http://agent.test/agent.json", Keys: []*poppy.SigningKey{key}})
	if !errors.Is(err, poppy.ErrInsecureURL) || strings.Count(err.Error(), "poppy:") != 1 || !strings.Contains(err.Error(), "client_id") {
		t.Fatalf("err = %q", err)
	}
}

func TestCompanyDomainWithTrailingSlash(t *testing.T) {
	e := newEnv(t, nil, nil)
	for _, d := range []string{"example.test/", "https://example.test/", "https://example.test", "EXAMPLE.test."} {
		c, err := e.agent.Company(ctx, d)
		if err != nil {
			t.Fatalf("Company(%q): %v", d, err)
		}
		if c.Domain() != "example.test" {
			t.Fatalf("Company(%q).Domain() = %q", d, c.Domain())
		}
	}
	if _, err := e.agent.Company(ctx, "example.test/x"); err == nil {
		t.Fatal("a path was accepted")
	}
}

// A formatted Session never shows the local User's name (applications use
// e-mail addresses) nor a token.
func TestSessionFormatLeavesOutTheLocalUser(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice@example.com")
	tok, err := s.Token(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{s.String(), fmt.Sprintf("%v %+v %#v %s", s, s, s, s)} {
		if strings.Contains(out, "alice") || strings.Contains(out, tok.Value()) || !strings.Contains(out, s.ID()) {
			t.Fatalf("formatted Session %q", out)
		}
	}
	if s.User() != "alice@example.com" || s.UserID() == s.User() {
		t.Fatalf("User %q, UserID %q", s.User(), s.UserID())
	}
}

// The debug record of each OAuth request names the endpoint it went to.
func TestLogNamesTheEndpoint(t *testing.T) {
	var mu sync.Mutex
	var b strings.Builder
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &b}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, nil, &poppy.AgentOptions{Logger: logger})
	c := e.company("example.test")
	if _, err := e.session("alice").Token(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := poppy.PostClientAuthenticated(ctx, c, c.Metadata().DeviceAuthorizationEndpoint, map[string][]string{"scope": {"poppy:read"}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	logs := b.String()
	mu.Unlock()
	if !strings.Contains(logs, `msg="poppy: token endpoint"`) || !strings.Contains(logs, `msg="poppy: device authorization endpoint"`) {
		t.Fatalf("logs:\n%s", logs)
	}
}

// ExtensionRequiredError: found as a value or a pointer, and it unwraps to
// the Company's *Error.
func TestExtensionRequiredErrorForms(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	e.srv.Faults().ForceError(poppytest.EndpointAPI, poppytest.Fault{Status: 403, Code: "extension_required"})
	_, err := doPost(s, e.srv.EndpointURL(poppytest.EndpointAPI)+"/orders/ord_1/exchanges", `{}`)
	var xp *poppy.ExtensionRequiredError
	var xv poppy.ExtensionRequiredError
	if !errors.As(err, &xp) || !errors.As(err, &xv) || xp.Extension != "operations" || xv.Extension != "operations" {
		t.Fatalf("err = %v", err)
	}
	var pe *poppy.Error
	if !errors.Is(xv, poppy.ErrExtensionRequired) || !errors.As(xp, &pe) || pe.Status != 403 {
		t.Fatalf("unwrap: %v", pe)
	}
}
