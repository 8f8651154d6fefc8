package testenv

// A caller that gives up during a credential exchange (spec 4.8,
// PA-4.8-04): against a Company that rotates Account Tokens on every use
// with no grace period, the caller's ctx is cancelled, or its deadline
// passes over a slow connection, at the moment after the Company answered
// (rotated the Account Token, used up the code) and before the SDK read
// the answer. The User must stay signed in, whatever the store.
//
// The slow connection is the agent's own net/http client with a
// RoundTripper in front (holder) that, for the one token request it is
// armed for, hands the SDK the Company's real answer but lets the SDK read
// its body only once the test releases it: the Company has acted, the
// answer is on its way, and the caller gives up while the SDK waits for
// it. Nothing else is changed: the answer is the Company's own, and a read
// of its body after the request's ctx ended fails with the ctx's cause, as
// net/http's body of an answer whose bytes had not arrived when the ctx
// ended does. (The fake is in the process and its answers arrive at once,
// so net/http alone would hand over the bytes it already holds.)

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// GiveUpScenarios are the exchanges CallerGivesUp interrupts: a renewal
// through an API call, Token with Renew, a second caller waiting on the
// renewal the first gave up, and the completion of a Device, a Direct
// and a Mediated Sign-In.
var GiveUpScenarios = []string{"api-call", "token-renew", "waiter", "device-poll", "code-exchange", "mediated"}

// GiveUpModes are the ways the caller gives up: its ctx is cancelled, or
// its deadline passes while the SDK waits for the answer.
var GiveUpModes = []string{"cancel", "deadline"}

// CallerGivesUp runs every scenario in every mode, each on a fresh fake
// Company and a fresh store from open, as subtests.
func CallerGivesUp(t *testing.T, open func(t *testing.T) keystore.Store) {
	for _, sc := range GiveUpScenarios {
		for _, mode := range GiveUpModes {
			t.Run(sc+"/"+mode, func(t *testing.T) {
				// A deadline that passes before the Company has answered
				// misses the moment under test (the SDK is not yet
				// waiting for the answer): the run still must keep the
				// User signed in, and is repeated with a longer one.
				for d := 200 * time.Millisecond; ; d *= 2 {
					if giveUpRun(t, open(t), sc, mode, d) || t.Failed() {
						return
					}
					if d > 20*time.Second {
						t.Fatalf("the Company never answered before a deadline of %v", d)
					}
					t.Logf("the deadline of %v passed before the Company answered; again with a longer one", d)
				}
			})
		}
	}
}

