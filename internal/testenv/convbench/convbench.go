// Package convbench is the harness of the conversation event benchmarks
// that docs/performance.md compares with their floor: throughput of
// conversation.Events from an SSE stream against the fake Company on
// loopback, beside a bare net/http read of the same stream (lines split,
// no JSON, no de-duplication, no cursor), the two timed alternately in one
// benchmark (SSEInterleaved), in memory and with the cursor in SQLite on
// disk; and the CPU per event of an agent reading by long poll beside one
// reading by SSE, each agent in a child process of its own (CPUPerEvent).
// Package conversation runs the in-memory ones on keystore.Memory;
// keystore/sqlitestore (a module of its own) runs all of them in one go
// test run. The fake runs in the same process as the throughput
// benchmarks, so allocations per event include its own (it is the same
// for the floor).
package convbench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
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

// roundEvents is how many events each reader reads in one round of the
// interleaved benchmarks: enough that opening the stream (one request,
// one proof) is a small part of the round, few enough that the readers
// alternate many times in a run.
const roundEvents = 2000

// warmupEvents are read by each reader before the figures are taken.
const warmupEvents = 200

// reader is one side of an interleaved benchmark: read reads n events of
// conversation id, which has them or is given them as it reads.
type reader struct {
	name string
	id   string
	read func(n int)
	// wall and cpu are the round times summed; events the events read.
	wall, cpu time.Duration
	events    int
}

// interleave runs b.N events through each reader, in rounds of at most
// roundEvents, rotating which reader goes first, so that on a shared
// machine whose load drifts every reader sees the same drift: the ratio
// of figures taken side by side is the one to trust (as the Session
// request row does). Each round is timed, in wall time and in the
// process's CPU time, to the reader's return from the start of the
// fake's appending the round's events as fast as it takes them (live),
// or from the start of the reading of the events the fake had (not
// live: the CPU of an agent catching up, the Company's work of making
// the events left out).
func interleave(b *testing.B, e *env, live bool, readers []*reader) {
	round := func(rd *reader, n int) (wall, cpu time.Duration) {
		var wg sync.WaitGroup
		if !live {
			b.StopTimer()
			produce(e, rd.id, n)
			b.StartTimer()
		}
		w0, c0 := time.Now(), cpuTime()
		if live {
			wg.Go(func() { produce(e, rd.id, n) })
		}
		rd.read(n)
		wall, cpu = time.Since(w0), cpuTime()-c0
		wg.Wait()
		return wall, cpu
	}
	// A first round of each, not counted: the first stream of a
	// connection, buffers growing to their size.
	for _, rd := range readers {
		round(rd, warmupEvents)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for r, left := 0, b.N; left > 0; r++ {
		n := min(left, roundEvents)
		left -= n
		for i := range readers {
			rd := readers[(r+i)%len(readers)]
			wall, cpu := round(rd, n)
			rd.wall += wall
			rd.cpu += cpu
			rd.events += n
		}
	}
	b.StopTimer()
	for _, rd := range readers {
		if rd.events != b.N || rd.wall <= 0 {
			b.Fatalf("implausible: %s read %d events in %v", rd.name, rd.events, rd.wall)
		}
	}
}

// rate is rd's events per second.
func (rd *reader) rate() float64 { return float64(rd.events) / rd.wall.Seconds() }

// cpuPerEvent is rd's process CPU per event, in ns.
func (rd *reader) cpuPerEvent() float64 { return float64(rd.cpu.Nanoseconds()) / float64(rd.events) }

// sdkReader reads c's events through Events with opts, one loop per
// round: the loop opens its stream (or long-polls) from the saved cursor
// and returns once it yielded n events, saving the cursor as opts'
// checkpoint policy says and when it returns.
func sdkReader(b *testing.B, name string, c *conversation.Conversation, opts *conversation.EventsOptions) *reader {
	ctx := context.Background()
	return &reader{name: name, id: c.ID(), read: func(n int) {
		got := 0
		for _, err := range c.Events(ctx, opts) {
			if err != nil {
				b.Fatalf("%s: %v", name, err)
			}
			if got++; got == n {
				break
			}
		}
		if got != n {
			b.Fatalf("%s: %d of %d events", name, got, n)
		}
	}}
}

// bareReader reads c's SSE stream with the Session's HTTP client and a
// bufio.Scanner alone, from the last event it read (Last-Event-ID),
// counting id lines: no JSON, no de-duplication, no cursor saved. It is
// the floor of an SSE read: the same request and stream from the fake,
// nothing of the SDK's reading.
func bareReader(b *testing.B, e *env, c *conversation.Conversation) *reader {
	last := c.Cursor()
	return &reader{name: "bare read", id: c.ID(), read: func(n int) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.Srv.EndpointURL(poppytest.EndpointAPI)+"/poppy/conversations/"+c.ID()+"/events", nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Last-Event-ID", last)
		resp, err := e.sess.HTTPClient().Do(req)
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		got := 0
		for got < n && sc.Scan() {
			if id, ok := bytes.CutPrefix(sc.Bytes(), []byte("id:")); ok {
				if got++; got == n {
					last = string(bytes.TrimSpace(id))
				}
			}
		}
		if got != n {
			b.Fatalf("bare read: %d of %d events: %v", got, n, sc.Err())
		}
	}}
}

