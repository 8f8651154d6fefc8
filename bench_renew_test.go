package poppy_test

// Benchmarks of renewal, Company resolution and Session start, each beside
// its floor in the same run. The counts they assert (token requests, other
// requests, concurrent token requests) are exact, so they fail loudly
// rather than report a figure that measured something else.

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
)

// countingRT counts the requests an Agent sends, those to the token
// endpoint apart, and the most token requests in flight at once.
type countingRT struct {
	next                http.RoundTripper
	tokenPath           string
	all, tokens         atomic.Int64
	inflight, maxFlight atomic.Int64
}

func (c *countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.all.Add(1)
	if r.URL.Path != c.tokenPath {
		return c.next.RoundTrip(r)
	}
	c.tokens.Add(1)
	n := c.inflight.Add(1)
	defer c.inflight.Add(-1)
	for {
		m := c.maxFlight.Load()
		if n <= m || c.maxFlight.CompareAndSwap(m, n) {
			break
		}
	}
	return c.next.RoundTrip(r)
}

// countingAgent returns a fresh Agent of e (own memory keystore) whose
// requests rt counts, and its Company example.test.
func countingAgent(b *testing.B, e *env) (*poppy.Company, *countingRT) {
	hc := *e.srv.Client()
	rt := &countingRT{next: hc.Transport, tokenPath: "/oauth/token"}
	hc.Transport = rt
	a := e.newAgent(&poppy.AgentOptions{HTTPClient: &hc, Store: keystore.NewMemory()})
	c, err := a.Company(ctx, "example.test")
	if err != nil {
		b.Fatal(err)
	}
	// The token endpoint's path, from the metadata.
	if u := c.Metadata().TokenEndpoint; u != "" {
		i := len("https://")
		for i < len(u) && u[i] != '/' {
			i++
		}
		rt.tokenPath = u[i:]
	}
	return c, rt
}

// expireAll moves the fake clock past every token's lifetime.
func expireAll(e *env) { e.srv.Clock().Advance(48 * time.Hour) }

// BenchmarkFloorRenewOne is one renewal of one expired token by one caller:
// one POST to the token endpoint with two signatures (the Session
// assertion and the DPoP proof). It is the floor of the renewal rows and
// of Session start.
func BenchmarkFloorRenewOne(b *testing.B) {
	e := newEnv(b, nil, nil)
	c, rt := countingAgent(b, e)
	s, err := c.Session(ctx, benchUser(), nil)
	if err != nil {
		b.Fatal(err)
	}
	before := rt.tokens.Load()
	for b.Loop() {
		expireAll(e)
		if _, err := s.Token(ctx, nil); err != nil {
			b.Fatal(err)
		}
	}
	if got := rt.tokens.Load() - before; got != int64(b.N) {
		b.Fatalf("%d token requests for %d renewals", got, b.N)
	}
}