// giveUpRun runs one scenario and reports whether the caller gave up at
// the moment under test.
func giveUpRun(t *testing.T, store keystore.Store, scenario, mode string, deadline time.Duration) bool {
	srv := poppytest.NewServer(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RotateAccountTokens: true}})
	h := &holder{base: srv.Client().Transport}
	client := *srv.Client()
	client.Transport = h
	watched := &watchStore{Store: store, changed: make(chan struct{})}
	e := NewOn(t, srv, &poppy.AgentOptions{Store: watched, HTTPClient: &client})
	// Every wait below ends in seconds if the rule is broken.
	live, stop := context.WithTimeout(context.Background(), time.Minute)
	defer stop()
	s := e.Session("alice")
	opts := &poppy.SignInOptions{Scopes: []string{"poppy:read"}}
	var (
		hold  *hold
		call  func(context.Context) error
		after func() // what the test does between the hold and giving up
		wait  func() // what the test waits for after releasing the hold
	)
	switch scenario {
	case "api-call", "token-renew", "waiter":
		if _, err := e.DeviceSignIn(live, s, opts); err != nil {
			t.Fatalf("sign-in: %v", err)
		}
		hold = h.arm(grantIs("refresh_token"))
		if scenario == "token-renew" {
			call = func(ctx context.Context) error {
				_, err := s.Token(ctx, &poppy.TokenOptions{Renew: true})
				return err
			}
			break
		}
		e.Srv.Clock().Advance(2 * time.Hour) // every Session Token is past its expiry
		call = func(ctx context.Context) error { return getOrders(ctx, e, s) }
		if scenario == "waiter" {
			// A second caller, whose ctx never ends, asks for the same
			// renewal while the first waits for the answer.
			second := make(chan error, 1)
			after = func() { go func() { second <- getOrders(live, e, s) }() }
			wait = func() {
				if err := <-second; err != nil {
					t.Errorf("the second caller, whose ctx never ended: %v", err)
				}
			}
		}
	case "device-poll":
		da, err := s.AuthorizeDevice(live, opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.Srv.Browse(live, da.VerificationURIComplete); err != nil {
			t.Fatal(err)
		}
		e.Srv.Clock().Advance(da.Interval)
		hold = h.arm(grantIs("urn:ietf:params:oauth:grant-type:device_code"))
		call = func(ctx context.Context) error {
			_, err := s.PollDevice(ctx, da)
			return err
		}
	case "code-exchange":
		d, err := signin.NewDirect(e.Agent, nil)
		if err != nil {
			t.Fatal(err)
		}
		st, err := d.Start(live, s, opts)
		if err != nil {
			t.Fatal(err)
		}
		loc, err := e.Srv.Browse(live, st.URL)
		if err != nil {
			t.Fatal(err)
		}
		hold = h.arm(grantIs("authorization_code"))
		call = func(ctx context.Context) error {
			_, err := d.Complete(ctx, loc)
			return err
		}
	case "mediated":
		endpoint := e.Srv.EndpointURL(poppytest.EndpointSignIn)
		hold = h.arm(func(r *http.Request, _ url.Values) bool { return r.URL.String() == endpoint })
		call = func(ctx context.Context) error {
			_, err := s.SendMediatedCredentials(ctx, map[string]string{"email": "user@example.test", "password": "correct horse"}, opts)
			return err
		}
	default:
		t.Fatalf("no scenario %q", scenario)
	}

	ctx, cancel := context.WithCancel(live)
	if mode == "deadline" {
		ctx, cancel = context.WithTimeout(live, deadline)
	}
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- call(ctx) }()
	var err error
	waited := false
	select {
	case <-hold.reached:
		if after != nil {
			after()
			waited = true
		}
		if mode == "cancel" {
			cancel()
		}
		// The deadline passes, or the cancellation arrives, while the SDK
		// waits for the body of an answer the Company has sent.
		err = <-done
	case err = <-done: // the caller gave up before the Company answered
	}
	hold.release()
	if err == nil || !errors.Is(err, ctx.Err()) {
		t.Fatalf("the caller that gave up got %v, want its ctx's error", err)
	}
	moment := hold.answeredBefore(ctx)
	if waited {
		wait()
	}

	// The exchange finished without its caller; a sign-in's completion is
	// kept in the store when the Session is signed in. With the rule
	// broken it never is: ten seconds tell.
	kept, stopKept := context.WithTimeout(live, 10*time.Second)
	defer stopKept()
	watched.until(t, kept, func() bool {
		_, err := s.AccountToken(live, "")
		return s.SignedIn() && err == nil
	})
	if err := getOrders(live, e, s); err != nil {
		t.Fatalf("after the caller gave up: %v (the User was signed out)", err)
	}
	// Two more rotations: the Account Token in the store is the current one.
	for i := range 2 {
		tok, err := s.Token(live, &poppy.TokenOptions{Renew: true})
		if err != nil || !tok.SignedIn {
			t.Fatalf("renewal %d after the caller gave up: %v, %v", i, tok, err)
		}
	}
	refreshes := 0
	for _, r := range e.Requests(poppytest.EndpointToken) {
		if r.Status != http.StatusOK && r.Form.Get("grant_type") != "urn:ietf:params:oauth:grant-type:device_code" {
			t.Errorf("token request %d (%s) answered %d %s", r.Index, r.Form.Get("grant_type"), r.Status, r.ErrorCode)
		}
		if r.Form.Get("grant_type") == "refresh_token" {
			refreshes++
		}
	}
	if scenario == "waiter" && moment && refreshes != 3 {
		// The held renewal, shared by both callers, then the two above.
		t.Errorf("%d refreshes, want 3: the second caller did not get the renewal's result", refreshes)
	}
	for _, v := range e.Srv.TakeViolations() {
		t.Errorf("protocol violation %v", v)
	}
	return moment
}

