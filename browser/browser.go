// Package browser joins a browser the agent controls to a Session, so that
// the Company's website sees the same Session as its APIs (spec 5).
//
// A join signs a browser assertion ([poppy.Session.SignBrowserAssertion]),
// serves a self-submitting form page that POSTs it to the Company's
// web.browser_session_endpoint from a one-shot loopback server
// ([NewPage], [ServePage]), and has the browser load that page. The Company
// checks the assertion, sets a cookie of its own for the Session and
// redirects the browser to return_to. [Browser] does all of it and then
// browses:
//
//	b, err := browser.New(chromium, sess, nil)
//	res, err := b.Join(ctx, "https://example.com/orders")
//	nav, err := b.Browse(ctx, "https://example.com/account")
//
// This package imports no browser driver: a browser is anything that
// implements [ControlledBrowser]. Package browser/headless drives a
// headless Chromium through the Chrome DevTools Protocol.
//
// # Only a browser the agent controls
//
// The SDK has no call that hands the assertion, the join page or its URL to
// the User's own browser, and none of its prompts carries them (PA-5-11): a
// User's browser that posted the assertion would hold the agent's Session,
// its sign-in and its scopes in a cookie the agent can't see, revoke or
// scope. [Browser.Join] takes a [ControlledBrowser], a browser the agent
// started and drives; the page server listens on 127.0.0.1 only, at a
// random path, for one load.
//
// # Without the endpoint
//
// When poppy.json lists no web.browser_session_endpoint, the website has
// nothing to join: [Browser.Join] signs nothing and opens return_to as an
// ordinary signed-out visitor, and reports it with [JoinResult.Mode]
// [Visitor] rather than an error (PA-5-02). [Browser.Browse] then needs no
// join, and a Company that offers no Sessions at all is browsed with
// [NewVisitor].
//
// # Decisions on the specification's open points
//
//   - return_to must be an https URL (no userinfo, at most 2048
//     bytes) on organization.domain or a subdomain of it; "www." counts as a
//     subdomain ([poppy.Company.CheckReturnTo]). Another domain of the same
//     issuer is refused: the cookie the endpoint sets can't cover it. To
//     browse that domain, resolve it as a Company of its own and join its
//     endpoint. The endpoint itself may be on any host the Company's
//     verified poppy.json names, but must be https.
//   - the SDK never relies on the earlier cookie after a join: each
//     join replaces it in the browser, whether or not the Company also ends
//     it. There is no wire signal for "the website no longer recognises the
//     Session", so the SDK joins again (PA-5-13) when the caller asks
//     ([Browser.Rejoin]), when the Session's session_id has changed since
//     the join (the Company ended it and the SDK started another), and when
//     the caller's check [Options.Recognizes] says a page the browser
//     landed on doesn't show the Session. iat is the agent's clock; exp is
//     iat + 60 s, the most the spec allows, so a Company with some clock
//     skew still accepts it. The 303 or 400 of the join reach the browser,
//     not the SDK's HTTP client: the join's outcome is read from the
//     browser's final document (a status of 400 or more, or a browser still
//     on the endpoint, is [ErrBrowserJoinFailed]).
package browser

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/wire"
)

// Errors of the package.
var (
	// ErrNotJoined: Browse on a Company with a browser-session endpoint
	// before a successful Join (PA-5-01).
	ErrNotJoined = errors.New("browser: the browser has not joined the Session")
	// ErrBrowserJoinFailed: the Company refused the join; the error is a
	// *JoinError (PA-5-12).
	ErrBrowserJoinFailed = errors.New("browser: the Company refused to join the browser to the Session")
)

// errInsecureURL: Browse was given a URL that isn't https. Nothing is
// loaded; no caller branches on it (a caller's own mistake).
var errInsecureURL = errors.New("browser: URL is not https")

// JoinError is a join the Company refused: the browser's final document
// after the POST. It matches ErrBrowserJoinFailed.
type JoinError struct {
	// Endpoint is the browser-session endpoint.
	Endpoint string
	// URL is where the browser ended, without its query.
	URL string
	// Status is that document's HTTP status (400 from a Company that
	// follows spec 5 step 3).
	Status int
}

