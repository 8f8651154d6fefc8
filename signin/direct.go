package signin

// Direct Sign-In (spec 4.5): the authorization code flow with PKCE.
//
// A sign-in in progress is a record in the keystore, found by its state, so
// that the redirect may reach any process or replica sharing the keystore:
// the one that receives it verifies state and iss, exchanges the code for
// the Session that started the sign-in, and writes the outcome into the
// record; the one waiting in SignIn sees it there. Within one process the
// waiter is woken at once; across processes it looks every PollInterval.
//
// The record names the Company exactly as the sign-in found it: its issuer
// and the domain as given to Agent.Company, port and www. included, so the
// replica that exchanges the code resolves the same Company. A failure is
// recorded with its outcome code and, in words, why (never a secret: the
// SDK's errors hold none), for Wait's error and the callback page, with
// what lets Wait in any process return an error of the same kind: the
// Company's error as a *poppy.Error (code, HTTP status, description) and
// the SDK's sentinels it matched (kinds), so that errors.Is and errors.As
// find in the waiter what they find in the process that exchanged it.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
)

// pendingUser and pendingIssuer address pending sign-ins, which are found by
// their state alone.
const (
	pendingUser   = "poppy:signin"
	pendingIssuer = "poppy:state"
	// pendingLifetime bounds how long the User has to finish.
	pendingLifetime = 10 * time.Minute
)

// pending is a Direct Sign-In in progress, as kept in the keystore.
type pending struct {
	User        string    `json:"user"`
	Issuer      string    `json:"issuer"`
	Domain      string    `json:"domain"`
	Session     string    `json:"session"`
	Verifier    string    `json:"code_verifier"`
	RedirectURI string    `json:"redirect_uri"`
	Scopes      []string  `json:"scopes"`
	Account     string    `json:"account"`
	Expires     time.Time `json:"expires"`

	Status string              `json:"status"`           // "pending", "exchanging", "done", "failed"
	Error  string              `json:"error,omitempty"`  // outcome code
	Reason string              `json:"reason,omitempty"` // why it failed, in words
	Kinds  []string            `json:"kinds,omitempty"`  // the sentinels of kinds the failure matched
	Cause  *companyError       `json:"cause,omitempty"`  // the Company's error, if it was one
	Result *poppy.SignInResult `json:"result,omitempty"`
}

// companyError is a *poppy.Error as the pending record keeps it. It holds
// no secret: the SDK's errors never do.
type companyError struct {
	Endpoint    string   `json:"endpoint,omitempty"`
	Status      int      `json:"status,omitempty"`
	Code        string   `json:"code,omitempty"`
	Description string   `json:"description,omitempty"`
	Scope       []string `json:"scope,omitempty"`
	Extension   string   `json:"extension,omitempty"`
}

// fail records outcome, the error that ended the sign-in, in p.
func (p *pending) fail(outcome error) {
	p.Status, p.Error, p.Reason = "failed", codeOf(outcome), reasonOf(outcome)
	p.Kinds, p.Cause = nil, nil
	for _, k := range kindNames {
		if errors.Is(outcome, kinds[k]) {
			p.Kinds = append(p.Kinds, k)
		}
	}
	var pe *poppy.Error
	if errors.As(outcome, &pe) {
		p.Cause = &companyError{Endpoint: pe.Endpoint, Status: pe.Status, Code: pe.Code,
			Description: truncate(pe.Description, maxReason), Scope: pe.Scope, Extension: pe.Extension}
	}
}

// outcome is the error Wait returns for a failed sign-in p: the outcome's
// sentinel with the reason, wrapping the sentinels of kinds and the
// Company's error it was recorded with.
func (p *pending) outcome() error {
	err := outcomeError(p.Error, p.Reason)
	var also []error
	for _, k := range p.Kinds {
		if e := kinds[k]; e != nil && !errors.Is(err, e) {
			also = append(also, e)
		}
	}
	if c := p.Cause; c != nil {
		also = append(also, &poppy.Error{Endpoint: c.Endpoint, Status: c.Status, Code: c.Code,
			Description: c.Description, Scope: c.Scope, Extension: c.Extension})
	}
	if len(also) == 0 {
		return err
	}
	return &recordedError{msg: err.Error(), errs: append([]error{err}, also...)}
}

// recordedError is a failure read back from a pending record: its text,
// and the errors it matches.
type recordedError struct {
	msg  string
	errs []error
}

