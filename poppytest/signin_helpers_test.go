package poppytest_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/poppyproto/poppy/poppytest"
)

// Raw sign-in requests for the CO tests of spec 4.4–4.9.

const clientAssertionType = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

// tokenAs POSTs form to the token endpoint with a proof signed by user's
// DPoP key (the form has no assertion to take the User from).
func (a *rawAgent) tokenAs(user string, form url.Values, mods ...pmod) *response {
	a.t.Helper()
	mods = append([]pmod{a.userKey(user)}, mods...)
	return postForm(a.t, a.srv, a.srv.EndpointURL(poppytest.EndpointToken), form, "DPoP", a.proof("POST", a.srv.EndpointURL(poppytest.EndpointToken), mods...))
}

// clientForm is a form with client authentication only.
func (a *rawAgent) clientForm(kv ...string) url.Values {
	f := url.Values{"client_id": {a.clientID}, "client_assertion_type": {clientAssertionType},
		"client_assertion": {a.clientAssertion()}}
	for i := 0; i+1 < len(kv); i += 2 {
		f.Set(kv[i], kv[i+1])
	}
	return f
}

// pkce is a code verifier and its S256 challenge.
type pkce struct{ verifier, challenge string }

func newPKCE() pkce {
	v := randID() + randID() // 44 characters
	sum := sha256.Sum256([]byte(v))
	return pkce{v, b64.EncodeToString(sum[:])}
}

// authzURL builds a Direct Sign-In authorization URL (spec 4.5 step 1);
// set overrides or (with "") deletes parameters.
func (a *rawAgent) authzURL(scope string, p pkce, set ...string) (string, string) {
	state := randID()
	q := url.Values{
		"response_type":         {"code"},
		"client_id":             {a.clientID},
		"redirect_uri":          {"https://" + a.host + "/oauth/callback"},
		"scope":                 {scope},
		"state":                 {state},
		"code_challenge":        {p.challenge},
		"code_challenge_method": {"S256"},
	}
	for i := 0; i+1 < len(set); i += 2 {
		if set[i+1] == "" {
			q.Del(set[i])
		} else {
			q.Set(set[i], set[i+1])
		}
	}
	return a.srv.EndpointURL(poppytest.EndpointAuthorize) + "?" + q.Encode(), q.Get("state")
}

// browse is Browse with a test context; it fails the test on error.
func browse(t testing.TB, srv *poppytest.Server, u string) *url.URL {
	t.Helper()
	loc, err := srv.Browse(context.Background(), u)
	if err != nil {
		t.Fatalf("Browse: %v", err)
	}
	if loc == "" {
		return nil
	}
	l, err := url.Parse(loc)
	if err != nil {
		t.Fatalf("Location %q: %v", loc, err)
	}
	return l
}

// asBrowser sends a raw request as the User's browser.
func asBrowser(t testing.TB, srv *poppytest.Server, method, u string, form url.Values) *response {
	t.Helper()
	var req *http.Request
	if form != nil {
		req, _ = http.NewRequest(method, u, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		req, _ = http.NewRequest(method, u, nil)
	}
	req.Header.Set("User-Agent", poppytest.BrowserUserAgent)
	c := &http.Client{Transport: srv.Transport(), CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return do(t, c, req)
}

// codeForm is the authorization_code grant (spec 4.5 step 4).
func (a *rawAgent) codeForm(code, verifier, sessionID string) url.Values {
	return a.clientForm("grant_type", "authorization_code", "code", code, "redirect_uri", "https://"+a.host+"/oauth/callback",
		"code_verifier", verifier, "session_id", sessionID)
}

// direct runs a Direct Sign-In for user's Session sid with the fake's
// programmable User and returns the code exchange's response.
func (a *rawAgent) direct(user, sid, scope string) *response {
	a.t.Helper()
	p := newPKCE()
	u, _ := a.authzURL(scope, p)
	loc := browse(a.t, a.srv, u)
	code := loc.Query().Get("code")
	if code == "" {
		a.t.Fatalf("no code in %v", loc)
	}
	return a.tokenAs(user, a.codeForm(code, p.verifier, sid))
}

// signedIn starts a Session for user and signs it in with Direct Sign-In;
// it returns the code exchange's response.
func (a *rawAgent) signedIn(user, scope string) *response {
	a.t.Helper()
	sid := a.start(user).str("session_id")
	r := a.direct(user, sid, scope)
	if r.Status != 200 {
		a.t.Fatalf("code exchange: %d %s", r.Status, r.Raw)
	}
	return r
}

// deviceStart is the device authorization request (spec 4.6 step 1).
func (a *rawAgent) deviceStart(scope string) *response {
	a.t.Helper()
	f := a.clientForm()
	if scope != "" {
		f.Set("scope", scope)
	}
	return postForm(a.t, a.srv, a.srv.EndpointURL(poppytest.EndpointDevice), f)
}

// poll is one device_code poll (spec 4.6 step 3).
func (a *rawAgent) poll(user, deviceCode, sid string) *response {
	a.t.Helper()
	return a.tokenAs(user, a.clientForm("grant_type", "urn:ietf:params:oauth:grant-type:device_code",
		"device_code", deviceCode, "session_id", sid))
}

// refreshForm is the refresh_token grant (spec 4.8).
func (a *rawAgent) refreshForm(pat, sid string) url.Values {
	f := a.clientForm("grant_type", "refresh_token", "refresh_token", pat)
	if sid != "" {
		f.Set("session_id", sid)
	}
	return f
}

// revoke posts an Account Token to the revocation endpoint (spec 4.9).
func (a *rawAgent) revoke(tok string) *response {
	a.t.Helper()
	return postForm(a.t, a.srv, a.srv.EndpointURL(poppytest.EndpointRevoke), a.clientForm("token", tok, "token_type_hint", "refresh_token"))
}

// mediated POSTs a JSON body to the mediated endpoint (or u) with the
// Session Token tok and a proof.
func (a *rawAgent) mediated(u, tok string, body any) *response {
	a.t.Helper()
	if u == "" {
		u = a.srv.EndpointURL(poppytest.EndpointSignIn)
	}
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", u, strings.NewReader(string(b)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "DPoP "+tok)
	info, _ := a.srv.Tokens().Get(tok)
	req.Header.Set("DPoP", a.proof("POST", u, a.userKey(info.UserID), withToken(tok)))
	return do(a.t, a.srv.Client(), req)
}

// creds is the default account's credentials.
func creds() map[string]any {
	return map[string]any{"email": "user@example.test", "password": "correct horse"}
}

// has reports whether the JSON body has every key.
func (r *response) has(keys ...string) bool {
	for _, k := range keys {
		if _, ok := r.Body[k]; !ok {
			return false
		}
	}
	return true
}
