// Package headless drives a headless Chromium through the Chrome DevTools
// Protocol (github.com/chromedp/chromedp), as a browser the Personal Agent
// controls: a [browser.ControlledBrowser] for [browser.Browser.Join].
//
//	chromium, err := headless.Start(ctx, nil)
//	defer chromium.Close()
//	b, err := browser.New(chromium, sess, nil)
//	res, err := b.Join(ctx, "https://example.com/orders")
//
// [Start] launches a Chromium of its own (Debian's chromium package, or
// Options.ExecPath) with a fresh profile directory, removed at Close;
// [Attach] uses a chromedp context the caller already has. Either way the
// chromedp context is the caller's for browsing ([Browser.Context]), with
// helpers to read the page's text and take a screenshot.
//
// Chromium is started headless with --no-sandbox --disable-gpu
// --disable-quic --no-first-run --disable-background-networking
// --disable-component-update --disable-sync: it makes no connection of its
// own, only those the agent asks for.
//
// # Trusting a test Company
//
// Options.HostResolverRules and Options.TrustSPKI let it reach a Company
// served on loopback with its own certificate, such as poppytest's:
// --host-resolver-rules maps the Company's host names to the listener, and
// --ignore-certificate-errors-spki-list accepts a server only when it
// proves, in the TLS handshake, that it holds the private key of a
// certificate with one of the listed SubjectPublicKeyInfo hashes. That is a
// pin to one key, not a blanket ignore-certificate-errors: any other
// server, key or certificate is refused as usual. Chromium honours the
// list only with its own --user-data-dir, which Start always sets. With
// poppytest:
//
//	trust := srv.BrowserTrust()
//	chromium, err := headless.Start(ctx, &headless.Options{
//		HostResolverRules: trust.ChromiumHostRules(),
//		TrustSPKI:         []string{trust.SPKI},
//	})
package headless

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/poppyproto/poppy/browser"
	"github.com/poppyproto/poppy/internal/wire"
)

// ErrNoChromium: no Chromium executable was found. Install Debian's
// chromium package, or set Options.ExecPath.
var ErrNoChromium = errors.New("headless: no Chromium found (install the Debian package chromium, or set Options.ExecPath)")

// ErrNavigation: a navigation ended on the browser's error page (the host
// could not be reached, TLS failed…).
var ErrNavigation = errors.New("headless: navigation failed")

// Options configures Start. The zero value is valid.
type Options struct {
	// ExecPath is the Chromium executable. Default: the first of
	// chromium, chromium-browser, google-chrome, google-chrome-stable on
	// PATH.
	ExecPath string
	// UserDataDir is the profile directory. Default: a fresh temporary
	// directory, removed at Close.
	UserDataDir string
	// HostResolverRules is Chromium's --host-resolver-rules, e.g.
	// "MAP example.com 127.0.0.1:8443".
	HostResolverRules string
	// TrustSPKI are base64 SHA-256 hashes of the SubjectPublicKeyInfo of
	// server certificates to accept although no trusted CA issued them
	// (--ignore-certificate-errors-spki-list; see the package doc).
	TrustSPKI []string
	// WindowWidth and WindowHeight are the viewport. Default 1280×800.
	WindowWidth, WindowHeight int
	// Logger receives chromedp's errors and a line per start and close.
	// Default: discard.
	Logger *slog.Logger
}

// LookPath returns the Chromium executable Start would use, or
// ErrNoChromium.
func LookPath() (string, error) {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", ErrNoChromium
}

// Browser is a Chromium page the agent controls. Its methods are safe for
// concurrent use; navigations are serialized.
type Browser struct {
	// ctx is the chromedp context of the page: the browser's handle (not a
	// request context), as chromedp requires. It lives until Close.
	ctx     context.Context
	cancels []context.CancelFunc
	dir     string // removed at Close when Start made it
	log     *slog.Logger
	owned   bool

	navMu sync.Mutex // one navigation at a time

	mu       sync.Mutex
	mainID   cdp.FrameID
	cur      document
	statuses map[string]int64 // main-frame document URL -> last status
	notify   chan struct{}
	closed   bool
}

// document is the main frame's current document.
type document struct {
	url         string // without fragment
	unreachable string
	loaded      bool
	seq         int // counts commits, so a wait sees only newer documents
}

