package poppy_test

// Attacks on the root package by a hostile Company and a careless caller
// (issue 8), kept together so that the next attack finds its neighbours.
// Each test names its attack; each failed on the code before its fix
// (commit b9fcb33), except TestAttackLargeErrorBody, whose fix landed in
// b9fcb33 itself (the transport no longer reads error bodies) and which
// checks that it holds on every path.
//
// A hostile Company is played by the strict fake, with a hostile
// transport in front of it that rewrites what it answers.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// hostileEnv is newEnv whose agent talks to the fake through a hostile
// transport.
func hostileEnv(t *testing.T, srvOpts *poppytest.Options, aopts *poppy.AgentOptions) (*env, *testenv.Hostile) {
	t.Helper()
	e := newEnv(t, srvOpts, aopts)
	h := testenv.NewHostile(e.srv.Transport())
	var o poppy.AgentOptions
	if aopts != nil {
		o = *aopts
	}
	o.HTTPClient = &http.Client{Transport: h}
	e.agent = e.newAgent(&o)
	return e, h
}

const tokenPath = "/oauth/token"

// Item 3, PA-4.2-13: an expires_in too large for time.Duration overflowed
// into an expiry in the past, so every API call asked for a new token.
func TestAttackExpiresInOverflow(t *testing.T) {
	for _, v := range []any{json.Number("9223372037"), json.Number("99999999999999999999"), json.Number("1e30")} {
		t.Run(fmt.Sprint(v), func(t *testing.T) {
			e, h := hostileEnv(t, nil, nil)
			h.OnJSON(tokenPath, func(m map[string]any) { m["expires_in"] = v })
			s := e.session("alice")
			for range 3 {
				if st, _ := e.get(s, "/products"); st != 200 {
					t.Fatalf("GET status %d", st)
				}
			}
			if n := len(grantsOf(e, "urn:ietf:params:oauth:grant-type:jwt-bearer")); n != 1 {
				t.Fatalf("%d token requests for one Session and 3 calls, want 1", n)
			}
			tok, err := s.Token(ctx, nil)
			if err != nil || !tok.Expiry.After(e.srv.Clock().Now().Add(24*time.Hour)) {
				t.Fatalf("token expiry %v (%v): clamped to 30 days expected", tok.Expiry, err)
			}
		})
	}
	// PA-4.2-13 still: missing, non-positive or non-numeric is an error.
	for _, v := range []any{nil, json.Number("0"), json.Number("-5"), "3600"} {
		e, h := hostileEnv(t, nil, nil)
		h.OnJSON(tokenPath, func(m map[string]any) {
			if v == nil {
				delete(m, "expires_in")
			} else {
				m["expires_in"] = v
			}
		})
		_, err := e.agent.Company(ctx, "example.test")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.company("example.test").Session(ctx, "alice", nil); !errors.Is(err, poppy.ErrInvalidTokenResponse) {
			t.Fatalf("expires_in %v: %v, want ErrInvalidTokenResponse", v, err)
		}
	}
}

// Item 3, PA-4.4-12: the same overflow in refresh_token_expires_in made a
// fresh Account Token look expired at once.
func TestAttackAccountTokenLifetimeOverflow(t *testing.T) {
	e, h := hostileEnv(t, nil, nil)
	huge := func(m map[string]any) {
		if _, ok := m["refresh_token"]; ok {
			m["refresh_token_expires_in"] = json.Number("9223372037")
		}
	}
	h.OnJSON(tokenPath, huge)
	h.OnJSON("/poppy/sign-in", huge)
	s := signedIn(t, e, "default")
	at, err := s.AccountToken(ctx, "")
	if err != nil {
		t.Fatalf("AccountToken after a sign-in with a huge refresh_token_expires_in: %v", err)
	}
	if !at.Expiry.After(e.srv.Clock().Now().Add(365 * 24 * time.Hour)) {
		t.Fatalf("Account Token expiry %v", at.Expiry)
	}
}

// Item 3, PA-4.3-27: a Retry-After too long for an integer was taken as
// absent, and the request retried after 1 s.
func TestAttackRetryAfterHuge(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	before := len(sdkRequests(e.srv, poppytest.EndpointAPI))
	e.srv.Faults().RateLimit(poppytest.EndpointAPI, 1, "99999999999999999999")
	resp, err := s.HTTPClient().Get(e.srv.EndpointURL(poppytest.EndpointAPI) + "/products")
	if err != nil {
		t.Fatal(err)
	}
	rerr := poppy.ResponseError(resp)
	resp.Body.Close()
	var pe *poppy.Error
	if resp.StatusCode != 429 || !errors.As(rerr, &pe) || pe.RetryAfter < 2*time.Minute {
		t.Fatalf("status %d, error %v: want the 429 back with its (clamped) Retry-After", resp.StatusCode, rerr)
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointAPI)) - before; n != 1 {
		t.Fatalf("%d requests: a wait longer than MaxRetryWait must not be retried", n)
	}
}

// PA-4.3-27, PA-4.3-28: an HTTP-date so far ahead that the wait saturates
// time.Duration was read as absent (an overflow), and the request retried
// after 1 s.
func TestAttackRetryAfterFarDate(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	before := len(sdkRequests(e.srv, poppytest.EndpointAPI))
	e.srv.Faults().RateLimit(poppytest.EndpointAPI, 1, "Fri, 31 Dec 9999 23:59:59 GMT")
	resp, err := s.HTTPClient().Get(e.srv.EndpointURL(poppytest.EndpointAPI) + "/products")
	if err != nil {
		t.Fatal(err)
	}
	rerr := poppy.ResponseError(resp)
	resp.Body.Close()
	var pe *poppy.Error
	if resp.StatusCode != 429 || !errors.As(rerr, &pe) || pe.RetryAfter < 2*time.Minute {
		t.Fatalf("status %d, error %v: want the 429 back with its (clamped) Retry-After", resp.StatusCode, rerr)
	}
	if n := len(sdkRequests(e.srv, poppytest.EndpointAPI)) - before; n != 1 {
		t.Fatalf("%d requests: a wait longer than MaxRetryWait must not be retried", n)
	}
}

