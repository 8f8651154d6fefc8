package api_test

// Attacks of a hostile Company on the api package (issue 20), one test per
// attack, each shown failing on the code before its fix.

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/api"
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
	prefix := env.Srv.APIURL() + "/users/"
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
		if len(got) == 0 || got[len(got)-1] != env.Srv.APIURL()+want {
			t.Errorf("id %q: request URIs %q, want …%s last", id, got, want)
		}
	}
}