// Start launches a headless Chromium and opens one page. ctx bounds the
// start only: the browser runs until Close.
func Start(ctx context.Context, opts *Options) (*Browser, error) {
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ExecPath == "" {
		p, err := LookPath()
		if err != nil {
			return nil, err
		}
		o.ExecPath = p
	}
	if o.WindowWidth <= 0 || o.WindowHeight <= 0 {
		o.WindowWidth, o.WindowHeight = 1280, 800
	}
	dir, made := o.UserDataDir, false
	if dir == "" {
		d, err := os.MkdirTemp("", "poppy-chromium-")
		if err != nil {
			return nil, fmt.Errorf("headless: profile directory: %w", err)
		}
		dir, made = d, true
	}
	flags := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(o.ExecPath),
		chromedp.UserDataDir(dir),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.WindowSize(o.WindowWidth, o.WindowHeight),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter"),
		chromedp.Flag("metrics-recording-only", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.Flag("use-mock-keychain", true),
	}
	if o.HostResolverRules != "" {
		flags = append(flags, chromedp.Flag("host-resolver-rules", o.HostResolverRules))
	}
	if len(o.TrustSPKI) > 0 {
		flags = append(flags, chromedp.Flag("ignore-certificate-errors-spki-list", strings.Join(o.TrustSPKI, ",")))
	}
	// The browser outlives ctx; ctx only bounds the start below.
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.WithoutCancel(ctx), flags...)
	tabCtx, tabCancel := chromedp.NewContext(allocCtx,
		chromedp.WithErrorf(func(format string, args ...any) { o.Logger.Debug("headless: " + redact(fmt.Sprintf(format, args...))) }))
	b := &Browser{ctx: tabCtx, cancels: []context.CancelFunc{tabCancel, allocCancel}, log: o.Logger, owned: true}
	if made {
		b.dir = dir
	}
	stop := context.AfterFunc(ctx, allocCancel)
	err := b.init()
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("headless: starting Chromium: %w", err)
	}
	o.Logger.Debug("headless: Chromium started", "exec", o.ExecPath)
	return b, nil
}

// Attach uses the page of tab, a chromedp context the caller made with
// chromedp.NewContext and owns: Close then leaves the page and the browser
// open. Attach runs tab's first action if it has none yet, which starts
// the browser.
func Attach(tab context.Context) (*Browser, error) {
	if chromedp.FromContext(tab) == nil {
		return nil, errors.New("headless: Attach needs a chromedp context")
	}
	b := &Browser{ctx: tab, log: slog.New(slog.DiscardHandler)}
	if err := b.init(); err != nil {
		return nil, fmt.Errorf("headless: attaching: %w", err)
	}
	return b, nil
}

// init starts the page if needed, enables the events Navigate reads, and
// finds the main frame.
func (b *Browser) init() error {
	b.statuses = map[string]int64{}
	b.notify = make(chan struct{}, 1)
	if err := chromedp.Do(b.ctx); err != nil { // allocates the browser and the page
		return err
	}
	// The listener ends at Close, also for a page the caller owns.
	lctx, stopListening := context.WithCancel(b.ctx)
	b.cancels = append([]context.CancelFunc{stopListening}, b.cancels...)
	if err := chromedp.Listen(lctx, b.onEvent); err != nil {
		return err
	}
	if _, err := chromedp.Call(b.ctx, network.Enable, network.EnableParams{}); err != nil {
		return err
	}
	if _, err := chromedp.Call(b.ctx, page.Enable, page.EnableParams{}); err != nil {
		return err
	}
	tree, err := chromedp.Call(b.ctx, page.GetFrameTree, cdp.Empty{})
	if err != nil {
		return err
	}
	b.mu.Lock()
	if tree.FrameTree != nil && tree.FrameTree.Frame != nil {
		b.mainID = tree.FrameTree.Frame.ID
	}
	b.mu.Unlock()
	return nil
}

// onEvent runs on chromedp's reading goroutine: it only records.
func (b *Browser) onEvent(ev any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch e := ev.(type) {
	case *page.EventFrameNavigated:
		f := e.Frame
		if f == nil || f.ParentID != "" {
			return
		}
		b.mainID = f.ID
		b.cur = document{url: f.URL, unreachable: f.UnreachableURL, seq: b.cur.seq + 1}
	case *page.EventLoadEventFired:
		b.cur.loaded = true
	case *network.EventResponseReceived:
		if e.Type == network.ResourceTypeDocument && e.Response != nil && (e.FrameID == b.mainID || b.mainID == "") {
			if len(b.statuses) > 256 {
				clear(b.statuses)
			}
			b.statuses[e.Response.URL] = e.Response.Status
		}
	default:
		return
	}
	select {
	case b.notify <- struct{}{}:
	default:
	}
}

// Context returns the page's chromedp context, for chromedp actions of the
// caller's own (chromedp.Run(b.Context(), …)). It ends at Close.
func (b *Browser) Context() context.Context { return b.ctx }

// run returns a context for one call: the page's context, also ended when
// ctx ends. Ending it stops the call, not the page.
func (b *Browser) run(ctx context.Context) (context.Context, context.CancelFunc) {
	rctx, cancel := context.WithCancel(b.ctx)
	stop := context.AfterFunc(ctx, cancel)
	return rctx, func() { stop(); cancel() }
}

