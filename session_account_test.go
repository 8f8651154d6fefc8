package poppy_test

import (
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/signin"
)

// Session.Account names the Account Token a Session is signed in with
// the account a standing permission names), and nothing when the
// Session is signed out.
func TestSessionAccount(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	if got := s.Account(); got != "" {
		t.Errorf("signed out: %q", got)
	}
	if _, err := signin.Mediated(ctx, s, &poppy.SignInOptions{Scopes: []string{"poppy:read"}, Account: "business"}, user); err != nil {
		t.Fatal(err)
	}
	if got := s.Account(); got != "business" {
		t.Errorf("signed in: %q", got)
	}
	if err := s.SignOut(ctx, "business"); err != nil {
		t.Fatal(err)
	}
	if got := s.Account(); got != "" {
		t.Errorf("after SignOut: %q", got)
	}
}
