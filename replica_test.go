package poppy_test

// Account Tokens across replicas and faults: a rotation lost by a crashed
// replica, a rotated token in a response the SDK refuses, and signed-in
// renewals raced by two replicas. Each "replica" here is an Agent of its
// own on one shared store, as in one process per replica.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
)

// crashingStore plays a replica killed after the Company answered a
// refresh and before the store saved the rotated Account Token: while
// armed, an Update of an Account Token runs fn (which sends the refresh)
// and then drops what fn returned.
type crashingStore struct {
	keystore.Store
	armed atomic.Bool
	kind  keystore.Kind // default KindAccountToken
}

var errCrashed = errors.New("test: replica killed before the write")

func (c *crashingStore) Update(ctx context.Context, key keystore.Key, fn func([]byte) ([]byte, error)) error {
	kind := c.kind
	if kind == "" {
		kind = keystore.KindAccountToken
	}
	if key.Kind != kind || !c.armed.Load() {
		return c.Store.Update(ctx, key, fn)
	}
	c.armed.Store(false)
	cur, err := c.Store.Get(ctx, key)
	if err != nil && !errors.Is(err, keystore.ErrNotFound) {
		return err
	}
	_, _ = fn(cur)
	return errCrashed
}

// Item 1 of the rotation fault runs: a replica loses a rotated Account
// Token, so the Company refuses the stored one (invalid_grant) while it
// still holds the Session signed in, and refuses to renew that Session with
// the assertion. The User ends with a clear sign_in_required, a
// working signed-out Session (a new one), and a new replica can start too
// (PA-4.8-06, PA-4.2-16).
func TestLostRotationEndsSignedOut(t *testing.T) {
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RotateAccountTokens: true}}, nil)
	s := signedIn(t, e, "")
	old := s.ID()
	crash := &crashingStore{Store: e.store}
	b := e.newAgent(&poppy.AgentOptions{Store: crash})
	cb, err := b.Company(ctx, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := cb.Session(ctx, "alice", nil)
	if err != nil {
		t.Fatal(err)
	}
	crash.armed.Store(true)
	if _, err := sb.Token(ctx, &poppy.TokenOptions{Renew: true}); !errors.Is(err, errCrashed) {
		t.Fatalf("the crashing replica's renewal: %v", err)
	}
	// The surviving replica: its next renewal sends the stored, rotated-away
	// Account Token.
	e.srv.Clock().Advance(2 * time.Hour)
	_, err = doGet(s, e.srv.EndpointURL(poppytest.EndpointAPI)+"/orders")
	if !errors.Is(err, poppy.ErrSignInRequired) {
		t.Fatalf("account call: err = %v, want ErrSignInRequired", err)
	}
	if code, body := e.get(s, "/products"); code != 200 {
		t.Fatalf("signed-out call: %d %s", code, body)
	}
	if s.SignedIn() || s.ID() == old || s.ID() == "" {
		t.Fatalf("Session %s signed in %v: want a new signed-out Session", s.ID(), s.SignedIn())
	}
	if _, err := s.AccountToken(ctx, ""); !errors.Is(err, poppy.ErrNoAccountToken) {
		t.Fatalf("the refused Account Token is still stored: %v", err)
	}
	// The other replica adopts the new Session instead of failing.
	if _, err := sb.Token(ctx, &poppy.TokenOptions{Renew: true}); err != nil {
		t.Fatalf("other replica: %v", err)
	}
	if sb.ID() != s.ID() || sb.SignedIn() {
		t.Fatalf("other replica on %s (signed in %v), want %s signed out", sb.ID(), sb.SignedIn(), s.ID())
	}
	// A new replica starts.
	c := e.newAgent(nil)
	cc, err := c.Company(ctx, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Session(ctx, "alice", nil); err != nil {
		t.Fatalf("new replica: %v", err)
	}
	// Exactly one new Session for the User, from exactly one start.
	starts := 0
	for _, r := range grantsOf(e, "urn:ietf:params:oauth:grant-type:jwt-bearer") {
		if r.Form.Get("session_id") == "" && r.Status == 200 {
			starts++
		}
	}
	if starts != 2 { // the first Session, then its replacement
		t.Fatalf("%d Session starts, want 2", starts)
	}
	// Signing in again works on the new Session.
	if code, _ := e.get(signedIn(t, e, ""), "/orders"); code != 200 {
		t.Fatal("signing in again does not work")
	}
	// The Company saw the rotated-away token once: inherent to the crash.
	vs := e.srv.TakeViolations()
	if len(vs) != 1 || vs[0].Rule != "PA-4.8-04" {
		t.Fatalf("violations %v, want the one PA-4.8-04 of the lost rotation", vs)
	}
}

// Item 2: a refresh answered 200 with a rotated Account Token, but with
// expires_in 0, is a protocol error for the Session Token (PA-4.2-13), yet
// the rotated Account Token is stored first (PA-4.8-04, RFC 6749 6): the
// next renewal uses it and the User stays signed in.
func TestPA_4_8_04_RotationKeptFromRefusedResponse(t *testing.T) {
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RotateAccountTokens: true}}, nil)
	s := signedIn(t, e, "")
	e.srv.Tokens().SetExpiresIn(0, 1)
	if _, err := s.Token(ctx, &poppy.TokenOptions{Renew: true}); !errors.Is(err, poppy.ErrInvalidTokenResponse) {
		t.Fatalf("err = %v, want ErrInvalidTokenResponse (PA-4.2-13)", err)
	}
	tok, err := s.Token(ctx, &poppy.TokenOptions{Renew: true})
	if err != nil || !tok.SignedIn {
		t.Fatalf("after the refused response: %v (signed in %v): the rotated Account Token was lost", err, tok != nil && tok.SignedIn)
	}
	for _, r := range grantsOf(e, "refresh_token") {
		if r.ErrorCode != "" {
			t.Fatalf("refresh %d answered %s", r.Index, r.ErrorCode)
		}
	}
}

