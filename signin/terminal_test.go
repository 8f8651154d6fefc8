package signin_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// The terminal prompter asks for exactly the declared fields, in order,
// and prints the Company's text with control characters escaped.
func TestTerminalPrompterMediated(t *testing.T) {
	e := newEnv(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{DocumentFields: map[string]any{
		"organization": map[string]any{"name": "Shop\x1b]0;pwned\x07\x1b[2J", "domain": "example.test"},
	}}}, nil)
	s := e.Session("alice")
	var out bytes.Buffer
	in := strings.NewReader("user@example.test\ncorrect horse\nleft over\n")
	p := signin.TerminalPrompter(&out, in)
	res, err := signin.Mediated(ctx, s, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, p)
	if err != nil {
		t.Fatalf("Mediated: %v\n%s", err, out.String())
	}
	if len(res.Granted) != 1 {
		t.Fatalf("granted %v", res.Granted)
	}
	got := out.String()
	if strings.ContainsAny(got, "\x1b\x07") {
		t.Fatalf("a control character reached the terminal: %q", got)
	}
	if !strings.Contains(got, `Shop\x1b]0;pwned\a\x1b[2J`) {
		t.Fatalf("the Company name is not shown escaped: %q", got)
	}
	if !strings.Contains(got, "Email: ") || !strings.Contains(got, "Password: ") {
		t.Fatalf("the declared fields were not asked for: %q", got)
	}
	if strings.Contains(got, "correct horse") {
		t.Fatal("the password was printed")
	}
	// Nothing after the answers was consumed.
	rest := make([]byte, 64)
	n, _ := in.Read(rest)
	if string(rest[:n]) != "left over\n" {
		t.Fatalf("the prompter read past its answers: %q left", rest[:n])
	}
}

func TestTerminalPrompterNoAnswer(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.Session("alice")
	p := signin.TerminalPrompter(&bytes.Buffer{}, strings.NewReader(""))
	if _, err := signin.Mediated(ctx, s, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, p); err != signin.ErrNoAnswer {
		t.Fatalf("err = %v, want ErrNoAnswer", err)
	}
}

func TestTerminalPrompterDevice(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.Session("alice")
	var out bytes.Buffer
	p := signin.TerminalPrompter(&out, strings.NewReader(""))
	b := e.browser()
	u := signin.PrompterFuncs{ShowCodeFunc: func(c context.Context, cp *signin.CodePrompt) error {
		if err := p.ShowCode(c, cp); err != nil {
			return err
		}
		return b.ShowCode(c, cp)
	}}
	if _, err := signin.Device(ctx, s, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, u); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "enter the code") || !strings.Contains(out.String(), e.Srv.EndpointURL(poppytest.EndpointVerification)) {
		t.Fatalf("device prompt: %q", out.String())
	}
}