// getOrders sends GET /orders, which needs a signed-in Session, through s.
func getOrders(ctx context.Context, e *Env, s *poppy.Session) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.Srv.EndpointURL(poppytest.EndpointAPI)+"/orders", nil)
	if err != nil {
		return err
	}
	resp, err := s.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return poppy.ResponseError(resp)
}

// grantIs matches a token request of grant_type grant.
func grantIs(grant string) func(*http.Request, url.Values) bool {
	return func(_ *http.Request, f url.Values) bool { return f.Get("grant_type") == grant }
}

// holder is an http.RoundTripper that holds the body of the answer to the
// one token request it is armed for until the test releases it.
type holder struct {
	base http.RoundTripper
	mu   sync.Mutex
	next *hold
}

// hold is one held answer.
type hold struct {
	match    func(*http.Request, url.Values) bool
	reached  chan struct{} // closed when the Company's answer is in
	released chan struct{}
	once     sync.Once
	mu       sync.Mutex
	answered time.Time
}

// arm holds the body of the answer to the next POST that matches, given
// its form (nil for a body that is not one).
func (h *holder) arm(match func(*http.Request, url.Values) bool) *hold {
	x := &hold{match: match, reached: make(chan struct{}), released: make(chan struct{})}
	h.mu.Lock()
	h.next = x
	h.mu.Unlock()
	return x
}

func (x *hold) release() { x.once.Do(func() { close(x.released) }) }

// answeredBefore reports whether the Company answered before ctx ended.
func (x *hold) answeredBefore(ctx context.Context) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.answered.IsZero() {
		return false
	}
	d, ok := ctx.Deadline()
	return !ok || x.answered.Before(d)
}

func (h *holder) RoundTrip(req *http.Request) (*http.Response, error) {
	h.mu.Lock()
	x := h.next
	h.mu.Unlock()
	if x == nil || req.Method != http.MethodPost || req.Body == nil {
		return h.base.RoundTrip(req)
	}
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, err
	}
	req.Body = io.NopCloser(bytes.NewReader(b))
	var f url.Values
	if req.Header.Get("Content-Type") == "application/x-www-form-urlencoded" {
		f, _ = url.ParseQuery(string(b))
	}
	if !x.match(req, f) {
		return h.base.RoundTrip(req)
	}
	resp, err := h.base.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	h.mu.Lock()
	if h.next == x {
		h.next = nil
	}
	h.mu.Unlock()
	x.mu.Lock()
	x.answered = time.Now()
	x.mu.Unlock()
	close(x.reached)
	resp.Body = &heldBody{ReadCloser: resp.Body, x: x, ctx: req.Context()}
	return resp, nil
}

// heldBody lets reads through once the hold is released; when the
// request's ctx ends first, every read fails with its cause, as net/http
// fails the read of a body still on its way.
type heldBody struct {
	io.ReadCloser
	x    *hold
	ctx  context.Context
	once sync.Once
	err  error
}

func (b *heldBody) Read(p []byte) (int, error) {
	b.once.Do(func() {
		select {
		case <-b.x.released:
		case <-b.ctx.Done():
			b.err = context.Cause(b.ctx)
		}
	})
	if b.err != nil {
		return 0, b.err
	}
	return b.ReadCloser.Read(p)
}

// watchStore is a keystore.Store that tells waiters whenever an Update
// has returned.
type watchStore struct {
	keystore.Store
	mu      sync.Mutex
	changed chan struct{}
}

func (w *watchStore) Update(ctx context.Context, key keystore.Key, fn func([]byte) ([]byte, error)) error {
	err := w.Store.Update(ctx, key, fn)
	w.mu.Lock()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
	return err
}

// until waits for cond, checked after every Update, or fails t when ctx
// ends first.
func (w *watchStore) until(t *testing.T, ctx context.Context, cond func() bool) {
	t.Helper()
	for {
		w.mu.Lock()
		ch := w.changed
		w.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatal("the exchange the caller gave up was never kept: the User is signed out")
		}
	}
}
