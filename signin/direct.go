package signin

// Direct Sign-In (spec 4.5): the authorization code flow with PKCE.
//
// A sign-in in progress is a record in the keystore, found by its state, so
// that the redirect may reach any process or replica sharing the keystore:
// the one that receives it verifies state and iss, exchanges the code for
// the Session that started the sign-in, and writes the outcome into the
// record; the one waiting in SignIn sees it there. Within one process the
// waiter is woken at once; across processes it looks every PollInterval.

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/sdk"
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

	Status string              `json:"status"` // "pending", "exchanging", "done", "failed"
	Error  string              `json:"error,omitempty"`
	Result *poppy.SignInResult `json:"result,omitempty"`
}

// DirectOptions configures Direct Sign-In.
type DirectOptions struct {
	// RedirectURI is where the Company sends the User back: one of the
	// identity's redirect_uris, exactly (spec 4.5). "" means the first.
	RedirectURI string
	// PollInterval is how often a waiting SignIn looks for an outcome
	// written by another process. Zero means 250 ms.
	PollInterval time.Duration
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

	mu      sync.Mutex
	waiters map[string]chan struct{}
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
	return &Direct{agent: agent, redirectURI: o.RedirectURI, redirect: ru, poll: o.PollInterval, waiters: map[string]chan struct{}{}}, nil
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
	state, authURL, res, err := d.start(ctx, sess, opts)
	if err != nil || res != nil {
		return res, err
	}
	if state == "" {
		return nil, errors.New("signin: no state")
	}
	ch := d.waiter(state)
	defer d.dropWaiter(state)
	c := sess.Company()
	if err := p.OpenURL(ctx, &URLPrompt{Company: c.Name(), URL: authURL, Scopes: describe(c, opts.Scopes)}); err != nil {
		return nil, err
	}
	return d.Wait(ctx, state, ch)
}

// Start begins a Direct Sign-In and returns its state and the URL the User
// must open; SignIn calls it, and so may an application that shows the URL
// itself and later calls Wait. When a stored Account Token covers the
// scopes, it signs the Session in with it and returns an empty URL.
func (d *Direct) Start(ctx context.Context, sess *poppy.Session, opts *poppy.SignInOptions) (state, authURL string, err error) {
	state, authURL, _, err = d.start(ctx, sess, opts)
	return state, authURL, err
}

