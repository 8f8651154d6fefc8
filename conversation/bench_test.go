package conversation_test

// Throughput and latency of event delivery, on loopback against the fake
// Company, side by side with the floor: a bare net/http read of the same
// SSE stream, splitting lines, without parsing JSON, de-duplicating or
// saving cursors. The fake runs in the same process, so allocations per
// event include its own (it is the same for the floor).
//
//	go test -run '^$' -bench . -benchmem ./conversation

import (
	"bufio"
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/keystore/sqlitestore"
	"github.com/poppyproto/poppy/poppytest"
)

func benchEnv(b *testing.B) (*env, *conversation.Conversation) {
	e := newEnv(b, poppytest.ConversationOptions{Agent: quiet, Streaming: true, PageSize: 1000})
	c := e.start(b, conversation.Text("Hello."), nil)
	// Read the start's events, so each run reads only its own.
	collect(b, c, nil, isIdle)
	return e, c
}

// produce appends n events, as fast as the fake takes them.
func produce(e *env, id string, n int) {
	for i := range n {
		e.Srv.AppendEvent(id, map[string]any{"type": "user_requested", "reason": strconv.Itoa(i)})
	}
}

func benchThroughput(b *testing.B, longPoll bool) {
	e, c := benchEnv(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	go produce(e, c.ID(), b.N)
	got := 0
	for _, err := range c.Events(ctx, &conversation.EventsOptions{LongPoll: longPoll}) {
		if err != nil {
			b.Fatal(err)
		}
		got++
		if got == b.N {
			break
		}
	}
	el := time.Since(start)
	b.StopTimer()
	rate := float64(b.N) / el.Seconds()
	b.ReportMetric(rate, "events/s")
	if b.N >= 1000 && rate < 100 {
		b.Fatalf("implausible: %.0f events/s", rate)
	}
}

func BenchmarkEventsSSE(b *testing.B) { benchThroughput(b, false) }

// BenchmarkEventsSSESQLite saves each cursor in an SQLite keystore on disk.
func BenchmarkEventsSSESQLite(b *testing.B) {
	store, err := sqlitestore.Open(filepath.Join(b.TempDir(), "keystore.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	e := &env{Env: testenv.New(b, &poppytest.Options{Conversation: poppytest.ConversationOptions{Agent: quiet, Streaming: true}}, &poppy.AgentOptions{Store: store})}
	e.sess = e.Session("alice")
	c := e.start(b, conversation.Text("Hello."), nil)
	collect(b, c, nil, isIdle)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	go produce(e, c.ID(), b.N)
	got := 0
	for _, err := range c.Events(ctx, nil) {
		if err != nil {
			b.Fatal(err)
		}
		if got++; got == b.N {
			break
		}
	}
	rate := float64(b.N) / time.Since(start).Seconds()
	b.StopTimer()
	b.ReportMetric(rate, "events/s")
	if b.N >= 100 && rate < 10 {
		b.Fatalf("implausible: %.0f events/s", rate)
	}
}
func BenchmarkEventsLongPoll(b *testing.B) { benchThroughput(b, true) }

// BenchmarkFloorBareSSE reads the same stream with net/http and
// bufio.Scanner alone.
func BenchmarkFloorBareSSE(b *testing.B) {
	e, c := benchEnv(b)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.Srv.APIURL()+"/poppy/conversations/"+c.ID()+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", c.Cursor())
	resp, err := e.sess.HTTPClient().Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	go produce(e, c.ID(), b.N)
	sc := bufio.NewScanner(resp.Body)
	got := 0
	for got < b.N && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "id:") {
			got++
		}
	}
	el := time.Since(start)
	b.StopTimer()
	if got != b.N {
		b.Fatalf("read %d of %d events: %v", got, b.N, sc.Err())
	}
	rate := float64(b.N) / el.Seconds()
	b.ReportMetric(rate, "events/s")
	if b.N >= 1000 && rate < 100 {
		b.Fatalf("implausible: %.0f events/s", rate)
	}
}

// benchLatency measures from the fake appending an event to the caller
// receiving it, one event at a time.
func benchLatency(b *testing.B, floor bool) {
	e, c := benchEnv(b)
	lat := make([]time.Duration, 0, b.N)
	recv := make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		if floor {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.Srv.APIURL()+"/poppy/conversations/"+c.ID()+"/events", nil)
			req.Header.Set("Accept", "text/event-stream")
			req.Header.Set("Last-Event-ID", c.Cursor())
			resp, err := e.sess.HTTPClient().Do(req)
			if err != nil {
				done <- err
				return
			}
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), "data:") {
					recv <- struct{}{}
				}
			}
			done <- nil
			return
		}
		for _, err := range c.Events(ctx, nil) {
			if err != nil {
				done <- err
				return
			}
			recv <- struct{}{}
		}
		done <- nil
	}()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		e.Srv.AppendEvent(c.ID(), map[string]any{"type": "user_requested", "reason": strconv.Itoa(i)})
		select {
		case <-recv:
		case err := <-done:
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	b.StopTimer()
	cancel()
	go func() {
		for range recv {
		}
	}()
	<-done
	close(recv)
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
	if p50 <= 0 || p50 > 10*time.Second {
		b.Fatalf("implausible p50 %v", p50)
	}
}

func BenchmarkLatencySSE(b *testing.B)       { benchLatency(b, false) }
func BenchmarkLatencyFloorBare(b *testing.B) { benchLatency(b, true) }
