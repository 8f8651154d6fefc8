package poppy

// Fuzz targets for the parsers that read a Company's input and had none
// (issue 8): cache headers, the duration clamp, device
// authorization durations and ResponseError; and (issue 20) the guard's
// reading of a host through a proxy and the search for tokens in URLs. The older targets
// (FuzzParseChallenges, FuzzTokenResponse, FuzzDocument) are in
// dpop_internal_test.go. Seed corpora are in testdata/fuzz; .ci/run runs
// each target for a few seconds. Retry-After's is in internal/retry.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/poppyproto/poppy/internal/netguard"
)

func FuzzFreshness(f *testing.F) {
	f.Add("max-age=300", "", "")
	f.Add("max-age=9223372036854775807", "10", "")
	f.Add("no-cache, max-age=5", "", "")
	f.Add("", "", "Wed, 21 Oct 2099 07:28:00 GMT")
	f.Add(`max-age="60"`, "99999999999999999999", "")
	now := time.Date(2026, 10, 21, 7, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, cc, age, expires string) {
		h := http.Header{}
		h.Set("Cache-Control", cc)
		h.Set("Age", age)
		h.Set("Expires", expires)
		ttl, _ := freshness(h, now)
		if ttl < 0 || ttl > rangeMaxAge.max {
			t.Fatalf("ttl %v for Cache-Control %q, Age %q, Expires %q", ttl, cc, age, expires)
		}
	})
}

func FuzzCompanySeconds(f *testing.F) {
	for _, s := range []string{"3600", "9223372037", "1e30", "-5", "0.5", "1e-400", "-0", "00", "1E+2", "", "null", `"3600"`} {
		f.Add(s)
	}
	ranges := []durationRange{rangeTokenLifetime, rangeAccountLifetime, rangeDeviceInterval, rangeDeviceExpiry, {0, 30 * 24 * time.Hour}, rangeMaxAge}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, r := range ranges {
			d, positive, ok := companySeconds(raw, r)
			if !ok && (d != 0 || positive) {
				t.Fatalf("%q: not a number but %v, %v", raw, d, positive)
			}
			if ok && (d < r.min || d > r.max) {
				t.Fatalf("%q: %v outside [%v, %v]", raw, d, r.min, r.max)
			}
		}
	})
}

func FuzzDeviceDurations(f *testing.F) {
	f.Add("5", "600")
	f.Add("10000000000", "1e30")
	f.Add("", "")
	f.Add("-1", "0")
	f.Add(`"5"`, "null")
	f.Fuzz(func(t *testing.T, interval, expiresIn string) {
		iv, exp, err := deviceDurations(interval, expiresIn)
		if err != nil {
			return
		}
		// PA-4.6-04: as sent, bounded only by the absurd; an interval
		// longer than expires_in was refused (unless it is the default).
		if iv < time.Second || exp < time.Second || exp > rangeDeviceExpiry.max || (iv > exp && iv != deviceDefaultInterval) {
			t.Fatalf("interval %q → %v, expires_in %q → %v", interval, iv, expiresIn, exp)
		}
	})
}

func FuzzResponseError(f *testing.F) {
	f.Add(403, `DPoP error="insufficient_scope", scope="poppy:read"`, "application/json", `{"error":"sign_in_required","error_description":"x"}`, "")
	f.Add(429, "", "application/problem+json", `{"error":"rate_limited"}`, "99999999999999999999")
	f.Add(400, `Bearer error=invalid_token, error_description="a \"b\""`, "text/plain", `{`, "Wed, 21 Oct 2026 07:28:00 GMT")
	f.Add(401, strings.Repeat("a,", 5000), "application/json", `{"error":"x","pad":"`+strings.Repeat("p", 70<<10), "")
	f.Fuzz(func(t *testing.T, status int, wwwAuth, ct, body, retryAfter string) {
		if status < 400 || status > 599 {
			return
		}
		h := http.Header{}
		h.Set("WWW-Authenticate", wwwAuth)
		h.Set("Content-Type", ct)
		h.Set("Retry-After", retryAfter)
		resp := &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(body)), Request: &http.Request{}}
		err := ResponseError(resp)
		e, ok := err.(*Error)
		if !ok {
			t.Fatalf("ResponseError gave %T", err)
		}
		rest, _ := io.ReadAll(resp.Body)
		if !bytes.Equal(rest, []byte(body)) {
			t.Fatalf("the body changed: %d bytes, want %d", len(rest), len(body))
		}
		if len(e.Scope) > maxScopes || len(e.Code) > maxDescription+3 || len(e.Error()) > 16<<10 {
			t.Fatalf("unbounded error: %d scopes, code of %d bytes, message of %d", len(e.Scope), len(e.Code), len(e.Error()))
		}
		if strings.ContainsFunc(e.Error(), func(r rune) bool { return unicode.IsControl(r) }) {
			t.Fatalf("control character in %q", e.Error())
		}
	})
}

