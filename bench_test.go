package poppy_test

import (
	"runtime"
	"strconv"

	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"github.com/poppyproto/poppy"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
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

func BenchmarkSessionRequest(b *testing.B) {
	e, url := benchEnv(b)
	client := e.session("alice").HTTPClient()
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
		sum := sha256.Sum256(payload)
		if _, _, err := ecdsa.Sign(rand.Reader, priv, sum[:]); err != nil {
			b.Fatal(err)
		}
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("Authorization", h.Get("Authorization"))
		req.Header.Set("DPoP", h.Get("DPoP"))
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkIdleSessionMemory reports the heap one idle Session costs an
// Agent that holds a thousand of them (with an in-memory keystore, whose
// records are part of the figure).
func BenchmarkIdleSessionMemory(b *testing.B) {
	e := newEnv(b, nil, nil)
	c := e.company("example.test")
	const n = 1000
	var before, after runtime.MemStats
	for b.Loop() {
		runtime.GC()
		runtime.ReadMemStats(&before)
		held := make([]*poppy.Session, 0, n)
		for i := range n {
			s, err := c.Session(ctx, "user-"+strconv.Itoa(b.N)+"-"+strconv.Itoa(i), nil)
			if err != nil {
				b.Fatal(err)
			}
			held = append(held, s)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/session")
		runtime.KeepAlive(held)
	}
}
