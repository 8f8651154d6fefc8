package poppy_test

import (
	"context"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// A Company whose every service names a resource, on an OAuth server that
// holds the Account Token to the resources a sign-in named and refuses a
// token request naming none of several, after using the Account Token up
// (RFC 8707 section 2.2; oidc-provider's default, modelled by poppytest's
// StrictResourceIndicators), with rotation. After a Direct or Device
// Sign-In that named both of its resources, Token with Renew (the
// Session's default token) names exactly one, twice, and the User stays
// signed in: each resource's token works at its service, and no token
// request of the grant is refused. internal/oidcprovider runs the same
// against oidc-provider itself.
func TestPA_4_3_21_RenewalNamesOneResource(t *testing.T) {
	const apiRes = "https://api.example.test/v1"
	for _, typ := range []string{"direct", "device"} {
		t.Run(typ, func(t *testing.T) {
			e := newEnv(t, &poppytest.Options{
				API:       poppytest.OpenAPIServerOptions{Resource: apiRes},
				Discovery: poppytest.DiscoveryOptions{DropAgent: true, Extensions: map[string]any{"operations": nil}},
				SignIn:    poppytest.SignInPolicy{StrictResourceIndicators: true, RotateAccountTokens: true, Disable: []string{"mediated"}},
			}, nil)
			sess := e.session("alice")
			if got := sess.Company().Resources(); len(got) != 2 {
				t.Fatalf("Resources() = %v, want the API's and the MCP server's", got)
			}
			opts := &poppy.SignInOptions{Scopes: []string{"poppy:read"}}
			switch typ {
			case "direct":
				d, err := signin.NewDirect(e.agent, nil)
				if err != nil {
					t.Fatal(err)
				}
				st, err := d.Start(ctx, sess, opts)
				if err != nil {
					t.Fatal(err)
				}
				loc, err := e.srv.Browse(ctx, st.URL)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := d.Complete(ctx, loc); err != nil {
					t.Fatalf("Direct Sign-In: %v", err)
				}
			case "device":
				show := signin.PrompterFuncs{ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
					_, err := e.srv.Browse(ctx, p.VerificationURIComplete)
					return err
				}}
				if _, err := signin.Device(ctx, sess, opts, show); err != nil {
					t.Fatalf("Device Sign-In: %v", err)
				}
			}
			for round := range 2 {
				tok, err := sess.Token(ctx, &poppy.TokenOptions{Renew: true})
				if err != nil || !tok.SignedIn {
					t.Fatalf("renewal %d: %v, %v", round, tok, err)
				}
			}
			if !sess.SignedIn() {
				t.Fatal("signed out by the renewals")
			}
			// An API call with each resource's token.
			if code, body := e.get(sess, "/orders"); code != 200 {
				t.Fatalf("GET /orders: %d %s", code, body)
			}
			bt, err := sess.Token(ctx, &poppy.TokenOptions{Bearer: true, Resource: e.srv.EndpointURL(poppytest.EndpointMCP)})
			if err != nil {
				t.Fatalf("MCP Bearer token: %v", err)
			}
			if info, ok := e.srv.Tokens().Get(bt.Value()); !ok || info.Resource != e.srv.EndpointURL(poppytest.EndpointMCP) || !info.SignedIn {
				t.Fatalf("MCP token %+v", info)
			}
			refreshes := 0
			for _, r := range sdkRequests(e.srv, poppytest.EndpointToken) {
				switch g := r.Form.Get("grant_type"); g {
				case "authorization_code", "urn:ietf:params:oauth:grant-type:device_code", "refresh_token":
					// PA-4.3-21: exactly one resource, renewal included.
					if got := r.Form["resource"]; len(got) != 1 {
						t.Errorf("token request %d (%s) names resources %q, want exactly one", r.Index, g, got)
					}
					if r.Status != 200 && r.ErrorCode != "authorization_pending" {
						t.Errorf("token request %d (%s) answered %d %s", r.Index, g, r.Status, r.ErrorCode)
					}
					if g == "refresh_token" {
						refreshes++
					}
				}
			}
			if refreshes < 3 {
				t.Errorf("%d refreshes, want the two renewals and the MCP token's", refreshes)
			}
		})
	}
}
