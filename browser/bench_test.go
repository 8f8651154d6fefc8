package browser_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/poppyproto/poppy/browser"
)

// BenchmarkJoinPage measures what the SDK adds to a join before the
// browser runs: signing the browser assertion and building its page. The
// floor, measured in the same run, is one bare ES256 signature; the figure
// must stay within a small multiple of it.
func BenchmarkJoinPage(b *testing.B) {
	_, sess := webEnv(b, nil)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	sum := sha256.Sum256([]byte("floor"))
	const floorOps = 300
	t0 := time.Now()
	for range floorOps {
		if _, err := ecdsa.SignASN1(rand.Reader, key, sum[:]); err != nil {
			b.Fatal(err)
		}
	}
	fl := time.Since(t0) / floorOps
	b.ReportAllocs()
	start := time.Now()
	n := 0
	for b.Loop() {
		a, err := sess.SignBrowserAssertion("https://example.test/orders")
		if err != nil {
			b.Fatal(err)
		}
		_ = browser.NewPage(a)
		n++
	}
	per := time.Since(start) / time.Duration(n)
	b.ReportMetric(float64(fl.Nanoseconds()), "floor-ns/op")
	if per > 20*fl+50*time.Microsecond || per < fl/4 {
		b.Fatalf("a join page costs %v, the ES256 floor %v: implausible", per, fl)
	}
}