// refAton is inet_aton(3) written another way, with strconv, as the
// reference FuzzHostAddr checks netguard.HostAddr against.
func refAton(host string) (netip.Addr, bool) {
	parts := strings.Split(strings.TrimSuffix(host, "."), ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		var err error
		switch lp := strings.ToLower(p); {
		case strings.HasPrefix(lp, "0x"):
			if lp == "0x" {
				continue
			}
			vals[i], err = strconv.ParseUint(lp[2:], 16, 32)
		case len(p) > 1 && p[0] == '0':
			vals[i], err = strconv.ParseUint(p[1:], 8, 32)
		default:
			vals[i], err = strconv.ParseUint(p, 10, 32)
		}
		if err != nil || (len(p) > 0 && (p[0] == '+' || p[0] == '-')) || strings.Contains(p, "_") {
			return netip.Addr{}, false
		}
	}
	var a uint64
	for i, v := range vals {
		if i < len(vals)-1 {
			if v > 255 {
				return netip.Addr{}, false
			}
			a += v << (8 * (3 - i))
			continue
		}
		if bits := 8 * (4 - i); v>>bits != 0 {
			return netip.Addr{}, false
		}
		a += v
	}
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], uint32(a))
	return netip.AddrFrom4(b), true
}

// FuzzHostAddr: the guard reads a host through a proxy as a resolver does
// (inet_aton forms), as the reference reads it, and whatever it reads as
// an address it also reports as numeric.
func FuzzHostAddr(f *testing.F) {
	for _, s := range []string{"2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "169.254.43518", "127.1", "0x7f.1",
		"2130706433", "app.localhost", "1.2.3.4.", "0x", "08.1", "4294967296", "example.123", "::1", "1.2.3.4.5", "0X7F.00.0.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		got, numeric := netguard.HostAddr(host)
		if got.IsValid() && !numeric {
			t.Fatalf("%q read as %v but not numeric", host, got)
		}
		if strings.Contains(host, ":") {
			return // IPv6: netip's
		}
		want, ok := refAton(host)
		switch {
		case ok && got != want:
			t.Fatalf("%q read as %v, a resolver reads %v", host, got, want)
		case !ok && got.IsValid():
			if ip, err := netip.ParseAddr(strings.TrimSuffix(host, ".")); err != nil || ip != got {
				t.Fatalf("%q read as %v, a resolver reads no address", host, got)
			}
		}
	})
}

// FuzzURLCarries: a token is found in a URL however its bytes are
// percent-encoded (each byte or not, upper or lower hex, once or twice),
// in the query, a path segment or the fragment.
func FuzzURLCarries(f *testing.F) {
	f.Add("VzdtEUgn1aNK_lqUZGVRxEzsSQF43_LTqE7oKj0-a3I", uint64(0xf0f0), uint8(0))
	f.Add("abc+def/ghi=", uint64(1), uint8(1))
	f.Add("tok.en~12345678", uint64(0xffffffff), uint8(2))
	f.Fuzz(func(t *testing.T, tok string, mask uint64, where uint8) {
		if len(tok) < minTokenScan || len(tok) > 256 || strings.Trim(tok, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~+/=") != "" {
			return
		}
		var b strings.Builder
		for i := 0; i < len(tok); i++ {
			bit := mask >> (uint(i) % 64) & 1
			switch {
			case bit == 0:
				b.WriteByte(tok[i])
			case where&4 != 0:
				fmt.Fprintf(&b, "%%25%02x", tok[i]) // encoded twice
			case i%2 == 0:
				fmt.Fprintf(&b, "%%%02X", tok[i])
			default:
				fmt.Fprintf(&b, "%%%02x", tok[i])
			}
		}
		enc := b.String()
		var raw string
		switch where % 3 {
		case 0:
			raw = "https://api.example.test/x?a=1&t=" + enc
		case 1:
			raw = "https://api.example.test/x/" + enc + "/y"
		default:
			raw = "https://api.example.test/x#" + enc
		}
		u, err := url.Parse(raw)
		if err != nil {
			return
		}
		if !urlCarries(u, []string{tok}) {
			t.Fatalf("%s carries %q, not found", raw, tok)
		}
	})
}