func (e *JoinError) Error() string {
	return fmt.Sprintf("browser: the Company refused to join the browser to the Session: %s answered HTTP %d", e.URL, e.Status)
}

// Is matches ErrBrowserJoinFailed.
func (e *JoinError) Is(target error) bool { return target == ErrBrowserJoinFailed }

// ControlledBrowser is a browser the Personal Agent controls (PA-5-11):
// started and driven by the agent, never the User's own. Package
// browser/headless implements it with Chromium.
type ControlledBrowser interface {
	// Navigate loads req.URL as a top-level navigation in the browser's
	// page and waits until the page has loaded a document whose URL
	// satisfies req.Until (the first document when Until is nil),
	// following redirects and pages that navigate by themselves, such as
	// a form that submits itself. It returns that document's URL and
	// HTTP status. It must return when ctx ends.
	Navigate(ctx context.Context, req *NavigateRequest) (*Navigation, error)
}

// NavigateRequest is a top-level navigation.
type NavigateRequest struct {
	URL string
	// Until reports whether a loaded document's URL is the one to wait
	// for. Nil: the first document that loads.
	Until func(url string) bool
}

// Navigation is where a navigation ended: the main document's URL and
// HTTP status.
type Navigation struct {
	URL    string
	Status int
}

// Mode says how the browser browses the Company's website.
type Mode int

const (
	// Joined: the browser carries the Company's cookie for the Session.
	Joined Mode = iota + 1
	// Visitor: the Company lists no browser_session_endpoint; the browser
	// browses as an ordinary signed-out visitor (spec 5, PA-5-02).
	Visitor
)

func (m Mode) String() string {
	switch m {
	case Joined:
		return "joined"
	case Visitor:
		return "visitor"
	}
	return "unknown"
}

// JoinResult is the outcome of a join.
type JoinResult struct {
	Mode Mode
	// SessionID is the Session the browser joined ("" for Visitor).
	SessionID string
	// Navigation is the page the browser landed on: return_to, or where
	// the Company's website sent it from there.
	Navigation
}

// Options configures a Browser. The zero value is valid.
type Options struct {
	// Logger receives a line per join; never an assertion. Default:
	// discard.
	Logger *slog.Logger
	// PageTimeout bounds the wait for the join page's one load. Default
	// DefaultPageTimeout.
	PageTimeout time.Duration
	// JoinTimeout bounds a whole join, from the page's load to the
	// browser's landing on return_to or an error page. Default
	// DefaultJoinTimeout.
	JoinTimeout time.Duration
	// Recognizes is the caller's check that a page of the Company's
	// website, just loaded by Browse, shows the Session: for
	// example, that it reads the page's text and finds the account's
	// name. When it reports false, Browse joins again once with the same
	// URL as return_to and returns where that landed. Nil: no check.
	Recognizes func(ctx context.Context, nav *Navigation) (bool, error)
}

// DefaultJoinTimeout is the default of Options.JoinTimeout.
const DefaultJoinTimeout = 30 * time.Second

// Browser is a controlled browser and the Session it joins at one
// Company. It is safe for concurrent use; navigations are serialized.
//
// A return_to the Company's website can't take is refused before anything
// is signed, with an error matching poppy.ErrReturnTo (PA-5-07); a
// web.browser_session_endpoint that is not a plain https URL is
// poppy.ErrBadBrowserSessionEndpoint.
type Browser struct {
	ctrl    ControlledBrowser
	company *poppy.Company
	sess    *poppy.Session
	opts    Options

	nav sync.Mutex // serializes navigations

	mu        sync.Mutex
	joinedSID string // session_id of the last successful join
	returnTo  string // return_to of the last join
}

func (b *Browser) state() (joinedSID, returnTo string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.joinedSID, b.returnTo
}

func (b *Browser) setState(joinedSID, returnTo string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.joinedSID = joinedSID
	if returnTo != "" {
		b.returnTo = returnTo
	}
}

