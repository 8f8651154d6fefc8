package conversation_test

// A hostile or lazy Company on the reading side: answers that never move
// the cursor, long polls answered at once, pages of events of unknown
// types. Time is the fake Company's clock, which sleeps move forward: the
// gaps asserted are gaps of that clock, never of real time.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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

// countingStore counts the writes of conversation records (the cursor).
type countingStore struct {
	keystore.Store
	mu     sync.Mutex
	writes int
}

func (s *countingStore) Update(ctx context.Context, k keystore.Key, fn func([]byte) ([]byte, error)) error {
	if k.Kind == keystore.KindCursor {
		s.mu.Lock()
		s.writes++
		s.mu.Unlock()
	}
	return s.Store.Update(ctx, k, fn)
}

func (s *countingStore) cursorWrites() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// newEnvWith is newEnv with the agent's store and clock given.
func newEnvWith(t testing.TB, co poppytest.ConversationOptions, ao *poppy.AgentOptions) *env {
	t.Helper()
	e := &env{Env: testenv.New(t, &poppytest.Options{Conversations: co}, ao)}
	if ao != nil && ao.Store != nil {
		e.Store = ao.Store
	}
	e.sess = e.Session("alice")
	return e
}

// readGaps returns the fake-clock time between consecutive reads of rs.
func readGaps(rs []poppytest.Request) []time.Duration {
	var out []time.Duration
	for i := 1; i < len(rs); i++ {
		out = append(out, rs[i].Time.Sub(rs[i-1].Time))
	}
	return out
}

// cancelAfterReads cancels once the Company has seen n more reads, or
// after a minute, should the loop stop reading.
func cancelAfterReads(e *env, n int) (context.Context, context.CancelFunc) {
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	base := len(reads(e))
	go func() {
		for rctx.Err() == nil && len(reads(e)) < base+n {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	return rctx, cancel
}

// TestIdleReadsPaced (spec 7.5; once 900 reads in 2 s against a 1 ms
// MaxWait): a Company that answers long polls at once is read again after
// a pause that starts at 250 ms and doubles while nothing comes, up to 5 s.
func TestIdleReadsPaced(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, MaxWait: time.Millisecond})
	c := e.start(t, conversation.Text("Hello."), nil)
	collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	base := len(reads(e))
	rctx, cancel := cancelAfterReads(e, 9)
	defer cancel()
	for _, err := range c.Events(rctx, &conversation.EventsOptions{LongPoll: true}) {
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	checkPaced(t, "", reads(e)[base:])
}

// checkPaced fails unless the first 9 reads of rs are paced: 250 ms
// doubling to 5 s apart, by the fake's clock.
func checkPaced(t *testing.T, label string, rs []poppytest.Request) {
	t.Helper()
	gaps := readGaps(rs)
	if len(gaps) < 8 {
		t.Fatalf("%s%d reads", label, len(gaps)+1)
	}
	for i, g := range gaps[:8] {
		// The pause counts from the start of a read; the Company logs
		// its arrival, a little later.
		want := min(250*time.Millisecond<<i, 5*time.Second) * 95 / 100
		if g < want {
			t.Fatalf("%sread %d came %v after the one before, want at least %v (gaps %v)", label, i+1, g, want, gaps)
		}
	}
}

// afterTurn starts a conversation with the fake's default Company Agent,
// its requests through a rewriter and the agent on clock (nil: the fake's),
// and takes one turn: a message, and the reply read to the end of the
// turn. It returns the turn's events.
func afterTurn(t testing.TB, co poppytest.ConversationOptions, clock poppy.Clock) (*env, *rewriter, *conversation.Conversation, []conversation.Event) {
	t.Helper()
	e := newEnvWith(t, co, &poppy.AgentOptions{Clock: clock})
	rw := e.withRewriterClock(t, clock)
	c := e.start(t, conversation.Text("Hello."), nil)
	collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	if _, err := c.Send(ctx, conversation.Text("And the colour?"), nil); err != nil {
		t.Fatal(err)
	}
	turn := collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	if len(texts(turn)) != 2 {
		t.Fatalf("the turn: %v", texts(turn))
	}
	return e, rw, c, turn
}

// rewritePages has every JSON events read answered with the page the
// fake gave, changed by fn (n counts the reads from 1). A cursor fn sets
// that the fake doesn't know ("pos_…", a position named by a cursor of
// the Company's own) stands for the fake's cursor of that page: a later
// read from it reads from there.
func rewritePages(rw *rewriter, fn func(n int, page map[string]any)) {
	var mu sync.Mutex
	n := 0
	own := map[string]string{} // the Company's own cursor → the fake's
	isRead := func(req *http.Request) bool {
		return req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/events")
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	rw.pre = func(req *http.Request) {
		if !isRead(req) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		q := req.URL.Query()
		if fc, ok := own[q.Get("cursor")]; ok {
			q.Set("cursor", fc)
			req.URL.RawQuery = q.Encode()
		}
		if fc, ok := own[req.Header.Get("Last-Event-ID")]; ok {
			req.Header.Set("Last-Event-ID", fc)
		}
	}
	rw.fn = func(req *http.Request, resp *http.Response) *http.Response {
		if !isRead(req) || resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			return resp
		}
		var page map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
			return resp
		}
		fakeCursor, _ := page["cursor"].(string)
		mu.Lock()
		n++
		fn(n, page)
		if cur, _ := page["cursor"].(string); strings.HasPrefix(cur, "pos_") {
			own[cur] = fakeCursor
		}
		mu.Unlock()
		b, _ := json.Marshal(page)
		return replaceBody(resp, b)
	}
}

