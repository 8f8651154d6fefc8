package poppytest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"strings"
	"testing"
)

func signProof(tb testing.TB, key *ecdsa.PrivateKey, header, claims map[string]any) string {
	h, _ := json.Marshal(header)
	c, _ := json.Marshal(claims)
	in := b64.EncodeToString(h) + "." + b64.EncodeToString(c)
	sum := sha256.Sum256([]byte(in))
	r, s, err := ecdsa.Sign(rand.Reader, key, sum[:])
	if err != nil {
		tb.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return in + "." + b64.EncodeToString(sig)
}

func testProof(tb testing.TB) string {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	jwkm := map[string]any{"kty": "EC", "crv": "P-256",
		"x": b64.EncodeToString(key.X.FillBytes(make([]byte, 32))),
		"y": b64.EncodeToString(key.Y.FillBytes(make([]byte, 32)))}
	return signProof(tb, key, map[string]any{"typ": "dpop+jwt", "alg": "ES256", "jwk": jwkm},
		map[string]any{"jti": "j1", "htm": "GET", "htu": "https://api.example.test/x", "iat": 1790900000, "ath": "abc"})
}

// FuzzParseProof feeds malformed DPoP headers to the proof parser and
// verifier: they must fail cleanly, never panic.
func FuzzParseProof(f *testing.F) {
	valid := testProof(f)
	parts := strings.Split(valid, ".")
	for _, seed := range []string{
		valid,
		"",
		"..",
		"a.b.c",
		parts[0] + "." + parts[1] + ".",
		parts[0] + ".." + parts[2],
		b64.EncodeToString([]byte(`{"typ":"dpop+jwt","alg":"ES256","jwk":{"kty":"EC","crv":"P-256","x":"","y":""}}`)) + "." + parts[1] + "." + parts[2],
		b64.EncodeToString([]byte(`{"typ":"dpop+jwt","alg":"ES256","jwk":{"kty":"EC","crv":"P-256","x":"AA","y":"AA","d":"AA"}}`)) + "." + parts[1] + "." + parts[2],
		b64.EncodeToString([]byte(`{"typ":"dpop+jwt","alg":"none"}`)) + "." + parts[1] + ".",
		parts[0] + "." + b64.EncodeToString([]byte(`{"iat":1e400,"jti":"x","htm":"GET","htu":"h"}`)) + "." + parts[2],
		parts[0] + "." + b64.EncodeToString([]byte(`[]`)) + "." + parts[2],
		parts[0] + "." + b64.EncodeToString([]byte(`{"a":1} {"b":2}`)) + "." + parts[2],
		valid + ".extra",
		strings.Repeat("A", maxJWS+1),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := parseProof(s, nil)
		if (p == nil) == (err == nil) {
			t.Fatalf("parseProof returned %v, %v", p, err)
		}
		if p != nil {
			p.verifySignature()
			if p.jkt == "" || p.key == nil {
				t.Fatal("parsed proof without key")
			}
		}
		decodeProofForLog(s)
		decodeJWTForLog(s)
	})
}

