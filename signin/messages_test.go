package signin_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/signin"
)

// A declined Device Sign-In says so once, and still gives the Company's
// error to errors.As.
func TestAccessDeniedSaidOnce(t *testing.T) {
	e := newEnv(t, nil, nil)
	sess := e.Session("alice")
	e.Srv.SignIn().Deny()
	_, err := signin.Device(ctx, sess, scopes("poppy:read"), e.browser())
	var pe *poppy.Error
	if !errors.Is(err, signin.ErrAccessDenied) || !errors.As(err, &pe) || pe.Code != "access_denied" {
		t.Fatalf("err = %v", err)
	}
	if strings.Count(err.Error(), "declined") != 1 || strings.Contains(err.Error(), "poppy:") {
		t.Fatalf("err = %q", err)
	}
}

// A PrompterFuncs without the function a sign-in type needs names it.
func TestPrompterFuncsNamesTheMissingFunc(t *testing.T) {
	e := newEnv(t, nil, nil)
	sess := e.Session("alice")
	_, err := signin.Device(ctx, sess, scopes("poppy:read"), signin.PrompterFuncs{})
	if err == nil || !strings.Contains(err.Error(), "ShowCodeFunc") {
		t.Fatalf("err = %v", err)
	}
	_, err = signin.Mediated(ctx, sess, scopes("poppy:read"), signin.PrompterFuncs{})
	if err == nil || !strings.Contains(err.Error(), "CredentialsFunc") {
		t.Fatalf("err = %v", err)
	}
	_, err = e.direct.SignIn(ctx, sess, scopes("poppy:read"), signin.PrompterFuncs{})
	if err == nil || !strings.Contains(err.Error(), "OpenURLFunc") {
		t.Fatalf("err = %v", err)
	}
}
