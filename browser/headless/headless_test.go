package headless_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"image/png"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"go.uber.org/goleak"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/browser"
	"github.com/poppyproto/poppy/browser/headless"
	"github.com/poppyproto/poppy/internal/realtest"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/operations"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(realtest.Main(m)) // one line per missing real component
}

// needChromium skips the test when Chromium is missing, or fails it with
// POPPY_TEST_REAL=1 (set by .ci/run). The look-up is one go test's cache
// sees (realtest.WatchPATH): a run that skipped is not served from the
// cache once Chromium is installed.
func needChromium(t *testing.T) {
	t.Helper()
	realtest.WatchPATH()
	if _, err := headless.LookPath(); err != nil {
		realtest.Missing(t, "headless Chromium", "no chromium on PATH (install the Debian package chromium, as .ci/run does)")
	}
}

// startChromium launches Chromium with the fake's host names mapped to its
// listener and its leaf key pinned (see the package doc).
func startChromium(t *testing.T, srv *poppytest.Server, logger *slog.Logger) *headless.Browser {
	t.Helper()
	needChromium(t)
	trust := srv.BrowserTrust()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b, err := headless.Start(ctx, &headless.Options{
		HostResolverRules: trust.ChromiumHostRules(),
		TrustSPKI:         []string{trust.SPKI},
		Logger:            logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// urlLog records every URL the browser requested or was redirected to,
// from chromedp's network events.
type urlLog struct {
	mu   sync.Mutex
	urls []string
}

func (l *urlLog) listen(t *testing.T, b *headless.Browser) {
	t.Helper()
	err := chromedp.Listen(b.Context(), func(ev any) {
		e, ok := ev.(*network.EventRequestWillBeSent)
		if !ok {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if e.Request != nil {
			l.urls = append(l.urls, e.Request.URL+e.Request.URLFragment)
		}
		if e.RedirectResponse != nil {
			l.urls = append(l.urls, e.RedirectResponse.URL)
			for k, v := range e.RedirectResponse.Headers {
				if strings.EqualFold(k, "Location") {
					l.urls = append(l.urls, fmt.Sprint(v))
				}
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (l *urlLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.urls...)
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func mediatedSignIn(t *testing.T, ctx context.Context, sess *poppy.Session) {
	t.Helper()
	p := signin.PrompterFuncs{CredentialsFunc: func(_ context.Context, cp *signin.CredentialsPrompt) (*signin.Credentials, error) {
		return signin.NewCredentials(cp, map[string]string{"email": "user@example.test", "password": "correct horse"}), nil
	}}
	if _, err := signin.Mediated(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, p); err != nil {
		t.Fatalf("Mediated: %v", err)
	}
}

func wantText(t *testing.T, ctx context.Context, b *headless.Browser, want ...string) string {
	t.Helper()
	text, err := b.Text(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Fatalf("page text %q does not contain %q", text, w)
		}
	}
	return text
}

// browserCookie returns the value of the Session cookie in Chromium.
func browserCookie(t *testing.T, b *headless.Browser) string {
	t.Helper()
	res, err := chromedp.Call(b.Context(), network.GetCookies, network.GetCookiesParams{URLs: []string{"https://example.test/"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range res.Cookies {
		if c.Name == "poppytest_session" {
			return c.Value
		}
	}
	return ""
}

// TestEndToEnd joins a real headless Chromium to a Session and follows the
// Session's state on the Company's website (spec 5; PA-5-01, CO-5-14,
// PA-5-13, CO-5-20).
func TestEndToEnd(t *testing.T) {
	env := testenv.New(t, &poppytest.Options{Web: poppytest.WebOptions{Subdomains: []string{"shop"}}}, nil)
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	agent := env.NewAgent(&poppy.AgentOptions{Logger: logger})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	company, err := agent.Company(ctx, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	sess, err := company.Session(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	chromium := startChromium(t, env.Srv, logger)
	var visited urlLog
	visited.listen(t, chromium)

	b, err := browser.New(chromium, sess, &browser.Options{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	// PA-5-01: no browsing of the website before the join.
	if _, err := b.Browse(ctx, "https://example.test/account"); !errors.Is(err, browser.ErrNotJoined) {
		t.Fatalf("Browse before Join: %v, want ErrNotJoined", err)
	}
	returnTo := "https://shop.example.test/account"
	res, err := b.Join(ctx, returnTo)
	if err != nil {
		t.Fatalf("Join: %v", err)
	}
	if res.Mode != browser.Joined || res.URL != returnTo || res.Status != 200 || res.SessionID != sess.ID() {
		t.Fatalf("Join = %+v, want joined on %s with 200", res, returnTo)
	}
	// PA-5-01: the first request the website saw from the browser is the
	// POST to the endpoint.
	var site []poppytest.Request
	for _, r := range env.Srv.RequestsTo(poppytest.EndpointWeb, poppytest.EndpointBrowserSession) {
		if r.Path != "/favicon.ico" {
			site = append(site, r)
		}
	}
	if len(site) < 2 || site[0].Endpoint != poppytest.EndpointBrowserSession || site[0].Method != "POST" {
		t.Fatalf("website requests = %v, want the join POST first", site)
	}
	first := browserCookie(t, chromium)
	if first == "" {
		t.Fatal("Chromium holds no Session cookie after the join")
	}
	// The signed-out page of the Session.
	wantText(t, ctx, chromium, "Signed out.", "Session "+sess.ID())

	// Sign in through the API; a reload shows the account and scopes
	// (CO-5-14).
	mediatedSignIn(t, ctx, sess)
	if _, err := chromium.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	wantText(t, ctx, chromium, "Signed in to account acct_1.", "Scopes: poppy:read")

	shot, err := chromium.Screenshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if d := os.Getenv("POPPY_TEST_ARTIFACTS"); d != "" {
		dir = d
	}
	path := filepath.Join(dir, "signed-in.png")
	if err := os.WriteFile(path, shot, 0o600); err != nil {
		t.Fatal(err)
	}
	img, err := png.DecodeConfig(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if len(shot) < 4<<10 || len(shot) > 8<<20 || img.Width < 640 || img.Height < 400 {
		t.Fatalf("screenshot %s: %d bytes, %dx%d: implausible", path, len(shot), img.Width, img.Height)
	}
	t.Logf("screenshot of the signed-in page: %s (%d bytes, %dx%d)", path, len(shot), img.Width, img.Height)

	// Sign out through the API; a reload shows signed out.
	if err := sess.SignOut(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := chromium.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	wantText(t, ctx, chromium, "Signed out.")

	// A second join replaces the cookie (PA-5-13, CO-5-20), and pages keep
	// working.
	if _, err := b.Rejoin(ctx); err != nil {
		t.Fatalf("Rejoin: %v", err)
	}
	second := browserCookie(t, chromium)
	if second == "" || second == first {
		t.Fatalf("cookie after the second join = %q, first %q: want a new value", second, first)
	}
	if nav, err := b.Browse(ctx, "https://example.test/orders"); err != nil || nav.Status != 200 {
		t.Fatalf("Browse after Rejoin = %+v, %v", nav, err)
	}
	wantText(t, ctx, chromium, "Signed out.", "Session "+sess.ID())

	// The assertions went only in POST bodies: never in a URL the browser
	// visited (chromedp's network events) nor in a log line (PA-5-10).
	joins := env.Srv.RequestsTo(poppytest.EndpointBrowserSession)
	if len(joins) != 2 {
		t.Fatalf("%d join requests, want 2", len(joins))
	}
	urls := visited.all()
	if len(urls) < 6 {
		t.Fatalf("only %d URLs recorded: the network listener saw nothing", len(urls))
	}
	for _, j := range joins {
		a := j.Form.Get("assertion")
		if j.Method != "POST" || a == "" || strings.Contains(j.URL, "?") || !strings.HasPrefix(j.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
			t.Fatalf("join request %s %s (%s) is not a form POST with the assertion in its body", j.Method, j.URL, j.Header.Get("Content-Type"))
		}
		for _, u := range urls {
			if strings.Contains(u, a) || strings.Contains(u, a[:40]) {
				t.Fatalf("the assertion appears in a URL the browser visited: %.80s", u)
			}
		}
		if strings.Contains(logs.String(), a[strings.LastIndexByte(a, '.')+1:]) || strings.Contains(logs.String(), a[:40]) {
			t.Fatal("the assertion appears in a log line")
		}
	}
	if !strings.Contains(logs.String(), "browser: joined") {
		t.Fatal("no log line of the join: the log check looked at nothing")
	}
}

// TestJoinWithoutScripts submits the join page with its visible button
// when the browser runs no scripts (spec 5 step 2, PA-5-09).
func TestJoinWithoutScripts(t *testing.T) {
	env := testenv.New(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess := env.Session("bob")
	chromium := startChromium(t, env.Srv, nil)
	if _, err := chromedp.Call(chromium.Context(), emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: true}); err != nil {
		t.Fatal(err)
	}
	a, err := sess.SignBrowserAssertion("https://example.test/orders")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := browser.ServePage(ctx, browser.NewPage(a), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	nav, err := chromium.Navigate(ctx, &browser.NavigateRequest{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if nav.URL != srv.URL() || nav.Status != 200 {
		t.Fatalf("page load = %+v", nav)
	}
	if n := len(env.Srv.RequestsTo(poppytest.EndpointBrowserSession)); n != 0 {
		t.Fatalf("the page submitted itself without scripts (%d joins)", n)
	}
	nav, err = chromium.Click(ctx, "button", func(u string) bool { return strings.HasPrefix(u, "https://") })
	if err != nil {
		t.Fatal(err)
	}
	if nav.URL != "https://example.test/orders" || nav.Status != 200 {
		t.Fatalf("after the button: %+v", nav)
	}
	wantText(t, ctx, chromium, "Signed out.", "Session "+sess.ID())
}

// TestJoinRefused: a join the Company refuses (the Session has ended)
// reaches the SDK as ErrBrowserJoinFailed from the browser's final
// document (PA-5-12, CO-5-12).
func TestJoinRefused(t *testing.T) {
	env := testenv.New(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess := env.Session("carol")
	chromium := startChromium(t, env.Srv, nil)
	b, err := browser.New(chromium, sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Sign the assertion with the Session still active, then end it on the
	// server, as a Company does that ends a Session between two requests.
	a, err := sess.SignBrowserAssertion("https://example.test/")
	if err != nil {
		t.Fatal(err)
	}
	env.Srv.Sessions().End(sess.ID())
	srv, err := browser.ServePage(ctx, browser.NewPage(a), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	nav, err := chromium.Navigate(ctx, &browser.NavigateRequest{URL: srv.URL(),
		Until: func(u string) bool { return strings.HasPrefix(u, "https://") }})
	if err != nil {
		t.Fatal(err)
	}
	if nav.Status != 400 || nav.URL != env.Srv.EndpointURL(poppytest.EndpointBrowserSession) {
		t.Fatalf("refused join landed on %+v, want the endpoint's 400", nav)
	}
	if c := browserCookie(t, chromium); c != "" {
		t.Fatal("a refused join set a cookie")
	}
	// Join itself reports the refusal as ErrBrowserJoinFailed.
	_, err = b.Join(ctx, "https://example.test/")
	var je *browser.JoinError
	if !errors.Is(err, browser.ErrBrowserJoinFailed) || !errors.As(err, &je) || je.Status != 400 {
		t.Fatalf("Join on an ended Session: %v, want a *JoinError with 400", err)
	}
	if _, ok := b.Joined(); ok {
		t.Fatal("a refused join left the browser joined")
	}
}

// The fake's leaf key is pinned, not every certificate trusted: with
// another hash in the list, Chromium refuses the fake's certificate.
func TestPinnedKeyOnly(t *testing.T) {
	env := testenv.New(t, nil, nil)
	needChromium(t)
	trust := env.Srv.BrowserTrust()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	wrong := sha256.Sum256([]byte("not the fake's key"))
	b, err := headless.Start(ctx, &headless.Options{
		HostResolverRules: "MAP example.test " + trust.Addr,
		TrustSPKI:         []string{base64.StdEncoding.EncodeToString(wrong[:])},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.Navigate(ctx, &browser.NavigateRequest{URL: "https://example.test/"}); !errors.Is(err, headless.ErrNavigation) {
		t.Fatalf("Navigate with an unpinned certificate: %v, want ErrNavigation", err)
	}
	if n := len(env.Srv.RequestsTo(poppytest.EndpointWeb)); n != 0 {
		t.Fatalf("%d requests reached the fake over an unverified connection", n)
	}
}

// Attach drives a page the caller started; Close leaves it open.
func TestAttach(t *testing.T) {
	env := testenv.New(t, nil, nil)
	needChromium(t)
	exec, _ := headless.LookPath()
	trust := env.Srv.BrowserTrust()
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exec), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("host-resolver-rules", "MAP example.test "+trust.Addr),
		chromedp.Flag("ignore-certificate-errors-spki-list", trust.SPKI))
	defer cancelAlloc()
	tab, cancelTab := chromedp.NewContext(alloc)
	defer cancelTab()
	b, err := headless.Attach(tab)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nav, err := b.Navigate(ctx, &browser.NavigateRequest{URL: "https://example.test/"})
	if err != nil || nav.Status != 200 {
		t.Fatalf("Navigate = %+v, %v", nav, err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	loc, err := chromedp.Run(tab, chromedp.Location())
	if err != nil || loc != "https://example.test/" {
		t.Fatalf("the caller's page after Close: %q, %v", loc, err)
	}
	if err := chromedp.Cancel(tab); err != nil {
		t.Fatal(err)
	}
}

// An operation's url opens in the joined browser and shows the operation
// in the same Session (OPS 3, spec 5).
func TestOperationURL(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{Scopes: map[string][]string{"mediated": {"poppy:read", "poppy:write"}}}})
	id, key := testenv.NewIdentity(t, map[string]string{"operations": "1"})
	env := &testenv.Env{T: t, Srv: srv, ID: id, Key: key}
	env.Serve(nil)
	env.Agent = env.NewAgent(nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sess := env.Session("dana")
	p := signin.PrompterFuncs{CredentialsFunc: func(_ context.Context, cp *signin.CredentialsPrompt) (*signin.Credentials, error) {
		return signin.NewCredentials(cp, map[string]string{"email": "user@example.test", "password": "correct horse"}), nil
	}}
	if _, err := signin.Mediated(ctx, sess, &poppy.SignInOptions{Scopes: []string{"poppy:read", "poppy:write"}}, p); err != nil {
		t.Fatal(err)
	}
	oc, err := operations.New(sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.EndpointURL(poppytest.EndpointAPI)+"/orders/ord_7Hk2/exchanges", strings.NewReader(`{"item_id":"itm_4Qa"}`))
	req.Header.Set("Content-Type", "application/json")
	op, _, err := oc.Propose(ctx, req, operations.OpenAPIAction("POST", "/orders/{id}/exchanges"), nil)
	if err != nil || op == nil || op.URL == "" {
		t.Fatalf("Propose = %+v, %v", op, err)
	}
	chromium := startChromium(t, srv, nil)
	b, err := browser.New(chromium, sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := b.Join(ctx, op.URL)
	if err != nil || res.URL != op.URL || res.Status != 200 {
		t.Fatalf("Join to the operation's url = %+v, %v", res, err)
	}
	wantText(t, ctx, chromium, "Operation "+op.ID, "State: proposed, revision 1", op.Summary)
}
