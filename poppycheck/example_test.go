package poppycheck_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/poppyproto/poppy/poppycheck"
	"github.com/poppyproto/poppy/poppytest"
)

// Check a Company from a Go test: here the fake Company of package
// poppytest, whose misconfiguration switch makes its website's cookie
// SameSite=Strict.
func Example() {
	srv, err := poppytest.New(&poppytest.Options{Web: poppytest.WebOptions{SameSite: http.SameSiteStrictMode}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	agent, err := poppycheck.NewAgent("https://agent.test/check/")
	if err != nil {
		fmt.Println(err)
		return
	}
	srv.HandleAgent("agent.test", agent.Handler())
	rep, err := poppycheck.Run(context.Background(), "example.test", &poppycheck.Options{
		Agent: agent, HTTPClient: srv.Client(), Clock: srv.Clock(),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range rep.Failed() {
		fmt.Printf("%s failed: %s\n", r.Rule, r.Detail)
	}
	// Output:
	// CO-5-17 failed: cookie "poppytest_session": SameSite Strict
}