// BenchmarkRenewOneSession1000 has 1,000 goroutines ask one Session for
// its expired token at once: exactly one token request may go out.
func BenchmarkRenewOneSession1000(b *testing.B) {
	const callers = 1000
	e := newEnv(b, nil, nil)
	c, rt := countingAgent(b, e)
	s, err := c.Session(ctx, benchUser(), nil)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		expireAll(e)
		before := rt.tokens.Load()
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, callers)
		for range callers {
			wg.Go(func() {
				<-start
				if _, err := s.Token(ctx, nil); err != nil {
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		if got := rt.tokens.Load() - before; got != 1 {
			b.Fatalf("%d token requests for one expired token asked for by %d goroutines, want exactly 1", got, callers)
		}
	}
	b.ReportMetric(1, "token-requests/op")
}

// BenchmarkRenew1000Sessions has one goroutine per Session renew 1,000
// expired Sessions of one Company at once: exactly 1,000 token requests,
// and more than one in flight at a time, which no lock held across the
// network by anyone but the renewing caller would allow.
func BenchmarkRenew1000Sessions(b *testing.B) {
	const n = 1000
	e := newEnv(b, nil, nil)
	c, rt := countingAgent(b, e)
	sessions := make([]*poppy.Session, n)
	for i := range sessions {
		s, err := c.Session(ctx, benchUser(), nil)
		if err != nil {
			b.Fatal(err)
		}
		sessions[i] = s
	}
	rt.maxFlight.Store(0)
	for b.Loop() {
		expireAll(e)
		before := rt.tokens.Load()
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, n)
		for _, s := range sessions {
			wg.Go(func() {
				<-start
				if _, err := s.Token(ctx, nil); err != nil {
					errs <- err
				}
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatal(err)
		}
		if got := rt.tokens.Load() - before; got != n {
			b.Fatalf("%d token requests for %d expired Sessions, want exactly %d", got, n, n)
		}
	}
	if m := rt.maxFlight.Load(); m < 2 {
		b.Fatalf("at most %d token request in flight while %d Sessions renewed: a lock is held across the network", m, n)
	}
	b.ReportMetric(float64(rt.maxFlight.Load()), "max-in-flight")
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/renewal")
}

// BenchmarkCompanyCached resolves a Company the Agent resolved before: no
// request at all.
func BenchmarkCompanyCached(b *testing.B) {
	e := newEnv(b, nil, nil)
	c, rt := countingAgent(b, e)
	agent := c.Agent()
	before := rt.all.Load()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := agent.Company(ctx, "example.test"); err != nil {
			b.Fatal(err)
		}
	}
	if got := rt.all.Load() - before; got != 0 {
		b.Fatalf("%d requests to resolve a cached Company, want 0", got)
	}
}

// BenchmarkFloorMapLookup is the floor of BenchmarkCompanyCached: a map
// lookup under a mutex, what a cache costs at least.
func BenchmarkFloorMapLookup(b *testing.B) {
	var mu sync.Mutex
	m := map[string]*poppy.Company{"example.test": nil}
	for b.Loop() {
		mu.Lock()
		_ = m["example.test"]
		mu.Unlock()
	}
}

// BenchmarkSessionStart starts the Session of a new User end to end on
// loopback: User ID and DPoP key created and stored, the JWT bearer grant,
// the first token. Its floor is BenchmarkFloorRenewOne.
func BenchmarkSessionStart(b *testing.B) {
	e := newEnv(b, nil, nil)
	c, rt := countingAgent(b, e)
	before := rt.tokens.Load()
	for b.Loop() {
		if _, err := c.Session(ctx, benchUser(), nil); err != nil {
			b.Fatal(err)
		}
	}
	if got := rt.tokens.Load() - before; got != int64(b.N) {
		b.Fatalf("%d token requests for %d Session starts", got, b.N)
	}
}

// BenchmarkSessionStartInterleaved starts a new User's Session and renews
// an existing Session's token (the floor: one POST and two signatures) in
// every iteration, timing each, so that both see the same load.
func BenchmarkSessionStartInterleaved(b *testing.B) {
	e := newEnv(b, nil, nil)
	c, _ := countingAgent(b, e)
	old, err := c.Session(ctx, benchUser(), nil)
	if err != nil {
		b.Fatal(err)
	}
	var startNS, floorNS time.Duration
	for b.Loop() {
		expireAll(e)
		t0 := time.Now()
		if _, err := old.Token(ctx, nil); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if _, err := c.Session(ctx, benchUser(), nil); err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		floorNS += t1.Sub(t0)
		startNS += t2.Sub(t1)
	}
	if floorNS <= 0 || startNS <= 0 {
		b.Fatalf("implausible: %v for the starts, %v for the floor", startNS, floorNS)
	}
	b.ReportMetric(float64(startNS.Nanoseconds())/float64(b.N), "start-ns/op")
	b.ReportMetric(float64(floorNS.Nanoseconds())/float64(b.N), "floor-ns/op")
	b.ReportMetric(float64(startNS)/float64(floorNS), "ratio")
}
