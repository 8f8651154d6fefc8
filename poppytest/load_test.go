package poppytest_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/poppytest"
	"github.com/poppyproto/poppy/signin"
)

// loadAgent starts a fake with bounded memory (Options.Load) and an SDK
// agent on it with users signed-in Users, for load runs.
func loadAgent(tb testing.TB, users int) (*poppytest.Server, []*poppy.Session) {
	tb.Helper()
	srv := poppytest.NewServer(tb, &poppytest.Options{
		SignIn: poppytest.SignInPolicy{RotateAccountTokens: true},
		Tokens: poppytest.TokenPolicy{TTL: 4 * time.Second},
		Load:   poppytest.LoadOptions{LogSize: 4096, ForgetTokensAfter: time.Minute},
	})
	key, err := poppy.GenerateSigningKey()
	if err != nil {
		tb.Fatal(err)
	}
	id, err := poppy.NewIdentity(poppy.IdentityConfig{ClientID: "https://agent.test/agent.json", JWKSURI: "https://agent.test/jwks.json",
		RedirectURIs: []string{"https://agent.test/oauth/callback"}, Keys: []*poppy.SigningKey{key}})
	if err != nil {
		tb.Fatal(err)
	}
	srv.HandleAgent("agent.test", id.Handler(nil))
	agent, err := poppy.NewAgent(id, &poppy.AgentOptions{HTTPClient: srv.Client(), Clock: srv.Clock()})
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	c, err := agent.Company(ctx, "example.test")
	if err != nil {
		tb.Fatal(err)
	}
	u := signin.PrompterFuncs{CredentialsFunc: func(_ context.Context, p *signin.CredentialsPrompt) (*signin.Credentials, error) {
		return signin.NewCredentials(p, map[string]string{"email": "user@example.test", "password": "correct horse"}), nil
	}}
	var sessions []*poppy.Session
	for i := range users {
		s, err := c.Session(ctx, fmt.Sprint("user-", i), nil)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := signin.Mediated(ctx, s, &poppy.SignInOptions{Scopes: []string{"poppy:read"}}, u); err != nil {
			tb.Fatal(err)
		}
		sessions = append(sessions, s)
	}
	return srv, sessions
}

func loadCall(s *poppy.Session, api string) error {
	req, _ := http.NewRequest(http.MethodGet, api+"/orders", nil)
	resp, err := s.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return poppy.ResponseError(resp)
}

// BenchmarkFakeSignedInCall is the fake's cost of a signed-in API call
// through the SDK (a DPoP proof, the Session Token, the renewals of 4 s
// tokens with rotating Account Tokens), 16 calls at a time. It fails if the
// second half of the run is less than half as fast as the first: the fake's
// cost per request must not grow with the requests it has seen.
func BenchmarkFakeSignedInCall(b *testing.B) {
	srv, sessions := loadAgent(b, 20)
	api := srv.EndpointURL(poppytest.EndpointAPI)
	var n atomic.Int64
	var half atomic.Int64 // nanoseconds when half the calls were done
	start := time.Now()
	b.SetParallelism(16 / runtime.GOMAXPROCS(0))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			if err := loadCall(sessions[int(i)%len(sessions)], api); err != nil {
				b.Error(err)
				return
			}
			if i == int64(b.N/2) {
				half.Store(int64(time.Since(start)))
			}
		}
	})
	b.StopTimer()
	total := time.Since(start)
	b.ReportMetric(float64(b.N)/total.Seconds(), "calls/s")
	if h := time.Duration(half.Load()); b.N >= 2000 && h > 0 {
		first, second := h, total-h
		if second > 2*first {
			b.Fatalf("the second half of %d calls took %v, the first %v: the fake slows down as it runs", b.N, second, first)
		}
	}
}

