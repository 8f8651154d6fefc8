package operations_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/poppyproto/poppy/operations"
)

var benchOp = []byte(`{"operation_id":"exc_5Rt2","revision":1,"state":"proposed","summary":"Exchange the Stormline Jacket (M) on order ord_7Hk2 for the Stormline Insulated Jacket (M), for $70.00 more, charged to the card used for the order.","terms":` + jacketTerms + `,"expires_at":"2026-10-08T12:20:00-07:00","user_approval_required":false,"url":"https://example.com/orders/ord_7Hk2/exchanges/exc_5Rt2","confirmation":null,"result":null}`)

// BenchmarkParse measures reading one operation against the floor of
// decoding the same bytes into a map with encoding/json, in the same run.
func BenchmarkParse(b *testing.B) {
	const floorN = 2000
	start := time.Now()
	for range floorN {
		var m map[string]any
		if err := json.Unmarshal(benchOp, &m); err != nil {
			b.Fatal(err)
		}
	}
	floor := time.Since(start) / floorN
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := operations.Parse(benchOp); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	per := b.Elapsed() / time.Duration(b.N)
	b.ReportMetric(float64(floor.Nanoseconds()), "floor-ns/op")
	if ratio := float64(per) / float64(max(floor, 1)); ratio > 20 {
		b.Fatalf("Parse takes %.1fx a plain json.Unmarshal (%v vs %v): implausible", ratio, per, floor)
	}
}

// BenchmarkPermissionCheck measures matching a standing permission against
// the jacket exchange's terms.
func BenchmarkPermissionCheck(b *testing.B) {
	now := time.Now()
	p := fullPermission(now)
	sub := subject(now, jacketTerms)
	b.ReportAllocs()
	for b.Loop() {
		if err := p.Check(sub); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if per := b.Elapsed() / time.Duration(b.N); per > time.Millisecond {
		b.Fatalf("one Check takes %v: implausible", per)
	}
}
