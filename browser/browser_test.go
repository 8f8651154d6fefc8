package browser_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/browser"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

var b64 = base64.RawURLEncoding

func webEnv(t testing.TB, opts *poppytest.Options) (*testenv.Env, *poppy.Session) {
	t.Helper()
	if opts == nil {
		opts = &poppytest.Options{}
	}
	if opts.Web.Subdomains == nil {
		opts.Web.Subdomains = []string{"shop"}
	}
	env := testenv.New(t, opts, nil)
	return env, env.Session("alice")
}

// decode splits a compact JWS into its header and claims.
func decode(t *testing.T, compact string) (map[string]any, map[string]any) {
	t.Helper()
	parts := strings.Split(compact, ".")
	if len(parts) != 3 {
		t.Fatalf("not a compact JWS: %d parts", len(parts))
	}
	var h, c map[string]any
	hb, _ := b64.DecodeString(parts[0])
	cb, _ := b64.DecodeString(parts[1])
	d := json.NewDecoder(bytes.NewReader(cb))
	d.UseNumber()
	if json.Unmarshal(hb, &h) != nil || d.Decode(&c) != nil {
		t.Fatal("header or claims are not JSON objects")
	}
	return h, c
}

func num(t *testing.T, c map[string]any, k string) int64 {
	t.Helper()
	n, ok := c[k].(json.Number)
	if !ok {
		t.Fatalf("claim %s is not a number: %v", k, c[k])
	}
	v, err := n.Int64()
	if err != nil {
		t.Fatalf("claim %s is not an integer: %v", k, n)
	}
	return v
}

func TestAssertionClaims(t *testing.T) {
	env, sess := webEnv(t, nil)
	a, err := sess.SignBrowserAssertion("https://shop.example.test/orders")
	if err != nil {
		t.Fatal(err)
	}
	h, c := decode(t, a.Value())
	// PA-5-03: typ exactly poppy-browser+jwt, signed with a jwks_uri key.
	if h["typ"] != "poppy-browser+jwt" || h["alg"] != "ES256" || h["kid"] != env.Key.KeyID() {
		t.Fatalf("header = %v", h)
	}
	set, err := jwk.Parse(env.ID.JWKS())
	if err != nil {
		t.Fatal(err)
	}
	key, _ := set.Key(0)
	if _, err := jws.Verify([]byte(a.Value()), jws.WithKey(jwa.ES256(), key)); err != nil {
		t.Fatalf("signature does not verify with the published JWKS: %v", err)
	}
	// PA-5-04: iss, sub, iat, jti.
	now := env.Srv.Clock().Now().Unix()
	if c["iss"] != testenv.ClientID || c["sub"] != sess.UserID() || !strings.HasPrefix(sess.UserID(), "usr_") {
		t.Fatalf("iss/sub = %v/%v", c["iss"], c["sub"])
	}
	if iat := num(t, c, "iat"); iat < now-5 || iat > now+5 {
		t.Fatalf("iat %d, clock %d", iat, now)
	}
	jti, _ := c["jti"].(string)
	if raw, err := b64.DecodeString(jti); err != nil || len(raw) < 16 {
		t.Fatalf("jti %q holds fewer than 128 bits", jti)
	}
	a2, _ := sess.SignBrowserAssertion("https://shop.example.test/orders")
	if _, c2 := decode(t, a2.Value()); c2["jti"] == jti {
		t.Fatal("two assertions share a jti")
	}
	// PA-5-05: aud is byte-equal to the document's endpoint.
	if c["aud"] != sess.Company().Document().Web.BrowserSessionEndpoint || c["aud"] != env.Srv.EndpointURL(poppytest.EndpointBrowserSession) {
		t.Fatalf("aud = %v", c["aud"])
	}
	// PA-5-06: session_id is the Session's.
	if c["session_id"] != sess.ID() || sess.ID() == "" {
		t.Fatalf("session_id = %v, Session %s", c["session_id"], sess.ID())
	}
	if c["return_to"] != "https://shop.example.test/orders" {
		t.Fatalf("return_to = %v", c["return_to"])
	}
	// PA-5-08: exp no more than 60 s after iat.
	if d := num(t, c, "exp") - num(t, c, "iat"); d <= 0 || d > 60 {
		t.Fatalf("exp - iat = %d", d)
	}
	if !a.ExpiresAt.After(a.IssuedAt) || a.ExpiresAt.Sub(a.IssuedAt) > time.Minute {
		t.Fatalf("IssuedAt %v ExpiresAt %v", a.IssuedAt, a.ExpiresAt)
	}
}