// New ties ctrl to sess, at the Company of the Session. opts may be nil.
func New(ctrl ControlledBrowser, sess *poppy.Session, opts *Options) (*Browser, error) {
	if ctrl == nil || sess == nil {
		return nil, errors.New("browser: New needs a ControlledBrowser and a Session")
	}
	return newBrowser(ctrl, sess.Company(), sess, opts)
}

// NewVisitor ties ctrl to the website of c, a Company that lists no
// web.browser_session_endpoint and so offers nothing to join (PA-5-02),
// such as one without Sessions at all: the browser browses as an ordinary
// signed-out visitor. A Company with the endpoint needs a Session (New).
func NewVisitor(ctrl ControlledBrowser, c *poppy.Company, opts *Options) (*Browser, error) {
	if ctrl == nil || c == nil {
		return nil, errors.New("browser: NewVisitor needs a ControlledBrowser and a Company")
	}
	if _, err := c.BrowserSessionEndpoint(); err == nil {
		return nil, errors.New("browser: the Company has a browser-session endpoint: New needs a Session")
	}
	return newBrowser(ctrl, c, nil, opts)
}

func newBrowser(ctrl ControlledBrowser, c *poppy.Company, sess *poppy.Session, opts *Options) (*Browser, error) {
	if _, err := c.BrowserSessionEndpoint(); errors.Is(err, poppy.ErrBadBrowserSessionEndpoint) {
		return nil, err
	}
	b := &Browser{ctrl: ctrl, company: c, sess: sess}
	if opts != nil {
		b.opts = *opts
	}
	if b.opts.Logger == nil {
		b.opts.Logger = slog.New(slog.DiscardHandler)
	}
	if b.opts.JoinTimeout <= 0 {
		b.opts.JoinTimeout = DefaultJoinTimeout
	}
	return b, nil
}

// Controlled returns the controlled browser.
func (b *Browser) Controlled() ControlledBrowser { return b.ctrl }

// Joined reports whether the browser has joined the Session, and which
// session_id it joined.
func (b *Browser) Joined() (string, bool) {
	sid, _ := b.state()
	return sid, sid != ""
}

// Join joins the browser to the Session and leaves it on returnTo (spec
// 5). returnTo "" means https://{organization.domain}/. A Company without
// the endpoint gets a Visitor result: nothing is signed and the browser
// opens returnTo directly (PA-5-02). A refused join is a *JoinError
// (ErrBrowserJoinFailed) and leaves the browser not joined.
func (b *Browser) Join(ctx context.Context, returnTo string) (*JoinResult, error) {
	b.nav.Lock()
	defer b.nav.Unlock()
	return b.join(ctx, returnTo)
}

// Rejoin joins again with the last return_to (PA-5-13): a new assertion,
// whose cookie replaces the one the Company set before (CO-5-20).
func (b *Browser) Rejoin(ctx context.Context) (*JoinResult, error) {
	b.nav.Lock()
	defer b.nav.Unlock()
	_, returnTo := b.state()
	return b.join(ctx, returnTo)
}

