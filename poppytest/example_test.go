package poppytest_test

import (
	"encoding/json"
	"fmt"

	"github.com/poppyproto/poppy/poppytest"
)

// Example starts a fake Company and runs discovery against it with the
// client it provides: poppy.json, then the issuer's RFC 8414 metadata.
func Example() {
	srv := poppytest.NewServer(nil, nil) // in a test: poppytest.NewServer(t, nil)
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
