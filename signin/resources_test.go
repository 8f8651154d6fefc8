package signin_test

import (
	"net/url"
	"slices"
	"testing"

	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// Item 5 of the standard-server runs: an OAuth server that holds a refresh
// token to the resources named at authorization (RFC 8707 section 2.2)
// refuses other resources at refresh with invalid_target. Direct and
// Device Sign-In therefore name every resource the Company lists: the API
// entry's resource and the MCP server's url.
func TestSignInNamesListedResources(t *testing.T) {
	e := newEnv(t, &poppytest.Options{APIResource: "https://api.example.test/v1"}, nil)
	want := []string{"https://api.example.test/v1", e.Srv.MCPURL()}
	if got := e.Company("example.test").Resources(); !slices.Equal(sorted(got), sorted(want)) {
		t.Fatalf("Resources() = %v, want %v", got, want)
	}
	b := e.browser()
	if _, err := e.direct.SignIn(ctx, e.Session("alice"), scopes("poppy:read"), b); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(b.urls[0])
	if got := u.Query()["resource"]; !slices.Equal(sorted(got), sorted(want)) {
		t.Fatalf("authorization request resources %v, want %v", got, want)
	}
	if _, err := signin.Device(ctx, e.Session("bob"), scopes("poppy:read"), e.browser()); err != nil {
		t.Fatal(err)
	}
	dev := e.Requests(poppytest.EndpointDevice)
	if got := dev[len(dev)-1].Form["resource"]; !slices.Equal(sorted(got), sorted(want)) {
		t.Fatalf("device authorization resources %v, want %v", got, want)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
