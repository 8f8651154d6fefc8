package api_test

import (
	"net/http"
	"slices"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/poppytest"
)

// api.List and Company.Resources apply one URL rule, the
// module's (Agent.ParseURL): with UnsafeAllowLoopbackHTTP a loopback
// http:// API entry is listed by api.List and its resource is one of
// Resources; without the option neither names it.
func TestListOneURLRule(t *testing.T) {
	const local = "http://127.0.0.1:8080/api"
	for _, allow := range []bool{false, true} {
		env := testenv.New(t, &poppytest.Options{API: poppytest.OpenAPIServerOptions{Resource: "https://api.example.test/v1"}}, nil)
		h := testenv.NewHostile(env.Srv.Transport())
		h.OnJSON("/.well-known/poppy.json", func(m map[string]any) {
			apis := m["apis"].([]any)
			m["apis"] = append(apis, map[string]any{"type": "openapi", "url": local + "/openapi.json", "resource": local, "description": "Local API."})
		})
		env.Agent = env.NewAgent(&poppy.AgentOptions{HTTPClient: &http.Client{Transport: h}, UnsafeAllowLoopbackHTTP: allow})
		c := env.Company("example.test")
		inList := false
		for _, a := range api.List(c) {
			inList = inList || a.Resource == local
		}
		inResources := slices.Contains(c.Resources(), local)
		if inList != allow || inResources != allow {
			t.Fatalf("UnsafeAllowLoopbackHTTP %v: api.List lists it %v, Resources names it %v", allow, inList, inResources)
		}
	}
}
