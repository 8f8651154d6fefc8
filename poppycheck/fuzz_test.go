package poppycheck

import (
	"net/http"
	"testing"
	"time"
)

// FuzzChallenge: the readers of a Company's WWW-Authenticate and
// Retry-After headers never panic, and a challenge's attributes come from
// the header alone.
func FuzzChallenge(f *testing.F) {
	for _, s := range []string{`DPoP error="invalid_dpop_proof", algs="ES256"`, `Bearer error="invalid_token", resource_metadata="https://x/.well-known/oauth-protected-resource"`,
		`DPoP error="a\"b", scope="poppy:read poppy:write"`, `DPoP error=`, `DPoP ,,,=`, `Bearer realm="x`, "120", "Wed, 21 Oct 2015 07:28:00 GMT", "-1", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		h := http.Header{"Www-Authenticate": {s}}
		for _, scheme := range []string{"DPoP", "Bearer"} {
			code, attrs, ok := challenge(h, scheme)
			if !ok && (code != "" || attrs != nil) {
				t.Fatalf("no challenge, yet %q %v", code, attrs)
			}
			for k, v := range attrs {
				if len(k)+len(v) > len(s) {
					t.Fatalf("attribute %q=%q longer than the header", k, v)
				}
			}
		}
		if d, ok := parseRetryAfter(s, time.Unix(1e9, 0)); ok && d < 0 {
			t.Fatalf("Retry-After %q: %v", s, d)
		}
	})
}