// barrierStore holds every Update of an Account Token until n of them
// have arrived (or a second has passed), so that n replicas that each
// found the Session Token due all reach the Account Token's lock.
type barrierStore struct {
	keystore.Store
	mu      sync.Mutex
	n       int
	waiting int
	release chan struct{}
}

func (b *barrierStore) Update(ctx context.Context, key keystore.Key, fn func([]byte) ([]byte, error)) error {
	if key.Kind == keystore.KindAccountToken {
		b.mu.Lock()
		ch := b.release
		if ch != nil {
			b.waiting++
			if b.waiting == b.n {
				close(ch)
				b.release = nil
			}
		}
		b.mu.Unlock()
		if ch != nil {
			select {
			case <-ch:
			case <-time.After(time.Second):
			}
		}
	}
	return b.Store.Update(ctx, key, fn)
}

func (b *barrierStore) arm(n int) {
	b.mu.Lock()
	b.n, b.waiting, b.release = n, 0, make(chan struct{})
	b.mu.Unlock()
}

// Item 3: three replicas find one signed-in Session's token due at once;
// one refresh serves them all (PA-4.8-05): the others adopt its token
// under the Account Token's lock instead of refreshing again.
func TestPA_4_8_05_OneRefreshAcrossReplicas(t *testing.T) {
	bs := &barrierStore{Store: keystore.NewMemory()}
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{RotateAccountTokens: true}}, &poppy.AgentOptions{Store: bs})
	e.store = bs
	var sessions []*poppy.Session
	sessions = append(sessions, signedIn(t, e, ""))
	for range 2 {
		a := e.newAgent(nil)
		c, err := a.Company(ctx, "example.test")
		if err != nil {
			t.Fatal(err)
		}
		s, err := c.Session(ctx, "alice", nil)
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, s)
	}
	for round := range 3 {
		before := len(grantsOf(e, "refresh_token"))
		e.srv.Clock().Advance(2 * time.Hour)
		bs.arm(len(sessions))
		var wg sync.WaitGroup
		toks := make([]*poppy.Token, len(sessions))
		for i, s := range sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tok, err := s.Token(ctx, nil)
				if err != nil {
					t.Errorf("replica %d: %v", i, err)
				}
				toks[i] = tok
			}()
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		if n := len(grantsOf(e, "refresh_token")) - before; n != 1 {
			t.Fatalf("round %d: %d refreshes for one Session Token lifetime across %d replicas, want 1", round, n, len(sessions))
		}
		for i, tok := range toks {
			if !tok.SignedIn || tok.Value() != toks[0].Value() {
				t.Fatalf("round %d: replica %d has another token", round, i)
			}
		}
	}
}

// A replica dies after the Company signed a Session in with the stored
// Account Token and before the Session's record says so: the record says
// signed out, the Company says signed in and refuses the assertion.
// Another replica starts a new Session instead of failing for good, and
// the next account call signs it in with the stored Account Token.
func TestCrashBetweenSignInAndRecord(t *testing.T) {
	e := newEnv(t, nil, nil)
	signedIn(t, e, "")
	crash := &crashingStore{Store: e.store, kind: keystore.KindSession}
	b := e.newAgent(&poppy.AgentOptions{Store: crash})
	cb, err := b.Company(ctx, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := cb.Session(ctx, "alice", &poppy.SessionOptions{Name: "task"})
	if err != nil {
		t.Fatal(err)
	}
	old := sb.ID()
	crash.armed.Store(true)
	if _, _, err := sb.UseAccountToken(ctx, nil); !errors.Is(err, errCrashed) {
		t.Fatalf("UseAccountToken on the crashing replica: %v", err)
	}
	// Another replica resumes the Session: signed out in the store.
	c := e.newAgent(nil)
	cc, err := c.Company(ctx, "example.test")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := cc.Session(ctx, "alice", &poppy.SessionOptions{Name: "task"})
	if err != nil {
		t.Fatalf("resuming the Session: %v", err)
	}
	e.srv.Clock().Advance(2 * time.Hour)
	if code, body := e.get(sc, "/orders"); code != 200 {
		t.Fatalf("account call: %d %s", code, body)
	}
	if sc.ID() == old || !sc.SignedIn() {
		t.Fatalf("Session %s (signed in %v), want a new one, signed in", sc.ID(), sc.SignedIn())
	}
	// The one assertion renewal of the Session the Company held signed in
	// is the price of the crash: nothing in the store said it was.
	if vs := e.srv.TakeViolations(); len(vs) != 1 || vs[0].Rule != "PA-4.2-15" {
		t.Fatalf("violations %v, want the one PA-4.2-15 of the crash", vs)
	}
}
