package poppy

import (
	"net/http"
	"strings"
	"testing"
)

// PA-6-04: WWW-Authenticate with several challenges in one header (DPoP
// and Bearer, quoted values, algs): each challenge's own error is read.
func TestPA_6_04_ParseChallenges(t *testing.T) {
	for _, c := range []struct{ header, code, scope string }{
		{`Bearer error="invalid_token", DPoP error="use_dpop_nonce", algs="ES256"`, "invalid_token", ""},
		{`Basic realm="x", DPoP error="use_dpop_nonce", algs="ES256"`, "use_dpop_nonce", ""},
		{`DPoP algs="ES256 ES384", Bearer error="insufficient_scope", scope="poppy:write", resource_metadata="https://mcp.example.test/.well-known/oauth-protected-resource/mcp"`,
			"insufficient_scope", "poppy:write"},
		{`Bearer realm="mcp", error="sign_in_required"`, "sign_in_required", ""},
	} {
		h := http.Header{}
		h.Set("WWW-Authenticate", c.header)
		code, scope, ok := dpopChallenge(h)
		if !ok || code != c.code || strings.Join(scope, " ") != c.scope {
			t.Errorf("%s: %q %q %v", c.header, code, scope, ok)
		}
	}
}
