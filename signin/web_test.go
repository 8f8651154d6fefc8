package signin_test

import (
	"net/http"
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