// Item 3 and 1 (cache max-age), PA-3-04, PA-3.2-08: max-age values that
// overflow time.Duration, or any int, are a day at most, not "revalidate
// every time" nor "forever".
func TestAttackCacheMaxAgeOverflow(t *testing.T) {
	e := newEnv(t, &poppytest.Options{
		Discovery: poppytest.DiscoveryOptions{PoppyCacheControl: "max-age=9223372036854775807", MetadataCacheControl: "max-age=99999999999999999999"},
	}, nil)
	gets := func() (int, int) {
		return len(sdkRequests(e.srv, poppytest.EndpointPoppyJSON)), len(sdkRequests(e.srv, poppytest.EndpointMetadata))
	}
	e.company("example.test")
	e.srv.Clock().Advance(time.Hour)
	e.company("example.test")
	if p, m := gets(); p != 1 || m != 1 {
		t.Fatalf("%d poppy.json and %d metadata GETs within an hour, want 1 and 1", p, m)
	}
	e.srv.Clock().Advance(24 * time.Hour)
	e.company("example.test")
	if p, m := gets(); p != 2 || m != 2 {
		t.Fatalf("%d poppy.json and %d metadata GETs after 25 h, want 2 and 2 (max-age is clamped to a day)", p, m)
	}
}

// quietLog discards a test server's log of the handshakes the tests make
// fail.
var quietLog = log.New(io.Discard, "", 0)

// hostileHeader is 9 MiB of "a,": a challenge list of 4.7 million schemes.
var hostileHeader = sync.OnceValue(func() string { return strings.Repeat("a,", 9<<19) })

// allocated returns the bytes fn allocates.
func allocated(fn func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	fn()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// Item 2: parsing a 9 MiB WWW-Authenticate cost ~540 MiB of heap. A
// caller-supplied client does not cap headers, so the parser must bound
// itself: one pass over at most 8 KiB, output bounded.
func TestAttackWWWAuthenticateHeap(t *testing.T) {
	hdr := hostileHeader()
	resp := &http.Response{StatusCode: 401, Header: http.Header{"Www-Authenticate": {hdr}}, Body: http.NoBody, Request: &http.Request{}}
	n := allocated(func() { _ = poppy.ResponseError(resp) })
	t.Logf("ResponseError on a 9 MiB WWW-Authenticate allocated %d bytes", n)
	if n > 256<<10 {
		t.Fatalf("ResponseError allocated %d bytes for one hostile header, want under 256 KiB", n)
	}

	// The token endpoint's path: a 401 with the header, through the SDK.
	e, h := hostileEnv(t, nil, nil)
	h.On(tokenPath, func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		drainClose(resp)
		return testenv.Answer(req, 401, http.Header{"Www-Authenticate": {hdr}, "Content-Type": {"application/json"}}, `{"error":"invalid_client"}`), nil
	})
	c := e.company("example.test")
	var err error
	n = allocated(func() { _, err = c.Session(ctx, "alice", nil) })
	t.Logf("a Session start answered with a 9 MiB WWW-Authenticate allocated %d bytes", n)
	if !errors.Is(err, poppy.ErrInvalidClient) {
		t.Fatalf("Session: %v", err)
	}
	if n > 2<<20 {
		t.Fatalf("the token endpoint path allocated %d bytes for one hostile header, want under 2 MiB", n)
	}
}

func drainClose(resp *http.Response) {
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

// Item 2: one 403 named 1.6 MB of scopes, and its error string held them
// all. Error.Scope is bounded.
func TestAttackScopeBound(t *testing.T) {
	scope := strings.Repeat("poppy:read ", 150_000)
	resp := &http.Response{StatusCode: 403, Body: http.NoBody, Request: &http.Request{},
		Header: http.Header{"Www-Authenticate": {`DPoP error="insufficient_scope", scope="` + scope + `"`}}}
	err := poppy.ResponseError(resp)
	var pe *poppy.Error
	if !errors.As(err, &pe) || pe.Code != "insufficient_scope" {
		t.Fatalf("%v", err)
	}
	t.Logf("a 403 naming %d bytes of scopes: %d scopes kept, error string of %d bytes", len(scope), len(pe.Scope), len(err.Error()))
	if len(pe.Scope) > 64 || len(err.Error()) > 16<<10 {
		t.Fatalf("%d scopes, error string of %d bytes", len(pe.Scope), len(err.Error()))
	}
}

// Item 2: the SDK's own client refuses response headers over 64 KiB
// before anything parses them.
func TestAttackHeaderCapDefaultClient(t *testing.T) {
	if n, _, _ := poppy.DefaultTransportLimits(); n != 64<<10 {
		t.Fatalf("MaxResponseHeaderBytes %d", n)
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Www-Authenticate", strings.Repeat("a,", 1<<19))
		w.WriteHeader(401)
	}))
	defer srv.Close()
	c := poppy.GuardedClient(poppy.GuardOptions{Roots: rootsOf(srv), AllowLoopback: true})
	defer c.CloseIdleConnections()
	resp, err := c.Get(srv.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("a 1 MiB header was accepted (status %d)", resp.StatusCode)
	}
	if !strings.Contains(err.Error(), "header") {
		t.Fatalf("error %v", err)
	}
}

func rootsOf(srv *httptest.Server) *x509.CertPool {
	return srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
}

