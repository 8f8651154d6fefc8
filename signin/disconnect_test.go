package signin_test

import (
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
)

// PA-4.9-06, PA-4.4-15: a sign-in right after the
// Company disconnected the User. Without Verify, Reused is a local check:
// the sign-in reports Reused without asking (Verified false), and the next
// API call answers sign_in_required; a second sign-in then asks the User.
// With Verify the Company is asked at the cost of one token request, the
// refused Account Token is dropped, the User is asked at once, and the
// next API call runs as the account.
func TestSignInAfterDisconnect(t *testing.T) {
	for _, verify := range []bool{false, true} {
		e := newEnv(t, nil, nil)
		sess := e.Session("alice")
		opts := &poppy.SignInOptions{Scopes: []string{"poppy:read"}, Verify: verify}
		if _, err := e.direct.SignIn(ctx, sess, opts, e.browser()); err != nil {
			t.Fatal(err)
		}
		if code, body := e.Get(sess, "/orders"); code != 200 {
			t.Fatalf("GET /orders after the sign-in: %d %s", code, body)
		}
		e.Srv.Sessions().Disconnect("acct_1")
		consents := len(e.Srv.SignIn().Consents())
		tokenRequests := len(e.Requests(poppytest.EndpointToken))
		b := e.browser()
		res, err := e.direct.SignIn(ctx, sess, opts, b)
		if err != nil {
			t.Fatalf("Verify %v: sign-in after the disconnect: %v", verify, err)
		}
		if !verify {
			// The documented local check: nothing sent, Reused, not
			// Verified; the next API call learns of the disconnect.
			if !res.Reused || res.Verified || len(b.urls) != 0 || len(e.Requests(poppytest.EndpointToken)) != tokenRequests {
				t.Fatalf("without Verify: %+v, %d prompts, %d token requests", res, len(b.urls), len(e.Requests(poppytest.EndpointToken))-tokenRequests)
			}
			if code, _ := e.Get(sess, "/orders"); code != 403 {
				t.Fatalf("without Verify: GET /orders %d, want 403 sign_in_required", code)
			}
			if sess.SignedIn() {
				t.Fatal("without Verify: the refused Account Token left the Session signed in")
			}
			continue
		}
		if res.Reused || len(b.urls) != 1 || len(e.Srv.SignIn().Consents()) != consents+1 {
			t.Fatalf("with Verify: %+v, %d prompts: the User was not asked again", res, len(b.urls))
		}
		if code, body := e.Get(sess, "/orders"); code != 200 {
			t.Fatalf("with Verify: GET /orders after the new sign-in: %d %s", code, body)
		}
	}
}

// Verify on a Session the Company still holds signed in
// costs one token request and reports Reused and Verified.
func TestSignInVerifyCostsOneTokenRequest(t *testing.T) {
	e := newEnv(t, nil, nil)
	sess := e.Session("alice")
	if _, err := e.direct.SignIn(ctx, sess, scopes("poppy:read"), e.browser()); err != nil {
		t.Fatal(err)
	}
	before := len(e.Requests(poppytest.EndpointToken))
	res, err := e.direct.SignIn(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read"}, Verify: true}, e.browser())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(e.Requests(poppytest.EndpointToken)) - before; !res.Reused || !res.Verified || n != 1 {
		t.Fatalf("Verify: %+v after %d token requests, want Reused and Verified after one", res, n)
	}
}
