package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/poppyproto/poppy/api"
	"github.com/poppyproto/poppy/internal/testenv"
)

// fanOutDescription is the fan-out attack of a hostile Company: a description of about
// 3.5 MiB whose ops operations each take a query parameter of one shared
// schema that, inlined, stays just under the former per-schema node bound
// (20,000): a property list of 832 references to a schema of ten strings.
func fanOutDescription(ops int) []byte {
	var b strings.Builder
	b.WriteString(`{"openapi":"3.1.0","info":{"title":"fan-out","version":"1"},"paths":{`)
	for i := range ops {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"/p%d":{"get":{"operationId":"o%d","parameters":[{"name":"q","in":"query","schema":{"$ref":"#/components/schemas/B"}}],"responses":{"200":{"description":"ok"}}}}`, i, i)
	}
	b.WriteString(`},"components":{"schemas":{"M":{"type":"object","properties":{`)
	for i := range 10 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"m%d":{"type":"string"}`, i)
	}
	b.WriteString(`}},"B":{"type":"object","properties":{`)
	for i := range 832 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"b%d":{"$ref":"#/components/schemas/M"}`, i)
	}
	b.WriteString(`}}}}}`)
	return []byte(b.String())
}

// fanOutOps is the number of operations of the description.
const fanOutOps = 23894

// heapSampler records the peak of live heap objects while it runs.
type heapSampler struct {
	stop chan struct{}
	wg   sync.WaitGroup
	peak uint64
}

func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{})}
	h.peak = heapObjects()
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				if v := heapObjects(); v > h.peak {
					h.peak = v
				}
			}
		}
	}()
	return h
}

func (h *heapSampler) done() uint64 {
	close(h.stop)
	h.wg.Wait()
	if v := heapObjects(); v > h.peak {
		h.peak = v
	}
	return h.peak
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// measure runs f once and returns the CPU time it took (the process's, so
// run nothing else meanwhile), the peak live heap above the start and the
// heap f's result retains.
func measure(f func() any) (cpu time.Duration, peak, retained uint64, res any) {
	base := liveHeap()
	h := startHeapSampler()
	c0 := cpuTime()
	res = f()
	cpu = cpuTime() - c0
	p := h.done()
	after := liveHeap()
	runtime.KeepAlive(res)
	if p > base {
		peak = p - base
	}
	if after > base {
		retained = after - base
	}
	return cpu, peak, retained, res
}

// BenchmarkAttackOpenAPIFanOut measures the fan-out attack (see
// TestAttackOpenAPIFanOut): loading the attack's description of 23,894
// operations, and loading 2,000 operations of the same shape and building
// their input schemas (what package llmtools builds a tool on), each once
// per iteration with the parsed-description cache emptied. It reports the CPU seconds (the process's, so run it alone),
// the peak live heap above the start and the heap still held after (the
// cache's entry included), beside a floor measured in the same run:
// decoding the same bytes as JSON into any. Before the fix (cd6a6e5) the
// issue's description took 245–298 CPU s, 9.8 GiB peak and 5.1 GiB
// retained on the shared machine (a measured run, the same code as here).
func BenchmarkAttackOpenAPIFanOut(b *testing.B) {
	_, sess := setup(b, nil)
	ctx := context.Background()
	e := entry(b, sess.Company(), api.TypeOpenAPI)
	for _, bc := range []struct {
		name    string
		ops     int
		schemas bool
	}{{"issue-23894-ops", fanOutOps, false}, {"shared-2000-ops-schemas", 2000, true}} {
		desc := fanOutDescription(bc.ops)
		b.Run(bc.name, func(b *testing.B) {
			fcpu, fpeak, _, _ := measure(func() any {
				var v any
				if err := json.Unmarshal(desc, &v); err != nil {
					b.Fatal(err)
				}
				return v
			})
			if fcpu <= 0 || fpeak < uint64(len(desc)) {
				b.Fatalf("implausible floor: %v CPU, %d bytes peak for %d bytes of JSON", fcpu, fpeak, len(desc))
			}
			var cpu time.Duration
			var peak, retained uint64
			for b.Loop() {
				api.ResetParsedCache()
				c, p, r, _ := measure(func() any {
					oa, err := api.NewOpenAPIFromBytes(ctx, sess, e, desc)
					if err != nil || !bc.schemas {
						return oa
					}
					schemas := make([]json.RawMessage, 0, bc.ops)
					for _, ep := range oa.Endpoints() {
						s, err := oa.InputSchema(ep, 0)
						if err != nil {
							b.Fatalf("input schema %d: %v", len(schemas), err)
						}
						schemas = append(schemas, s)
					}
					if len(schemas) != bc.ops {
						b.Fatalf("%d input schemas, want %d", len(schemas), bc.ops)
					}
					return []any{oa, schemas}
				})
				cpu += c
				peak, retained = max(peak, p), max(retained, r)
			}
			n := float64(b.N)
			b.ReportMetric(cpu.Seconds()/n, "cpu-s/op")
			b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
			b.ReportMetric(float64(retained)/(1<<20), "retained-MiB")
			b.ReportMetric(fcpu.Seconds(), "floor-cpu-s")
			b.ReportMetric(float64(fpeak)/(1<<20), "floor-peak-MiB")
			b.ReportMetric(cpu.Seconds()/n/fcpu.Seconds(), "cpu/floor")
		})
	}
}

// BenchmarkAttackEndlessToolList measures listing the tools of an MCP
// server whose tools/list never ends (the attack read 2,440 pages, 122,000
// tools and 365–453 MiB in 8 s before, no end without a deadline): the
// pages read, the tools yielded, CPU seconds and peak heap per listing,
// now that the list stops at MaxTools (1,000).
func BenchmarkAttackEndlessToolList(b *testing.B) {
	h := &testenv.EndlessTools{}
	m := connectEndless(b, h, nil)
	var cpu time.Duration
	var peak uint64
	tools := 0
	for b.Loop() {
		h.ResetPages()
		c, p, _, _ := measure(func() any {
			tools = 0
			for _, err := range m.Tools(context.Background()) {
				if err != nil {
					break
				}
				tools++
			}
			return nil
		})
		cpu += c
		peak = max(peak, p)
	}
	if tools != 1000 || h.Pages() > 21 {
		b.Fatalf("%d tools in %d pages", tools, h.Pages())
	}
	b.ReportMetric(float64(h.Pages()), "pages")
	b.ReportMetric(float64(tools), "tools")
	b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(peak)/(1<<20), "peak-MiB")
}