// Item 4: a 403 whose JSON body is over 64 KiB reached the caller empty.
// Checked on b9fcb33 for every path: the Session transport (the body
// whole, the code found in its head), the token endpoint (the Company's
// error) and discovery (the status).
func TestAttackLargeErrorBody(t *testing.T) {
	pad := strings.Repeat("a", 200<<10)
	big := `{"error":"sign_in_required","error_description":"sign in","pad":"` + pad + `"}`
	e, h := hostileEnv(t, nil, nil)
	h.On("/orders", func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
		return testenv.Answer(req, 403, http.Header{"Content-Type": {"application/json"}}, big), nil
	})
	s := e.session("alice")
	resp, err := s.HTTPClient().Get(e.srv.EndpointURL(poppytest.EndpointAPI) + "/orders")
	if err != nil {
		t.Fatal(err)
	}
	rerr := poppy.ResponseError(resp)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != big {
		t.Fatalf("body of %d bytes reached the caller, want %d", len(b), len(big))
	}
	if !errors.Is(rerr, poppy.ErrSignInRequired) {
		t.Fatalf("ResponseError %v: the code in the body's first 64 KiB", rerr)
	}

	// The token endpoint: the error in a 200 KiB body.
	e, h = hostileEnv(t, nil, nil)
	h.On(tokenPath, func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
		return testenv.Answer(req, 400, http.Header{"Content-Type": {"application/json"}}, `{"error":"invalid_grant","pad":"`+pad+`"}`), nil
	})
	if _, err := e.company("example.test").Session(ctx, "alice", nil); !errors.Is(err, poppy.ErrInvalidGrant) {
		t.Fatalf("token endpoint: %v", err)
	}
	// Discovery: the status of a 403 with a large body.
	e, h = hostileEnv(t, nil, nil)
	h.On("/.well-known/poppy.json", func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
		return testenv.Answer(req, 403, http.Header{"Content-Type": {"application/json"}}, big), nil
	})
	if _, err := e.agent.Company(ctx, "example.test"); err == nil || !strings.Contains(err.Error(), "HTTP 403") {
		t.Fatalf("discovery: %v", err)
	}
}

// Item 5: one caller's cancelled ctx failed every caller waiting on the
// same discovery.
func TestAttackSharedDiscoveryCancel(t *testing.T) {
	e, h := hostileEnv(t, nil, nil)
	arrived := make(chan struct{})
	var n atomic.Int32
	h.On("/.well-known/poppy.json", func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
		if n.Add(1) == 1 {
			close(arrived)
			<-req.Context().Done() // a silent Company, until the first caller gives up
			return nil, req.Context().Err()
		}
		return next.RoundTrip(req)
	})
	ctxA, cancelA := context.WithCancel(ctx)
	errA := make(chan error, 1)
	go func() {
		_, err := e.agent.Company(ctxA, "example.test")
		errA <- err
	}()
	<-arrived
	errB := make(chan error, 1)
	go func() {
		_, err := e.agent.Company(ctx, "example.test") // no deadline at all
		errB <- err
	}()
	// Let B join A's fetch. Should it not have yet, it fetches by itself
	// and the test still holds.
	time.Sleep(50 * time.Millisecond)
	cancelA()
	if err := <-errA; !errors.Is(err, context.Canceled) {
		t.Fatalf("first caller: %v", err)
	}
	if err := <-errB; err != nil {
		t.Fatalf("the second caller, whose ctx never ended, got: %v", err)
	}
}

// Item 6: the default client waits 30 s for response headers; a ctx from
// WithResponseHeaderTimeout changes or lifts that wait per request.
func TestAttackSilentServerHeaderTimeout(t *testing.T) {
	if _, _, d := poppy.DefaultTransportLimits(); d != 30*time.Second {
		t.Fatalf("default header timeout %v", d)
	}
	release := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/silent":
			select { // never answers
			case <-r.Context().Done():
			case <-release:
			}
		case "/slow":
			time.Sleep(300 * time.Millisecond)
			io.WriteString(w, "ok")
		}
	}))
	defer srv.Close()
	defer close(release)
	c := poppy.GuardedClient(poppy.GuardOptions{Roots: rootsOf(srv), AllowLoopback: true, HeaderTimeout: 100 * time.Millisecond})
	defer c.CloseIdleConnections()
	bound, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()

	req, _ := http.NewRequestWithContext(bound, http.MethodGet, srv.URL+"/silent", nil)
	if _, err := c.Do(req); !errors.Is(err, poppy.ErrResponseHeaderTimeout) {
		t.Fatalf("silent server: %v, want ErrResponseHeaderTimeout", err)
	}
	// A long poll opts out: it gets its answer however late.
	req, _ = http.NewRequestWithContext(poppy.WithResponseHeaderTimeout(bound, 0), http.MethodGet, srv.URL+"/slow", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("opted out: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Fatalf("body %q", b)
	}
	// And a ctx may set its own, shorter wait on a client with a long one.
	long := poppy.GuardedClient(poppy.GuardOptions{Roots: rootsOf(srv), AllowLoopback: true, HeaderTimeout: time.Hour})
	defer long.CloseIdleConnections()
	req, _ = http.NewRequestWithContext(poppy.WithResponseHeaderTimeout(bound, 50*time.Millisecond), http.MethodGet, srv.URL+"/silent", nil)
	if _, err := long.Do(req); !errors.Is(err, poppy.ErrResponseHeaderTimeout) {
		t.Fatalf("per-request timeout: %v", err)
	}
}

// Item 7: %+v, %s or slog of keystore.Memory, and %s of the *Agent holding
// it, printed the DPoP private key, the tokens and the PKCE verifier.
// keystore/sqlitestore's TestAttackSecretsInFormatting runs the same on a
// sealed SQLite store.
func TestAttackSecretsInFormatting(t *testing.T) {
	testenv.SecretsInFormatting(t, keystore.NewMemory())
}

// Item 11: DPoP proof jti was 96 bits; an independent Company demands 128
// (PA-4.3-05: a fresh proof, with its own jti, for every request).
func TestAttackDPoPJTI128(t *testing.T) {
	e := newEnv(t, nil, nil)
	s := e.session("alice")
	e.get(s, "/products")
	n := 0
	for _, r := range sdkRequests(e.srv, poppytest.EndpointToken, poppytest.EndpointAPI) {
		if r.Proof == nil {
			continue
		}
		jti, _ := r.Proof.Claims["jti"].(string)
		b, err := base64.RawURLEncoding.DecodeString(jti)
		if err != nil || len(b) < 16 {
			t.Fatalf("proof jti %q: %d bytes, want 16 (128 bits)", jti, len(b))
		}
		n++
	}
	if n < 2 {
		t.Fatalf("%d proofs seen", n)
	}
}

