package main

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
)

// A suggested command is safe to paste into a shell: arguments are quoted
// and nothing the Company sent can run.
func TestShellQuote(t *testing.T) {
	for in, want := range map[string]string{
		"example.com":      "example.com",
		"poppy:read":       "poppy:read",
		"a b":              "'a b'",
		"x';rm -rf ~;'":    `'x'\'';rm -rf ~;'\'''`,
		"$(reboot)":        "'$(reboot)'",
		"":                 "''",
		"semi;colon":       "'semi;colon'",
		"back`tick`":       "'back`tick`'",
		"line\nbreak":      "'line\nbreak'",
		"https://x.test/a": "https://x.test/a",
	} {
		got := shellQuote(in)
		if got != want {
			t.Errorf("shellQuote(%q) = %q, want %q", in, got, want)
		}
		if sh, err := exec.LookPath("sh"); err == nil && in != "" {
			out, err := exec.Command(sh, "-c", "printf %s "+got).Output()
			if err != nil || string(out) != in {
				t.Errorf("sh reads %q as %q (%v), want %q", got, out, err, in)
			}
		}
	}
}

func TestSignInHint(t *testing.T) {
	a := newApp(newInput(context.Background(), nil), &bytes.Buffer{}, &bytes.Buffer{}, &environment{getenv: func(string) string { return "" }})
	a.profile = "bob smith"
	err := a.signInHint(&poppy.Error{Code: "insufficient_scope", Scope: []string{"orders:write"}, SignInTypes: []string{"mediated", "direct"}}, nil, "shop.example", nil)
	var he *hintError
	if !errors.As(err, &he) || he.code != exitSignIn {
		t.Fatalf("err = %v, want exit code 3", err)
	}
	want := "run: poppy signin shop.example --method direct --scope orders:write --profile 'bob smith'"
	if he.hint != want {
		t.Fatalf("hint = %q\nwant %q", he.hint, want)
	}
	if !errors.Is(err, poppy.ErrInsufficientScope) {
		t.Fatal("the hint hides the protocol error")
	}
	var stderr bytes.Buffer
	a.stderr = &stderr
	if code := a.exit(context.Background(), nil, err); code != exitSignIn || !strings.Contains(stderr.String(), want) {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
}