func (e *recordedError) Error() string   { return e.msg }
func (e *recordedError) Unwrap() []error { return e.errs }

// kinds are the SDK's sentinels a failed exchange may match besides its
// outcome code, by the name the pending record keeps them under.
var kinds = map[string]error{
	"invalid_token_response": poppy.ErrInvalidTokenResponse,
	"unexpected_token_type":  poppy.ErrUnexpectedTokenType,
	"response_too_large":     poppy.ErrResponseTooLarge,
	"insecure_url":           poppy.ErrInsecureURL,
	"foreign_host":           poppy.ErrForeignHost,
	"no_auth":                poppy.ErrNoAuth,
	"rate_limited":           poppy.ErrRateLimited,
	"invalid_client":         poppy.ErrInvalidClient,
	"invalid_target":         poppy.ErrInvalidTarget,
	"account_mismatch":       poppy.ErrAccountMismatch,
	"session_ended":          ErrSessionEnded,
	"deadline_exceeded":      context.DeadlineExceeded,
	"canceled":               context.Canceled,
}

// kindNames are the names of kinds, in a fixed order.
var kindNames = []string{"invalid_token_response", "unexpected_token_type", "response_too_large", "insecure_url",
	"foreign_host", "no_auth", "rate_limited", "invalid_client", "invalid_target", "account_mismatch", "session_ended",
	"deadline_exceeded", "canceled"}

// DirectOptions configures Direct Sign-In.
type DirectOptions struct {
	// RedirectURI is where the Company sends the User back: one of the
	// identity's redirect_uris, exactly (spec 4.5). "" means the first.
	RedirectURI string
	// PollInterval is how often a waiting SignIn looks for an outcome
	// written by another process. Zero means 250 ms.
	PollInterval time.Duration
	// Done, if set, answers the User's browser once Handler has handled the
	// redirect, instead of the built-in page: res is the result, or err
	// says why the sign-in failed. A web application redirects to its own
	// pages from here, e.g. http.Redirect(w, r, "/account", http.StatusSeeOther),
	// and can check that the browser is the one that started the sign-in
	// (see Start) before it trusts the outcome. res names the local User
	// and Session (SignInResult.User, SignInResult.SessionName).
	Done func(w http.ResponseWriter, r *http.Request, res *poppy.SignInResult, err error)
	// StateCookie, if set, names a cookie that binds each sign-in to the
	// browser that started it (RFC 6749 section 10.12): Redirect sets it to
	// the sign-in's state, and Handler refuses, with an error and
	// before anything else, a redirect from a browser whose cookie doesn't
	// hold that state. Use it when the browser that starts the sign-in is
	// the one that comes back, as in a web application.
	StateCookie string
}

// Direct runs Direct Sign-Ins for an Agent. Serve [Direct.Handler] at the
// redirect URI, for example through the identity's handler:
//
//	direct, _ := signin.NewDirect(agent, nil)
//	http.Handle("agent.example/", identity.Handler(direct.Handler()))
type Direct struct {
	agent       *poppy.Agent
	redirectURI string
	redirect    *url.URL
	poll        time.Duration
	done        func(http.ResponseWriter, *http.Request, *poppy.SignInResult, error)
	cookie      string

	mu      sync.Mutex
	waiters map[string]*waiter
}

// waiter wakes the Waits of one sign-in in this process.
type waiter struct {
	ch chan struct{}
	n  int
}

// NewDirect returns a Direct for agent. opts may be nil.
func NewDirect(agent *poppy.Agent, opts *DirectOptions) (*Direct, error) {
	var o DirectOptions
	if opts != nil {
		o = *opts
	}
	uris := agent.Identity().RedirectURIs()
	if o.RedirectURI == "" {
		if len(uris) == 0 {
			return nil, errors.New("signin: the identity has no redirect_uris")
		}
		o.RedirectURI = uris[0]
	}
	found := false
	for _, u := range uris {
		found = found || u == o.RedirectURI // PA-4.5-04: byte for byte
	}
	if !found {
		return nil, fmt.Errorf("signin: %q is not one of the identity's redirect_uris", o.RedirectURI)
	}
	ru, err := url.Parse(o.RedirectURI)
	if err != nil {
		return nil, fmt.Errorf("signin: redirect URI: %w", err)
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 250 * time.Millisecond
	}
	return &Direct{agent: agent, redirectURI: o.RedirectURI, redirect: ru, poll: o.PollInterval, done: o.Done, cookie: o.StateCookie,
		waiters: map[string]*waiter{}}, nil
}

