package poppy

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// PA-4.3-22: the token for a request is the one for the listed resource
// that contains it, whatever spelling of the same URL either side uses
// (RFC 3986 section 6.2.2, 6.2.3).
func TestPA_4_3_22_ResourceForNormalisedURLs(t *testing.T) {
	c := &Company{doc: &Document{APIs: []API{
		{Type: "openapi", URL: "https://api.example.test/api/openapi.json", Resource: "https://api.example.test/api"},
		{Type: "openapi", URL: "https://files.example.test/v2/spec.json", Resource: "https://files.example.test/"},
		{Type: "mcp", URL: "https://mcp.example.test/mcp", Resource: "https://mcp.example.test/mcp"},
	}}}
	for raw, want := range map[string]string{
		"https://api.example.test/api/x":         "https://api.example.test/api",
		"https://api.example.test:443/api/x":     "https://api.example.test/api",
		"HTTPS://API.Example.Test/api/x":         "https://api.example.test/api",
		"https://api.example.test./api":          "https://api.example.test/api",
		"https://api.example.test/%61pi/x":       "https://api.example.test/api",
		"https://api.example.test/v1/../api/x":   "https://api.example.test/api",
		"https://api.example.test/apix":          "", // another path segment
		"https://api.example.test:8443/api/x":    "", // another origin
		"https://files.example.test":             "https://files.example.test/",
		"https://files.example.test:443/v2/a%7e": "https://files.example.test/",
		"https://mcp.example.test/mcp":           "", // MCP tokens are asked for apart
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.resourceFor(u); got != want {
			t.Errorf("resourceFor(%s) = %q, want %q", raw, got, want)
		}
	}
}

func TestNormURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://a.test":             "https://a.test/",
		"https://A.test:443/x/./y/":  "https://a.test/x/y/",
		"http://a.test:80/%7euser":   "http://a.test/~user",
		"https://a.test/a%2fb":       "https://a.test/a%2Fb",
		"https://a.test/a/b/../../c": "https://a.test/c",
		"https://[::1]:443/x":        "https://[::1]/x",
		"https://a.test:8443/x":      "https://a.test:8443/x",
	} {
		u, _ := url.Parse(raw)
		o, p := normURL(u)
		if o+p != want {
			t.Errorf("normURL(%s) = %s, want %s", raw, o+p, want)
		}
	}
}

// The renewal point is min(90% of the lifetime, lifetime - renewMargin),
// and at most a minute before expiry: a Session Token of a few seconds is
// renewed early enough not to expire in flight.
func TestRenewalPoint(t *testing.T) {
	t0 := time.Unix(0, 0)
	for lifetime, want := range map[time.Duration]time.Duration{
		time.Hour:        59 * time.Minute,
		5 * time.Minute:  270 * time.Second,
		20 * time.Second: 18 * time.Second,
		4 * time.Second:  3 * time.Second,
		time.Second:      500 * time.Millisecond,
	} {
		if got := renewPoint(t0, lifetime).Sub(t0); got != want {
			t.Errorf("lifetime %v: renewed after %v, want %v", lifetime, got, want)
		}
	}
}

// urlCarries (PA-4.3-26): a token of minTokenScan bytes or more anywhere,
// a shorter one only as a whole component; encodings undone up to four
// times, and no further.
func TestURLCarries(t *testing.T) {
	long, short := "Tok_0123456789abcdef", "ab12"
	enc := long
	for range 4 {
		enc = url.QueryEscape(enc) // "_" stays; escape the escapes
		enc = strings.ReplaceAll(enc, "T", "%54")
	}
	for raw, want := range map[string]bool{
		"https://api.example.test/x?y=" + long:                                  true,
		"https://api.example.test/x?y=z" + long + "z":                           true,
		"https://" + strings.ToLower(long) + ".example.test/":                   true,
		"https://api.example.test/x?y=" + enc:                                   true,
		"https://api.example.test/x?y=" + url.QueryEscape(enc):                  false, // five rounds
		"https://api.example.test/x?y=" + long[:len(long)-1]:                    false,
		"https://api.example.test/" + short + "/z":                              true,
		"https://api.example.test/z?k=" + short + "&j=1":                        true,
		"https://api.example.test/z?" + short:                                   true,
		"https://api.example.test/stab12s?k=xab12":                              false,
		"https://api.example.test/z?k=%61%62%31%32":                             true,
		"https://api.example.test/" + strings.ToUpper(short):                    false, // case matters outside the host
		"https://api.example.test/x?y=" + strings.ToUpper(long[1:5]) + long[5:]: false,
	} {
		u, err := url.Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if got := urlCarries(u, []string{long, short}); got != want {
			t.Errorf("%s: %v, want %v", raw, got, want)
		}
	}
}
