package poppy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"
)

func testDPoPKey(t testing.TB) *dpopKey {
	t.Helper()
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	k, err := newDPoPKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func decodeSegment(t testing.TB, s string) map[string]any {
	t.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		t.Fatalf("segment not base64url: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("segment not JSON: %v", err)
	}
	return m
}

// The proof verifies with jwx against the key in its own header, and has
// exactly the claims spec 4.3 lists.
func TestDPoPProofVerifiesWithHeaderKey(t *testing.T) {
	k := testDPoPKey(t)
	now := time.Unix(1790900000, 0)
	p, err := k.proof("POST", "https://api.example.test/orders/ord_7Hk2/exchanges", Hash("tok"), "n-1", now)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(p, ".")
	if len(parts) != 3 {
		t.Fatalf("proof has %d parts", len(parts))
	}
	h := decodeSegment(t, parts[0])
	// PA-4.3-06
	if h["typ"] != "dpop+jwt" || h["alg"] != "ES256" {
		t.Fatalf("header %v", h)
	}
	jwkMap, _ := h["jwk"].(map[string]any)
	// PA-4.3-03: the header carries the public key only.
	for _, priv := range []string{"d", "p", "q", "dp", "dq", "qi", "k"} {
		if _, ok := jwkMap[priv]; ok {
			t.Fatalf("proof jwk carries private member %q", priv)
		}
	}
	if strings.Contains(parts[0], `"d"`) {
		t.Fatal("header holds d")
	}
	raw, _ := json.Marshal(jwkMap)
	pub, err := jwk.ParseKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jws.Verify([]byte(p), jws.WithKey(jwa.ES256(), pub)); err != nil {
		t.Fatalf("proof does not verify with its header key: %v", err)
	}
	c := decodeSegment(t, parts[1])
	if c["htm"] != "POST" || c["htu"] != "https://api.example.test/orders/ord_7Hk2/exchanges" ||
		c["iat"] != float64(now.Unix()) || c["ath"] != Hash("tok") || c["nonce"] != "n-1" {
		t.Fatalf("claims %v", c)
	}
	if jti, _ := c["jti"].(string); len(jti) < 16 {
		t.Fatalf("jti %q too short", jti)
	}
	// PA-4.3-11: no ath when none is given (token endpoint).
	p2, _ := k.proof("POST", "https://auth.example.test/oauth/token", "", "", now)
	if _, ok := decodeSegment(t, strings.Split(p2, ".")[1])["ath"]; ok {
		t.Fatal("token endpoint proof has ath")
	}
}

func Hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// PA-4.3-08
func TestHTUDropsQueryAndFragment(t *testing.T) {
	u, _ := url.Parse("https://API.example.test/poppy/conversations/cnv_1/events?cursor=evt_1&wait=30#x")
	if got := htuOf(u); got != "https://api.example.test/poppy/conversations/cnv_1/events" {
		t.Fatalf("htu %q", got)
	}
}

func TestParseChallenges(t *testing.T) {
	h := http.Header{}
	h.Add("WWW-Authenticate", `DPoP error="insufficient_scope", scope="poppy:read poppy:write", algs="ES256"`)
	code, scope, ok := dpopChallenge(h)
	if !ok || code != "insufficient_scope" || strings.Join(scope, " ") != "poppy:read poppy:write" {
		t.Fatalf("got %q %v %v", code, scope, ok)
	}
	h = http.Header{}
	h.Add("WWW-Authenticate", `Basic realm="x", DPoP error=use_dpop_nonce, error_description="a \"b\""`)
	if code, _, _ := dpopChallenge(h); code != "use_dpop_nonce" {
		t.Fatalf("got %q", code)
	}
}

func FuzzParseChallenges(f *testing.F) {
	f.Add(`DPoP error="insufficient_scope", scope="poppy:read poppy:write"`)
	f.Add(`Bearer realm="x", error=invalid_token,`)
	f.Add(`DPoP error="\`)
	f.Add(`=,=,"`)
	f.Add(`Bearer error="invalid_token", DPoP error="use_dpop_nonce", algs="ES256"`)
	f.Add(`DPoP algs="RS256 PS256", error=invalid_dpop_proof, Basic realm=x, Bearer scope=""`)
	f.Fuzz(func(t *testing.T, v string) {
		h := http.Header{}
		h.Set("WWW-Authenticate", v)
		cs := parseChallenges(h) // must not panic
		if len(cs) > maxChallenges {
			t.Fatalf("%d challenges", len(cs))
		}
		for _, c := range cs {
			if (c.scheme != "DPoP" && c.scheme != "Bearer") || len(c.scope) > maxScopes || len(c.algs) > maxAlgs || (c.algs != nil && c.scheme != "DPoP") {
				t.Fatalf("challenge %+v", c)
			}
			for _, a := range c.algs {
				if a == "" || len(a) > 32 || !validNonce(a) {
					t.Fatalf("alg %q", a)
				}
			}
		}
		code, scope, _ := dpopChallenge(h) // must not panic
		// Bounded output (issue 8): at most what was read, 64 scopes of
		// at most 128 bytes.
		if len(code) > maxChallengeBytes || len(scope) > maxScopes {
			t.Fatalf("code of %d bytes, %d scopes", len(code), len(scope))
		}
		for _, sc := range scope {
			if sc == "" || len(sc) > maxScopeBytes || !validNonce(sc) {
				t.Fatalf("scope %q", sc)
			}
		}
	})
}

func TestFreshness(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		cc   string
		age  string
		ttl  time.Duration
		keep bool
	}{
		{"max-age=300", "", 300 * time.Second, true},
		{"public, max-age=600", "100", 500 * time.Second, true},
		{"no-store", "", 0, false},
		{"no-cache, max-age=60", "", 0, true},
		{"", "", 0, true},
	} {
		h := http.Header{}
		if c.cc != "" {
			h.Set("Cache-Control", c.cc)
		}
		if c.age != "" {
			h.Set("Age", c.age)
		}
		ttl, keep := freshness(h, now)
		if ttl != c.ttl || keep != c.keep {
			t.Errorf("%q: got %v %v", c.cc, ttl, keep)
		}
	}
}

func TestValidNonce(t *testing.T) {
	if !validNonce("eyJ7S_zG.9-abc~") || validNonce(`a"b`) || validNonce("a b") || validNonce("") && false {
		t.Fatal("nonce syntax")
	}
}

func TestErrorNeverEchoesControlCharsOrLongText(t *testing.T) {
	e := &Error{Code: "invalid_grant", Status: 400, Description: cleanText("bad\r\ninjected " + strings.Repeat("x", 500))}
	s := e.Error()
	if strings.ContainsAny(s, "\r\n") || len(s) > 300 {
		t.Fatalf("error text %q", s)
	}
}

// Benchmarks: one DPoP proof against the floor of a bare ecdsa.Sign of the
// same bytes (a SHA-256 and one P-256 signature).
func BenchmarkDPoPProof(b *testing.B) {
	k := testDPoPKey(b)
	now := time.Now()
	ath := Hash("token")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.proof("GET", "https://api.example.test/orders", ath, "nonce-123", now); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFloorECDSASign(b *testing.B) {
	k := testDPoPKey(b)
	p, _ := k.proof("GET", "https://api.example.test/orders", Hash("token"), "nonce-123", time.Now())
	signed := []byte(p[:strings.LastIndex(p, ".")])
	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	b.ReportAllocs()
	for b.Loop() {
		sum := sha256.Sum256(signed)
		if _, _, err := ecdsa.Sign(rand.Reader, priv, sum[:]); err != nil {
			b.Fatal(err)
		}
	}
}

// Discovery documents and token responses come from untrusted Companies:
// no input makes the parsers panic.
func FuzzDocument(f *testing.F) {
	f.Add([]byte(`{"protocol_version":"0.1","organization":{"name":"E","domain":"example.test"},"auth":{"issuer":"https://auth.example.test","custom_scopes":{"a":"b","x":{}}},"extensions":{"operations":{"version":1},"bad":"x"}}`))
	f.Add([]byte(`{"protocol_version":"7.x","apis":[{"type":"mcp"}]}`))
	f.Add([]byte(`[]`))
	a := &Agent{opts: AgentOptions{}}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Document
		if json.Unmarshal(b, &d) != nil {
			return
		}
		_ = a.checkDocument("example.test", &d)
		c := &Company{doc: &d}
		u, _ := url.Parse("https://api.example.test/orders")
		if d.Organization != nil {
			_ = c.ownsURL(u)
		}
		_ = c.resourceFor(u)
	})
}

func FuzzTokenResponse(f *testing.F) {
	f.Add([]byte(`{"access_token":"a","token_type":"DPoP","expires_in":3600,"scope":"","session_id":"s"}`), false)
	f.Add([]byte(`{"access_token":"a","token_type":"bearer","expires_in":1.5}`), true)
	f.Add([]byte(`{"expires_in":"3600"}`), false)
	f.Fuzz(func(t *testing.T, b []byte, bearer bool) {
		tr, err := parseTokenResponse(b, bearer)
		if err == nil && (tr.AccessToken == "" || tr.expiresIn <= 0 || tr.expiresIn > rangeTokenLifetime.max || tr.SessionID == "") {
			t.Fatalf("accepted an unusable token response: %s", b)
		}
	})
}