func pendingKey(state string) keystore.Key {
	return keystore.Key{Kind: keystore.KindPendingSignIn, User: pendingUser, Issuer: pendingIssuer, ID: state}
}

func random(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic("signin: crypto/rand failed: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// SignIn signs the Session in with Direct Sign-In: it gives the User the
// Company's authorization URL through p, then waits until the redirect has
// been handled (by this process or another sharing the keystore), the User
// took too long, or ctx ends. A stored Account Token that covers the scopes
// is used instead, without asking the User.
func (d *Direct) SignIn(ctx context.Context, sess *poppy.Session, opts *poppy.SignInOptions, p UserPrompter) (*poppy.SignInResult, error) {
	st, err := d.Start(ctx, sess, opts)
	if err != nil || st.Result != nil {
		return st.resultOrNil(), err
	}
	w := d.waiter(st.State)
	defer d.dropWaiter(st.State, w)
	c := sess.Company()
	if err := p.OpenURL(ctx, &URLPrompt{Company: c.Name(), URL: st.URL, Scopes: describe(c, opts.Scopes)}); err != nil {
		return nil, err
	}
	return d.wait(ctx, st.State, w.ch)
}

// DirectStart is a Direct Sign-In that Start began, or the result that made
// it unneeded.
type DirectStart struct {
	// Result is set when no sign-in is needed: the Session already holds
	// the scopes, or a stored Account Token covers them. URL and State are
	// then empty: don't redirect, the Session is signed in.
	Result *poppy.SignInResult
	// URL is the Company's authorization URL to send the User's browser to.
	URL string
	// State identifies the sign-in: Wait takes it, and the redirect back
	// carries it.
	State string
}

func (st *DirectStart) resultOrNil() *poppy.SignInResult {
	if st == nil {
		return nil
	}
	return st.Result
}

// Start begins a Direct Sign-In for an application that sends the User to
// the Company itself, typically a web server answering with
// http.Redirect(w, r, st.URL, http.StatusFound), and later calls Wait or
// gets the outcome through DirectOptions.Done. SignIn calls it.
//
// When st.Result is set, no sign-in was needed (the Session is signed in
// with the scopes already) and st.URL is empty: redirecting to it would
// loop.
//
// Bind the sign-in to the browser that starts it (RFC 6749 section 10.12):
// otherwise anyone who gets a victim's browser to open a redirect of their
// own sign-in makes the victim's Session sign in to the attacker's account.
// With DirectOptions.StateCookie set, Redirect and Handler do it: a cookie
// holding st.State (Secure, HttpOnly, SameSite=Lax) goes with the redirect
// to the Company and must come back with the browser. An application that
// receives the redirect itself does the same before calling Complete.
func (d *Direct) Start(ctx context.Context, sess *poppy.Session, opts *poppy.SignInOptions) (*DirectStart, error) {
	if res, err := prepare(ctx, sess, "direct", opts); res != nil || err != nil {
		if err != nil {
			return nil, err
		}
		return &DirectStart{Result: res}, nil
	}
	c := sess.Company()
	authz, err := url.Parse(c.Metadata().AuthorizationEndpoint)
	if err != nil {
		return nil, errors.New("signin: invalid authorization_endpoint")
	}
	state := random(32)    // PA-4.5-01
	verifier := random(32) // PA-4.5-02: 256 bits, S256
	sum := sha256.Sum256([]byte(verifier))
	challenge := base64.RawURLEncoding.EncodeToString(sum[:])
	account := opts.Account
	if account == "" {
		account = poppy.DefaultAccount
	}
	// The Company as given (port, www.), and its issuer.
	p := pending{
		User: sess.User(), Issuer: c.Issuer(), Domain: c.Domain(), Session: sess.Name(),
		Verifier: verifier, RedirectURI: d.redirectURI, Scopes: append([]string(nil), opts.Scopes...),
		Account: account, Expires: d.agent.Clock().Now().Add(pendingLifetime), Status: "pending",
	}
	b, _ := json.Marshal(&p)
	if err := d.agent.Store().Update(ctx, pendingKey(state), func([]byte) ([]byte, error) { return b, nil }); err != nil {
		return nil, fmt.Errorf("signin: storing the pending sign-in: %w", err)
	}
	// PA-4.5-03: every parameter, on the metadata's authorization_endpoint.
	q := authz.Query()
	q.Set("response_type", "code")
	q.Set("client_id", d.agent.Identity().ClientID())
	q.Set("redirect_uri", d.redirectURI)
	q.Set("scope", scopeString(opts.Scopes))
	q.Set("state", state)
	q.Set("code_challenge", challenge)
	q.Set("code_challenge_method", "S256")
	if rs := c.Resources(); len(rs) > 0 {
		q["resource"] = rs // RFC 8707 section 2.1: every listed resource
	}
	authz.RawQuery = q.Encode()
	return &DirectStart{URL: authz.String(), State: state}, nil
}

// Wait waits for the outcome of the sign-in Start began with state: until
// the redirect has been handled, by this process (which wakes it at once)
// or another sharing the keystore, the sign-in expired, or ctx ends.
func (d *Direct) Wait(ctx context.Context, state string) (*poppy.SignInResult, error) {
	w := d.waiter(state)
	defer d.dropWaiter(state, w)
	return d.wait(ctx, state, w.ch)
}

func (d *Direct) wait(ctx context.Context, state string, ch <-chan struct{}) (*poppy.SignInResult, error) {
	t := time.NewTicker(d.poll)
	defer t.Stop()
	for {
		b, err := d.agent.Store().Get(ctx, pendingKey(state))
		if errors.Is(err, keystore.ErrNotFound) {
			return nil, errUnknownSignIn
		}
		if err != nil {
			return nil, fmt.Errorf("signin: reading the pending sign-in: %w", err)
		}
		var p pending
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, errors.New("signin: the pending sign-in record is corrupt")
		}
		switch p.Status {
		case "done":
			d.forget(ctx, state)
			return p.Result, nil
		case "failed":
			d.forget(ctx, state)
			return nil, p.outcome()
		}
		if !d.agent.Clock().Now().Before(p.Expires) {
			d.forget(ctx, state)
			return nil, ErrSignInExpired
		}
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (d *Direct) forget(ctx context.Context, state string) {
	_ = d.agent.Store().Update(ctx, pendingKey(state), func([]byte) ([]byte, error) { return nil, nil })
}

// waiter registers a Wait for state; every Wait of one state shares a
// channel, closed by wake.
func (d *Direct) waiter(state string) *waiter {
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.waiters[state]
	if w == nil {
		w = &waiter{ch: make(chan struct{})}
		d.waiters[state] = w
	}
	w.n++
	return w
}

func (d *Direct) dropWaiter(state string, w *waiter) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w.n--; w.n == 0 && d.waiters[state] == w {
		delete(d.waiters, state)
	}
}

func (d *Direct) wake(state string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w, ok := d.waiters[state]; ok {
		close(w.ch)
		delete(d.waiters, state)
	}
}

// The outcomes a callback can record, and the errors Wait returns for them.
var outcomes = map[string]error{
	"access_denied":   ErrAccessDenied,
	"issuer_missing":  errIssuerMissing,
	"issuer_mismatch": poppy.ErrIssuerMismatch,
	"invalid_grant":   poppy.ErrInvalidGrant,
	"invalid_scope":   poppy.ErrInvalidScope,
	"invalid_session": poppy.ErrInvalidSession,
	"session_ended":   ErrSessionEnded,
	"expired":         ErrSignInExpired,
}

// outcomeError is the error Wait returns for a recorded outcome: the
// outcome's sentinel, with the reason when there is one.
func outcomeError(code, reason string) error {
	err, ok := outcomes[code]
	if !ok {
		err = ErrSignInFailed
		if reason == "" {
			reason = code
		}
	}
	if reason == "" || reason == err.Error() {
		return err
	}
	return fmt.Errorf("%w: %s", err, reason)
}

// Complete handles the redirect the Company sent the User's browser to:
// callback is its full URL. It checks state and iss, exchanges the code for
// the Session that started the sign-in, records the outcome for Wait, and
// returns it. Handler calls it; an application that receives the redirect
// another way calls it itself.
//
// The pending record is claimed under its lock, and the code is exchanged
// after the lock is released, so that no other keystore lock is taken while
// it is held; a second redirect for the same state meanwhile gets an
// error saying so.
func (d *Direct) Complete(ctx context.Context, callback string) (*poppy.SignInResult, error) {
	u, err := url.Parse(callback)
	if err != nil {
		return nil, errors.New("signin: unparseable redirect")
	}
	q := u.Query()
	state := q.Get("state")
	if state == "" {
		return nil, errStateMismatch
	}
	var (
		claimed *pending
		code    string
		res     *poppy.SignInResult
		outcome error
	)
	err = d.agent.Store().Update(ctx, pendingKey(state), func(cur []byte) ([]byte, error) {
		if cur == nil {
			return nil, errStateMismatch // PA-4.5-05: no sign-in has this state
		}
		var p pending
		if err := json.Unmarshal(cur, &p); err != nil {
			return nil, errors.New("signin: the pending sign-in record is corrupt")
		}
		switch p.Status {
		case "done":
			res = p.Result
			return cur, nil
		case "failed":
			outcome = p.outcome()
			return cur, nil
		case "exchanging":
			outcome = errSignInInProgress
			return cur, nil
		}
		if code, outcome = d.check(&p, q); outcome != nil {
			p.fail(outcome)
		} else {
			p.Status = "exchanging"
			claimed = &p
		}
		return json.Marshal(&p)
	})
	if err != nil {
		return nil, err
	}
	if claimed == nil {
		d.wake(state)
		return res, outcome
	}
	res, outcome = d.redeem(ctx, claimed, code)
	if outcome != nil {
		claimed.fail(outcome)
	} else {
		claimed.Status, claimed.Result = "done", res
	}
	b, _ := json.Marshal(claimed)
	if err := d.agent.Store().Update(context.WithoutCancel(ctx), pendingKey(state), func([]byte) ([]byte, error) { return b, nil }); err != nil {
		return nil, fmt.Errorf("signin: recording the outcome: %w", err)
	}
	d.wake(state)
	return res, outcome
}

// check checks the redirect (spec 4.5 steps 3-4) and returns its code.
func (d *Direct) check(p *pending, q url.Values) (string, error) {
	if !d.agent.Clock().Now().Before(p.Expires) {
		return "", ErrSignInExpired
	}
	// PA-4.5-06, PA-4.5-07: iss first, so that not even an error from
	// another Company's sign-in is believed.
	iss, ok := q["iss"]
	if !ok || len(iss) == 0 || iss[0] == "" {
		return "", errIssuerMissing
	}
	if iss[0] != p.Issuer {
		return "", poppy.ErrIssuerMismatch
	}
	if e := q.Get("error"); e != "" {
		if e == "access_denied" {
			return "", ErrAccessDenied // PA-4.5-08
		}
		return "", outcomeError(e, "")
	}
	code := q.Get("code")
	if code == "" {
		return "", errors.New("signin: the redirect has neither code nor error")
	}
	return code, nil
}

// redeem exchanges code for the Session that started the sign-in
// (PA-4.5-09).
func (d *Direct) redeem(ctx context.Context, p *pending, code string) (*poppy.SignInResult, error) {
	c, err := d.agent.Company(ctx, p.Domain)
	if err != nil {
		return nil, err
	}
	if c.Issuer() != p.Issuer {
		return nil, poppy.ErrIssuerMismatch
	}
	sess, err := c.Session(ctx, p.User, &poppy.SessionOptions{Name: p.Session})
	if err != nil {
		return nil, err
	}
	opts := &poppy.SignInOptions{Scopes: p.Scopes, Account: p.Account}
	res, err := sess.ExchangeCode(ctx, code, p.RedirectURI, p.Verifier, opts)
	if !errors.Is(err, poppy.ErrInvalidSession) {
		return res, err
	}
	// PA-4.2-16: the Company ended the Session, and ExchangeCode started
	// a new one. The code is the User's consent, not the Session's:
	// exchange it on the new Session.
	res, err = sess.ExchangeCode(ctx, code, p.RedirectURI, p.Verifier, opts)
	if errors.Is(err, poppy.ErrInvalidGrant) || errors.Is(err, poppy.ErrInvalidSession) {
		// The Company used the code up when it refused the ended Session.
		return nil, fmt.Errorf("%w: %w", ErrSessionEnded, err)
	}
	return res, err
}

// maxReason bounds the reason kept in the pending record.
const maxReason = 300

// reasonOf says why a sign-in failed, for the pending record: the error's
// text, without what its outcome code already says.
func reasonOf(err error) string {
	msg := err.Error()
	if code := codeOf(err); code != "failed" {
		if e, ok := outcomes[code]; ok && msg == e.Error() {
			return ""
		}
	}
	return truncate(msg, maxReason)
}

// truncate cuts s to at most n bytes of valid UTF-8, marking the cut.
func truncate(s string, n int) string {
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "…"
	}
	return s
}

// codeOf names an outcome for the pending record.
func codeOf(err error) string {
	if errors.Is(err, ErrSessionEnded) {
		return "session_ended" // it wraps the Company's error
	}
	for code, e := range outcomes {
		if errors.Is(err, e) {
			return code
		}
	}
	var pe *poppy.Error
	if errors.As(err, &pe) && pe.Code != "" {
		return pe.Code
	}
	return "failed"
}

// Redirect sends the User's browser to the Company's sign-in page for st,
// a sign-in Start began: a 302 to st.URL, after setting the StateCookie
// when DirectOptions names one. When no sign-in is needed (st.Result is
// set) it does nothing and returns false; the caller answers the browser
// itself.
func (d *Direct) Redirect(w http.ResponseWriter, r *http.Request, st *DirectStart) bool {
	if st == nil || st.Result != nil || st.URL == "" {
		return false
	}
	if d.cookie != "" {
		http.SetCookie(w, &http.Cookie{
			Name: d.cookie, Value: st.State, Path: cookiePath(d.redirect.Path),
			MaxAge: int(pendingLifetime / time.Second), Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode,
		})
	}
	http.Redirect(w, r, st.URL, http.StatusFound)
	return true
}

func cookiePath(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// boundToBrowser reports whether r comes from the browser that started
// the sign-in it names, when DirectOptions.StateCookie asks for that
// check, and clears the cookie.
func (d *Direct) boundToBrowser(w http.ResponseWriter, r *http.Request) bool {
	if d.cookie == "" {
		return true
	}
	c, err := r.Cookie(d.cookie)
	http.SetCookie(w, &http.Cookie{Name: d.cookie, Value: "", Path: cookiePath(d.redirect.Path), MaxAge: -1,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	state := r.URL.Query().Get("state")
	return err == nil && state != "" && subtle.ConstantTimeCompare([]byte(c.Value), []byte(state)) == 1
}

// Handler serves the redirect URI: it completes the sign-in (Complete) and
// then answers the browser with DirectOptions.Done, or else a short page
// saying whether it worked and, if not, why. Requests for other paths get
// 404.
func (d *Direct) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != d.redirect.Path {
			http.NotFound(w, r)
			return
		}
		if r.Method != http.MethodGet {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		var res *poppy.SignInResult
		var err error
		if d.boundToBrowser(w, r) {
			full := *d.redirect
			full.RawQuery = r.URL.RawQuery
			res, err = d.Complete(r.Context(), full.String())
		} else {
			// Another browser's sign-in: nothing is completed, and the
			// sign-in stays pending for the browser that started it.
			err = fmt.Errorf("%w: this browser did not start the sign-in", errStateMismatch)
		}
		if d.done != nil {
			d.done(w, r, res, err)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Referrer-Policy", "no-referrer")
		msg := "You are signed in. You can close this tab."
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			msg = "Sign-in did not complete: " + pageReason(err) + " You can close this tab."
		}
		fmt.Fprintf(w, "<!doctype html><title>Sign-in</title><p>%s</p>\n", html.EscapeString(msg))
	})
}

// pageReason tells the User why their sign-in failed, in a sentence.
func pageReason(err error) string {
	switch {
	case errors.Is(err, ErrAccessDenied):
		return "you declined it at the Company."
	case errors.Is(err, ErrSignInExpired):
		return "it took too long. Start it again."
	case errors.Is(err, errStateMismatch):
		return "this link is not from a sign-in this agent started, or it was already used."
	case errors.Is(err, errSignInInProgress):
		return "it is being completed already."
	case errors.Is(err, ErrSessionEnded):
		return "the Company ended the session meanwhile. Start it again."
	case errors.Is(err, errIssuerMissing), errors.Is(err, poppy.ErrIssuerMismatch):
		return "the answer did not come from the Company the sign-in was for."
	}
	return err.Error() + "."
}