// keepAlive is what a client sees of a server with a keep-alive timeout
// (Node's 5 s default): a pooled connection idle for at least timeout, by
// the fake clock, is closed by the server just as the next request
// arrives, before any answer. It runs between the client's transport and
// the fake as a byte pump, so TLS stays end to end; the connection is
// HTTP/1.1, as with Node.
type keepAlive struct {
	clock   *poppytest.OffsetClock
	timeout time.Duration
	closed  atomic.Int32 // connections closed that way
}

func (k *keepAlive) transport(base *http.Transport) *http.Transport {
	t := base.Clone()
	t.ForceAttemptHTTP2 = false
	t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	t.TLSClientConfig.NextProtos = []string{"http/1.1"}
	t.IdleConnTimeout = 0 // the client keeps its connections; the server decides
	dial := t.DialContext
	t.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		up, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		client, mine := net.Pipe()
		go k.pump(mine, up)
		return client, nil
	}
	return t
}

func (k *keepAlive) pump(c, up net.Conn) {
	var mu sync.Mutex
	last := k.clock.Now() // the last byte the server sent
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				mu.Lock()
				last = k.clock.Now()
				mu.Unlock()
				if _, werr := c.Write(buf[:n]); werr != nil {
					up.Close()
					return
				}
			}
			if err != nil {
				c.Close()
				return
			}
		}
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			up.Close()
			return
		}
		mu.Lock()
		idle := k.clock.Now().Sub(last)
		mu.Unlock()
		if idle >= k.timeout {
			// The keep-alive timer fired as the request arrived: the
			// request is never read, the connection closes.
			k.closed.Add(1)
			c.Close()
			up.Close()
			return
		}
		if _, err := up.Write(buf[:n]); err != nil {
			c.Close()
			return
		}
	}
}

// Item 14: a token POST on a pooled keep-alive connection failed with EOF
// when the server closed it at the same instant (1 in 89 Device polls at
// 6 s against Node). A jwt-bearer renewal and device_code polls at 5 and
// 6 s of idle now go through: the SDK sends them again once, on a new
// connection, with a fresh assertion and proof.
func TestAttackKeepAliveEOF(t *testing.T) {
	e := newEnv(t, &poppytest.Options{SignIn: poppytest.SignInPolicy{DeviceInterval: 5 * time.Second}}, nil)
	ka := &keepAlive{clock: e.srv.Clock(), timeout: 5 * time.Second}
	e.agent = e.newAgent(&poppy.AgentOptions{HTTPClient: &http.Client{Transport: ka.transport(e.srv.Transport())}})
	s := e.session("alice")

	// Session renewals after 5 s and 6 s idle (jwt-bearer).
	for _, idle := range []time.Duration{5 * time.Second, 6 * time.Second, 5 * time.Second, 6 * time.Second} {
		e.srv.Clock().Advance(idle)
		if _, err := s.Token(ctx, &poppy.TokenOptions{Renew: true}); err != nil {
			t.Fatalf("renewal after %v idle: %v", idle, err)
		}
	}
	// Device polls 5 s apart, and 10 s after a slow_down; the User
	// approves after 12 polls.
	e.srv.SignIn().HoldDevicePolls(10)
	e.srv.SignIn().ScriptDevicePolls("slow_down")
	show := signin.PrompterFuncs{ShowCodeFunc: func(ctx context.Context, p *signin.CodePrompt) error {
		_, err := e.srv.Browse(ctx, p.VerificationURIComplete)
		return err
	}}
	if _, err := signin.Device(ctx, s, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, show); err != nil {
		t.Fatalf("Device Sign-In with polls at 5-10 s idle: %v", err)
	}
	polls := len(grantsOf(e, "urn:ietf:params:oauth:grant-type:device_code"))
	t.Logf("%d connections closed by the keep-alive timeout; %d polls, 0 failures", ka.closed.Load(), polls)
	if ka.closed.Load() < 10 {
		t.Fatalf("only %d connections were closed under the requests: the test didn't exercise the race", ka.closed.Load())
	}
	// The SDK's own client closes idle connections before such a server
	// does.
	if _, idle, _ := poppy.DefaultTransportLimits(); idle >= 5*time.Second {
		t.Fatalf("IdleConnTimeout %v is not below the common 5 s keep-alive timeout", idle)
	}

	// A rotating refresh that went out is not sent again by the SDK (the
	// Company may have rotated the token): the renewal fails, the Account
	// Token is kept, and the next renewal, on a new connection, works.
	before := ka.closed.Load()
	e.srv.Clock().Advance(6 * time.Second)
	refreshes := len(grantsOf(e, "refresh_token"))
	_, err := s.Token(ctx, &poppy.TokenOptions{Renew: true})
	t.Logf("refresh after 6 s idle: %v", err)
	if err == nil {
		if ka.closed.Load() > before {
			t.Fatal("a refresh closed under its request was sent again")
		}
	} else if !strings.Contains(err.Error(), "EOF") {
		t.Fatalf("refresh on a closed connection: %v", err)
	}
	if n := len(grantsOf(e, "refresh_token")) - refreshes; n > 1 {
		t.Fatalf("%d refresh requests reached the Company", n)
	}
	if _, err := s.AccountToken(ctx, ""); err != nil {
		t.Fatalf("the Account Token was lost: %v", err)
	}
	if _, err := s.Token(ctx, &poppy.TokenOptions{Renew: true}); err != nil {
		t.Fatalf("the next renewal: %v", err)
	}
}