// Navigate implements browser.ControlledBrowser: it loads req.URL as a
// top-level navigation and waits until a document whose URL satisfies
// req.Until has fired its load event.
func (b *Browser) Navigate(ctx context.Context, req *browser.NavigateRequest) (*browser.Navigation, error) {
	b.navMu.Lock()
	defer b.navMu.Unlock()
	rctx, cancel := b.run(ctx)
	defer cancel()
	b.mu.Lock()
	seq := b.cur.seq
	b.mu.Unlock()
	res, err := chromedp.Call(rctx, page.Navigate, page.NavigateParams{URL: req.URL})
	if err != nil {
		return nil, fmt.Errorf("headless: navigating: %w", err)
	}
	if res.ErrorText != "" {
		return nil, fmt.Errorf("%w: %s", ErrNavigation, res.ErrorText)
	}
	return b.wait(rctx, seq, req.Until)
}

// Reload reloads the page and waits for it to load.
func (b *Browser) Reload(ctx context.Context) (*browser.Navigation, error) {
	b.navMu.Lock()
	defer b.navMu.Unlock()
	rctx, cancel := b.run(ctx)
	defer cancel()
	b.mu.Lock()
	seq := b.cur.seq
	b.mu.Unlock()
	if _, err := chromedp.Call(rctx, page.Reload, page.ReloadParams{}); err != nil {
		return nil, fmt.Errorf("headless: reloading: %w", err)
	}
	return b.wait(rctx, seq, nil)
}

// Click clicks the first element matching the CSS selector and, when that
// navigates, waits like Navigate for a document whose URL satisfies until.
func (b *Browser) Click(ctx context.Context, selector string, until func(string) bool) (*browser.Navigation, error) {
	b.navMu.Lock()
	defer b.navMu.Unlock()
	rctx, cancel := b.run(ctx)
	defer cancel()
	b.mu.Lock()
	seq := b.cur.seq
	b.mu.Unlock()
	if err := chromedp.Do(rctx, chromedp.Click(chromedp.CSS(selector))); err != nil {
		return nil, fmt.Errorf("headless: clicking: %w", err)
	}
	return b.wait(rctx, seq, until)
}

// wait waits for a document committed after seq to load and satisfy
// until.
func (b *Browser) wait(ctx context.Context, seq int, until func(string) bool) (*browser.Navigation, error) {
	for {
		b.mu.Lock()
		cur := b.cur
		status := b.statuses[cur.url]
		b.mu.Unlock()
		if cur.seq > seq && cur.unreachable != "" {
			return nil, fmt.Errorf("%w: %s could not be loaded", ErrNavigation, wire.StripQuery(cur.unreachable))
		}
		if cur.seq > seq && cur.loaded && (until == nil || until(cur.url)) {
			return &browser.Navigation{URL: cur.url, Status: int(status)}, nil
		}
		select {
		case <-b.notify:
		case <-time.After(250 * time.Millisecond): // a missed wake-up costs a moment, never a hang
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// URL returns the URL of the page's current document.
func (b *Browser) URL() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cur.url
}

// Text returns the visible text of the page (document.body.innerText).
func (b *Browser) Text(ctx context.Context) (string, error) {
	rctx, cancel := b.run(ctx)
	defer cancel()
	s, err := chromedp.Run(rctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
	if err != nil {
		return "", fmt.Errorf("headless: reading the page's text: %w", err)
	}
	return s, nil
}

// Screenshot returns a PNG of the whole page.
func (b *Browser) Screenshot(ctx context.Context) ([]byte, error) {
	rctx, cancel := b.run(ctx)
	defer cancel()
	png, err := chromedp.Run(rctx, chromedp.FullScreenshot(100))
	if err != nil {
		return nil, fmt.Errorf("headless: taking a screenshot: %w", err)
	}
	return png, nil
}

// Close closes the page and, for a browser Start launched, Chromium itself,
// and removes the profile directory Start made. It waits for Chromium to
// exit (at most 10 s).
func (b *Browser) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	if !b.owned {
		for _, c := range b.cancels {
			c()
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	err := chromedp.Cancel(ctx)
	cancel()
	for _, c := range b.cancels {
		c()
	}
	if b.dir != "" {
		if rerr := os.RemoveAll(b.dir); rerr != nil && err == nil {
			err = rerr
		}
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("headless: closing Chromium: %w", err)
	}
	b.log.Debug("headless: Chromium closed")
	return nil
}

// jwtRE matches a compact JWS, such as a browser assertion inside an
// event chromedp could not decode (its postData).
var jwtRE = regexp.MustCompile(`eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+`)

// redact keeps chromedp's error lines short and free of JWTs.
func redact(s string) string {
	s = jwtRE.ReplaceAllString(s, "[JWT redacted]")
	if len(s) > 512 {
		s = s[:512] + "…"
	}
	return s
}
