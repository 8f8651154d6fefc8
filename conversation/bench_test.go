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
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/internal/testenv/convbench"
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
		e.Srv.Conversations().Append(id, map[string]any{"type": "user_requested", "reason": strconv.Itoa(i)})
	}
}

// The throughput benchmarks and their floor are internal/testenv/convbench's,
// which keystore/sqlitestore also runs, beside the same benchmarks with the
// cursor in SQLite on disk (BenchmarkEventsSSESQLiteInterleaved,
// BenchmarkEventsSSESQLite, BenchmarkEventsSSESQLiteEachEvent,
// BenchmarkUnknownEventsSQLite) and the CPU per event of long polls
// (BenchmarkCPUPerEvent): docs/performance.md takes all of them from that
// run.

func BenchmarkEventsSSE(b *testing.B)      { convbench.Throughput(b, false) }
func BenchmarkEventsLongPoll(b *testing.B) { convbench.Throughput(b, true) }

// BenchmarkFloorBareSSE reads the same stream with net/http and
// bufio.Scanner alone.
func BenchmarkFloorBareSSE(b *testing.B) { convbench.FloorBareSSE(b) }

// BenchmarkEventsSSEInterleaved reads events through Events from an SSE
// stream and by a bare read of the same kind of stream, alternately in
// one benchmark: the ratio of the two, taken side by side, is the figure
// (events/s, floor-events/s, ratio).
func BenchmarkEventsSSEInterleaved(b *testing.B) { convbench.SSEInterleaved(b, nil, nil) }

// BenchmarkEventsSSECatchUpInterleaved does the same with each round's
// events waiting before it starts (an agent catching up): the readers'
// work, not the pace of the fake's making events, bounds both.
func BenchmarkEventsSSECatchUpInterleaved(b *testing.B) { convbench.SSECatchUpInterleaved(b) }

// realClock sleeps for real: the benchmarks of reads per second need the
// SDK's pauses to take time.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }
func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// idleWindow is how long BenchmarkIdleReads watches its loops (whatever
// b.N is: the figure is reads per second); stuckWindow bounds
// BenchmarkStuckCursorReads, which ends sooner, with ErrCursorStuck.
const (
	idleWindow  = 2 * time.Second
	stuckWindow = 10 * time.Second
)

// BenchmarkIdleReads counts the reads per second of idle Events loops
// against a Company that answers each long poll after 1 ms (MaxWait; spec
// 7.5 lets it), after a conversation turn (a message, and the reply read
// to the end of the turn), over idleWindow: by stream request (the
// default; the fake answers JSON) and by long poll, each against the
// fake's answers as they are, and against the same answers carrying the
// turn's events again under a cursor of the Company's own each time. The
// four loops run at once, each with its own fake; the figure is the
// highest of their rates, each of which the log shows.
func BenchmarkIdleReads(b *testing.B) {
	type loop struct {
		name               string
		longPoll, seenOwns bool
		e                  *env
		c                  *conversation.Conversation
		base, n            int
		err                error
	}
	loops := []*loop{
		{name: "stream request"},
		{name: "long poll", longPoll: true},
		{name: "stream request, seen events under cursors of its own", seenOwns: true},
		{name: "long poll, seen events under cursors of its own", longPoll: true, seenOwns: true},
	}
	for _, l := range loops {
		e, rw, c, turn := afterTurn(b, poppytest.ConversationOptions{MaxWait: time.Millisecond}, realClock{})
		if l.seenOwns {
			raws := rawEvents(turn)
			rewritePages(rw, func(n int, page map[string]any) {
				page["events"], page["cursor"] = raws, fmt.Sprintf("pos_%d", n)
			})
		}
		l.e, l.c = e, c
	}
	b.ResetTimer()
	rctx, cancel := context.WithTimeout(ctx, idleWindow)
	defer cancel()
	var wg sync.WaitGroup
	start := time.Now()
	for _, l := range loops {
		l.base = len(reads(l.e))
		wg.Go(func() {
			for _, err := range l.c.Events(rctx, &conversation.EventsOptions{LongPoll: l.longPoll}) {
				if err != nil && rctx.Err() == nil {
					l.err = err
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	worst := 0.0
	for _, l := range loops {
		if l.err != nil {
			b.Fatalf("%s: %v", l.name, l.err)
		}
		l.n = len(reads(l.e)) - l.base
		if l.n < 1 {
			b.Fatalf("%s: implausible: %d reads", l.name, l.n)
		}
		rate := float64(l.n) / el.Seconds()
		b.Logf("%s: %d reads in %v, %.2f reads/s", l.name, l.n, el, rate)
		worst = max(worst, rate)
	}
	b.ReportMetric(worst, "reads/s")
}

// BenchmarkStuckCursorReads counts the reads sent to a Company that
// answers every read with has_more: true, no events and the same cursor,
// until the loop gives up with ErrCursorStuck (within stuckWindow).
func BenchmarkStuckCursorReads(b *testing.B) {
	e := &env{Env: testenv.New(b, &poppytest.Options{Conversations: poppytest.ConversationOptions{Agent: quiet, MaxWait: time.Millisecond}}, &poppy.AgentOptions{Clock: realClock{}})}
	arm := stuckCompanyClock(b, e, 1<<30, realClock{})
	c := e.start(b, conversation.Text("Hello."), nil)
	collect(b, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	arm()
	base := len(reads(e))
	b.ResetTimer()
	rctx, cancel := context.WithTimeout(ctx, stuckWindow)
	defer cancel()
	start := time.Now()
	var last error
	for _, err := range c.Events(rctx, &conversation.EventsOptions{LongPoll: true}) {
		last = err
	}
	el := time.Since(start)
	b.StopTimer()
	n := len(reads(e)) - base
	if !errors.Is(last, conversation.ErrCursorStuck) {
		b.Fatalf("after %d reads in %v: %v, want ErrCursorStuck", n, el, last)
	}
	b.ReportMetric(float64(n)/el.Seconds(), "reads/s")
	b.ReportMetric(float64(n), "reads")
	b.Logf("%d reads in %v, ending with %v", n, el, last)
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
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.Srv.EndpointURL(poppytest.EndpointAPI)+"/poppy/conversations/"+c.ID()+"/events", nil)
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
		e.Srv.Conversations().Append(c.ID(), map[string]any{"type": "user_requested", "reason": strconv.Itoa(i)})
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
