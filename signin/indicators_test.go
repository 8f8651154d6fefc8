package signin_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// A Company that lists two or more resources, on an OAuth
// server that holds the Account Token to the resources named at
// authorization and refuses a token request naming none of several, or
// several (RFC 8707 section 2.2; oidc-provider's default, modelled by
// poppytest's StrictResourceIndicators). Direct and Device Sign-In, the
// refresh of every resource's token and rotation all pass, against that
// mode and against the plain fake, with two and three listed resources;
// every token request of the sign-in's grant names exactly one resource.
func TestSignInStrictResourceIndicators(t *testing.T) {
	const apiRes, convRes = "https://api.example.test/v1", "https://example.test/poppy/conversations"
	for _, strict := range []bool{true, false} {
		for _, n := range []int{2, 3} {
			for _, typ := range []string{"direct", "device"} {
				t.Run(fmt.Sprintf("strict=%v/resources=%d/%s", strict, n, typ), func(t *testing.T) {
					opts := &poppytest.Options{API: poppytest.OpenAPIServerOptions{Resource: apiRes}, SignIn: poppytest.SignInPolicy{RotateAccountTokens: true, StrictResourceIndicators: strict}}
					if n == 3 {
						opts.Conversations.Resource = convRes
					}
					e := newEnv(t, opts, nil)
					c := e.Company("example.test")
					if got := len(c.Resources()); got != n {
						t.Fatalf("Resources() = %v, want %d", c.Resources(), n)
					}
					sess := e.Session("alice")
					var err error
					if typ == "direct" {
						_, err = e.direct.SignIn(ctx, sess, scopes("poppy:read"), e.browser())
					} else {
						_, err = signin.Device(ctx, sess, scopes("poppy:read"), e.browser())
					}
					if err != nil {
						t.Fatalf("sign-in: %v", err)
					}
					check := func(when string) {
						t.Helper()
						if code, body := e.Get(sess, "/orders"); code != 200 {
							t.Fatalf("%s: GET /orders: %d %s", when, code, body)
						}
						bt, err := sess.Token(ctx, &poppy.TokenOptions{Bearer: true, Resource: e.Srv.EndpointURL(poppytest.EndpointMCP)})
						if err != nil {
							t.Fatalf("%s: MCP Bearer token: %v", when, err)
						}
						if info, ok := e.Srv.Tokens().Get(bt.Value()); !ok || info.Resource != e.Srv.EndpointURL(poppytest.EndpointMCP) || !info.SignedIn {
							t.Fatalf("%s: MCP token %+v", when, info)
						}
						if n == 3 {
							ct, err := sess.Token(ctx, &poppy.TokenOptions{Resource: convRes})
							if err != nil {
								t.Fatalf("%s: conversation token: %v", when, err)
							}
							if info, ok := e.Srv.Tokens().Get(ct.Value()); !ok || info.Resource != convRes || !info.SignedIn {
								t.Fatalf("%s: conversation token %+v", when, info)
							}
						}
					}
					check("after sign-in")
					// Rotation: every resource's token renewed twice, each
					// refresh rotating the Account Token.
					for round := range 2 {
						for _, o := range []*poppy.TokenOptions{
							{Resource: apiRes, Renew: true},
							{Bearer: true, Resource: e.Srv.EndpointURL(poppytest.EndpointMCP), Renew: true},
						} {
							if _, err := sess.Token(ctx, o); err != nil {
								t.Fatalf("round %d: renewing %+v: %v", round, o, err)
							}
						}
					}
					check("after rotations")
					if !sess.SignedIn() {
						t.Fatal("signed out by the rotations")
					}
					// A second process (same keystore) resumes the signed-in
					// Session and checks it with a token the grant holds.
					a2 := e.NewAgent(nil)
					c2, err := a2.Company(ctx, "example.test")
					if err != nil {
						t.Fatal(err)
					}
					e.Srv.Clock().Advance(3 * time.Hour) // every token is past its expiry
					s2, err := c2.Session(ctx, "alice", nil)
					if err != nil {
						t.Fatalf("resuming the signed-in Session: %v", err)
					}
					if !s2.SignedIn() {
						t.Fatal("resumed Session signed out")
					}
					for _, r := range e.Requests(poppytest.EndpointToken) {
						switch r.Form.Get("grant_type") {
						case "authorization_code", "urn:ietf:params:oauth:grant-type:device_code", "refresh_token":
							if got := r.Form["resource"]; len(got) != 1 {
								t.Errorf("a %s request names resources %q, want exactly one", r.Form.Get("grant_type"), got)
							}
						}
					}
				})
			}
		}
	}
}
