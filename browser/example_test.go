package browser_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/browser"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/poppytest/agenttest"
)

// The part of a join that needs no browser: sign the browser assertion,
// build the self-submitting join page and serve it once on loopback. A
// browser the agent controls (package browser/headless) then loads the
// page's URL; Browser.Join does all of it.
func Example() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	agent, _, err := agenttest.NewAgent(company, nil) // the second result is the agent's Identity, not an error
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	c, _ := agent.Company(ctx, "example.test")
	sess, _ := c.Session(ctx, "local-user-42", nil)

	// return_to must be on the Company's domain: checked before signing.
	_, err = sess.SignBrowserAssertion("https://evil.test/")
	fmt.Println("evil.test refused:", errors.Is(err, poppy.ErrReturnTo))

	a, err := sess.SignBrowserAssertion("https://example.test/orders")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("aud:", a.Endpoint)
	fmt.Println("lifetime:", a.ExpiresAt.Sub(a.IssuedAt))
	fmt.Println("redacted:", !strings.Contains(fmt.Sprint(a), a.Value()))

	page := browser.NewPage(a)
	fmt.Println("CSP:", page.CSP())

	srv, err := browser.ServePage(ctx, page, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	fmt.Println("served at http://127.0.0.1:…:", strings.HasPrefix(srv.URL(), "http://127.0.0.1:"))
	// Output:
	// evil.test refused: true
	// aud: https://example.test/poppy/browser-session
	// lifetime: 1m0s
	// redacted: true
	// CSP: default-src 'none'; script-src 'sha256-8lDeP0UDwCO6/RhblgeH/ctdBzjVpJxrXizsnIk3cEQ='; form-action https://example.test; base-uri 'none'; frame-ancestors 'none'
	// served at http://127.0.0.1:…: true
}