// answerDNS is a DNS server over a stream connection (as Go's resolver
// uses when Dial returns one) that answers names from a table: A and AAAA
// records, NXDOMAIN for names it doesn't know.
func answerDNS(c net.Conn, table map[string]string) {
	defer c.Close()
	for {
		var l [2]byte
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		q := make([]byte, int(l[0])<<8|int(l[1]))
		if _, err := io.ReadFull(c, q); err != nil || len(q) < 17 {
			return
		}
		i := 12
		var labels []string
		for i < len(q) && q[i] != 0 {
			n := int(q[i])
			if i+1+n > len(q) {
				return
			}
			labels = append(labels, string(q[i+1:i+1+n]))
			i += 1 + n
		}
		i++
		if i+4 > len(q) {
			return
		}
		qtype := int(q[i])<<8 | int(q[i+1])
		question := q[12 : i+4]
		name := strings.ToLower(strings.Join(labels, "."))
		var rdata []byte
		addr, known := table[name]
		if ip := net.ParseIP(addr); ip != nil {
			if v4 := ip.To4(); v4 != nil && qtype == 1 {
				rdata = v4
			} else if v4 == nil && qtype == 28 {
				rdata = ip.To16()
			}
		}
		flags := []byte{0x81, 0x80}
		if !known {
			flags[1] |= 3 // NXDOMAIN
		}
		an := 0
		if rdata != nil {
			an = 1
		}
		msg := append([]byte{q[0], q[1], flags[0], flags[1], 0, 1, 0, byte(an), 0, 0, 0, 0}, question...)
		if rdata != nil {
			msg = append(msg, 0xc0, 0x0c, byte(qtype>>8), byte(qtype), 0, 1, 0, 0, 0, 60, 0, byte(len(rdata)))
			msg = append(msg, rdata...)
		}
		if _, err := c.Write(append([]byte{byte(len(msg) >> 8), byte(len(msg))}, msg...)); err != nil {
			return
		}
	}
}

func fakeResolver(table map[string]string) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
		c, s := net.Pipe()
		go answerDNS(s, table)
		return c, nil
	}}
}

// countingTLS is a TLS server on loopback that counts the connections it
// accepts: the internal service a hostile Company aims the agent at.
func countingTLS(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "internal") }))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Config.ErrorLog = quietLog
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &conns
}

// SSRF: a public name that resolves to a private address (DNS rebinding,
// or a Company's own record) is refused at connect time, on the resolved
// address; the service behind it never sees a connection.
func TestSSRFResolvedAddressRefused(t *testing.T) {
	srv, conns := countingTLS(t)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	table := map[string]string{
		"api.attacker.example":      "127.0.0.1",
		"metadata.attacker.example": "169.254.169.254",
		"intranet.attacker.example": "10.0.0.7",
		"v6.attacker.example":       "fd00::7",
	}
	c := poppy.GuardedClient(poppy.GuardOptions{Resolver: fakeResolver(table), Roots: rootsOf(srv)})
	defer c.CloseIdleConnections()
	for name := range table {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		req, _ := http.NewRequestWithContext(dctx, http.MethodGet, "https://"+name+":"+port+"/", nil)
		_, err := c.Do(req)
		cancel()
		if !errors.Is(err, poppy.ErrForbiddenAddress) {
			t.Fatalf("%s (%s): %v, want ErrForbiddenAddress", name, table[name], err)
		}
	}
	if n := conns.Load(); n != 0 {
		t.Fatalf("the internal service saw %d connections", n)
	}
	// The same client with the address allowed reaches it (the resolver
	// works, and only the guard stood in the way).
	allowed := poppy.GuardedClient(poppy.GuardOptions{Resolver: fakeResolver(table), Roots: rootsOf(srv), AllowLoopback: true})
	defer allowed.CloseIdleConnections()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://api.attacker.example:"+port+"/", nil)
	if resp, err := allowed.Do(req); err == nil {
		resp.Body.Close()
	}
	if conns.Load() == 0 {
		t.Fatal("with loopback allowed the service saw no connection: the refusal above proves nothing")
	}
}

// SSRF: the address classes the guard refuses, and what AllowNetworks and
// UnsafeAllowLoopbackHTTP relax.
func TestSSRFAddressClasses(t *testing.T) {
	for addr, public := range map[string]bool{
		"93.184.215.14": true, "2606:4700::1111": true, "8.8.8.8": true,
		"127.0.0.1": false, "::1": false, "10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false,
		"169.254.169.254": false, "fe80::1": false, "fc00::1": false, "fd12::1": false, "100.64.0.1": false,
		"0.0.0.0": false, "::": false, "224.0.0.1": false, "255.255.255.255": false, "198.18.0.1": false,
		"::ffff:10.0.0.1": false, "64:ff9b::a9fe:a9fe": false, "64:ff9b::808:808": true, "fd00:ec2::254": false,
	} {
		ip := netip.MustParseAddr(addr)
		if got := poppy.IsPublicAddr(ip.Unmap()); got != public {
			t.Errorf("%s: public %v, want %v", addr, got, public)
		}
	}
}

// SSRF: an Agent with the default client refuses a Company on a private
// address from the first request; UnsafeAllowLoopbackHTTP and
// AllowNetworks relax it.
func TestSSRFDefaultAgent(t *testing.T) {
	srv, conns := countingTLS(t)
	id, _ := newIdentity(t, nil)
	a, err := poppy.NewAgent(id, nil)
	if err != nil {
		t.Fatal(err)
	}
	host := srv.Listener.Addr().String() // 127.0.0.1:port
	if _, err := a.Company(ctx, host); !errors.Is(err, poppy.ErrForbiddenAddress) {
		t.Fatalf("Company(%s) with the default client: %v, want ErrForbiddenAddress", host, err)
	}
	if conns.Load() != 0 {
		t.Fatal("the loopback service saw a connection")
	}
	for _, o := range []*poppy.AgentOptions{
		{UnsafeAllowLoopbackHTTP: true},
		{AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
	} {
		a, err := poppy.NewAgent(id, o)
		if err != nil {
			t.Fatal(err)
		}
		_, err = a.Company(ctx, host) // the test certificate isn't trusted: a TLS error, after connecting
		if errors.Is(err, poppy.ErrForbiddenAddress) {
			t.Fatalf("%+v: %v", o, err)
		}
		a.HTTPClient().CloseIdleConnections()
	}
	if conns.Load() != 2 {
		t.Fatalf("%d connections with the guard relaxed, want 2", conns.Load())
	}
}

// connectProxy is an HTTP proxy on loopback that records CONNECT targets
// and refuses them all.
func connectProxy(t *testing.T) (*httptest.Server, func() []string) {
	var mu sync.Mutex
	var seen []string
	p := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.Host)
		mu.Unlock()
		http.Error(w, "no", http.StatusBadGateway)
	}))
	t.Cleanup(p.Close)
	return p, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

