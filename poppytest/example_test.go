package poppytest_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/poppyproto/poppy/poppytest"
)

// Example starts a fake Company and runs discovery against it with the
// client it provides: poppy.json, then the issuer's RFC 8414 metadata.
func Example() {
	srv, err := poppytest.New(nil) // in a test: srv := poppytest.NewServer(t, nil), closed at cleanup
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	var doc struct {
		ProtocolVersion string `json:"protocol_version"`
		Organization    struct{ Domain string }
		Auth            struct{ Issuer string }
	}
	resp, err := srv.Client().Get(srv.URL() + "/.well-known/poppy.json")
	if err != nil {
		panic(err)
	}
	json.NewDecoder(resp.Body).Decode(&doc)
	resp.Body.Close()
	fmt.Println(doc.ProtocolVersion, doc.Organization.Domain, doc.Auth.Issuer)

	var meta struct {
		TokenEndpoint string   `json:"token_endpoint"`
		PoppyDomains  []string `json:"poppy_domains"`
	}
	resp, err = srv.Client().Get(doc.Auth.Issuer + "/.well-known/oauth-authorization-server")
	if err != nil {
		panic(err)
	}
	json.NewDecoder(resp.Body).Decode(&meta)
	resp.Body.Close()
	fmt.Println(meta.TokenEndpoint, meta.PoppyDomains)

	for _, r := range srv.Requests() {
		fmt.Println(r.Method, r.URL, r.Status, r.Endpoint)
	}
	fmt.Println("violations:", len(srv.Violations()))
	// Output:
	// 0.1 example.test https://auth.example.test
	// https://auth.example.test/oauth/token [example.test]
	// GET https://example.test/.well-known/poppy.json 200 poppy.json
	// GET https://auth.example.test/.well-known/oauth-authorization-server 200 metadata
	// violations: 0
}

// ExampleServer_Browse plays the User's browser in Direct Sign-In. The
// agent under test hands its authorization URL to the User (in an SDK
// test, its prompter callback gets it); the test passes it to Browse,
// the programmable User decides on the consent page, and Browse returns
// the callback URL the browser would go to, for the test to hand back to
// the agent. Device Sign-In works the same with verification_uri_complete
// (Browse then returns ""), and Mediated Sign-In's one-time code is
// LastCode.
func ExampleServer_Browse() {
	srv, err := poppytest.New(nil) // in a test: srv := poppytest.NewServer(t, nil), closed at cleanup
	if err != nil {
		panic(err)
	}
	defer srv.Close()

	// The agent's client metadata document and key set (spec 4.1), which
	// the authorization endpoint fetches.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	pub, _ := jwk.Import(key.Public())
	jwks, _ := json.Marshal(map[string]any{"keys": []any{pub}})
	srv.HandleAgent("agent.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/agent.json":
			json.NewEncoder(w).Encode(map[string]any{
				"client_id":                  "https://agent.test/agent.json",
				"client_name":                "Example Agent",
				"jwks_uri":                   "https://agent.test/jwks.json",
				"redirect_uris":              []string{"https://agent.test/oauth/callback"},
				"token_endpoint_auth_method": "private_key_jwt",
			})
		case "/jwks.json":
			w.Write(jwks)
		}
	}))

	// The User approves read access only.
	srv.SignIn().ApproveScopes("acct_1", "poppy:read")

	verifier := "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
	sum := sha256.Sum256([]byte(verifier))
	authURL := srv.EndpointURL(poppytest.EndpointAuthorize) + "?" + url.Values{
		"response_type":         {"code"},
		"client_id":             {"https://agent.test/agent.json"},
		"redirect_uri":          {"https://agent.test/oauth/callback"},
		"scope":                 {"poppy:read poppy:write"},
		"state":                 {"Xq81vR-a-fresh-random-state"},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
	}.Encode()

	loc, err := srv.Browse(context.Background(), authURL)
	if err != nil {
		panic(err)
	}
	callback, _ := url.Parse(loc)
	q := callback.Query()
	fmt.Println(callback.Host+callback.Path, q.Get("state"), q.Get("iss"), q.Get("code") != "")
	c := srv.SignIn().Consents()[0]
	fmt.Println(c.ClientName, c.Scopes)
	// Output:
	// agent.test/oauth/callback Xq81vR-a-fresh-random-state https://auth.example.test true
	// Example Agent [poppy:read poppy:write]
}

// ExampleServer_EndpointURL shows where each part of the Company is, as
// its documents publish it.
func ExampleServer_EndpointURL() {
	srv, err := poppytest.New(nil) // in a test: srv := poppytest.NewServer(t, nil), closed at cleanup
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	for _, ep := range []poppytest.EndpointKind{
		poppytest.EndpointPoppyJSON, poppytest.EndpointToken, poppytest.EndpointDevice,
		poppytest.EndpointSignIn, poppytest.EndpointAPI, poppytest.EndpointMCP,
		poppytest.EndpointConversation, poppytest.EndpointOperations,
	} {
		fmt.Println(ep, srv.EndpointURL(ep))
	}
	// Output:
	// poppy.json https://example.test/.well-known/poppy.json
	// token https://auth.example.test/oauth/token
	// device https://auth.example.test/oauth/device
	// sign-in https://auth.example.test/poppy/sign-in
	// api https://api.example.test
	// mcp https://mcp.example.test/mcp
	// conversation https://api.example.test/poppy/conversations
	// operations https://api.example.test/poppy/operations
}
