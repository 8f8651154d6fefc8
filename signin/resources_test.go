package signin_test

import (
	"net/url"
	"slices"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// Item 5 of the standard-server runs: an OAuth server that holds a refresh
// token to the resources named at authorization (RFC 8707 section 2.2)
// refuses other resources at refresh with invalid_target. Direct and
// Device Sign-In therefore name every resource the Company lists: the API
// entry's resource and the MCP server's url.
func TestSignInNamesListedResources(t *testing.T) {
	e := newEnv(t, &poppytest.Options{API: poppytest.OpenAPIServerOptions{Resource: "https://api.example.test/v1"}}, nil)
	want := []string{"https://api.example.test/v1", e.Srv.EndpointURL(poppytest.EndpointMCP)}
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

// Company.Resources applies the module's one URL rule
// (Agent.ParseURL): with UnsafeAllowLoopbackHTTP, a loopback http:// API
// entry's resource is one of Resources and sign-in names it; without the
// option it is not. (That api.List follows the same rule is
// TestListOneURLRule in the api module.)
func TestResourcesOneURLRule(t *testing.T) {
	const local = "http://127.0.0.1:8080/api"
	for _, allow := range []bool{false, true} {
		e, h := hostileEnv(t, &poppytest.Options{API: poppytest.OpenAPIServerOptions{Resource: "https://api.example.test/v1"}}, &poppy.AgentOptions{UnsafeAllowLoopbackHTTP: allow})
		h.OnJSON("/.well-known/poppy.json", func(m map[string]any) {
			apis := m["apis"].([]any)
			m["apis"] = append(apis, map[string]any{"type": "openapi", "url": local + "/openapi.json", "resource": local, "description": "Local API."})
		})
		c := e.Company("example.test")
		if inResources := slices.Contains(c.Resources(), local); inResources != allow {
			t.Fatalf("UnsafeAllowLoopbackHTTP %v: Resources names it %v", allow, inResources)
		}
		if !allow {
			continue
		}
		// (The fake knows no such resource, so the sign-in stops here.)
		st, err := e.direct.Start(ctx, e.Session("alice"), scopes("poppy:read"))
		if err != nil {
			t.Fatal(err)
		}
		if got := query(t, st.URL)["resource"]; !slices.Contains(got, local) {
			t.Fatalf("authorization request resources %v, want %s among them", got, local)
		}
	}
}