// SSRF with a proxy from the environment: the operator's loopback proxy is
// dialed (the operator chose it), a literal private target is not sent to
// it, and a direct request to the proxy's own address is refused.
func TestSSRFProxy(t *testing.T) {
	p, seen := connectProxy(t)
	pu, _ := url.Parse(p.URL)
	proxyFn := func(req *http.Request) (*url.URL, error) {
		if req.URL.Host == pu.Host { // NO_PROXY for the proxy itself
			return nil, nil
		}
		return pu, nil
	}
	c := poppy.GuardedClient(poppy.GuardOptions{Proxy: proxyFn})
	defer c.CloseIdleConnections()
	get := func(u string) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get("https://api.example.com/"); errors.Is(err, poppy.ErrForbiddenAddress) {
		t.Fatalf("through the operator's loopback proxy: %v", err)
	}
	if got := seen(); len(got) != 1 || got[0] != "CONNECT api.example.com:443" {
		t.Fatalf("proxy saw %v", got)
	}
	for _, u := range []string{"https://169.254.169.254/latest/meta-data/", "https://[fd00::1]/", "https://localhost/", "http://" + pu.Host + "/"} {
		if err := get(u); !errors.Is(err, poppy.ErrForbiddenAddress) {
			t.Fatalf("%s: %v, want ErrForbiddenAddress", u, err)
		}
	}
	if got := seen(); len(got) != 1 {
		t.Fatalf("proxy saw %v: a refused request reached it", got)
	}
}

// Issue 20, sections 3 and 4: where tokens may go, and the SSRF guard
// through a proxy and inside IPv6 addresses. Each test below failed on
// cd6a6e5, the code the issue was filed against; its comment says how.

// wire is a transport in front of the fake that records every request the
// agent put on the wire, and answers itself, as another server would, for
// the Company's host names on port 8443, which no document names.
type wire struct {
	base http.RoundTripper
	mu   sync.Mutex
	reqs []*http.Request
}

func (w *wire) RoundTrip(r *http.Request) (*http.Response, error) {
	w.mu.Lock()
	w.reqs = append(w.reqs, r)
	w.mu.Unlock()
	if r.URL.Port() == "8443" {
		return testenv.Answer(r, http.StatusOK, nil, "another server"), nil
	}
	return w.base.RoundTrip(r)
}

func (w *wire) sent() []*http.Request {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.reqs)
}

// wireEnv is hostileEnv with a wire in front of the hostile transport.
func wireEnv(t *testing.T, srvOpts *poppytest.Options) (*env, *testenv.Hostile, *wire) {
	t.Helper()
	e, h := hostileEnv(t, srvOpts, nil)
	w := &wire{base: h}
	e.agent = e.newAgent(&poppy.AgentOptions{HTTPClient: &http.Client{Transport: w}})
	return e, h, w
}

// Section 3: a Session Token and its proof went to
// https://api.example.test:8443, a port no document names, because the
// transport compared host names only. Tokens go only to the origins
// (scheme, host, port) the Company's documents name, and to https on 443
// at organization.domain and its subdomains: not to another port of a
// named host, not after a redirect there, and no client assertion goes to
// a device authorization endpoint on such a port. On cd6a6e5 the first GET
// was sent with the token ("sent to https://api.example.test:8443/products
// with DPoP ...").
func TestAttackTokenToUnnamedPort(t *testing.T) {
	e, h, w := wireEnv(t, nil)
	s := e.session("alice")
	to8443 := func() []string {
		var out []string
		for _, r := range w.sent() {
			if r.URL.Port() == "8443" {
				out = append(out, r.URL.String()+" with "+strings.Fields(r.Header.Get("Authorization") + " none")[0])
			}
		}
		return out
	}
	for _, u := range []string{
		"https://api.example.test:8443/products", "https://example.test:8443/", "https://shop.example.test:8443/x",
		"https://API.example.test.:8443/products", "https://api.example.test:08443/products",
	} {
		resp, err := s.HTTPClient().Get(u)
		if err == nil {
			drainClose(resp)
		}
		if !errors.Is(err, poppy.ErrForeignHost) {
			t.Errorf("GET %s: %v, want ErrForeignHost", u, err)
		}
		if got := to8443(); len(got) > 0 {
			t.Fatalf("sent to %v", got)
		}
	}
	// The Company's own API redirects there.
	h.On("/moved", func(req *http.Request, _ http.RoundTripper) (*http.Response, error) {
		return testenv.Answer(req, http.StatusFound, http.Header{"Location": {"https://api.example.test:8443/products"}}, ""), nil
	})
	if resp, err := s.HTTPClient().Get(e.srv.EndpointURL(poppytest.EndpointAPI) + "/moved"); !errors.Is(err, poppy.ErrForeignHost) {
		if err == nil {
			drainClose(resp)
		}
		t.Fatalf("a redirect to port 8443: %v, want ErrForeignHost", err)
	}
	// Device Sign-In's client-authenticated POST, to an endpoint the
	// metadata puts on that port.
	e2, h2, w2 := wireEnv(t, nil)
	h2.OnJSON("/.well-known/oauth-authorization-server", func(m map[string]any) {
		m["device_authorization_endpoint"] = "https://auth.example.test:8443/device"
	})
	s2 := e2.session("bob")
	shown := false
	_, err := signin.Device(ctx, s2, &poppy.SignInOptions{Scopes: []string{"poppy:read"}},
		signin.PrompterFuncs{ShowCodeFunc: func(context.Context, *signin.CodePrompt) error { shown = true; return nil }})
	if !errors.Is(err, poppy.ErrForeignHost) || shown {
		t.Fatalf("Device Sign-In at port 8443: %v (code shown %v), want ErrForeignHost", err, shown)
	}
	w = w2
	if got := to8443(); len(got) > 0 {
		t.Fatalf("sent to %v", got)
	}
	// The named origin, however spelled, still gets its requests.
	for _, u := range []string{"https://api.example.test:443/products", "https://API.Example.Test/products"} {
		resp, err := s.HTTPClient().Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		drainClose(resp)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: HTTP %d", u, resp.StatusCode)
		}
	}
}

