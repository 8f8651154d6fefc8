package poppytest_test

import (
	"strings"
	"testing"

	"github.com/poppyproto/poppy/poppytest"
)

// EndpointURL gives each endpoint the URL poppy.json and the RFC 8414
// metadata publish for it, so that a test reads one from the other.
func TestEndpointURLMatchesTheDocuments(t *testing.T) {
	srv := poppytest.NewServer(t, nil)
	doc := get(t, srv, srv.EndpointURL(poppytest.EndpointPoppyJSON))
	meta := get(t, srv, srv.EndpointURL(poppytest.EndpointMetadata))
	if doc.Status != 200 || meta.Status != 200 {
		t.Fatalf("documents: %d %d", doc.Status, meta.Status)
	}
	auth, _ := doc.Body["auth"].(map[string]any)
	mediated, _ := auth["mediated"].(map[string]any)
	web, _ := doc.Body["web"].(map[string]any)
	ext, _ := doc.Body["extensions"].(map[string]any)
	ops, _ := ext["operations"].(map[string]any)
	want := map[poppytest.EndpointKind]any{
		poppytest.EndpointToken:          meta.Body["token_endpoint"],
		poppytest.EndpointRevoke:         meta.Body["revocation_endpoint"],
		poppytest.EndpointAuthorize:      meta.Body["authorization_endpoint"],
		poppytest.EndpointDevice:         meta.Body["device_authorization_endpoint"],
		poppytest.EndpointSignIn:         mediated["endpoint"],
		poppytest.EndpointBrowserSession: web["browser_session_endpoint"],
		poppytest.EndpointOperations:     ops["endpoint"],
		poppytest.EndpointWeb:            srv.URL(),
		poppytest.EndpointAgent:          "",
	}
	apis, _ := doc.Body["apis"].([]any)
	for _, a := range apis {
		a, _ := a.(map[string]any)
		switch a["type"] {
		case "openapi": // the API's base URL: its description is /openapi.json
			u, _ := a["url"].(string)
			want[poppytest.EndpointAPI] = strings.TrimSuffix(u, "/openapi.json")
		case "mcp":
			want[poppytest.EndpointMCP] = a["url"]
		case "poppy":
			want[poppytest.EndpointConversation] = a["endpoint"]
		}
	}
	for ep, w := range want {
		if got := srv.EndpointURL(ep); w == nil || got != w {
			t.Errorf("EndpointURL(%s) = %q, the documents say %v", ep, got, w)
		}
	}
}