// rawEvents returns evs as the Company sent them, for a page's events.
func rawEvents(evs []conversation.Event) []any {
	out := make([]any, 0, len(evs))
	for _, ev := range evs {
		out = append(out, json.RawMessage(ev.Raw))
	}
	return out
}

// idleReads runs an Events loop until the Company has answered 9 more
// reads, and returns them with what the loop yielded (its cancellation
// aside).
func idleReads(t *testing.T, e *env, c *conversation.Conversation, opts *conversation.EventsOptions) ([]poppytest.Request, []conversation.Event) {
	t.Helper()
	base := len(reads(e))
	rctx, cancel := cancelAfterReads(e, 9)
	defer cancel()
	var evs []conversation.Event
	for ev, err := range c.Events(rctx, opts) {
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			continue
		}
		evs = append(evs, ev)
	}
	return reads(e)[base:], evs
}

// TestPA_7_5_06_CappedWaitAfterTurn: a Company that caps wait at 1 ms
// (spec 7.5 lets it) is read, after a turn, no faster than the pace of
// reads that bring nothing, in both read modes, whatever its empty answer
// says besides: the request's cursor, as spec 7.5 has it, a cursor of its
// own each time, has_more with a cursor of its own, or a cursor it then
// refuses.
func TestPA_7_5_06_CappedWaitAfterTurn(t *testing.T) {
	answers := []struct {
		name string
		fn   func(n int, page map[string]any)
	}{
		{"the request's cursor", func(int, map[string]any) {}},
		{"a cursor of its own", func(n int, page map[string]any) { page["cursor"] = fmt.Sprintf("pos_%d", n) }},
		{"has_more and a cursor of its own", func(n int, page map[string]any) {
			page["cursor"], page["has_more"] = fmt.Sprintf("pos_%d", n), true
		}},
		// The next read is refused with invalid_cursor, and the loop
		// recovers by reading from the beginning: every read.
		{"a cursor it then refuses", func(n int, page map[string]any) { page["cursor"] = fmt.Sprintf("gone_%d", n) }},
	}
	for _, a := range answers {
		for _, longPoll := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, LongPoll %v", a.name, longPoll), func(t *testing.T) {
				e, rw, c, _ := afterTurn(t, poppytest.ConversationOptions{MaxWait: time.Millisecond}, nil)
				rewritePages(rw, a.fn)
				cursor := c.Cursor()
				rs, evs := idleReads(t, e, c, &conversation.EventsOptions{LongPoll: longPoll})
				if len(evs) != 0 {
					t.Fatalf("%d events yielded", len(evs))
				}
				// PA-7.5-06: read again, without error, at the pace of
				// reads that bring nothing, with the same cursor when the
				// Company answered it.
				checkPaced(t, "", rs)
				for i, r := range rs {
					if got := query(t, r).Get("cursor"); a.name == "the request's cursor" && got != cursor {
						t.Fatalf("read %d from cursor %q, want %q", i, got, cursor)
					}
				}
			})
		}
	}
}

