package browser_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/poppyproto/poppy/internal/leakcheck"

	"github.com/poppyproto/poppy/browser"
	"github.com/poppyproto/poppy/poppytest"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}

// formBrowser is a scripted stand-in for a controlled browser, for the
// tests that need no Chromium: it loads pages with its own cookie jar,
// submits a page's first POST form as a script would, and follows
// redirects. It records every URL it requested and every page's CSP.
type formBrowser struct {
	t      testing.TB
	client *http.Client

	mu     sync.Mutex
	urls   []string
	csps   []string
	pages  []string
	navs   int
	posted []url.Values // the forms it submitted
}

// localFirst dials 127.0.0.1 directly (the join page) and everything else
// through the fake's transport.
type localFirst struct{ fake http.RoundTripper }

func (l localFirst) RoundTrip(r *http.Request) (*http.Response, error) {
	if h, _, _ := net.SplitHostPort(r.URL.Host); h == "127.0.0.1" {
		return http.DefaultTransport.RoundTrip(r)
	}
	return l.fake.RoundTrip(r)
}

func newFormBrowser(t testing.TB, srv *poppytest.Server) *formBrowser {
	jar, _ := cookiejar.New(nil)
	f := &formBrowser{t: t}
	f.client = &http.Client{
		Jar:       jar,
		Transport: localFirst{srv.Transport()},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			f.record(req.URL.String())
			if len(via) > 10 {
				return errors.New("too many redirects")
			}
			return nil
		},
	}
	t.Cleanup(func() { http.DefaultTransport.(*http.Transport).CloseIdleConnections() })
	return f
}

func (f *formBrowser) record(u string) {
	f.mu.Lock()
	f.urls = append(f.urls, u)
	f.mu.Unlock()
}

var (
	formRE   = regexp.MustCompile(`<form method="post" action="([^"]*)"[^>]*>`)
	hiddenRE = regexp.MustCompile(`<input type="hidden" name="([^"]*)" value="([^"]*)">`)
)

func (f *formBrowser) do(ctx context.Context, method, u string, form url.Values) (string, int, string, error) {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return "", 0, "", err
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		f.mu.Lock()
		f.posted = append(f.posted, form)
		f.mu.Unlock()
	}
	f.record(u)
	resp, err := f.client.Do(req)
	if err != nil {
		return "", 0, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	f.mu.Lock()
	f.csps = append(f.csps, resp.Header.Get("Content-Security-Policy"))
	f.pages = append(f.pages, string(b))
	f.mu.Unlock()
	return resp.Request.URL.String(), resp.StatusCode, string(b), nil
}

// Navigate implements browser.ControlledBrowser.
func (f *formBrowser) Navigate(ctx context.Context, req *browser.NavigateRequest) (*browser.Navigation, error) {
	f.mu.Lock()
	f.navs++
	f.mu.Unlock()
	final, status, page, err := f.do(ctx, http.MethodGet, req.URL, nil)
	for hops := 0; err == nil && hops < 3; hops++ {
		if req.Until == nil || req.Until(final) {
			return &browser.Navigation{URL: final, Status: status}, nil
		}
		m := formRE.FindStringSubmatch(page)
		if m == nil || !strings.Contains(page, "<script>document.forms[0].submit();</script>") {
			return nil, fmt.Errorf("formBrowser: %s neither satisfies Until nor submits a form", final)
		}
		form := url.Values{}
		for _, h := range hiddenRE.FindAllStringSubmatch(page, -1) {
			form.Add(html.UnescapeString(h[1]), html.UnescapeString(h[2]))
		}
		final, status, page, err = f.do(ctx, http.MethodPost, html.UnescapeString(m[1]), form)
	}
	if err != nil {
		return nil, err
	}
	return nil, errors.New("formBrowser: too many page hops")
}

func (f *formBrowser) visited() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.urls...)
}

// postedForms returns the forms the browser submitted, in order.
func (f *formBrowser) postedForms() []url.Values {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]url.Values(nil), f.posted...)
}

func (f *formBrowser) navigations() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.navs
}

// cookie returns the Session cookie the jar holds for u.
func (f *formBrowser) cookie(u string) string {
	pu, _ := url.Parse(u)
	for _, c := range f.client.Jar.Cookies(pu) {
		if c.Name == "poppytest_session" {
			return c.Value
		}
	}
	return ""
}

// text returns the last page loaded.
func (f *formBrowser) lastPage() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.pages) == 0 {
		return ""
	}
	return f.pages[len(f.pages)-1]
}

func newJar() (http.CookieJar, error) { return cookiejar.New(nil) }
