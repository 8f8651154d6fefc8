package poppy_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
)

// A long poll or an event stream lifts the SDK's 30 s wait for response
// headers for the requests of one ctx. (The wait is the SDK's own
// client's; the fake Company's client used here has none, and the request
// is the same.)
func ExampleWithResponseHeaderTimeout() {
	company, err := poppytest.New(nil)
	if err != nil {
		log.Fatal(err)
	}
	defer company.Close()
	agent := exampleAgent(company, nil)
	c, err := agent.Company(context.Background(), "example.test")
	if err != nil {
		log.Fatal(err)
	}
	sess, err := c.Session(context.Background(), "local-user-42", nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := poppy.WithResponseHeaderTimeout(context.Background(), 0) // no header timeout
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, company.EndpointURL(poppytest.EndpointAPI)+"/products", nil)
	resp, err := sess.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	if err := poppy.ResponseError(resp); err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.StatusCode)
	// Output: 200
}

// The SDK's own client refuses to connect to addresses that are not
// public, whatever a Company's documents name: here a Company on
// loopback. AgentOptions.AllowNetworks (or UnsafeAllowLoopbackHTTP for
// loopback) relaxes that.
func ExampleDefaultHTTPClient() {
	resp, err := poppy.DefaultHTTPClient().Get("https://127.0.0.1:1/")
	if err == nil {
		resp.Body.Close()
	}
	fmt.Println(errors.Is(err, poppy.ErrForbiddenAddress))
	// Output: true
}
