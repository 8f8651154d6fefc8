package poppy_test

import (
	"encoding/base64"
	"os"
	"runtime"
	"strconv"
	"strings"

	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/keystore"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// The Session transport against its floor, in one run: the same TLS
// connection pool, the same trivial handler, and for the floor one ES256
// signature of proof-sized bytes in place of the SDK's work. The handler
// lives on a subdomain of the Company (bench.example.test) so that the
// fake's own DPoP verification is not part of either figure.
func benchEnv(b *testing.B) (*env, string) {
	e := newEnv(b, nil, nil)
	e.srv.HandleAgent("bench.example.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("DPoP") != "" {
			benchHeaders.Store(r.Header.Clone())
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	return e, "https://bench.example.test/orders"
}

var benchHeaders atomic.Value

// floorProof signs payload once and returns proof, a captured DPoP proof,
// with its signature replaced by the new one: a value as long as the SDK's
// and, like it, new on every request, so that HTTP/2 header compression
// (HPACK) cannot send it as a reference to the previous request's value,
// which would make the floor cheaper than any real request.
func floorProof(b *testing.B, priv *ecdsa.PrivateKey, payload []byte, proof string) string {
	sum := sha256.Sum256(payload)
	r, sv, err := ecdsa.Sign(rand.Reader, priv, sum[:])
	if err != nil {
		b.Fatal(err)
	}
	var sig [64]byte
	r.FillBytes(sig[:32])
	sv.FillBytes(sig[32:])
	i := strings.LastIndexByte(proof, '.')
	return proof[:i+1] + base64.RawURLEncoding.EncodeToString(sig[:])
}

func BenchmarkSessionRequest(b *testing.B) {
	e, url := benchEnv(b)
	client := e.session("alice").HTTPClient()
	// One request first, as the floor does, so that neither figure
	// includes the connection's setup.
	resp, err := client.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	b.ReportAllocs()
	for b.Loop() {
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

func BenchmarkFloorPlainRequestPlusSign(b *testing.B) {
	e, url := benchEnv(b)
	// The floor sends the very headers the SDK sends (captured from one
	// SDK request), so that both cost the server the same.
	sdk := e.session("alice").HTTPClient()
	resp, err := sdk.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	h := benchHeaders.Load().(http.Header)
	client := e.srv.Client()
	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	payload := make([]byte, 420) // the size of a proof's signing input
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", h.Get("Authorization"))
		req.Header.Set("DPoP", floorProof(b, priv, payload, h.Get("DPoP")))
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// benchUsers hands out user names that no earlier iteration or benchmark
// used, so that every Session an iteration asks for is a new one.
var benchUsers atomic.Int64

func benchUser() string { return "user-" + strconv.FormatInt(benchUsers.Add(1), 10) }

// benchSessions is how many Sessions BenchmarkIdleSessionMemory holds in one
// Agent: 1,000 by default, POPPY_BENCH_SESSIONS to change it (the report in
// docs/performance.md uses 100,000).
func benchSessions(b *testing.B) int {
	n := 1000
	if v := os.Getenv("POPPY_BENCH_SESSIONS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			b.Fatalf("POPPY_BENCH_SESSIONS=%q: not a positive count", v)
		}
	}
	return n
}

func heapNow() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkIdleSessionMemory reports the heap an idle Session costs the SDK
// in an Agent holding n of them (with its in-memory keystore, which is the
// Agent's). Each iteration builds a fresh Agent and starts n Sessions for
// users no one used before, measures the heap, then drops the Agent, its
// keystore and its Sessions and measures again: the fake Company's records
// of those Sessions stay behind, so the difference is the SDK's share alone.
// The fake's share is reported beside it.
func BenchmarkIdleSessionMemory(b *testing.B) {
	e := newEnv(b, nil, nil)
	n := benchSessions(b)
	var sdkBytes, fakeBytes float64
	iters := 0
	for b.Loop() {
		b.StopTimer()
		base := heapNow()
		b.StartTimer()
		agent := e.newAgent(&poppy.AgentOptions{Store: keystore.NewMemory()})
		c, err := agent.Company(ctx, "example.test")
		if err != nil {
			b.Fatal(err)
		}
		held := make([]*poppy.Session, 0, n)
		for range n {
			s, err := c.Session(ctx, benchUser(), nil)
			if err != nil {
				b.Fatal(err)
			}
			held = append(held, s)
		}
		b.StopTimer()
		withSDK := heapNow()
		runtime.KeepAlive(held)
		runtime.KeepAlive(agent)
		held, agent, c = nil, nil, nil
		without := heapNow()
		b.StartTimer()
		if withSDK <= without {
			b.Fatalf("dropping %d Sessions freed nothing: heap %d with them, %d without", n, withSDK, without)
		}
		sdkBytes += float64(withSDK-without) / float64(n)
		// Other garbage freed meanwhile can make the fake's share look
		// negative; it is reported, not checked.
		fakeBytes += (float64(without) - float64(base)) / float64(n)
		iters++
	}
	sdk := sdkBytes / float64(iters)
	// An idle Session holds at least its IDs, its token and its DPoP key: a
	// figure under 256 bytes means the benchmark measured nothing (such as
	// Sessions found in a cache), one over 1 MiB that it measured something else.
	if sdk < 256 || sdk > 1<<20 {
		b.Fatalf("implausible heap per idle Session: %.1f B (fake Company's share %.1f B)", sdk, fakeBytes/float64(iters))
	}
	b.ReportMetric(sdk, "B/session")
	b.ReportMetric(fakeBytes/float64(iters), "fake-B/session")
}

// stubBench answers every request to bench.example.test itself, without a
// network, and passes the rest to the fake Company.
type stubBench struct{ next http.RoundTripper }

func (s stubBench) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Host != "bench.example.test" {
		return s.next.RoundTrip(r)
	}
	return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
}

// BenchmarkSessionOverhead is the Session transport's own work per request:
// the network is a stub that answers at once, so what remains is the token
// lookup, the proof (one ES256 signature) and the request's copy.
func BenchmarkSessionOverhead(b *testing.B) {
	e, url := benchEnv(b)
	hc := *e.srv.Client()
	hc.Transport = stubBench{hc.Transport}
	a := e.newAgent(&poppy.AgentOptions{HTTPClient: &hc, Store: keystore.NewMemory()})
	c, err := a.Company(ctx, "example.test")
	if err != nil {
		b.Fatal(err)
	}
	s, err := c.Session(ctx, benchUser(), nil)
	if err != nil {
		b.Fatal(err)
	}
	rt := s.Transport()
	req, _ := http.NewRequest("GET", url, nil)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}

// BenchmarkFloorSign is one ES256 signature of proof-sized bytes.
func BenchmarkFloorSign(b *testing.B) {
	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	payload := make([]byte, 420)
	b.ReportAllocs()
	for b.Loop() {
		sum := sha256.Sum256(payload)
		if _, _, err := ecdsa.Sign(rand.Reader, priv, sum[:]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSessionRequestInterleaved sends, in every iteration, one request
// through the Session transport and one floor request (plain request plus
// one ES256 signature), timing each: on a shared machine whose load drifts
// between two benchmarks, the ratio of two figures taken side by side is
// the one to trust. Allocations are counted by the two separate benchmarks
// above.
func BenchmarkSessionRequestInterleaved(b *testing.B) {
	e, url := benchEnv(b)
	sdk := e.session("alice").HTTPClient()
	resp, err := sdk.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	resp.Body.Close()
	h := benchHeaders.Load().(http.Header)
	plain := e.srv.Client()
	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	payload := make([]byte, 420)
	floor := func() {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", h.Get("Authorization"))
		req.Header.Set("DPoP", floorProof(b, priv, payload, h.Get("DPoP")))
		resp, err := plain.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	viaSDK := func() {
		resp, err := sdk.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	timed := func(f func()) time.Duration {
		t := time.Now()
		f()
		return time.Since(t)
	}
	var sdkNS, floorNS time.Duration
	i := 0
	for b.Loop() {
		// Alternate which goes first, so that neither always follows the
		// other's leftovers (a response still being written, garbage).
		if i%2 == 0 {
			floorNS += timed(floor)
			sdkNS += timed(viaSDK)
		} else {
			sdkNS += timed(viaSDK)
			floorNS += timed(floor)
		}
		i++
	}
	if floorNS <= 0 || sdkNS <= 0 {
		b.Fatalf("implausible: %v for the SDK's requests, %v for the floor's", sdkNS, floorNS)
	}
	b.ReportMetric(float64(sdkNS.Nanoseconds())/float64(b.N), "sdk-ns/req")
	b.ReportMetric(float64(floorNS.Nanoseconds())/float64(b.N), "floor-ns/req")
	b.ReportMetric(float64(sdkNS)/float64(floorNS), "ratio")
}