func TestParseProofValid(t *testing.T) {
	p, err := parseProof(testProof(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.htm != "GET" || p.htu != "https://api.example.test/x" || p.iat != 1790900000 || !p.hasAth || p.jkt == "" {
		t.Errorf("parsed %+v", p)
	}
	if err := p.verifySignature(); err != nil {
		t.Error(err)
	}
}

func TestValidateDocumentRules(t *testing.T) {
	s := &Server{}
	s.opts.Domains = []string{"example.test"}
	if err := s.configure(); err != nil {
		t.Fatal(err)
	}
	base := func() map[string]any {
		var m map[string]any
		b, _ := json.Marshal(s.document("example.test"))
		json.Unmarshal(b, &m)
		return m
	}
	if ps := validateDocument(base(), "example.test"); len(ps) != 0 {
		t.Fatalf("default document: %v", ps)
	}
	cases := []struct {
		rule string
		mod  func(m map[string]any)
	}{
		// CO-3-04
		{"CO-3-04", func(m map[string]any) { m["protocol_version"] = "1" }},
		// CO-3-05
		{"CO-3-05", func(m map[string]any) { m["organization"].(map[string]any)["name"] = "" }},
		// CO-3-06
		{"CO-3-06", func(m map[string]any) { m["organization"].(map[string]any)["domain"] = "other.test" }},
		// CO-3-07
		{"CO-3-07", func(m map[string]any) { delete(m, "auth") }},
		// CO-3-07
		{"CO-3-07", func(m map[string]any) { m["auth"].(map[string]any)["issuer"] = "http://auth.example.test" }},
		// CO-3-08
		{"CO-3-08", func(m map[string]any) { delete(m, "agent"); delete(m, "apis"); delete(m, "web") }},
		// CO-3-09
		{"CO-3-09", func(m map[string]any) {
			m["agent"].(map[string]any)["protocols"].([]any)[0].(map[string]any)["endpoint"] = "http://api.example.test/c"
		}},
		// CO-3-10
		{"CO-3-10", func(m map[string]any) { delete(m["apis"].([]any)[0].(map[string]any), "description") }},
		// CO-6-01
		{"CO-6-01", func(m map[string]any) { m["apis"].([]any)[0].(map[string]any)["type"] = "graphql" }},
		// CO-3-11
		{"CO-3-11", func(m map[string]any) { delete(m["auth"].(map[string]any)["direct"].(map[string]any), "scopes") }},
		// CO-3-11
		{"CO-3-11", func(m map[string]any) {
			delete(m["auth"].(map[string]any)["mediated"].(map[string]any)["fields"].([]any)[0].(map[string]any), "secret")
		}},
		// CO-3-11
		{"CO-3-11", func(m map[string]any) {
			m["auth"].(map[string]any)["device"].(map[string]any)["scopes"] = []any{"orders:admin"}
		}},
		// CO-4.4-04
		{"CO-4.4-04", func(m map[string]any) {
			m["auth"].(map[string]any)["custom_scopes"] = map[string]any{"poppy:admin": "x"}
		}},
		// CO-3.3-01
		{"CO-3.3-01", func(m map[string]any) { m["extensions"].(map[string]any)["gift-wrap"] = map[string]any{"version": "1"} }},
	}
	for _, c := range cases {
		m := base()
		c.mod(m)
		found := false
		for _, p := range validateDocument(m, "example.test") {
			found = found || p.rule == c.rule
		}
		if !found {
			t.Errorf("validator missed %s", c.rule)
		}
	}
	// www. on either side is ignored.
	m := base()
	m["organization"].(map[string]any)["domain"] = "www.example.test"
	if ps := validateDocument(m, "example.test"); len(ps) != 0 {
		t.Errorf("www. domain: %v", ps)
	}
}

func TestValidateMetadataRules(t *testing.T) {
	doc := map[string]any{"auth": map[string]any{"issuer": "https://auth.example.test", "direct": map[string]any{}, "device": map[string]any{}}}
	meta := map[string]any{"issuer": "https://auth.example.test", "token_endpoint": "https://auth.example.test/t", "poppy_domains": []any{}}
	rules := map[string]bool{}
	for _, p := range validateMetadata(meta, map[string]map[string]any{"example.test": doc}) {
		rules[p.rule] = true
	}
	// CO-3.2-03, CO-3.2-04, CO-3.2-05
	for _, r := range []string{"CO-3.2-03", "CO-3.2-04", "CO-3.2-05"} {
		if !rules[r] {
			t.Errorf("validator missed %s: %v", r, rules)
		}
	}
}

// BenchmarkProofVerification measures the fake's cost per DPoP proof:
// parse (cached key) and signature verification.
func BenchmarkProofVerification(b *testing.B) {
	s := &Server{keyCache: map[string]cachedKey{}}
	proof := testProof(b)
	for b.Loop() {
		p, err := parseProof(proof, s)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.verifySignature(); err != nil {
			b.Fatal(err)
		}
	}
}
