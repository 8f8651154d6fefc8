package signin_test

import (
	"errors"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// Direct.SignIn keeps what kind of error ended the
// exchange, in the process that exchanged the code and in one that only
// waited on the shared keystore: errors.Is finds ErrInvalidTokenResponse,
// and errors.As finds the Company's *poppy.Error with its code and status.
func TestDirectSignInKeepsErrorKind(t *testing.T) {
	for _, across := range []bool{false, true} {
		name := "one process"
		if across {
			name = "across processes"
		}
		t.Run(name, func(t *testing.T) {
			t.Run("company error", func(t *testing.T) { directCompanyError(t, across) })
			t.Run("sdk error", func(t *testing.T) { directSDKError(t, across) })
		})
	}
}

// directCompanyError: the Company's error, invalid_target (HTTP 400).
func directCompanyError(t *testing.T, across bool) {
	e := newEnv(t, nil, nil)
	if across {
		serveOnOtherReplica(t, e)
	}
	sess := e.Session("alice")
	e.Srv.Faults().ForceError(poppytest.EndpointToken, poppytest.Fault{Status: 400, Code: "invalid_target"})
	_, err := e.direct.SignIn(ctx, sess, scopes("poppy:read"), e.browser())
	var pe *poppy.Error
	if !errors.As(err, &pe) || pe.Code != "invalid_target" || pe.Status != 400 {
		t.Fatalf("SignIn: %v; errors.As *poppy.Error: %+v", err, pe)
	}
	if !errors.Is(err, poppy.ErrInvalidTarget) || !errors.Is(err, signin.ErrSignInFailed) {
		t.Fatalf("SignIn: %v, want it to match ErrInvalidTarget and ErrSignInFailed", err)
	}
}

// directSDKError: the SDK's own error, a token response without an
// Account Token.
func directSDKError(t *testing.T, across bool) {
	e2, h := hostileEnv(t, nil, nil)
	e2 = withDirect(t, e2) // on the hostile Agent
	if across {
		serveOnOtherReplica(t, e2)
	}
	h.OnJSON("/oauth/token", func(m map[string]any) {
		if _, ok := m["refresh_token"]; ok {
			delete(m, "refresh_token")
		}
	})
	_, err := e2.direct.SignIn(ctx, e2.Session("bob"), scopes("poppy:read"), e2.browser())
	if !errors.Is(err, poppy.ErrInvalidTokenResponse) {
		t.Fatalf("SignIn: %v, want it to match ErrInvalidTokenResponse", err)
	}
}

// serveOnOtherReplica makes a second Agent and Direct on e's keystore
// serve the callback, so that the exchange happens there and e's Direct
// learns the outcome from the pending record alone.
func serveOnOtherReplica(t *testing.T, e *env) {
	t.Helper()
	d2, err := signin.NewDirect(e.NewAgent(&poppy.AgentOptions{HTTPClient: e.Agent.HTTPClient()}), nil)
	if err != nil {
		t.Fatal(err)
	}
	e.Serve(d2.Handler())
}