// TestPA_7_5_09_SeenEventsUnderMovingCursor: a Company that answers each
// long poll at once with events already handled, under a cursor that
// changes every time, forward to values of its own or back to earlier
// events, yields none of them (PA-7.5-09) and is read at the pace of
// reads that bring nothing, in both read modes; so is a Company that
// streams the events before Last-Event-ID again and closes each stream
// at once.
func TestPA_7_5_09_SeenEventsUnderMovingCursor(t *testing.T) {
	for _, longPoll := range []bool{false, true} {
		t.Run(fmt.Sprintf("LongPoll %v", longPoll), func(t *testing.T) {
			e, rw, c, turn := afterTurn(t, poppytest.ConversationOptions{MaxWait: time.Millisecond}, nil)
			raws := rawEvents(turn)
			rewritePages(rw, func(n int, page map[string]any) {
				page["events"] = raws
				switch n % 3 {
				case 0:
					page["cursor"] = fmt.Sprintf("pos_%d", n)
				case 1:
					page["cursor"] = turn[0].ID // back to the turn's first event
				default:
					page["cursor"] = fmt.Sprintf("pos_%d", 1000-n) // "earlier" values of its own
				}
			})
			rs, evs := idleReads(t, e, c, &conversation.EventsOptions{LongPoll: longPoll})
			// PA-7.5-09: events handled before are skipped.
			if len(evs) != 0 {
				t.Fatalf("%d events yielded again", len(evs))
			}
			checkPaced(t, "", rs)
		})
	}
	t.Run("stream", func(t *testing.T) {
		// A stream that replays the events before Last-Event-ID and closes
		// after the first.
		e, _, c, _ := afterTurn(t, poppytest.ConversationOptions{Streaming: true, CloseStreamAfter: 1}, nil)
		e.Srv.Conversations().SetFaults(poppytest.ConversationFaults{Replay: 2})
		rs, evs := idleReads(t, e, c, nil)
		if len(evs) != 0 {
			t.Fatalf("%d events yielded again", len(evs))
		}
		checkPaced(t, "", rs)
	})
}

// blockingClock is the fake clock, except that a sleep of at least block
// waits until its context ends (it says so on blocked first).
type blockingClock struct {
	*poppytest.OffsetClock
	block   time.Duration
	blocked chan struct{}
}

