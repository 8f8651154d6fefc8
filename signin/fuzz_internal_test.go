package signin

// Fuzz targets for the sign-in parsers that read a Company's input
// (issue 8): the device authorization response, the Direct Sign-In
// callback query and the Mediated Sign-In answers. Seed corpora are in
// testdata/fuzz; .ci/run runs each target for a few seconds.

import (
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/poppyproto/poppy"
)

const fuzzRedirect = "https://agent.test/oauth/callback"

func fuzzAgent(f *testing.F, opts *poppy.AgentOptions) *poppy.Agent {
	key, err := poppy.GenerateSigningKey()
	if err != nil {
		f.Fatal(err)
	}
	id, err := poppy.NewIdentity(poppy.IdentityConfig{
		ClientID: "https://agent.test/agent.json", JWKSURI: "https://agent.test/jwks.json",
		RedirectURIs: []string{fuzzRedirect}, Keys: []*poppy.SigningKey{key},
	})
	if err != nil {
		f.Fatal(err)
	}
	a, err := poppy.NewAgent(id, opts)
	if err != nil {
		f.Fatal(err)
	}
	return a
}

func FuzzDeviceAuthorization(f *testing.F) {
	f.Add([]byte(`{"device_code":"d","user_code":"WDJB-MJHT","verification_uri":"https://auth.example.test/device","verification_uri_complete":"https://auth.example.test/device?user_code=WDJB-MJHT","expires_in":600,"interval":5}`))
	f.Add([]byte(`{"device_code":"d","user_code":"A","verification_uri":"https:javascript:alert(1)","expires_in":600}`))
	f.Add([]byte(`{"device_code":"d","user_code":"A","verification_uri":"https://x.test/","interval":10000000000,"expires_in":1e30}`))
	f.Add([]byte(`{"device_code":"d","user_code":"\u001b[2J","verification_uri":"https://x.test/","expires_in":600}`))
	f.Add([]byte(`{"device_code":"d","user_code":"A","verification_uri":"http://127.0.0.1:8080/device","expires_in":"600"}`))
	a := fuzzAgent(f, &poppy.AgentOptions{UnsafeAllowLoopbackHTTP: true})
	f.Fuzz(func(t *testing.T, body []byte) {
		da, interval, lifetime, err := parseDeviceAuthorization(a, body)
		if err != nil {
			return
		}
		if interval < time.Second || lifetime < time.Second || lifetime > 30*24*time.Hour || (interval > lifetime && interval != 5*time.Second) {
			t.Fatalf("interval %v, lifetime %v", interval, lifetime)
		}
		if da.DeviceCode == "" || da.UserCode == "" || len(da.UserCode) > maxUserCode || strings.ContainsFunc(da.UserCode, unicode.IsControl) {
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

func FuzzDirectCallback(f *testing.F) {
	f.Add("state=s&code=c&iss=https%3A%2F%2Fauth.example.test")
	f.Add("state=s&error=access_denied&iss=https%3A%2F%2Fauth.example.test")
	f.Add("state=s&code=c")
	f.Add("state=s&code=c&iss=https%3A%2F%2Fevil.test&iss=https%3A%2F%2Fauth.example.test")
	f.Add("state=s&code=&iss=https%3A%2F%2Fauth.example.test&error=")
	f.Add("%zz&;;&&iss")
	a := fuzzAgent(f, nil)
	d, err := NewDirect(a, nil)
	if err != nil {
		f.Fatal(err)
	}
	const issuer = "https://auth.example.test"
	f.Fuzz(func(t *testing.T, rawQuery string) {
		u, err := url.Parse(fuzzRedirect + "?" + rawQuery)
		if err != nil {
			return
		}
		q := u.Query()
		p := &pending{Issuer: issuer, Expires: a.Clock().Now().Add(time.Minute)}
		code, err := d.check(p, q)
		if err != nil {
			if code != "" {
				t.Fatalf("a code with an error: %v", err)
			}
			return
		}
		// PA-4.5-06, PA-4.5-07, PA-4.5-08: a code only with the right iss,
		// first, and no error.
		if code == "" || len(q["iss"]) == 0 || q["iss"][0] != issuer || q.Get("error") != "" {
			t.Fatalf("accepted %q", rawQuery)
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
		var pe *poppy.Error
		if errors.As(err, &pe) {
			if len(pe.Code) > maxCompanyText+3 || strings.ContainsFunc(pe.Code, unicode.IsControl) {
				t.Fatalf("error code %q", pe.Code)
			}
		}
		_ = json.Valid(body)
	})
}