// PA-5-07: return_to must be https on organization.domain or a subdomain
// anything else is refused before anything is signed.
func TestReturnTo(t *testing.T) {
	env, sess := webEnv(t, &poppytest.Options{Domains: []string{"example.test", "example2.test"}})
	c := sess.Company()
	for _, u := range []string{
		"https://example.test/", "https://example.test", "https://shop.example.test/orders", "https://www.example.test/a?b=c#d",
		"https://EXAMPLE.test./x", "https://example.test:443/",
	} {
		if err := c.CheckReturnTo(u); err != nil {
			t.Errorf("CheckReturnTo(%q) = %v, want accepted", u, err)
		}
	}
	for _, u := range []string{
		"https://evil.test/", "http://example.test/", "https://example.test.evil.test/", "https://notexample.test/",
		"https://user@example.test/", "//example.test/", "/orders", "javascript:alert(1)", "https://example2.test/",
		"https://exa mple.test/", "https://" + strings.Repeat("a", 2100) + ".example.test/", "https://[::1]/",
	} {
		if err := c.CheckReturnTo(u); !errors.Is(err, poppy.ErrReturnTo) {
			t.Errorf("CheckReturnTo(%q) = %v, want ErrReturnTo", u, err)
		}
	}
	// Nothing is signed: no assertion, no navigation, no join request.
	if a, err := sess.SignBrowserAssertion("https://evil.test/"); a != nil || !errors.Is(err, poppy.ErrReturnTo) {
		t.Fatalf("SignAssertion(evil) = %v, %v", a, err)
	}
	fb := newFormBrowser(t, env.Srv)
	b, err := browser.New(fb, sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Join(context.Background(), "https://evil.test/"); !errors.Is(err, poppy.ErrReturnTo) {
		t.Fatalf("Join(evil) = %v", err)
	}
	if fb.navigations() != 0 || len(env.Srv.RequestsTo(poppytest.EndpointBrowserSession)) != 0 {
		t.Fatal("a refused return_to still reached the browser or the Company")
	}
	if _, err := b.Join(context.Background(), "https://shop.example.test/orders"); err != nil {
		t.Fatalf("Join(shop) = %v", err)
	}
}

// PA-5-09, PA-5-10: the page is a form POST of the assertion, in the body
// only; its CSP allows exactly its own script.
func TestJoinPage(t *testing.T) {
	_, sess := webEnv(t, nil)
	a, err := sess.SignBrowserAssertion("https://shop.example.test/orders")
	if err != nil {
		t.Fatal(err)
	}
	p := browser.NewPage(a)
	page := string(p.HTML())
	form := `<form method="post" action="https://example.test/poppy/browser-session" enctype="application/x-www-form-urlencoded">`
	if !strings.Contains(page, form) {
		t.Fatalf("no POST form to the endpoint in %s", page)
	}
	if !strings.Contains(page, `<input type="hidden" name="assertion" value="`+a.Value()+`">`) {
		t.Fatal("the assertion is not the form's hidden field")
	}
	if strings.Count(page, a.Value()) != 1 {
		t.Fatal("the assertion appears more than once on the page")
	}
	if !strings.Contains(page, `<button type="submit">`) {
		t.Fatal("no visible submit button for a browser without scripts")
	}
	scripts := regexp.MustCompile(`(?s)<script>(.*?)</script>`).FindAllStringSubmatch(page, -1)
	if len(scripts) != 1 || strings.Contains(page, "<script ") || strings.Contains(page, " on") && regexp.MustCompile(` on[a-z]+=`).MatchString(page) {
		t.Fatalf("the page has %d inline scripts, or other script sources", len(scripts))
	}
	sum := sha256.Sum256([]byte(scripts[0][1]))
	hash := "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	want := "default-src 'none'; script-src " + hash + "; form-action https://example.test https://shop.example.test; base-uri 'none'; frame-ancestors 'none'"
	if p.CSP() != want {
		t.Fatalf("CSP = %q\nwant  %q", p.CSP(), want)
	}
	rec := &headerRecorder{h: http.Header{}}
	p.ServeHTTP(rec, nil)
	if rec.h.Get("Content-Security-Policy") != want || rec.h.Get("Cache-Control") != "no-store" || rec.h.Get("Referrer-Policy") != "no-referrer" {
		t.Fatalf("served headers = %v", rec.h)
	}
	if !bytes.Equal(rec.body.Bytes(), p.HTML()) {
		t.Fatal("served body differs from HTML()")
	}
}

type headerRecorder struct {
	h    http.Header
	body bytes.Buffer
	code int
}

func (r *headerRecorder) Header() http.Header         { return r.h }
func (r *headerRecorder) Write(b []byte) (int, error) { return r.body.Write(b) }
func (r *headerRecorder) WriteHeader(c int)           { r.code = c }

// The assertion never shows in %v, %+v, %#v, slog or an error.
func TestAssertionRedacted(t *testing.T) {
	_, sess := webEnv(t, nil)
	a, err := sess.SignBrowserAssertion("https://example.test/")
	if err != nil {
		t.Fatal(err)
	}
	p := browser.NewPage(a)
	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("x", "assertion", a, "page", p)
	sig := a.Value()[strings.LastIndexByte(a.Value(), '.')+1:]
	for _, s := range []string{fmt.Sprint(a), fmt.Sprintf("%+v %#v %s %q", a, a, a, a), fmt.Sprint(p), fmt.Sprintf("%+v %#v", p, p), logs.String()} {
		if strings.Contains(s, sig) || strings.Contains(s, a.Value()[:30]) {
			t.Fatalf("the assertion shows in %q", s)
		}
	}
}

func TestJoinAndBrowse(t *testing.T) {
	env, sess := webEnv(t, nil)
	ctx := context.Background()
	fb := newFormBrowser(t, env.Srv)
	var logs bytes.Buffer
	b, err := browser.New(fb, sess, &browser.Options{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	// PA-5-01: Browse before Join is refused, and nothing reaches the site.
	if _, err := b.Browse(ctx, "https://example.test/orders"); !errors.Is(err, browser.ErrNotJoined) {
		t.Fatalf("Browse before Join: %v", err)
	}
	if n := len(env.Srv.RequestsTo(poppytest.EndpointWeb, poppytest.EndpointBrowserSession)); n != 0 {
		t.Fatalf("%d website requests before the join", n)
	}
	res, err := b.Join(ctx, "https://shop.example.test/orders")
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != browser.Joined || res.URL != "https://shop.example.test/orders" || res.Status != 200 || res.SessionID != sess.ID() {
		t.Fatalf("Join = %+v", res)
	}
	site := env.Srv.RequestsTo(poppytest.EndpointWeb, poppytest.EndpointBrowserSession)
	// PA-5-01: the first request the site sees is the join POST.
	if len(site) != 2 || site[0].Endpoint != poppytest.EndpointBrowserSession || site[1].URL != "https://shop.example.test/orders" {
		t.Fatalf("site requests = %+v", site)
	}
	// PA-5-09, PA-5-10: a form POST, the assertion in the body only.
	j := site[0]
	if j.Method != "POST" || j.URL != env.Srv.EndpointURL(poppytest.EndpointBrowserSession) || j.Header.Get("Content-Type") != "application/x-www-form-urlencoded" || j.Status != 303 {
		t.Fatalf("join request = %s %s %q → %d", j.Method, j.URL, j.Header.Get("Content-Type"), j.Status)
	}
	a := j.Form.Get("assertion")
	if j.Assertion == nil || j.Assertion.Header["typ"] != "poppy-browser+jwt" {
		t.Fatal("the join request carries no browser assertion")
	}
	for _, u := range fb.visited() {
		if strings.Contains(u, a[len(a)-40:]) {
			t.Fatalf("the assertion is in the URL %.60s", u)
		}
	}
	if strings.Contains(logs.String(), a[len(a)-40:]) || !strings.Contains(logs.String(), "browser: joined") {
		t.Fatalf("logs: %s", logs.String())
	}
	if !strings.Contains(fb.lastPage(), "Signed out.") {
		t.Fatalf("landing page: %s", fb.lastPage())
	}
	nav, err := b.Browse(ctx, "https://example.test/account")
	if err != nil || nav.Status != 200 {
		t.Fatalf("Browse = %+v, %v", nav, err)
	}
	if !strings.Contains(fb.lastPage(), "Session "+sess.ID()) {
		t.Fatalf("page: %s", fb.lastPage())
	}
	if _, err := b.Browse(ctx, "http://example.test/"); !errors.Is(err, browser.ErrInsecureURL) {
		t.Fatalf("Browse(http) = %v", err)
	}
}

// PA-5-02: without the endpoint the browser is an ordinary visitor: no
// assertion, no join request, a typed result.
func TestNoEndpoint(t *testing.T) {
	env, sess := webEnv(t, &poppytest.Options{Discovery: poppytest.DiscoveryOptions{DropBrowserSession: true}})
	ctx := context.Background()
	fb := newFormBrowser(t, env.Srv)
	b, err := browser.New(fb, sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Join(ctx, "https://example.test/orders")
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != browser.Visitor || res.SessionID != "" || res.URL != "https://example.test/orders" || res.Status != 200 {
		t.Fatalf("Join = %+v, want a Visitor on the page", res)
	}
	if _, err := sess.SignBrowserAssertion("https://example.test/"); !errors.Is(err, poppy.ErrNoBrowserSessionEndpoint) {
		t.Fatalf("SignAssertion = %v", err)
	}
	if nav, err := b.Browse(ctx, "https://example.test/account"); err != nil || nav.Status != 200 {
		t.Fatalf("Browse = %+v, %v", nav, err)
	}
	for _, r := range env.Srv.Requests() {
		if r.Path == poppytest.BrowserSessionPath || r.Assertion != nil && r.Endpoint != poppytest.EndpointToken {
			t.Fatalf("a browser assertion was sent: %s %s", r.Method, r.URL)
		}
	}
	if !strings.Contains(fb.lastPage(), "Visitor without a Session.") {
		t.Fatalf("page: %s", fb.lastPage())
	}
	// A browse-only Company needs no Session at all.
	if _, err := browser.NewVisitor(fb, sess.Company(), nil); err != nil {
		t.Fatalf("New without a Session: %v", err)
	}
	if Visitor := browser.Visitor.String(); Visitor != "visitor" {
		t.Fatal(Visitor)
	}
}

// A Company with the endpoint is joined with a Session: NewVisitor refuses
// it, and New needs a Session.
func TestNewNeedsASession(t *testing.T) {
	env, sess := webEnv(t, nil)
	fb := newFormBrowser(t, env.Srv)
	if b, err := browser.NewVisitor(fb, sess.Company(), nil); err == nil || b != nil {
		t.Fatalf("NewVisitor on a Company with the endpoint = %v, %v", b, err)
	}
	if b, err := browser.New(fb, nil, nil); err == nil || b != nil {
		t.Fatalf("New without a Session = %v, %v", b, err)
	}
	if fb.navigations() != 0 {
		t.Fatal("the browser navigated")
	}
}

// PA-5-12: a join the Company refuses is ErrBrowserJoinFailed, read from
// the browser's final document.
func TestJoinRefused(t *testing.T) {
	env, sess := webEnv(t, nil)
	ctx := context.Background()
	fb := newFormBrowser(t, env.Srv)
	b, err := browser.New(fb, sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	env.Srv.Sessions().End(sess.ID())
	_, err = b.Join(ctx, "https://example.test/")
	var je *browser.JoinError
	if !errors.Is(err, browser.ErrBrowserJoinFailed) || !errors.As(err, &je) || je.Status != 400 || je.URL != env.Srv.EndpointURL(poppytest.EndpointBrowserSession) {
		t.Fatalf("Join on an ended Session = %v", err)
	}
	if strings.Contains(err.Error(), "eyJ") {
		t.Fatal("the error carries a JWT")
	}
	if _, ok := b.Joined(); ok {
		t.Fatal("joined after a refusal")
	}
	if fb.cookie("https://example.test/") != "" {
		t.Fatal("a refused join left a cookie")
	}
	if _, err := b.Browse(ctx, "https://example.test/"); !errors.Is(err, browser.ErrNotJoined) {
		t.Fatalf("Browse after a refused join = %v", err)
	}
}

// PA-5-13: Rejoin posts a new assertion; the new cookie replaces the old
// one and later pages carry it (CO-5-20). With RevokeOnRejoin (the strict
// reading of A-19) the old cookie stops working and nothing breaks.
func TestRejoin(t *testing.T) {
	for _, revoke := range []bool{false, true} {
		t.Run(fmt.Sprint("revoke=", revoke), func(t *testing.T) {
			env, sess := webEnv(t, &poppytest.Options{Web: poppytest.WebOptions{RevokeOnRejoin: revoke}})
			ctx := context.Background()
			fb := newFormBrowser(t, env.Srv)
			b, _ := browser.New(fb, sess, nil)
			if _, err := b.Join(ctx, "https://example.test/orders"); err != nil {
				t.Fatal(err)
			}
			first := fb.cookie("https://example.test/")
			if _, err := b.Rejoin(ctx); err != nil {
				t.Fatal(err)
			}
			second := fb.cookie("https://example.test/")
			if first == "" || second == "" || first == second {
				t.Fatalf("cookies %q then %q", first, second)
			}
			if _, err := b.Browse(ctx, "https://example.test/account"); err != nil {
				t.Fatal(err)
			}
			last := env.Srv.Requests()[len(env.Srv.Requests())-1]
			if !strings.Contains(last.Header.Get("Cookie"), second) || !strings.Contains(fb.lastPage(), "Session "+sess.ID()) {
				t.Fatalf("the page request carried %q, page %s", last.Header.Get("Cookie"), fb.lastPage())
			}
			if n := len(env.Srv.RequestsTo(poppytest.EndpointBrowserSession)); n != 2 {
				t.Fatalf("%d joins", n)
			}
		})
	}
}

// when the caller's check says the website no longer recognises the
// Session, Browse joins again once (PA-5-13).
func TestRecognizesRejoins(t *testing.T) {
	env, sess := webEnv(t, nil)
	ctx := context.Background()
	fb := newFormBrowser(t, env.Srv)
	checks := 0
	b, _ := browser.New(fb, sess, &browser.Options{
		Recognizes: func(_ context.Context, nav *browser.Navigation) (bool, error) {
			checks++
			return strings.Contains(fb.lastPage(), "Session "+sess.ID()), nil
		},
	})
	if _, err := b.Join(ctx, "https://example.test/"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Browse(ctx, "https://example.test/orders"); err != nil {
		t.Fatal(err)
	}
	if n := len(env.Srv.RequestsTo(poppytest.EndpointBrowserSession)); n != 1 || checks != 1 {
		t.Fatalf("%d joins, %d checks while recognised", n, checks)
	}
	// The browser loses its cookie (a cleared profile): the page shows a
	// visitor, the check fails, Browse joins again and lands on the page.
	fb.client.Jar, _ = newJar()
	nav, err := b.Browse(ctx, "https://example.test/orders")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(env.Srv.RequestsTo(poppytest.EndpointBrowserSession)); n != 2 || nav.URL != "https://example.test/orders" {
		t.Fatalf("%d joins, landed on %+v", n, nav)
	}
	if !strings.Contains(fb.lastPage(), "Session "+sess.ID()) {
		t.Fatalf("page after the rejoin: %s", fb.lastPage())
	}
}

// userPrompter plays the User at every sign-in type, recording each prompt
// as it was shown: what the User's own browser or eyes would get.
type userPrompter struct {
	env   *testenv.Env
	shown []string
}

func (u *userPrompter) OpenURL(ctx context.Context, p *signin.URLPrompt) error {
	u.shown = append(u.shown, fmt.Sprintf("%+v", *p))
	loc, err := u.env.Srv.Browse(ctx, p.URL)
	if err != nil || loc == "" {
		return err
	}
	resp, err := u.env.Srv.Client().Get(loc) // back to the agent's callback
	if err == nil {
		resp.Body.Close()
	}
	return err
}

func (u *userPrompter) ShowCode(ctx context.Context, p *signin.CodePrompt) error {
	u.shown = append(u.shown, fmt.Sprintf("%+v", *p))
	_, err := u.env.Srv.Browse(ctx, p.VerificationURIComplete)
	return err
}

func (u *userPrompter) Credentials(_ context.Context, p *signin.CredentialsPrompt) (*signin.Credentials, error) {
	u.shown = append(u.shown, fmt.Sprintf("%+v", *p))
	return signin.NewCredentials(p, map[string]string{"email": "user@example.test", "password": "correct horse"}), nil
}

func (u *userPrompter) OneTimeCode(_ context.Context, p *signin.OneTimeCodePrompt) (string, error) {
	u.shown = append(u.shown, fmt.Sprintf("%+v", *p))
	return u.env.Srv.SignIn().LastCode(), nil
}

// PA-5-11: browser assertions are posted only from a browser the agent
// controls, never from the User's own. Join hands the join page to the
// ControlledBrowser and to nothing else: every assertion the Company got
// came in a form that browser submitted from the page the SDK served it,
// and in nothing else; the browser package's log lines hold no assertion
// and no join page URL (whoever loads that page first posts the
// assertion); and no prompt of any sign-in type after the joins (Direct's
// URL, Device's code, Mediated's credentials and one-time code) holds the
// endpoint, an assertion or a join page for the User's browser to open.
func TestPA_5_11_AssertionsOnlyFromTheControlledBrowser(t *testing.T) {
	env, sess := webEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RequireCode: true}})
	d, err := signin.NewDirect(env.Agent, nil)
	if err != nil {
		t.Fatal(err)
	}
	env.Serve(d.Handler())
	ctx := context.Background()
	var logs bytes.Buffer
	fb := newFormBrowser(t, env.Srv)
	b, _ := browser.New(fb, sess, &browser.Options{
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if _, err := b.Join(ctx, "https://example.test/"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Rejoin(ctx); err != nil {
		t.Fatal(err)
	}
	var assertions, joinPages []string
	for _, f := range fb.postedForms() {
		if a := f.Get("assertion"); a != "" {
			assertions = append(assertions, a)
		}
	}
	for _, u := range fb.visited() {
		if strings.HasPrefix(u, "http://127.0.0.1:") {
			joinPages = append(joinPages, u)
		}
	}
	joins := env.Srv.RequestsTo(poppytest.EndpointBrowserSession)
	if len(joins) != 2 || len(assertions) != 2 || len(joinPages) != 2 {
		t.Fatalf("%d join requests at the Company, %d assertions posted by the controlled browser from %d join pages",
			len(joins), len(assertions), len(joinPages))
	}
	for i, j := range joins {
		if got := j.Form.Get("assertion"); got != assertions[i] {
			t.Fatalf("join %d carried an assertion the controlled browser didn't post", i)
		}
	}
	// Every request at the Company that carries an assertion, anywhere,
	// is one of those joins.
	for _, r := range env.Srv.Requests() {
		if r.Endpoint == poppytest.EndpointBrowserSession {
			continue
		}
		for _, a := range assertions {
			if strings.Contains(fmt.Sprintf("%s %v %v", r.URL, r.Header, r.Form), a[len(a)-40:]) {
				t.Fatalf("%s %s carries an assertion", r.Method, r.URL)
			}
		}
	}
	u := &userPrompter{env: env}
	read := &poppy.SignInOptions{Scopes: []string{"poppy:read"}}
	if _, err := d.SignIn(ctx, env.Session("bob"), read, u); err != nil {
		t.Fatalf("Direct: %v", err)
	}
	if _, err := signin.Device(ctx, env.Session("carol"), read, u); err != nil {
		t.Fatalf("Device: %v", err)
	}
	if _, err := signin.Mediated(ctx, sess, read, u); err != nil {
		t.Fatalf("Mediated: %v", err)
	}
	if len(u.shown) < 4 {
		t.Fatalf("%d prompts, want one of each kind: %q", len(u.shown), u.shown)
	}
	bad := append([]string{env.Srv.EndpointURL(poppytest.EndpointBrowserSession), poppytest.BrowserSessionPath, "http://127.0.0.1:"}, joinPages...)
	for _, a := range assertions {
		bad = append(bad, a[len(a)-40:])
	}
	for _, s := range u.shown {
		for _, x := range bad {
			if strings.Contains(s, x) {
				t.Fatalf("a prompt to the User holds %q: %s", x, s)
			}
		}
	}
	for _, x := range append(joinPages, assertions...) {
		if strings.Contains(logs.String(), x) || strings.Contains(logs.String(), srvPathOf(x)) {
			t.Fatalf("the browser package logged a join page or an assertion: %s", logs.String())
		}
	}
	if fb.navigations() != 2 {
		t.Fatalf("%d navigations of the controlled browser", fb.navigations())
	}
}

// srvPathOf is the path of a join page URL ("" for anything else).
func srvPathOf(u string) string {
	if p, err := url.Parse(u); err == nil && strings.HasPrefix(p.Path, "/join/") {
		return p.Path
	}
	return "\x00"
}

func TestPageServer(t *testing.T) {
	_, sess := webEnv(t, nil)
	a, _ := sess.SignBrowserAssertion("https://example.test/")
	p := browser.NewPage(a)
	ctx := context.Background()

	t.Run("one load", func(t *testing.T) {
		s, err := browser.ServePage(ctx, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !strings.HasPrefix(s.URL(), "http://127.0.0.1:") || len(s.URL()) < len("http://127.0.0.1:1/join/")+20 {
			t.Fatalf("URL = %s", s.URL())
		}
		base := s.URL()[:strings.LastIndexByte(s.URL(), '/')]
		if code := status(t, base+"/other"); code != 404 {
			t.Fatalf("other path: %d", code)
		}
		if s.Loaded() {
			t.Fatal("a wrong path counted as the load")
		}
		if code := status(t, s.URL()); code != 200 {
			t.Fatalf("the page: %d", code)
		}
		select {
		case <-s.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the server did not shut down after the load")
		}
		if _, err := http.Get(s.URL()); err == nil {
			t.Fatal("the page was served twice")
		}
	})
	t.Run("timeout", func(t *testing.T) {
		s, err := browser.ServePage(ctx, p, &browser.ServeOptions{Timeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-s.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("no shutdown after the timeout")
		}
		if s.Loaded() {
			t.Fatal("loaded")
		}
	})
	t.Run("context", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		s, err := browser.ServePage(cctx, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		select {
		case <-s.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("no shutdown when the context ended")
		}
	})
	t.Run("host", func(t *testing.T) {
		s, err := browser.ServePage(ctx, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		req, _ := http.NewRequest(http.MethodGet, s.URL(), nil)
		req.Host = "attacker.test"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 404 || s.Loaded() {
			t.Fatalf("a foreign Host got %d (loaded %v)", resp.StatusCode, s.Loaded())
		}
	})
}

func status(t *testing.T, u string) int {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	return resp.StatusCode
}

// A-19, PA-5-13: when the Company ended the Session and the SDK started
// another, Browse joins the new Session before loading the page.
func TestBrowseRejoinsNewSession(t *testing.T) {
	env, sess := webEnv(t, nil)
	ctx := context.Background()
	fb := newFormBrowser(t, env.Srv)
	b, _ := browser.New(fb, sess, nil)
	if _, err := b.Join(ctx, "https://example.test/"); err != nil {
		t.Fatal(err)
	}
	old := sess.ID()
	env.Srv.Sessions().End(old)
	if code, _ := env.Get(sess, "/products"); code != 200 {
		t.Fatalf("API call after the Session ended: %d", code)
	}
	if sess.ID() == old {
		t.Fatal("the SDK kept the ended Session")
	}
	nav, err := b.Browse(ctx, "https://example.test/orders")
	if err != nil {
		t.Fatal(err)
	}
	joins := env.Srv.RequestsTo(poppytest.EndpointBrowserSession)
	if len(joins) != 2 || joins[1].Assertion.Claims["session_id"] != sess.ID() || nav.URL != "https://example.test/orders" {
		t.Fatalf("%d joins, landed on %+v", len(joins), nav)
	}
	if sid, _ := b.Joined(); sid != sess.ID() || !strings.Contains(fb.lastPage(), "Session "+sess.ID()) {
		t.Fatalf("joined %s, page %s", sid, fb.lastPage())
	}
}

// FuzzCheckReturnTo: whatever CheckReturnTo accepts is an https URL on
// example.test or a subdomain, without userinfo (PA-5-07).
func FuzzCheckReturnTo(f *testing.F) {
	_, sess := webEnv(f, nil)
	for _, s := range []string{"https://example.test/", "https://shop.example.test/x?y#z", "https://evil.test/", "https://example.test:99999/",
		"https://example.test@evil.test/", "https://evil.test\\@example.test/", "https://example.test%2f@evil.test", "HTTPS://EXAMPLE.TEST/"} {
		f.Add(s)
	}
	c := sess.Company()
	f.Fuzz(func(t *testing.T, raw string) {
		if c.CheckReturnTo(raw) != nil {
			return
		}
		u, err := url.Parse(raw)
		if err != nil || u.Scheme != "https" || u.User != nil {
			t.Fatalf("accepted %q", raw)
		}
		h := strings.TrimSuffix(strings.ToLower(u.Hostname()), ".")
		if h != "example.test" && !strings.HasSuffix(h, ".example.test") {
			t.Fatalf("accepted %q on host %q", raw, h)
		}
		if strings.Contains(h, "..") || strings.HasPrefix(h, ".") {
			t.Fatalf("accepted %q with an empty label", raw)
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != p {
				t.Fatalf("accepted %q with port %q", raw, p)
			}
		}
	})
}