// TestFakeSteadyLoad runs signed-in calls as fast as 16 callers
// (POPPY_TEST_FAKE_LOAD_CALLERS) for 50 Users (POPPY_TEST_FAKE_LOAD_USERS)
// can for POPPY_TEST_FAKE_LOAD seconds (60 for the figures in the package doc) and
// checks that the fake keeps its pace, the last 10 s within 20% of the
// first, with bounded memory. It is a load test, skipped by default.
func TestFakeSteadyLoad(t *testing.T) {
	secs, _ := strconv.Atoi(os.Getenv("POPPY_TEST_FAKE_LOAD"))
	if secs <= 0 {
		t.Skip("set POPPY_TEST_FAKE_LOAD to the seconds to run (60 for the documented figures)")
	}
	secs = max(secs, 20)
	users, callers := 50, 16
	if n, err := strconv.Atoi(os.Getenv("POPPY_TEST_FAKE_LOAD_USERS")); err == nil && n > 0 {
		users = n
	}
	if n, err := strconv.Atoi(os.Getenv("POPPY_TEST_FAKE_LOAD_CALLERS")); err == nil && n > 0 {
		callers = n
	}
	srv, sessions := loadAgent(t, users)
	api := srv.EndpointURL(poppytest.EndpointAPI)
	var n atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range callers {
		wg.Go(func() {
			for i := g; ; i += callers {
				select {
				case <-stop:
					return
				default:
				}
				if err := loadCall(sessions[i%len(sessions)], api); err != nil {
					t.Error(err)
					return
				}
				n.Add(1)
			}
		})
	}
	var rates []float64
	var heaps []uint64
	last := int64(0)
	for range secs / 10 {
		time.Sleep(10 * time.Second)
		cur := n.Load()
		rates = append(rates, float64(cur-last)/10)
		last = cur
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heaps = append(heaps, ms.HeapAlloc)
		t.Logf("%3d s: %7.0f calls/s, heap %5.1f MB", len(rates)*10, rates[len(rates)-1], float64(ms.HeapAlloc)/(1<<20))
	}
	close(stop)
	wg.Wait()
	c := srv.Counts()
	t.Logf("%d requests, %d kept in the log, %d violations; grants %v", c.Requests, c.Requests-c.Dropped, c.Violations, c.Grants)
	first, lastRate := rates[0], rates[len(rates)-1]
	if lastRate < 0.8*first || lastRate > 1.2*first {
		t.Errorf("last 10 s: %.0f calls/s, first 10 s: %.0f: not within 20%%", lastRate, first)
	}
	if heaps[len(heaps)-1] > 2*heaps[0]+64<<20 {
		t.Errorf("heap grew from %d MB to %d MB", heaps[0]>>20, heaps[len(heaps)-1]>>20)
	}
}

// Counts.EarlyRenewals counts renewals of a Session less than half a
// lifetime after its last token for the same purpose: the mark of
// replicas renewing one Session twice.
func TestCountsEarlyRenewals(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Tokens: poppytest.TokenPolicy{TTL: 10 * time.Second}})
	a := newAgent(t, srv, "agent.test")
	sid := a.start("usr_1").str("session_id")
	renew := func() {
		t.Helper()
		if r := a.token(a.renewForm("usr_1", sid)); r.Status != 200 {
			t.Fatalf("renewal: %d %s", r.Status, r.Raw)
		}
	}
	renew() // at once after the start: early
	srv.Clock().Advance(4 * time.Second)
	renew() // 4 s after the last of 10 s: early
	srv.Clock().Advance(6 * time.Second)
	renew() // 6 s after: in time
	a.start("usr_2")
	a.start("usr_2") // a second Session of one User renews nothing
	if got := srv.Counts().EarlyRenewals; got != 2 {
		t.Errorf("EarlyRenewals = %d, want 2", got)
	}
}

// Counts.SessionsStarted and Counts.SignIns count at the Company what a
// load run's log no longer holds.
func TestCountsSessionsAndSignIns(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Load: poppytest.LoadOptions{ViolationsOnly: true}})
	a := newAgent(t, srv, "agent.test")
	sid := a.start("usr_1").str("session_id")
	a.token(a.renewForm("usr_1", sid)) // a renewal starts nothing
	r := a.signedIn("usr_2", "poppy:read")
	// A refresh without session_id starts a signed-in Session.
	if r := a.tokenAs("usr_2", a.refreshForm(r.str("refresh_token"), "")); r.Status != 200 {
		t.Fatalf("refresh: %d %s", r.Status, r.Raw)
	}
	c := srv.Counts()
	if c.SessionsStarted != 3 || c.SignIns != 1 {
		t.Errorf("SessionsStarted %d, SignIns %d; want 3 and 1", c.SessionsStarted, c.SignIns)
	}
}