// pctAll percent-encodes every byte of s; upper picks the hex case.
func pctAll(s string, upper bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if upper {
			fmt.Fprintf(&b, "%%%02X", s[i])
		} else {
			fmt.Fprintf(&b, "%%%02x", s[i])
		}
	}
	return b.String()
}

// Section 3, spec 4.3 (PA-4.3-26): a token in a URL was sent, and after
// the Company's invalid_token the SDK renewed and sent the same URL again
// (3 requests). A request whose URL carries any token the Session holds,
// in any part and any encoding a server would decode, is refused with
// ErrTokenInURL before anything is sent, and the error repeats no token.
// On cd6a6e5 the first URL was sent ("query: 3 requests sent").
func TestAttackTokenInURL(t *testing.T) {
	e, _, w := wireEnv(t, nil)
	s := e.session("alice")
	tok, err := s.Token(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	bearer, err := s.Token(ctx, &poppy.TokenOptions{Bearer: true, Resource: e.srv.EndpointURL(poppytest.EndpointMCP)})
	if err != nil {
		t.Fatal(err)
	}
	replaced := tok.Value()
	if _, err := s.Token(ctx, &poppy.TokenOptions{Renew: true}); err != nil {
		t.Fatal(err)
	}
	cur, _ := s.Token(ctx, nil)
	// The Account Token of a signed-in Session, read from the keystore
	// (the SDK never hands it out).
	signed := signedIn(t, e, "signed")
	b, err := e.store.Get(ctx, keystore.Key{Kind: keystore.KindAccountToken, User: "alice", Issuer: e.srv.Issuer(), ID: poppy.DefaultAccount})
	if err != nil {
		t.Fatal(err)
	}
	var ar struct {
		Token string `json:"refresh_token"`
	}
	if json.Unmarshal(b, &ar) != nil || ar.Token == "" {
		t.Fatalf("no Account Token in the store: %s", b)
	}
	api := e.srv.EndpointURL(poppytest.EndpointAPI)
	v := cur.Value()
	cases := []struct {
		name, url string
		s         *poppy.Session
		secret    string
	}{
		{"query", api + "/products?access_token=" + v, s, v},
		{"query, escaped", api + "/products?access_token=" + url.QueryEscape(v), s, v},
		{"query, every byte encoded", api + "/products?t=" + pctAll(v, true), s, v},
		{"query, lower-case hex", api + "/products?t=" + pctAll(v, false), s, v},
		{"query, encoded twice", api + "/products?t=" + strings.ReplaceAll(pctAll(v, true), "%", "%25"), s, v},
		{"query, %u", api + "/products?t=" + strings.ReplaceAll(pctAll(v, true), "%", "%u00"), s, v},
		{"query key", api + "/products?" + v, s, v},
		{"path", api + "/products/" + v, s, v},
		{"path, encoded", api + "/products/" + pctAll(v, true), s, v},
		{"fragment", api + "/products#" + v, s, v},
		{"userinfo", "https://x:" + url.PathEscape(v) + "@api.example.test/products", s, v},
		{"host label, lower case", "https://" + strings.ToLower(v) + ".example.test/", s, v},
		{"Bearer token", api + "/products?token=" + bearer.Value(), s, bearer.Value()},
		{"token a renewal replaced", api + "/products?token=" + replaced, s, replaced},
		{"Account Token", api + "/orders?refresh_token=" + url.QueryEscape(ar.Token), signed, ar.Token},
	}
	for _, c := range cases {
		before := len(w.sent())
		resp, err := c.s.HTTPClient().Get(c.url)
		if err == nil {
			drainClose(resp)
		}
		if !errors.Is(err, poppy.ErrTokenInURL) {
			t.Errorf("%s: %v, want ErrTokenInURL", c.name, err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.url, nil)
		if req == nil {
			t.Fatalf("%s: the URL doesn't parse", c.name)
		}
		_, err = c.s.Do(req)
		if !errors.Is(err, poppy.ErrTokenInURL) || strings.Contains(err.Error(), c.secret) {
			t.Errorf("%s: Session.Do: %v, want ErrTokenInURL without the token", c.name, err)
		}
		if n := len(w.sent()) - before; n != 0 {
			t.Errorf("%s: %d requests sent", c.name, n)
		}
	}
	for _, v := range e.srv.Violations() {
		if v.Rule == "PA-4.3-26" || v.Rule == "PA-4.8-11" {
			t.Errorf("the fake saw a token in a URL: %v", v)
		}
	}
	// An ordinary request of the same Session goes out.
	if st, _ := e.get(s, "/products?q="+url.QueryEscape(v[:4])); st != http.StatusOK {
		t.Fatalf("GET /products: %d", st)
	}
}

// Section 4: through HTTPS_PROXY, the guard refused only canonical
// literal internal addresses; every other spelling a resolver reads as one
// reached the proxy as a CONNECT, as did localhost's subdomains and IPv6
// addresses that carry an internal IPv4 address. None reaches the proxy
// now; a public address, however spelled, and a DNS name still do. On
// cd6a6e5: "https://2852039166/: <nil> error from the proxy, want
// ErrForbiddenAddress".
func TestSSRFProxyNumericHosts(t *testing.T) {
	p, seen := connectProxy(t)
	pu, _ := url.Parse(p.URL)
	c := poppy.GuardedClient(poppy.GuardOptions{Proxy: func(*http.Request) (*url.URL, error) { return pu, nil }})
	defer c.CloseIdleConnections()
	get := func(u string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for _, host := range []string{
		// the spellings of 169.254.169.254 and 127.0.0.1
		"2852039166", "0xa9fea9fe", "0251.0376.0251.0376", "169.254.43518", "127.1", "0x7f.1", "2130706433", "app.localhost",
		// more of the same
		"0X7F.0.0.1", "0177.0.0.01", "127.0.0.1.", "10.1", "0x0a.0x00.0x00.0x01", "0", "0x", "LOCALHOST.", "a.b.localhost",
		"localhost.localdomain", "ip6-localhost",
		// IPv6 addresses carrying 169.254.169.254 (or 10.0.0.1)
		"[::ffff:a9fe:a9fe]", "[::ffff:0:a9fe:a9fe]", "[::a9fe:a9fe]", "[64:ff9b::a9fe:a9fe]", "[64:ff9b:1::a9fe:a9fe]",
		"[64:ff9b:1:a9fe:a9:fe00::]", "[2002:a9fe:a9fe::1]", "[2001:0:4136:e378:8000:63bf:5601:5601]",
		"[2001:0:a00:1::1]", "[fe80::1%25eth0]",
		// ends in a number but is no address
		"1.2.3.4.5", "256.0.0.1", "4294967296", "0x100000000", "08.0.0.1", "example.123", "example.0x1f",
	} {
		if err := get("https://" + host + "/"); !errors.Is(err, poppy.ErrForbiddenAddress) {
			t.Errorf("%s: %v, want ErrForbiddenAddress", host, err)
		}
	}
	if got := seen(); len(got) != 0 {
		t.Fatalf("the proxy saw %v", got)
	}
	// Public addresses and names reach the proxy (which refuses them all).
	public := []string{"134744072", "8.8.8.8", "0x8.8.8.8", "api.example.com", "[2606:4700::1111]", "[64:ff9b::808:808]", "[2002:808:808::1]"}
	for _, host := range public {
		if err := get("https://" + host + "/"); errors.Is(err, poppy.ErrForbiddenAddress) {
			t.Errorf("%s: %v", host, err)
		}
	}
	if got := seen(); len(got) != len(public) {
		t.Fatalf("the proxy saw %v, want the %d public hosts", got, len(public))
	}
}

// Section 4: IPv6 addresses that carry an IPv4 address were classed by
// their IPv6 prefix, so an internal IPv4 address inside them was public.
// They are classed by the IPv4 address they carry, where a NAT64, a 6to4
// relay or a Teredo relay delivers the packet; on the dialer and through
// a proxy alike. On cd6a6e5: "64:ff9b:1::a9fe:a9fe: public true, want
// false" and eight more.
func TestSSRFEmbeddedIPv4(t *testing.T) {
	for addr, public := range map[string]bool{
		// NAT64, local-use prefix (RFC 8215), in the /96, /64, /56 and /48 forms
		"64:ff9b:1::a9fe:a9fe": false, "64:ff9b:1::808:808": true, "64:ff9b:1:ffff::a00:1": false,
		"64:ff9b:1:0:a9:fea9:fe00:0": false, "64:ff9b:1:a9:fe:a9fe::": false, "64:ff9b:1:a9fe:a9:fe00::": false,
		"64:ff9b:1::":             false,
		"64:ff9b:1:0:a:0:800:0":   false, // 8.0.0.0 in the /96 form, but 10.0.0.8 in the /64 form
		"64:ff9b:1:0:8:808:800:0": true,  // 8.0.0.0, or 8.8.8.8 in the /64 form
		// NAT64, well-known prefix (RFC 6052)
		"64:ff9b::a9fe:a9fe": false, "64:ff9b::7f00:1": false, "64:ff9b::808:808": true,
		// 6to4 (RFC 3056)
		"2002:a9fe:a9fe::1": false, "2002:a00:1::1": false, "2002:808:808::1": true,
		// SIIT, IPv4-translated (RFC 6145)
		"::ffff:0:a9fe:a9fe": false, "::ffff:0:808:808": true,
		// IPv4-compatible (RFC 4291, deprecated)
		"::a9fe:a9fe": false, "::a00:1": false, "::808:808": true,
		// IPv4-mapped
		"::ffff:a9fe:a9fe": false, "::ffff:808:808": true,
		// Teredo: server 65.54.227.120, client the inverse of the last 32 bits
		"2001:0:4136:e378:8000:63bf:5601:5601": false, // client 169.254.169.254
		"2001:0:4136:e378:8000:63bf:f5ff:fffe": false, // client 10.0.0.1
		"2001:0:a00:1:8000:63bf:f7f7:f7f7":     false, // server 10.0.0.1
		"2001:0:4136:e378:8000:63bf:f7f7:f7f7": true,  // client 8.8.8.8
		// special-purpose IPv6 ranges
		"2001:2::1": false, "3fff::1": false, "5f00::1": false, "2001:20::1": false,
	} {
		if got := poppy.IsPublicAddr(netip.MustParseAddr(addr)); got != public {
			t.Errorf("%s: public %v, want %v", addr, got, public)
		}
	}
}

// What one hostile WWW-Authenticate costs ResponseError (item 2), against
// the floor of an ordinary challenge in the same run: the 9 MiB header of
// "a," must cost about what the short one does, since only 8 KiB of it is
// read. (Before the fix: ~840 MB allocated per header.)
func BenchmarkHostileWWWAuthenticate(b *testing.B) {
	run := func(b *testing.B, hdr string) float64 {
		resp := &http.Response{StatusCode: 401, Header: http.Header{"Www-Authenticate": {hdr}}, Body: http.NoBody, Request: &http.Request{}}
		per := float64(allocated(func() { _ = poppy.ResponseError(resp) }))
		b.ReportAllocs()
		for b.Loop() {
			_ = poppy.ResponseError(resp)
		}
		b.ReportMetric(per, "heap-B/header")
		return per
	}
	var floor float64
	b.Run("ordinary", func(b *testing.B) {
		floor = run(b, `DPoP error="invalid_token", algs="ES256"`)
	})
	b.Run("9MiB", func(b *testing.B) {
		if got := run(b, hostileHeader()); got > 64*floor+8<<10 {
			b.Fatalf("a 9 MiB header allocated %.0f bytes, the floor %.0f", got, floor)
		}
	})
}
