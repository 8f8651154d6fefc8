// Package convbench is the harness of the conversation event benchmarks
// that docs/performance.md compares with their floor: throughput of
// conversation.Events from an SSE stream against the fake Company on
// loopback, beside a bare net/http read of the same stream (lines split,
// no JSON, no de-duplication, no cursor). Package conversation runs them
// on keystore.Memory; keystore/sqlitestore (a module of its own) runs the
// in-memory ones, the floor and the durable ones (the cursor in SQLite on
// disk) in one go test run, so that each figure has its floor from the
// same run. The fake runs in the same process, so allocations per event
// include its own (it is the same for the floor).
package convbench

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
)

// quiet is a Company Agent that says nothing: the benchmarks script the
// events.
func quiet(*poppytest.Turn) {}

// env is a fake Company with a conversation endpoint, an agent, alice's
// Session and a conversation started, its first events read.
type env struct {
	*testenv.Env
	sess *poppy.Session
	c    *conversation.Conversation
}

// newEnv starts the fake with co and an agent on store (keystore.Memory
// when nil), and a conversation whose start events it reads: up to the
// first idle state event, or, with untilIdle, by a loop with
// EventsOptions.UntilIdle to its end.
func newEnv(b *testing.B, co poppytest.ConversationOptions, store keystore.Store, untilIdle bool) *env {
	b.Helper()
	ctx := context.Background()
	e := &env{Env: testenv.New(b, &poppytest.Options{Conversations: co}, &poppy.AgentOptions{Store: store})}
	e.sess = e.Session("alice")
	c, err := conversation.Start(ctx, e.sess, conversation.Text("Hello."), nil)
	if err != nil {
		b.Fatalf("Start: %v", err)
	}
	e.c = c
	// Read the start's events, so each run reads only its own.
	var opts *conversation.EventsOptions
	if untilIdle {
		opts = &conversation.EventsOptions{UntilIdle: true}
	}
	for ev, err := range c.Events(ctx, opts) {
		if err != nil {
			b.Fatalf("Events: %v", err)
		}
		if !untilIdle && ev.Type == conversation.EventState && ev.Status == conversation.StatusIdle {
			break
		}
	}
	return e
}

// produce appends n events, as fast as the fake takes them.
func produce(e *env, id string, n int) {
	for i := range n {
		e.Srv.Conversations().Append(id, map[string]any{"type": "user_requested", "reason": strconv.Itoa(i)})
	}
}

// Throughput reads b.N events through Events, by SSE or by long poll, with
// an in-memory keystore, and reports events/s (BenchmarkEventsSSE,
// BenchmarkEventsLongPoll).
func Throughput(b *testing.B, longPoll bool) {
	ctx := context.Background()
	e := newEnv(b, poppytest.ConversationOptions{Agent: quiet, Streaming: true, PageSize: 1000}, nil, false)
	c := e.c
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

// Durable reads b.N events through Events from an SSE stream with the
// cursor saved in store (a keystore on disk) by opts' checkpoint policy
// (the default when nil), and reports events/s; once the loop returned,
// the last event handled is in store (BenchmarkEventsSSESQLite,
// BenchmarkEventsSSESQLiteEachEvent).
func Durable(b *testing.B, store keystore.Store, opts *conversation.EventsOptions) {
	ctx := context.Background()
	e := newEnv(b, poppytest.ConversationOptions{Agent: quiet, Streaming: true}, store, false)
	c := e.c
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	go produce(e, c.ID(), b.N)
	got := 0
	var last string
	for ev, err := range c.Events(ctx, opts) {
		if err != nil {
			b.Fatal(err)
		}
		last = ev.ID
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
	// The loop returned: the last event handled is on disk.
	if got := savedCursorIn(b, store, e, c.ID()); got != last {
		b.Fatalf("saved cursor %q, want %q", got, last)
	}
}

func savedCursorIn(b *testing.B, store keystore.Store, e *env, id string) string {
	raw, err := store.Get(context.Background(), keystore.Key{Kind: keystore.KindCursor, User: "alice", Issuer: e.Srv.Issuer(), ID: id})
	if err != nil {
		b.Fatal(err)
	}
	var rec struct{ Cursor string }
	json.Unmarshal(raw, &rec)
	return rec.Cursor
}

// UnknownEvents reads pages of 100 events of an unknown type (skipped,
// spec 7.5) by long poll, with the cursor in store: the cost of skipping,
// per event (BenchmarkUnknownEventsSQLite).
func UnknownEvents(b *testing.B, store keystore.Store) {
	ctx := context.Background()
	e := newEnv(b, poppytest.ConversationOptions{Agent: quiet, PageSize: 100}, store, true)
	c := e.c
	for range b.N {
		e.Srv.Conversations().Append(c.ID(), map[string]any{"type": "poll"})
	}
	e.Srv.Conversations().Say(c.ID(), poppytest.Reply{Text: "After the polls."})
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for ev, err := range c.Events(ctx, &conversation.EventsOptions{LongPoll: true}) {
		if err != nil {
			b.Fatal(err)
		}
		if ev.Type == conversation.EventMessage {
			break
		}
	}
	el := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/el.Seconds(), "events/s")
	b.ReportMetric(float64(el.Microseconds())/float64(b.N), "µs/event")
}

// FloorBareSSE reads the same stream as Throughput with net/http and
// bufio.Scanner alone (BenchmarkFloorBareSSE).
func FloorBareSSE(b *testing.B) {
	e := newEnv(b, poppytest.ConversationOptions{Agent: quiet, Streaming: true, PageSize: 1000}, nil, false)
	c := e.c
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.Srv.EndpointURL(poppytest.EndpointAPI)+"/poppy/conversations/"+c.ID()+"/events", nil)
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