func (d *Direct) start(ctx context.Context, sess *poppy.Session, opts *poppy.SignInOptions) (state, authURL string, res *poppy.SignInResult, err error) {
	if res, err := prepare(ctx, sess, "direct", opts); res != nil || err != nil {
		return "", "", res, err
	}
	c := sess.Company()
	authz, err := url.Parse(c.Metadata().AuthorizationEndpoint)
	if err != nil {
		return "", "", nil, errors.New("signin: invalid authorization_endpoint")
	}
	state = random(32)     // PA-4.5-01
	verifier := random(32) // PA-4.5-02: 256 bits, S256
	sum := sha256.Sum256([]byte(verifier))
	challenge := base64.RawURLEncoding.EncodeToString(sum[:])
	account := opts.Account
	if account == "" {
		account = poppy.DefaultAccount
	}
	p := pending{
		User: sess.User(), Issuer: c.Issuer(), Domain: c.Domain(), Session: sess.Name(),
		Verifier: verifier, RedirectURI: d.redirectURI, Scopes: append([]string(nil), opts.Scopes...),
		Account: account, Expires: d.agent.Clock().Now().Add(pendingLifetime), Status: "pending",
	}
	b, _ := json.Marshal(&p)
	if err := d.agent.Store().Update(ctx, pendingKey(state), func([]byte) ([]byte, error) { return b, nil }); err != nil {
		return "", "", nil, fmt.Errorf("signin: storing the pending sign-in: %w", err)
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
	authz.RawQuery = q.Encode()
	return state, authz.String(), nil, nil
}

// Wait waits for the outcome of the sign-in started with state. ch, if not
// nil, is closed when this process handled the redirect.
func (d *Direct) Wait(ctx context.Context, state string, ch <-chan struct{}) (*poppy.SignInResult, error) {
	t := time.NewTicker(d.poll)
	defer t.Stop()
	for {
		b, err := d.agent.Store().Get(ctx, pendingKey(state))
		if errors.Is(err, keystore.ErrNotFound) {
			return nil, ErrUnknownSignIn
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
			return nil, outcomeError(p.Error)
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

func (d *Direct) waiter(state string) chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	ch := make(chan struct{})
	d.waiters[state] = ch
	return ch
}

func (d *Direct) dropWaiter(state string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.waiters, state)
}

func (d *Direct) wake(state string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if ch, ok := d.waiters[state]; ok {
		close(ch)
		delete(d.waiters, state)
	}
}

// The outcomes a callback can record, and the errors Wait returns for them.
var outcomes = map[string]error{
	"access_denied":   ErrAccessDenied,
	"issuer_missing":  ErrIssuerMissing,
	"issuer_mismatch": poppy.ErrIssuerMismatch,
	"invalid_grant":   poppy.ErrInvalidGrant,
	"invalid_scope":   poppy.ErrInvalidScope,
	"invalid_session": poppy.ErrInvalidSession,
	"session_ended":   ErrSessionEnded,
	"expired":         ErrSignInExpired,
}

func outcomeError(code string) error {
	if err, ok := outcomes[code]; ok {
		return err
	}
	return fmt.Errorf("%w: %s", ErrSignInFailed, code)
}

// Complete handles the redirect the Company sent the User's browser to:
// callback is its full URL. It checks state and iss, exchanges the code for
// the Session that started the sign-in, records the outcome for Wait, and
// returns it. Handler calls it; an application that receives the redirect
// another way calls it itself.
//
// The pending record is claimed under its lock, and the code is exchanged
// after the lock is released, so that no other keystore lock is taken while
// it is held; a second redirect for the same state meanwhile gets
// ErrSignInInProgress.
func (d *Direct) Complete(ctx context.Context, callback string) (*poppy.SignInResult, error) {
	u, err := url.Parse(callback)
	if err != nil {
		return nil, errors.New("signin: unparseable redirect")
	}
	q := u.Query()
	state := q.Get("state")
	if state == "" {
		return nil, ErrStateMismatch
	}
	var (
		claimed *pending
		code    string
		res     *poppy.SignInResult
		outcome error
	)
	err = d.agent.Store().Update(ctx, pendingKey(state), func(cur []byte) ([]byte, error) {
		if cur == nil {
			return nil, ErrStateMismatch // PA-4.5-05: no sign-in has this state
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
			outcome = outcomeError(p.Error)
			return cur, nil
		case "exchanging":
			outcome = ErrSignInInProgress
			return cur, nil
		}
		if code, outcome = d.check(&p, q); outcome != nil {
			p.Status, p.Error = "failed", codeOf(outcome)
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
		claimed.Status, claimed.Error = "failed", codeOf(outcome)
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
		return "", ErrIssuerMissing
	}
	if iss[0] != p.Issuer {
		return "", poppy.ErrIssuerMismatch
	}
	if e := q.Get("error"); e != "" {
		if e == "access_denied" {
			return "", ErrAccessDenied // PA-4.5-08
		}
		return "", outcomeError(e)
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
	grant := url.Values{
		"grant_type":    {"authorization_code"},
		"code":          {code},
		"redirect_uri":  {p.RedirectURI},
		"code_verifier": {p.Verifier},
	}
	opts := &poppy.SignInOptions{Scopes: p.Scopes, Account: p.Account}
	ended := sess.ID()
	res, err := sdk.CompleteSignIn(ctx, sess, grant, opts)
	if !errors.Is(err, poppy.ErrInvalidSession) {
		return res, err
	}
	// PA-4.2-16: the Company ended the Session. The code is the User's
	// consent, not the Session's: exchange it on a new Session.
	if err := sdk.RestartSession(ctx, sess, ended); err != nil {
		return nil, err
	}
	res, err = sdk.CompleteSignIn(ctx, sess, grant, opts)
	if errors.Is(err, poppy.ErrInvalidGrant) || errors.Is(err, poppy.ErrInvalidSession) {
		// The Company used the code up when it refused the ended Session.
		return nil, fmt.Errorf("%w: %w", ErrSessionEnded, err)
	}
	return res, err
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

// Handler serves the redirect URI: it completes the sign-in (Complete) and
// shows the User a short page saying whether it worked. Requests for other
// paths get 404.
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
		full := *d.redirect
		full.RawQuery = r.URL.RawQuery
		_, err := d.Complete(r.Context(), full.String())
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Referrer-Policy", "no-referrer")
		msg := "You are signed in. You can close this tab."
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			msg = "Sign-in did not complete: " + codeOf(err) + ". You can close this tab."
		}
		fmt.Fprintf(w, "<!doctype html><title>Sign-in</title><p>%s</p>\n", html.EscapeString(msg))
	})
}
