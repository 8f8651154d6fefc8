package signin

// Fuzz target for the sign-in parser that reads a Company's input here: the
// Direct Sign-In callback query. The device authorization
// response and the Mediated Sign-In answers are read in the root
// (deviceauth.go, mediated.go), and fuzzed there. Seed corpora are in
// testdata/fuzz; .ci/run runs each target for a few seconds.

import (
	"net/url"
	"testing"
	"time"

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
