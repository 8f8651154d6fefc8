// Command browser joins a headless Chromium to a Session (spec 5) against
// the embedded fake Company from package poppytest: the agent signs the
// User in with Device Sign-In, then the browser it controls opens the
// Company's account page in the same Session and sees it signed in.
//
//	go run ./examples/browser
//
// It needs Chromium (the Debian package chromium). It is a program of its
// own, not a step of examples/quickstart, so that the quickstart neither
// downloads nor compiles the DevTools Protocol client (chromedp, cdproto)
// on a machine without a browser.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"os"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer) error {
	step := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }
	company, err := poppytest.New(nil)
	if err != nil {
		return err
	}
	defer company.Close()

	// The agent, its identity served at agent.test, and a Session signed in
	// with poppy:read (examples/quickstart shows each step).
	key, err := poppy.GenerateSigningKey()
	if err != nil {
		return err
	}
	identity, err := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID:     "https://agent.test/agent.json",
		RedirectURIs: []string{"https://agent.test/oauth/callback"},
		Keys:         []*poppy.SigningKey{key},
	})
	if err != nil {
		return err
	}
	company.HandleAgent("agent.test", identity.Handler(nil))
	agent, err := poppy.NewAgent(identity, &poppy.AgentOptions{Store: keystore.NewMemory(), HTTPClient: company.Client(), Clock: company.Clock()})
	if err != nil {
		return err
	}
	c, err := agent.Company(ctx, "example.test")
	if err != nil {
		return err
	}
	sess, err := c.Session(ctx, "local-user-42", nil)
	if err != nil {
		return err
	}
	prompter := signin.PrompterFuncs{ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
		_, err := company.Browse(ctx, p.VerificationURIComplete) // the fake's User approves
		return err
	}}
	if _, err := signin.Device(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, prompter); err != nil {
		return err
	}
	step("signed in to %s in Session %s", c.Name(), sess.ID())
	return browse(ctx, step, company, sess)
}
