package operations

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// canonicalJSON sorts members, drops insignificant space and re-encodes
// strings; it refuses what it can't key without merging two requests.
func TestCanonicalJSON(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{" { \"a\" : [ 1 , {\"d\":null,\"c\":true} ] }\n", `{"a":[1,{"c":true,"d":null}]}`},
		{`"\u0041\/"`, `"A/"`},
		{`1.50`, `1.50`},
		{`[]`, `[]`},
		{`{}`, `{}`},
		{`{"é":1,"e":2}`, `{"e":2,"é":1}`},
		{`"a<b&c"`, `"a\u003cb\u0026c"`},
		{`"a\u003cb\u0026c"`, `"a\u003cb\u0026c"`},
		{"\"x\u2028y\"", `"x\u2028y"`},
		{`{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
	} {
		got, ok := canonicalJSON([]byte(c.in))
		if !ok || string(got) != c.want {
			t.Errorf("canonicalJSON(%q) = %q, %v; want %q", c.in, got, ok, c.want)
		}
	}
	for _, in := range []string{``, `{`, `{"a":1}{}`, `{"a":1,"a":1}`, `{"a":1,"b":2,"a":3}`, `{"\u0061":1,"a":2}`, `[1,]`, "\"\xff\"", `{"a":1} x`, strings.Repeat("[", 300) + strings.Repeat("]", 300)} {
		if got, ok := canonicalJSON([]byte(in)); ok {
			t.Errorf("canonicalJSON(%q) = %q, want a refusal", in, got)
		}
	}
}

// The keys of requests: the same action in any order is one key; a
// non-JSON body, another Content-Type or another method is another key.
func TestProposalKeys(t *testing.T) {
	key := func(method, u, ct, body string) string {
		r, _ := http.NewRequest(method, u, strings.NewReader(body))
		if ct != "" {
			r.Header.Set("Content-Type", ct)
		}
		k, err := proposalKey(r)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	base := key("POST", "https://api.example.com/x?b=2&a=1", "application/json", `{"a":1,"b":2}`)
	for _, same := range []string{
		key("POST", "https://API.example.com:443/x?a=1&b=2", "application/json", `{"b":2,"a":1}`),
		key("POST", "https://api.example.com/x?a=1&b=2#frag", "application/problem+json", ` {"a": 1, "b": 2} `),
	} {
		if same != base {
			t.Errorf("the same request keyed %s and %s", base, same)
		}
	}
	for i, other := range []string{
		key("PUT", "https://api.example.com/x?b=2&a=1", "application/json", `{"a":1,"b":2}`),
		key("POST", "https://api.example.com/x?b=2&a=1", "text/plain", `{"a":1,"b":2}`),
		key("POST", "https://api.example.com/x?b=2&a=1", "application/json", `{"a":1,"b":3}`),
		key("POST", "https://api.example.com/y?b=2&a=1", "application/json", `{"a":1,"b":2}`),
		key("POST", "https://api.example.com/x?b=2&a=1", "", ""),
	} {
		if other == base {
			t.Errorf("request %d keyed as the base", i)
		}
	}
	// A raw body that looks like the canonical marker is not a canonical body.
	if key("POST", "https://a.example/x", "application/json", "c\n{}") == key("POST", "https://a.example/x", "application/json", "{}") {
		t.Error("a raw body collides with a canonical one")
	}
}

// FuzzCanonicalJSON: what canonicalJSON accepts comes out valid, stable
// and meaning the same.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1,2,{"d":"x","c":null}]}`, `"\u00e9"`, `1e5`, `[true,false]`, `{"a":{"a":{"a":1}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, ok := canonicalJSON(b)
		if !ok {
			return
		}
		if !json.Valid(c) {
			t.Fatalf("%q → invalid %q", b, c)
		}
		if again, ok := canonicalJSON(c); !ok || !bytes.Equal(again, c) {
			t.Fatalf("not stable: %q → %q → %q", b, c, again)
		}
		var x, y any
		dx := json.NewDecoder(bytes.NewReader(b))
		dx.UseNumber()
		dy := json.NewDecoder(bytes.NewReader(c))
		dy.UseNumber()
		if dx.Decode(&x) != nil || dy.Decode(&y) != nil || !reflect.DeepEqual(x, y) {
			t.Fatalf("meaning changed: %q → %q", b, c)
		}
	})
}

// BenchmarkProposalKey measures keying a proposing request with a 4 KiB
// JSON body, against the floor of one SHA-256 of method, URL and body in
// the same run.
func BenchmarkProposalKey(b *testing.B) {
	var body bytes.Buffer
	body.WriteString(`{"items":[`)
	for i := range 40 {
		if i > 0 {
			body.WriteByte(',')
		}
		body.WriteString(`{"sku":"stormline-insulated-m","qty":1,"note":"a gift, please wrap it","price":{"amount":"70.00","currency":"USD"}}`)
	}
	body.WriteString(`],"order_id":"ord_7Hk2"}`)
	raw := body.Bytes()
	req, _ := http.NewRequest("POST", "https://api.example.com/orders/ord_7Hk2/exchanges?b=2&a=1", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	const floorN = 2000
	start := time.Now()
	for range floorN {
		h := sha256.New()
		h.Write([]byte("POST " + req.URL.String() + "\n"))
		h.Write(raw)
		h.Sum(nil)
	}
	floor := time.Since(start) / floorN
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	b.ResetTimer()
	for b.Loop() {
		if _, err := proposalKey(req); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(floor.Nanoseconds()), "floor-ns/op")
	if ratio := float64(per) / float64(max(floor, 1)); ratio > 200 {
		b.Fatalf("keying takes %.0fx a SHA-256 of the request (%v vs %v): implausible", ratio, per, floor)
	}
}