// startConversation starts another conversation on e's Session and reads
// its start's events, up to the first idle state event; n is how many
// it read.
func (e *env) startConversation(b *testing.B) (c *conversation.Conversation, n int) {
	ctx := context.Background()
	c, err := conversation.Start(ctx, e.sess, conversation.Text("Hello."), nil)
	if err != nil {
		b.Fatalf("Start: %v", err)
	}
	for ev, err := range c.Events(ctx, nil) {
		if err != nil {
			b.Fatalf("Events: %v", err)
		}
		n++
		if ev.Type == conversation.EventState && ev.Status == conversation.StatusIdle {
			break
		}
	}
	return c, n
}

// SSEInterleaved reads b.N events through Events from an SSE stream, with
// the cursor in store (keystore.Memory when nil) by opts' checkpoint
// policy, and b.N events by a bare read of the same kind of stream (lines
// split, no JSON, no de-duplication, no cursor), each of its own
// conversation on one fake, alternately in rounds, the fake appending
// each round's events as fast as it takes them (see interleave). It
// reports the SDK's events/s, the floor's floor-events/s and their ratio
// (BenchmarkEventsSSEInterleaved, BenchmarkEventsSSESQLiteInterleaved).
// With a store, the last event handled is in it once the loop returned.
func SSEInterleaved(b *testing.B, store keystore.Store, opts *conversation.EventsOptions) {
	sseInterleaved(b, store, opts, true)
}

// SSECatchUpInterleaved is SSEInterleaved in memory with each round's
// events appended before the round starts: an agent catching up, the
// readers' work and the fake's streaming alone timed, not the pace at
// which the fake makes events (BenchmarkEventsSSECatchUpInterleaved).
func SSECatchUpInterleaved(b *testing.B) { sseInterleaved(b, nil, nil, false) }

func sseInterleaved(b *testing.B, store keystore.Store, opts *conversation.EventsOptions, live bool) {
	e := newEnv(b, poppytest.ConversationOptions{Agent: quiet, Streaming: true, PageSize: 1000}, store, false)
	sdk := sdkReader(b, "Events", e.c, opts)
	fc, _ := e.startConversation(b)
	floor := bareReader(b, e, fc)
	interleave(b, e, live, []*reader{floor, sdk})
	ratio := sdk.rate() / floor.rate()
	b.ReportMetric(sdk.rate(), "events/s")
	b.ReportMetric(floor.rate(), "floor-events/s")
	b.ReportMetric(ratio, "ratio")
	// A bare read of the same stream does less than Events: an SDK twice
	// as fast is a broken benchmark, not a fast reader.
	if b.N >= 1000 && (sdk.rate() < 100 || ratio > 2) {
		b.Fatalf("implausible: %.0f events/s, %.0f for the bare read", sdk.rate(), floor.rate())
	}
	if store != nil {
		if got := savedCursorIn(b, store, e, e.c.ID()); got != e.c.Cursor() {
			b.Fatalf("saved cursor %q, want %q", got, e.c.Cursor())
		}
	}
}

// reads counts the events reads of conversation id the fake answered.
func reads(e *env, id string) int {
	n := 0
	for _, r := range e.Requests(poppytest.EndpointConversation) {
		if r.Method == http.MethodGet && strings.Contains(r.Path, "/"+id+"/events") {
			n++
		}
	}
	return n
}
