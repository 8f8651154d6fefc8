package poppy

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// PA-6-04: WWW-Authenticate with several challenges in one header (DPoP
// and Bearer, quoted values, algs): every challenge is read with its own
// parameters, and the one of the token's scheme is chosen.
func TestPA_6_04_ParseChallenges(t *testing.T) {
	h := http.Header{}
	h.Set("WWW-Authenticate", `Bearer error="invalid_token", DPoP error="use_dpop_nonce", algs="ES256"`)
	cs := parseChallenges(h)
	if len(cs) != 2 || cs[0].scheme != "Bearer" || cs[0].code != "invalid_token" || cs[0].algs != nil ||
		cs[1].scheme != "DPoP" || cs[1].code != "use_dpop_nonce" || !slices.Equal(cs[1].algs, []string{"ES256"}) {
		t.Fatalf("parsed %+v", cs)
	}
	for _, c := range []struct{ header, scheme, code, scope string }{
		// By scheme: the DPoP token gets the DPoP challenge, MCP the Bearer one.
		{`Bearer error="invalid_token", DPoP error="use_dpop_nonce", algs="ES256"`, "DPoP", "use_dpop_nonce", ""},
		{`Bearer error="invalid_token", DPoP error="use_dpop_nonce", algs="ES256"`, "Bearer", "invalid_token", ""},
		{`DPoP error="invalid_dpop_proof", Bearer error="insufficient_scope", scope="poppy:write"`, "Bearer", "insufficient_scope", "poppy:write"},
		{`Basic realm="x", DPoP error="use_dpop_nonce", algs="ES256"`, "DPoP", "use_dpop_nonce", ""},
		{`DPoP algs="ES256 ES384", Bearer error="insufficient_scope", scope="poppy:write", resource_metadata="https://mcp.example.test/.well-known/oauth-protected-resource/mcp"`,
			"DPoP", "insufficient_scope", "poppy:write"},
		{`Bearer realm="mcp", error="sign_in_required"`, "DPoP", "sign_in_required", ""},
	} {
		h := http.Header{}
		h.Set("WWW-Authenticate", c.header)
		got, ok := pick(parseChallenges(h), c.scheme)
		if !ok || got.code != c.code || strings.Join(got.scope, " ") != c.scope {
			t.Errorf("%s for %s: %+v %v", c.header, c.scheme, got, ok)
		}
	}
	// Challenges in separate header values are read too.
	h = http.Header{}
	h.Add("WWW-Authenticate", `Bearer error="invalid_token"`)
	h.Add("WWW-Authenticate", `DPoP error="invalid_dpop_proof", algs="RS256 PS256"`)
	if code, _, _ := dpopChallenge(h); code != "invalid_dpop_proof" {
		t.Errorf("DPoP challenge in the second value: %q", code)
	}
	if algs := dpopAlgs(parseChallenges(h)); !slices.Equal(algs, []string{"RS256", "PS256"}) {
		t.Errorf("algs %q", algs)
	}
}