// fuzzAgent returns an Agent on agent.test for a fuzz target.
func fuzzAgent(f *testing.F, opts *AgentOptions) *Agent {
	key, err := GenerateSigningKey()
	if err != nil {
		f.Fatal(err)
	}
	id, err := NewIdentity(IdentityConfig{
		ClientID: "https://agent.test/agent.json", JWKSURI: "https://agent.test/jwks.json",
		RedirectURIs: []string{"https://agent.test/oauth/callback"}, Keys: []*SigningKey{key},
	})
	if err != nil {
		f.Fatal(err)
	}
	a, err := NewAgent(id, opts)
	if err != nil {
		f.Fatal(err)
	}
	return a
}

// The device authorization response (RFC 8628 section 3.2) and the
// Mediated Sign-In answers (spec 4.7), moved here from package signin with
// the code that reads them.
func FuzzDeviceAuthorization(f *testing.F) {
	f.Add([]byte(`{"device_code":"d","user_code":"WDJB-MJHT","verification_uri":"https://auth.example.test/device","verification_uri_complete":"https://auth.example.test/device?user_code=WDJB-MJHT","expires_in":600,"interval":5}`))
	f.Add([]byte(`{"device_code":"d","user_code":"A","verification_uri":"https:javascript:alert(1)","expires_in":600}`))
	f.Add([]byte(`{"device_code":"d","user_code":"A","verification_uri":"https://x.test/","interval":10000000000,"expires_in":1e30}`))
	f.Add([]byte(`{"device_code":"d","user_code":"\u001b[2J","verification_uri":"https://x.test/","expires_in":600}`))
	f.Add([]byte(`{"device_code":"d","user_code":"A","verification_uri":"http://127.0.0.1:8080/device","expires_in":"600"}`))
	a := fuzzAgent(f, &AgentOptions{UnsafeAllowLoopbackHTTP: true})
	f.Fuzz(func(t *testing.T, body []byte) {
		da, lifetime, err := parseDeviceAuthorization(a, body)
		if err != nil {
			return
		}
		interval := da.Interval
		if interval < time.Second || lifetime < time.Second || lifetime > 30*24*time.Hour || (interval > lifetime && interval != 5*time.Second) {
			t.Fatalf("interval %v, lifetime %v", interval, lifetime)
		}
		if da.deviceCode == "" || da.UserCode == "" || len(da.UserCode) > maxUserCode || strings.ContainsFunc(da.UserCode, unicode.IsControl) {
			t.Fatalf("accepted user_code %q", da.UserCode)
		}
		for _, raw := range []string{da.VerificationURI, da.VerificationURIComplete} {
			if raw == "" {
				continue
			}
			u, err := url.Parse(raw)
			if err != nil || u.Host == "" || u.Opaque != "" || u.User != nil || (u.Scheme != "https" && u.Scheme != "http") {
				t.Fatalf("accepted verification URI %q", raw)
			}
		}
	})
}

func FuzzMediatedResponse(f *testing.F) {
	f.Add(200, []byte(`{"status":"complete","access_token":"a"}`))
	f.Add(202, []byte(`{"status":"code_required","sign_in_id":"sgn_1","code":{"sent_to":"Text to \u001b]0;x\u0007 71"},"expires_at":"2026-10-21T07:28:00Z"}`))
	f.Add(401, []byte(`{"status":"failed"}`))
	f.Add(400, []byte(`{"error":"`+strings.Repeat("\u0007", 500)+`"}`))
	f.Add(500, []byte(`not json`))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		mr, err := readMediated(status, body)
		if err == nil {
			if mr.Status == "" {
				t.Fatal("an answer without a status accepted")
			}
			return
		}
		var pe *Error
		if errors.As(err, &pe) {
			if len(pe.Code) > maxDescription+3 || strings.ContainsFunc(pe.Code, unicode.IsControl) {
				t.Fatalf("error code %q", pe.Code)
			}
		}
		_ = json.Valid(body)
	})
}