func (c *blockingClock) Sleep(ctx context.Context, d time.Duration) error {
	if d < c.block {
		return c.OffsetClock.Sleep(ctx, d)
	}
	select {
	case c.blocked <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestIdlePaceEndsOnSend: a message sent on the conversation ends the
// pause of an idle Events loop, so its reply is read at once.
func TestIdlePaceEndsOnSend(t *testing.T) {
	srv := poppytest.NewServer(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{MaxWait: time.Millisecond}})
	clock := &blockingClock{OffsetClock: srv.Clock(), block: time.Second, blocked: make(chan struct{}, 1)}
	e := &env{Env: testenv.NewOn(t, srv, &poppy.AgentOptions{Clock: clock})}
	e.sess = e.Session("alice")
	c := e.start(t, conversation.Text("Hello."), nil)
	collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	// A bound on the test, should the pause not end: the loop then fails.
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	go func() {
		<-clock.blocked // the loop pauses for a second or more
		if _, err := c.Send(ctx, conversation.Text("Still there?"), nil); err != nil {
			t.Error(err)
		}
	}()
	for ev, err := range c.Events(rctx, &conversation.EventsOptions{LongPoll: true}) {
		if err != nil {
			t.Fatalf("the pause did not end on Send: %v", err)
		}
		if ev.Type == conversation.EventMessage && ev.Message.Role == conversation.RoleCompany {
			break
		}
	}
}

// stuckCompany gives e a Session through which, once arm is called, every
// events read is answered with has_more: true, no events and the
// request's cursor; after limit reads it answers conversation_not_found,
// so that a loop that never gives up ends.
func stuckCompany(t testing.TB, e *env, limit int) (arm func()) {
	return stuckCompanyClock(t, e, limit, nil)
}

// stuckCompanyClock is stuckCompany with the agent's clock given (nil: the
// fake Company's).
func stuckCompanyClock(t testing.TB, e *env, limit int, clock poppy.Clock) (arm func()) {
	t.Helper()
	rw := e.withRewriterClock(t, clock)
	var mu sync.Mutex
	n, armed := 0, false
	rw.fn = func(req *http.Request, resp *http.Response) *http.Response {
		mu.Lock()
		defer mu.Unlock()
		if !armed || req.Method != http.MethodGet || !strings.HasSuffix(req.URL.Path, "/events") {
			return resp
		}
		n++
		over := n > limit
		resp.Header = http.Header{"Content-Type": {"application/json"}}
		if over {
			resp.StatusCode, resp.Status = http.StatusNotFound, "404 Not Found"
			return replaceBody(resp, []byte(`{"error":"conversation_not_found"}`))
		}
		cursor := "null"
		if cur := req.URL.Query().Get("cursor"); cur != "" {
			cursor = `"` + cur + `"`
		}
		resp.Body.Close()
		resp.StatusCode, resp.Status = http.StatusOK, "200 OK"
		return replaceBody(resp, []byte(`{"conversation_id":"x","events":[],"cursor":`+cursor+`,"has_more":true,"status":"working","responder":"agent"}`))
	}
	return func() {
		mu.Lock()
		armed = true
		mu.Unlock()
	}
}

// TestCursorStuck (spec 7.5; once 790–5,589 reads per second): a Company
// that answers has_more: true with no events and the same cursor is read
// again after a growing backoff, and after 5 such answers the loop ends
// with ErrCursorStuck, which is also ErrProtocol.
func TestCursorStuck(t *testing.T) {
	for _, stream := range []bool{false, true} {
		// MaxWait: the stuck answers replace the fake's, which should not
		// hold the long polls first.
		e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, Streaming: stream, MaxWait: time.Millisecond})
		arm := stuckCompany(t, e, 100)
		c := e.start(t, conversation.Text("Hello."), nil)
		collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
		arm()
		base := len(reads(e))
		var got error
		for _, err := range c.Events(ctx, &conversation.EventsOptions{LongPoll: !stream}) {
			got = err
		}
		rs := reads(e)[base:]
		if !errors.Is(got, conversation.ErrCursorStuck) || !errors.Is(got, conversation.ErrProtocol) {
			t.Fatalf("stream=%v: after %d reads: %v", stream, len(rs), got)
		}
		if len(rs) != 5 {
			t.Fatalf("stream=%v: %d reads, want 5", stream, len(rs))
		}
		// Each read again waits longer than the one before it.
		gaps := readGaps(rs)
		for i, g := range gaps {
			if g < 50*time.Millisecond<<i {
				t.Fatalf("stream=%v: gaps %v", stream, gaps)
			}
		}
	}
}

// TestUnknownEventsCheckpointPerPage (PA-7.5-04; once a keystore commit
// per skipped unknown event, 579 µs each on SQLite): a page of unknown
// events costs one cursor write, not one per event, and the cursor moves
// past them.
func TestUnknownEventsCheckpointPerPage(t *testing.T) {
	for _, stream := range []bool{false, true} {
		store := &countingStore{Store: keystore.NewMemory()}
		e := newEnvWith(t, poppytest.ConversationOptions{Agent: quiet, Streaming: stream, PageSize: 100}, &poppy.AgentOptions{Store: store})
		c := e.start(t, conversation.Text("Hello."), nil)
		collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
		var last string
		for range 500 {
			last = e.Srv.Conversations().Append(c.ID(), map[string]any{"type": "poll"})
		}
		e.Srv.Conversations().Say(c.ID(), poppytest.Reply{Text: "After the polls."})
		before := store.cursorWrites()
		evs := collect(t, c, nil, func(ev conversation.Event) bool { return ev.Type == conversation.EventMessage })
		writes := store.cursorWrites() - before
		if len(evs) != 1 {
			t.Fatalf("stream=%v: %d events yielded", stream, len(evs))
		}
		// Five pages of 100 (or a stream's bursts) and the message: a
		// handful of writes, against 501 with a write per event.
		if writes > 100 {
			t.Fatalf("stream=%v: %d cursor writes for 501 events", stream, writes)
		}
		if cur := savedCursor(t, e, c.ID()); cur != evs[0].ID {
			t.Fatalf("stream=%v: saved cursor %q, want %q (past %s)", stream, cur, evs[0].ID, last)
		}
	}
}
