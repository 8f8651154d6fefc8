package browser

// The join page and the one-shot loopback server that serves it (spec 5
// step 2).
//
// The page is a form with method="post", the endpoint as action and the
// assertion in one hidden field, so the browser sends it as the body of a
// top-level application/x-www-form-urlencoded POST (PA-5-09, PA-5-10). One
// inline script submits it; without scripts the visible button does. The
// Content-Security-Policy allows that one script by its SHA-256 hash and
// nothing else: no other script, style, image, frame, connection or base,
// and forms only to the endpoint's and return_to's origins (Chromium checks
// form-action on the redirect that follows the POST as well).
//
// The server listens on 127.0.0.1 on a random port and serves the page at
// a random 128-bit path, to one GET, with the Host it was given: any other
// path or host gets 404, a second load 410. It shuts itself down after the
// load, after its timeout, or when its context ends, whichever is first.

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"html"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/jose"
)

// submitScript is the page's only script.
const submitScript = `document.forms[0].submit();`

// scriptHash is the CSP source that allows submitScript.
var scriptHash = func() string {
	sum := sha256.Sum256([]byte(submitScript))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}()

// Page is a self-submitting form page that makes a browser POST an
// assertion to the Company. It holds the assertion: String and Format
// don't show it.
type Page struct {
	html []byte
	csp  string
}

// NewPage builds the join page of a, an assertion
// poppy.Session.SignBrowserAssertion signed.
func NewPage(a *poppy.BrowserAssertion) *Page {
	forms := originOf(a.Endpoint)
	if rt := originOf(a.ReturnTo); rt != forms {
		forms += " " + rt
	}
	csp := "default-src 'none'; script-src " + scriptHash + "; form-action " + forms +
		"; base-uri 'none'; frame-ancestors 'none'"
	body := "<!doctype html>\n<html><head><meta charset=\"utf-8\"><meta name=\"referrer\" content=\"no-referrer\">" +
		"<title>Joining the Session</title></head><body>\n" +
		`<form method="post" action="` + html.EscapeString(a.Endpoint) + `" enctype="application/x-www-form-urlencoded">` +
		`<input type="hidden" name="assertion" value="` + html.EscapeString(a.Value()) + `">` +
		`<button type="submit">Continue</button></form>` + "\n" +
		"<script>" + submitScript + "</script>\n</body></html>\n"
	return &Page{html: []byte(body), csp: csp}
}

// originOf returns scheme://host[:port] of a URL already checked by
// poppy.Company.BrowserSessionEndpoint or CheckReturnTo.
func originOf(raw string) string {
	u, _ := url.Parse(raw)
	return u.Scheme + "://" + u.Host
}

// HTML returns the page. It contains the assertion.
func (p *Page) HTML() []byte { return append([]byte(nil), p.html...) }

// CSP returns the page's Content-Security-Policy.
func (p *Page) CSP() string { return p.csp }

// String describes the page without the assertion.
func (p *Page) String() string { return "browser.Page(redacted)" }

// Format writes String for every verb.
func (p *Page) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(p.String())) }

// ServeHTTP writes the page with its headers: the CSP, no caching, no
// referrer, no sniffing.
func (p *Page) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", p.csp)
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	_, _ = w.Write(p.html)
}

// DefaultPageTimeout is how long a [PageServer] waits for its one load.
const DefaultPageTimeout = 10 * time.Second

// ServeOptions configures [ServePage]. The zero value is valid.
type ServeOptions struct {
	// Timeout is how long the server waits for the page's one load before
	// it shuts down. Default DefaultPageTimeout.
	Timeout time.Duration
	// Logger receives a line when the page is loaded or the server times
	// out; never the assertion. Default: discard.
	Logger *slog.Logger
}

// PageServer serves a [Page] once from a loopback listener. It runs in
// the background until its one load, its timeout or its context's end.
type PageServer struct {
	url  string
	host string
	path string
	page *Page
	srv  *http.Server
	log  *slog.Logger

	mu      sync.Mutex
	loaded  bool
	stop    chan struct{} // closed to ask the watcher to shut down
	once    sync.Once
	stopped chan struct{} // closed once shut down
}

// ServePage starts serving p at a random path of a loopback listener on a
// random port. The server outlives the call: it stops after the first
// load, after opts.Timeout, when ctx ends, or at Close.
func ServePage(ctx context.Context, p *Page, opts *ServeOptions) (*PageServer, error) {
	var o ServeOptions
	if opts != nil {
		o = *opts
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultPageTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("browser: listening on loopback: %w", err)
	}
	s := &PageServer{host: ln.Addr().String(), path: "/join/" + jose.RandomID(16), page: p, log: o.Logger,
		stop: make(chan struct{}), stopped: make(chan struct{})}
	s.url = "http://" + s.host + s.path
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(slog.DiscardHandler, slog.LevelError)}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = s.srv.Serve(ln)
	}()
	go func() {
		t := time.NewTimer(o.Timeout)
		defer t.Stop()
		select {
		case <-s.stop:
		case <-t.C:
			s.log.Debug("browser: join page not loaded in time; shutting down")
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
		<-served
		close(s.stopped)
	}()
	return s, nil
}

// serve answers one request.
func (s *PageServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.Host != s.host || r.URL.Path != s.path || r.URL.RawQuery != "" {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", "GET")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	s.mu.Lock()
	first := !s.loaded
	s.loaded = true
	s.mu.Unlock()
	if !first {
		http.Error(w, "gone", http.StatusGone)
		return
	}
	w.Header().Set("Connection", "close")
	s.page.ServeHTTP(w, r)
	s.log.Debug("browser: join page loaded")
	s.finish()
}

// finish marks the server done (idempotent); the watcher then shuts it
// down.
func (s *PageServer) finish() { s.once.Do(func() { close(s.stop) }) }

// URL returns the page's URL: http://127.0.0.1:PORT/join/{random}.
func (s *PageServer) URL() string { return s.url }

// Loaded reports whether the page has been served.
func (s *PageServer) Loaded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loaded
}

// Done is closed once the server has stopped serving the page: after the
// load, the timeout, the context's end or Close.
func (s *PageServer) Done() <-chan struct{} { return s.stopped }

// Close stops the server and waits until it has shut down.
func (s *PageServer) Close() error {
	s.finish()
	<-s.stopped
	return nil
}
