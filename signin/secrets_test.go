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

// Everything the SDK logs at debug level and everything a caller may
// format (results, errors, prompts, tokens) during all three sign-ins,
// renewals, a failed sign-in and a sign-out holds none of the secrets the
// exchange used: Session and Account Tokens, proofs, assertions, the
// password, one-time, device and authorization codes, PKCE verifiers.
func TestNoSecretInLogsOrFormattedValues(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RequireCode: true, RotateAccountTokens: true}}, &poppy.AgentOptions{Logger: logger})
	var formatted []string
	show := func(vs ...any) {
		for _, v := range vs {
			formatted = append(formatted, fmt.Sprintf("%v|%+v|%#v|%s", v, v, v, v))
		}
	}
	b := e.browser()
	c := e.Company("example.test")
	var issued []string // tokens issued, whether or not they were ever sent
	for i, run := range []func(*poppy.Session) (*poppy.SignInResult, error){
		func(s *poppy.Session) (*poppy.SignInResult, error) {
			return e.direct.SignIn(ctx, s, scopes("poppy:read", "poppy:write"), b)
		},
		func(s *poppy.Session) (*poppy.SignInResult, error) {
			return signin.Device(ctx, s, scopes("poppy:read"), b)
		},
		func(s *poppy.Session) (*poppy.SignInResult, error) {
			return signin.Mediated(ctx, s, scopes("poppy:read"), b)
		},
	} {
		s, err := c.Session(ctx, fmt.Sprint("user-", i), nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := run(s)
		if err != nil {
			t.Fatal(err)
		}
		tok, _ := s.Token(ctx, nil)
		at, _ := s.AccountToken(ctx, "")
		show(res, tok, at, s)
		issued = append(issued, tok.Value())
		if info, ok := e.Srv.Sessions().Get(s.ID()); ok {
			issued = append(issued, info.AccountToken)
		}
		e.Srv.Clock().Advance(2 * time.Hour)
		if code, body := e.Get(s, "/orders"); code != 200 {
			t.Fatalf("after renewal: %d %s", code, body)
		}
		if err := s.SignOut(ctx, ""); err != nil {
			t.Fatal(err)
		}
	}
	// A failed Mediated Sign-In and the errors a caller sees.
	b.values = map[string]string{"email": "user@example.test", "password": "wrong password value"}
	s, _ := c.Session(ctx, "user-failed", nil)
	_, err := signin.Mediated(ctx, s, scopes("poppy:read"), b)
	if !errors.Is(err, signin.ErrSignInFailed) {
		t.Fatalf("err = %v", err)
	}
	show(err)
	for _, p := range b.creds {
		show(p, signin.NewCredentials(p, map[string]string{"email": "user@example.test", "password": password}))
	}
	for _, p := range b.codes {
		show(p)
	}
	for _, p := range b.otps {
		show(p)
	}

	var secrets []string
	add := func(v string) {
		if len(v) >= 6 {
			secrets = append(secrets, v)
		}
	}
	for _, v := range issued {
		add(v)
	}
	add(password)
	add("wrong password value")
	for _, sc := range e.Srv.SignIn().Outbox() {
		add(sc.Code)
	}
	for _, r := range e.Srv.Requests() {
		add(r.AccessToken)
		add(r.Header.Get("DPoP"))
		for _, f := range []string{"assertion", "client_assertion", "refresh_token", "token", "code", "code_verifier", "device_code"} {
			add(r.Form.Get(f))
		}
	}
	if len(secrets) < 40 {
		t.Fatalf("only %d secrets collected: the test would prove little", len(secrets))
	}
	mu.Lock()
	all := logs.String() + strings.Join(formatted, "\n")
	mu.Unlock()
	if !strings.Contains(all, "poppy:") {
		t.Fatal("nothing was logged")
	}
	for _, sec := range secrets {
		if strings.Contains(all, sec) {
			t.Fatalf("a secret (%d bytes) reached a log line or a formatted value", len(sec))
		}
	}
}
