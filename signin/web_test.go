package signin_test

import (
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/signin"
)

// A web application: Start gives the URL to redirect to, DirectOptions.Done
// answers the browser after the redirect with the result, which names the
// local User and Session; a second Start for scopes the Session holds
// gives the result and no URL.
func TestDirectInAWebApp(t *testing.T) {
	e := newEnv(t, nil, nil)
	type outcome struct {
		res *poppy.SignInResult
		err error
	}
	got := make(chan outcome, 1)
	d, err := signin.NewDirect(e.Agent, &signin.DirectOptions{Done: func(w http.ResponseWriter, r *http.Request, res *poppy.SignInResult, err error) {
		got <- outcome{res, err}
		http.Redirect(w, r, "https://agent.test/account", http.StatusSeeOther)
	}})
	if err != nil {
		t.Fatal(err)
	}
	e.Serve(d.Handler())
	co := e.Company("example.test")
	sess, err := co.Session(ctx, "alice@example.com", &poppy.SessionOptions{Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	st, err := d.Start(ctx, sess, scopes("poppy:read"))
	if err != nil || st.Result != nil || st.URL == "" || st.State == "" {
		t.Fatalf("Start: %+v, %v", st, err)
	}
	back, err := e.Srv.Browse(ctx, st.URL)
	if err != nil {
		t.Fatal(err)
	}
	c := *e.Srv.Client()
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := c.Get(back)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "https://agent.test/account" {
		t.Fatalf("callback answered %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	o := <-got
	if o.err != nil || o.res.User != "alice@example.com" || o.res.SessionName != "shop" || o.res.SessionID != sess.ID() {
		t.Fatalf("Done got %+v, %v", o.res, o.err)
	}
	if res, err := d.Wait(ctx, st.State); err != nil || res.User != "alice@example.com" {
		t.Fatalf("Wait: %+v, %v", res, err)
	}
	// Signed in already: a result, no URL to redirect to.
	st, err = d.Start(ctx, sess, scopes("poppy:read"))
	if err != nil || st.Result == nil || !st.Result.Reused || st.URL != "" {
		t.Fatalf("second Start: %+v, %v", st, err)
	}
}

// DirectOptions.StateCookie binds the sign-in to the browser that started
// it (RFC 6749 section 10.12): a redirect arriving in another browser
// completes nothing, and the sign-in stays open for the right one.
func TestDirectStateCookieBindsTheBrowser(t *testing.T) {
	e := newEnv(t, nil, nil)
	d, err := signin.NewDirect(e.Agent, &signin.DirectOptions{StateCookie: "poppy_signin"})
	if err != nil {
		t.Fatal(err)
	}
	e.Serve(d.Handler())
	sess := e.Session("alice")
	st, err := d.Start(ctx, sess, scopes("poppy:read"))
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	if !d.Redirect(rec, httptest.NewRequest("GET", "https://agent.test/login", nil), st) {
		t.Fatal("Redirect did not redirect")
	}
	if rec.Code != http.StatusFound || rec.Header().Get("Location") != st.URL {
		t.Fatalf("Redirect answered %d %s", rec.Code, rec.Header().Get("Location"))
	}
	cookies := rec.Result().Cookies()
	if len(cookies) != 1 || cookies[0].Value != st.State || !cookies[0].Secure || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteLaxMode {
		t.Fatalf("cookies %v", cookies)
	}
	back, err := e.Srv.Browse(ctx, st.URL)
	if err != nil {
		t.Fatal(err)
	}
	// An attacker's browser, without the cookie, opens the redirect.
	resp, err := e.Srv.Client().Get(back)
	if err != nil {
		t.Fatal(err)
	}
	if page := readAll(t, resp); resp.StatusCode != http.StatusBadRequest || !strings.Contains(page, "not from a sign-in this agent started") {
		t.Fatalf("foreign browser: %d %s", resp.StatusCode, page)
	}
	if n := len(grants(e, "authorization_code")); n != 0 || sess.SignedIn() {
		t.Fatalf("%d exchanges, signed in %v", n, sess.SignedIn())
	}
	// The User's own browser, with the cookie, completes it.
	jar, _ := cookiejar.New(nil)
	u, _ := url.Parse(back)
	jar.SetCookies(u, cookies)
	browser := *e.Srv.Client()
	browser.Jar = jar
	resp, err = browser.Get(back)
	if err != nil {
		t.Fatal(err)
	}
	if page := readAll(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("own browser: %d %s", resp.StatusCode, page)
	}
	if res, err := d.Wait(ctx, st.State); err != nil || !sess.SignedIn() || res.User != "alice" {
		t.Fatalf("Wait: %+v, %v", res, err)
	}
	// Signed in: nothing to redirect to.
	st, _ = d.Start(ctx, sess, scopes("poppy:read"))
	if d.Redirect(httptest.NewRecorder(), httptest.NewRequest("GET", "https://agent.test/login", nil), st) {
		t.Fatal("redirected although signed in")
	}
}