func (b *Browser) join(ctx context.Context, returnTo string) (*JoinResult, error) {
	if returnTo == "" {
		returnTo = "https://" + b.company.WebsiteDomain() + "/"
	}
	if err := b.company.CheckReturnTo(returnTo); err != nil {
		return nil, err // PA-5-07: before anything is signed
	}
	endpoint, err := b.company.BrowserSessionEndpoint()
	if errors.Is(err, poppy.ErrNoBrowserSessionEndpoint) {
		// PA-5-02: an ordinary signed-out visitor.
		nav, err := b.ctrl.Navigate(ctx, &NavigateRequest{URL: returnTo})
		if err != nil {
			return nil, fmt.Errorf("browser: opening %s: %w", wire.StripQuery(returnTo), err)
		}
		b.setState("", returnTo)
		return &JoinResult{Mode: Visitor, Navigation: *nav}, nil
	}
	if err != nil {
		return nil, err
	}
	// The Session's current token: renews it, and surfaces a Session the
	// Company ended, before an assertion names it.
	if _, err := b.sess.Token(ctx, nil); err != nil {
		return nil, fmt.Errorf("browser: the Session is not usable: %w", err)
	}
	a, err := b.sess.SignBrowserAssertion(returnTo)
	if err != nil {
		return nil, err
	}
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, b.opts.JoinTimeout)
	defer cancel()
	srv, err := ServePage(ctx, NewPage(a), &ServeOptions{Timeout: b.opts.PageTimeout, Logger: b.opts.Logger})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	pageOrigin := strings.TrimSuffix(srv.URL(), srvPath(srv.URL()))
	nav, err := b.ctrl.Navigate(ctx, &NavigateRequest{
		URL:   srv.URL(),
		Until: func(u string) bool { return !strings.HasPrefix(u, pageOrigin+"/") && u != pageOrigin },
	})
	b.setState("", "") // whatever happens next, the old cookie is no longer known good
	if err != nil {
		if parent.Err() == nil && ctx.Err() != nil {
			return nil, fmt.Errorf("browser: the join did not finish within %v: %w", b.opts.JoinTimeout, err)
		}
		return nil, fmt.Errorf("browser: joining the browser: %w", err)
	}
	if !srv.Loaded() {
		return nil, errors.New("browser: the browser never loaded the join page")
	}
	// PA-5-12: the Company's 303 or 400 went to the browser; read its end.
	if nav.Status >= 400 || sameEndpoint(nav.URL, endpoint) {
		b.opts.Logger.InfoContext(ctx, "browser: join refused", "endpoint", endpoint, "status", nav.Status)
		return nil, &JoinError{Endpoint: endpoint, URL: wire.StripQuery(nav.URL), Status: nav.Status}
	}
	b.setState(a.SessionID, returnTo)
	b.opts.Logger.InfoContext(ctx, "browser: joined", "endpoint", endpoint, "session_id", a.SessionID,
		"landed", wire.StripQuery(nav.URL), "status", nav.Status)
	return &JoinResult{Mode: Joined, SessionID: a.SessionID, Navigation: *nav}, nil
}

// Browse opens rawURL, an https URL, in the browser. On the Company's
// website (organization.domain and its subdomains), a Company with the
// endpoint requires a join first (ErrNotJoined, PA-5-01), and Browse joins
// again, with rawURL as return_to, when the Session's session_id has
// changed since the join or Options.Recognizes reports that the page
// doesn't show the Session (A-19, PA-5-13).
func (b *Browser) Browse(ctx context.Context, rawURL string) (*Navigation, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("%w: %s", errInsecureURL, wire.StripQuery(rawURL))
	}
	b.nav.Lock()
	defer b.nav.Unlock()
	_, epErr := b.company.BrowserSessionEndpoint()
	site := onDomain(u.Hostname(), b.company.WebsiteDomain()) && epErr == nil
	if site {
		joined, _ := b.state()
		if joined == "" {
			return nil, ErrNotJoined
		}
		if sid := b.sess.ID(); sid != joined {
			res, err := b.join(ctx, rawURL)
			if err != nil {
				return nil, err
			}
			return &res.Navigation, nil
		}
	}
	nav, err := b.ctrl.Navigate(ctx, &NavigateRequest{URL: rawURL})
	if err != nil {
		return nil, fmt.Errorf("browser: opening %s: %w", wire.StripQuery(rawURL), err)
	}
	if site && b.opts.Recognizes != nil {
		ok, err := b.opts.Recognizes(ctx, nav)
		if err != nil {
			return nil, fmt.Errorf("browser: checking the page: %w", err)
		}
		if !ok {
			b.opts.Logger.InfoContext(ctx, "browser: the website no longer recognises the Session; joining again")
			res, err := b.join(ctx, rawURL)
			if err != nil {
				return nil, err
			}
			return &res.Navigation, nil
		}
	}
	return nav, nil
}

// onDomain reports whether host is domain or a subdomain of it.
func onDomain(host, domain string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	return domain != "" && (host == domain || strings.HasSuffix(host, "."+domain))
}

// sameEndpoint reports whether u is the endpoint, ignoring any query.
func sameEndpoint(u, endpoint string) bool { return wire.StripQuery(u) == wire.StripQuery(endpoint) }

func srvPath(u string) string {
	p, _ := url.Parse(u)
	return p.Path
}
