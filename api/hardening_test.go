package api_test

// Attacks of a hostile Company on the api package, one test per
// attack, each shown failing on the code before its fix.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/poppytest"
)

// requestURIs returns the URLs (with the request URI as sent) of the
// requests the fake's API host received under prefix.
func requestURIs(srv *poppytest.Server, prefix string) []string {
	var out []string
	for _, r := range srv.Requests() {
		if strings.HasPrefix(r.URL, prefix) {
			out = append(out, r.URL)
		}
	}
	return out
}

// A path parameter that is a dot segment, in any spelling a server or a
// proxy in front of it would decode or normalise to one, is refused before
// anything is sent: "/users/{id}/orders" with id ".." must never reach a
// server as "/users/../orders", which it would read as "/orders" (RFC 3986
// 5.2.4). Three dots, or dots inside a segment, are ordinary values and
// are sent escaped as they are.
func TestAttackPathParameterDotSegment(t *testing.T) {
	env, sess := setup(t, nil)
	desc := `{"openapi":"3.1.0","info":{"title":"t","version":"1"},"paths":{
	 "/users/{id}/orders":{"get":{"operationId":"userOrders","parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],"responses":{"200":{"description":"ok"}}}}}}`
	oa, err := api.NewOpenAPIFromBytes(context.Background(), sess, entry(t, sess.Company(), api.TypeOpenAPI), []byte(desc))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	prefix := env.Srv.EndpointURL(poppytest.EndpointAPI) + "/users/"
	for _, id := range []string{
		"..", ".", "%2e%2e", "%2E.", ".%2e", "%2e", "%252e%252e", "%25252E%25252E", // encoded, once and more
		"../admin", "a/../b", "a/./b", "..%2f..", "x/..", // dot segments inside a value with slashes
		`..\`, `a\..\b`, "..;x", ".;", // IIS backslashes, Tomcat path parameters
		"\u2025", "\uff0e\uff0e", "\uff0e", // NFKC: two-dot leader, fullwidth full stops
	} {
		_, err := oa.Call(ctx, "userOrders", &api.Args{Params: map[string]any{"id": id}})
		if !errors.Is(err, api.ErrDotSegment) || !errors.Is(err, api.ErrInvalidArguments) {
			t.Errorf("id %q: %v, want ErrDotSegment", id, err)
		}
	}
	if _, err := oa.CallPath(ctx, "GET", "/users/../orders", nil); !errors.Is(err, api.ErrDotSegment) {
		t.Errorf(`CallPath "/users/../orders": %v, want ErrDotSegment`, err)
	}
	if got := requestURIs(env.Srv, prefix); len(got) > 0 {
		t.Errorf("request URIs reached the fake: %q", got)
	}
	// Ordinary values are sent, escaped.
	for id, want := range map[string]string{"...": "/users/.../orders", "a.b": "/users/a.b/orders", ".x": "/users/.x/orders",
		"a/b": "/users/a%2Fb/orders", "..x": "/users/..x/orders", "50%": "/users/50%25/orders"} {
		if _, err := oa.Call(ctx, "userOrders", &api.Args{Params: map[string]any{"id": id}}); err != nil {
			var pe *poppy.Error // the fake's 404 is fine: it was reached
			if !errors.As(err, &pe) {
				t.Errorf("id %q: %v", id, err)
			}
		}
		got := requestURIs(env.Srv, prefix)
		if len(got) == 0 || got[len(got)-1] != env.Srv.EndpointURL(poppytest.EndpointAPI)+want {
			t.Errorf("id %q: request URIs %q, want …%s last", id, got, want)
		}
	}
}

// connectEndless connects to the fake's MCP server through h
// (testenv.EndlessTools), whose tools/list never ends.
func connectEndless(t testing.TB, h *testenv.EndlessTools, opts *api.MCPOptions) *api.MCP {
	t.Helper()
	srv := poppytest.NewServer(t, nil)
	h.Base = srv.Client().Transport
	u, _ := url.Parse(srv.EndpointURL(poppytest.EndpointMCP))
	h.SetPath(u.Path)
	env := testenv.NewOn(t, srv, &poppy.AgentOptions{HTTPClient: &http.Client{Transport: h}})
	sess := env.Session("alice")
	m, err := api.ConnectMCP(context.Background(), sess, entry(t, sess.Company(), api.TypeMCP), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// An MCP server whose tools/list never ends (the attack read 2,440 pages and
// 122,000 tools in 8 s, no end without a deadline) is read up to the
// bound, MaxTools tools in MaxToolPages pages (1,000 and 100 by default),
// and then ends with ErrTooManyTools, the tools within the bound yielded;
// a cursor given twice ends it at once. (That package llmtools keeps those
// tools and reports the error is its TestAttackEndlessToolListTools.)
func TestAttackEndlessToolList(t *testing.T) {
	for _, tc := range []struct {
		name         string
		repeat       bool
		opts         *api.MCPOptions
		pages, tools int
	}{
		{"defaults", false, nil, 20, 1000},
		{"pages", false, &api.MCPOptions{MaxToolPages: 7, MaxTools: 100000}, 7, 350},
		{"repeated cursor", true, nil, 2, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &testenv.EndlessTools{Repeat: tc.repeat}
			m := connectEndless(t, h, tc.opts)
			n := 0
			var last error
			for tool, err := range m.Tools(context.Background()) {
				if err != nil {
					last = err
					break
				}
				if tool == nil {
					t.Fatal("nil tool")
				}
				n++
			}
			t.Logf("%d pages read, %d tools yielded, then: %v", h.Pages(), n, last)
			if !errors.Is(last, api.ErrTooManyTools) {
				t.Errorf("list ended with %v, want ErrTooManyTools", last)
			}
			if n != tc.tools || h.Pages() > tc.pages+1 {
				t.Errorf("%d tools in %d pages, want %d tools, at most %d pages", n, h.Pages(), tc.tools, tc.pages+1)
			}
		})
	}
}

// A JSON answer of the MCP server is bounded (MaxResponseBytes): a page
// of tools of 2 MiB against a bound of 256 KiB fails the listing.
func TestAttackMCPAnswerBound(t *testing.T) {
	h := &testenv.EndlessTools{Padding: 40 << 10, Last: 2}
	m := connectEndless(t, h, &api.MCPOptions{MaxResponseBytes: 256 << 10})
	n := 0
	var last error
	for _, err := range m.Tools(context.Background()) {
		if err != nil {
			last = err
			break
		}
		n++
	}
	if last == nil || n > 0 || h.Pages() != 1 { // on the code before the bound: 100 tools, 2 pages
		t.Errorf("%d tools in %d pages of 2 MiB, then %v; want an error at the first page", n, h.Pages(), last)
	}
}

// distinctFanOut is fanOutDescription's attack without sharing: each of
// ops operations has a schema of its own that refers to the wide one, so
// no two tool schemas are alike.
func distinctFanOut(ops int) []byte {
	d := string(fanOutDescription(ops))
	for i := ops - 1; i >= 0; i-- {
		d = strings.Replace(d, fmt.Sprintf(`"operationId":"o%d","parameters":[{"name":"q","in":"query","schema":{"$ref":"#/components/schemas/B"}}]`, i),
			fmt.Sprintf(`"operationId":"o%d","parameters":[{"name":"q","in":"query","schema":{"type":"object","title":"t%d","properties":{"b":{"$ref":"#/components/schemas/B"}}}}]`, i, i), 1)
	}
	return []byte(d)
}

// An OpenAPI description fans out. 23,894 operations each
// take a schema that, inlined, stays just under the per-schema bound
// (20,000 nodes): on the code before, loading it inlined every copy
// (minutes of CPU, gigabytes of heap, see BenchmarkAttackOpenAPIFanOut).
// The whole description is bounded now:
//   - the references' fan-out is counted before kin-openapi resolves them:
//     this description is refused (ErrInvalidDescription);
//   - nothing is inlined at load: operations that use one schema share one
//     copy of it as the description gives it, and the tools built from
//     them share one inlined input schema;
//   - schemas that can't be shared draw on one budget per description:
//     past it, the remaining tools are left out with ErrSchemaTooLarge.
func TestAttackOpenAPIFanOut(t *testing.T) {
	_, sess := setup(t, nil)
	ctx := context.Background()
	e := entry(t, sess.Company(), api.TypeOpenAPI)
	// Shared: 500 operations of one schema load, and their tools share it.
	oa, err := api.NewOpenAPIFromBytes(ctx, sess, e, fanOutDescription(500))
	if err != nil {
		t.Fatal(err)
	}
	ops := oa.Endpoints()
	if len(ops) != 500 {
		t.Fatalf("%d operations", len(ops))
	}
	first := ops[0].Parameters[0].Schema
	if string(first) != `{"$ref":"#/components/schemas/B"}` {
		t.Errorf("parameter schema %s, want the description's", first)
	}
	for _, op := range ops[1:] {
		if s := op.Parameters[0].Schema; &s[0] != &first[0] {
			t.Fatalf("%s: its parameter schema is a copy of its own", op.ID)
		}
	}
	if s, err := oa.ResolveSchema(first); err != nil || !strings.Contains(string(s), `"m9":{"type":"string"}`) || strings.Contains(string(s), "$ref") {
		t.Errorf("ResolveSchema: %.200s, %v", s, err)
	}
	in, err := oa.InputSchema(ops[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(in) == 0 || len(in) > 16<<10 {
		t.Fatalf("input schema of %d bytes", len(in))
	}
	for _, op := range ops[1:] {
		s, err := oa.InputSchema(op, 0)
		if err != nil {
			t.Fatal(err)
		}
		if &s[0] != &in[0] {
			t.Fatalf("%s: an input schema of its own", op.ID)
		}
	}

	// Not shared: 100 operations, each a schema of its own as wide as
	// before, load (their fan-out is within bounds), but their tools stop
	// where the description's budget does.
	oa, err = api.NewOpenAPIFromBytes(ctx, sess, e, distinctFanOut(100))
	if err != nil {
		t.Fatal(err)
	}
	built := func() (n int, last error) {
		for _, op := range oa.Endpoints() {
			if _, err := oa.InputSchema(op, 0); err != nil {
				last = err
				continue
			}
			n++
		}
		return n, last
	}
	n, err := built()
	t.Logf("%d of 100 input schemas built; %.200v", n, err)
	if !errors.Is(err, api.ErrSchemaTooLarge) || n == 0 || n >= 100 {
		t.Fatalf("%d of 100 input schemas built, then %v; want the budget spent before the last", n, err)
	}
	// The budget is the description's: asking again builds nothing new.
	if again, _ := built(); again != n {
		t.Errorf("asked again, %d input schemas, the first time %d", again, n)
	}

	// The description: its references fan out past the bound
	// before kin-openapi resolves them, and it is refused.
	if _, err := api.NewOpenAPIFromBytes(ctx, sess, e, fanOutDescription(fanOutOps)); !errors.Is(err, api.ErrInvalidDescription) ||
		!strings.Contains(err.Error(), "references") {
		t.Fatalf("the fan-out description: %v, want ErrInvalidDescription", err)
	}
}
