package conversation_test

// What was handled is known by position (PA-7.5-09): resuming a stream,
// long histories, and the recoveries from invalid_cursor and
// cursor_expired never yield again an event the saved cursor covers.

import (
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

// longHistory is more events than the 1,024 IDs remembered by default,
// past the 1,306 with which duplicate skipping was seen to collapse.
const longHistory = 1400

// appendMany appends n user_requested events (a known type, so each is
// yielded) and returns their IDs.
func appendMany(e *env, id string, n int) []string {
	ids := make([]string, n)
	for i := range n {
		ids[i] = e.Srv.Conversations().Append(id, map[string]any{"type": "user_requested", "reason": "r" + strconv.Itoa(i)})
	}
	return ids
}

// companyEventIDs returns the IDs of the Company's events, in its order.
func companyEventIDs(t testing.TB, e *env, id string) []string {
	t.Helper()
	info, ok := e.Srv.Conversations().Get(id)
	if !ok {
		t.Fatalf("no conversation %s", id)
	}
	var out []string
	for _, raw := range info.Events {
		var ev struct{ ID string }
		json.Unmarshal(raw, &ev)
		out = append(out, ev.ID)
	}
	return out
}

// countIDs counts the Company events among evs by ID.
func countIDs(evs []conversation.Event) map[string]int {
	n := map[string]int{}
	for _, ev := range evs {
		if ev.ID != "" {
			n[ev.ID]++
		}
	}
	return n
}

// savedCursor returns the cursor in the conversation's keystore record.
func savedCursor(t testing.TB, e *env, id string) string {
	t.Helper()
	b, err := e.Store.Get(ctx, keystore.Key{Kind: keystore.KindCursor, User: "alice", Issuer: e.Srv.Issuer(), ID: id})
	if err != nil {
		t.Fatal(err)
	}
	var rec struct{ Cursor string }
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Cursor
}

// readAll reads until the conversation is closed and read to its end.
func readAll(t testing.TB, c *conversation.Conversation, opts *conversation.EventsOptions) []conversation.Event {
	t.Helper()
	return collect(t, c, opts, nil)
}

// TestPA_7_5_09_ResumeByStream: a Company that resumes a stream only from
// Last-Event-ID (it ignores a cursor query on a stream) gets the saved
// cursor as Last-Event-ID on the first stream request after Resume, and
// nothing handled comes again, across a history longer than the IDs
// remembered, and with the Company replaying events before the cursor.
func TestPA_7_5_09_ResumeByStream(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, Streaming: true, StreamIgnoresCursor: true})
	c := e.start(t, conversation.Text("Hello."), nil)
	first := appendMany(e, c.ID(), longHistory)
	got := collect(t, c, nil, func(ev conversation.Event) bool { return ev.ID == first[len(first)-1] })
	if n := len(countIDs(got)); n < longHistory {
		t.Fatalf("first process: %d events", n)
	}
	saved := savedCursor(t, e, c.ID())
	if saved != first[len(first)-1] {
		t.Fatalf("saved cursor %q, want the last event handled %q", saved, first[len(first)-1])
	}

	// A new process: Resume, and stream from the saved cursor, with the
	// Company sending the last 3 events before it again.
	e.Srv.Conversations().SetFaults(poppytest.ConversationFaults{Replay: 3})
	more := appendMany(e, c.ID(), 5)
	e.Srv.Conversations().Close(c.ID())
	c2, err := conversation.Resume(ctx, e.Session("alice"), c.ID(), nil)
	if err != nil {
		t.Fatal(err)
	}
	base := len(reads(e))
	again := readAll(t, c2, nil)
	r := reads(e)[base]
	// the first stream request carries the cursor as Last-Event-ID
	// (and as the cursor query, for a Company that answers JSON).
	if r.Header.Get("Last-Event-ID") != saved || query(t, r).Get("cursor") != saved {
		t.Fatalf("first stream request: Last-Event-ID %q, URL %s; want %q", r.Header.Get("Last-Event-ID"), r.URL, saved)
	}
	// PA-7.5-09: only the events after the saved cursor, each once.
	n := countIDs(again)
	for _, id := range first {
		if n[id] != 0 {
			t.Fatalf("event %s, handled before the restart, yielded %d times again (%d in all)", id, n[id], len(n))
		}
	}
	for _, id := range more {
		if n[id] != 1 {
			t.Fatalf("new event %s yielded %d times", id, n[id])
		}
	}
}

// sleepClock is the fake's clock, keeping what the SDK sleeps.
type sleepClock struct {
	*poppytest.OffsetClock
	mu     sync.Mutex
	sleeps []time.Duration
}

func (c *sleepClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.sleeps = append(c.sleeps, d)
	c.mu.Unlock()
	return c.OffsetClock.Sleep(ctx, d)
}

func (c *sleepClock) reset() {
	c.mu.Lock()
	c.sleeps = nil
	c.mu.Unlock()
}

// pauses returns the sleeps of at least d since the last reset.
func (c *sleepClock) pauses(d time.Duration) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []time.Duration
	for _, s := range c.sleeps {
		if s >= d {
			out = append(out, s)
		}
	}
	return out
}

// TestPA_7_5_09_LongHistoryRecovery: after invalid_cursor or
// cursor_expired the conversation is read from its beginning, and none of
// the more than 1,024 events handled before is yielded again; the events
// after them are, once. The history is skipped page after page at
// once: the refused read is the one that is paced.
func TestPA_7_5_09_LongHistoryRecovery(t *testing.T) {
	for _, tc := range []struct{ name, code string }{
		{"invalid_cursor", "invalid_cursor"},
		{"cursor_expired", "cursor_expired"},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(tc.name+"/stream="+strconv.FormatBool(stream), func(t *testing.T) {
				srv := poppytest.NewServer(t, &poppytest.Options{Conversations: poppytest.ConversationOptions{Agent: quiet, Streaming: stream}})
				clock := &sleepClock{OffsetClock: srv.Clock()}
				e := &env{Env: testenv.NewOn(t, srv, &poppy.AgentOptions{Clock: clock})}
				rw := e.withRewriterClock(t, clock)
				c := e.start(t, conversation.Text("Hello."), nil)
				first := appendMany(e, c.ID(), longHistory)
				collect(t, c, nil, func(ev conversation.Event) bool { return ev.ID == first[len(first)-1] })
				more := appendMany(e, c.ID(), 3)
				e.Srv.Conversations().Close(c.ID())
				// The Company refuses the next read's cursor once, though it
				// still holds every event (a cursor that expired as a token,
				// or that it no longer recognises).
				var mu sync.Mutex
				refused := false
				rw.fn = func(req *http.Request, resp *http.Response) *http.Response {
					mu.Lock()
					defer mu.Unlock()
					hasCursor := req.URL.Query().Has("cursor") || req.Header.Get("Last-Event-ID") != ""
					if req.Method != http.MethodGet || refused || !hasCursor {
						return resp
					}
					refused = true
					resp.Body.Close()
					status := http.StatusBadRequest
					if tc.code == "cursor_expired" {
						status = http.StatusGone
					}
					b := `{"error":"` + tc.code + `","error_description":"refused"}`
					resp.StatusCode, resp.Status = status, strconv.Itoa(status)
					resp.Header = http.Header{"Content-Type": {"application/json"}}
					return replaceBody(resp, []byte(b))
				}
				clock.reset()
				evs := readAll(t, c, nil)
				if !refused {
					t.Fatal("no read was refused")
				}
				if p := clock.pauses(250 * time.Millisecond); len(p) > 1 {
					t.Fatalf("the recovery paused %d times: %v", len(p), p)
				}
				// PA-7.5-09: nothing handled before is yielded again.
				n := countIDs(evs)
				for _, id := range first {
					if n[id] != 0 {
						dup := 0
						for _, id := range first {
							dup += n[id]
						}
						t.Fatalf("%d of %d events handled before were yielded again", dup, len(first))
					}
				}
				for _, id := range more {
					if n[id] != 1 {
						t.Fatalf("new event %s yielded %d times", id, n[id])
					}
				}
				// PA-7.5-11: cursor_expired says part of the conversation may be missing.
				gaps := 0
				for _, ev := range evs {
					if ev.Type == conversation.EventHistoryGap {
						gaps++
					}
				}
				if want := map[bool]int{true: 1, false: 0}[tc.code == "cursor_expired"]; gaps != want {
					t.Fatalf("%d history gaps", gaps)
				}
			})
		}
	}
}

// TestPA_7_5_10_ExpiredLongHistory: the Company dropped the events up to
// and past the cursor, and keeps more than a page of later ones: every
// event it still holds was never handled, and each is yielded once.
func TestPA_7_5_10_ExpiredLongHistory(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, PageSize: 50})
	c := e.start(t, conversation.Text("Hello."), nil)
	collect(t, c, nil, func(conversation.Event) bool { return true })
	later := appendMany(e, c.ID(), 120)
	e.Srv.Conversations().PurgeBefore(c.ID(), later[0])
	e.Srv.Conversations().Close(c.ID())
	evs := readAll(t, c, nil)
	n := countIDs(evs)
	// PA-7.5-10: nothing lost, nothing twice.
	for _, id := range companyEventIDs(t, e, c.ID()) {
		if n[id] != 1 {
			t.Fatalf("event %s yielded %d times", id, n[id])
		}
	}
	if evs[0].Type != conversation.EventHistoryGap {
		t.Fatalf("first event %s", evs[0].Type)
	}
}

// TestRememberEventsBoundsMemoryNotTheGuarantee: with 3 IDs
// remembered and the Company replaying 5 events before each cursor, no
// event is yielded twice: a page that holds the cursor's event again
// starts after it.
func TestRememberEventsBoundsMemoryNotTheGuarantee(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, PageSize: 6})
	c, err := conversation.Start(ctx, e.sess, conversation.Text("Hello."), &conversation.StartOptions{Options: conversation.Options{RememberEvents: 3}})
	if err != nil {
		t.Fatal(err)
	}
	e.Srv.Conversations().SetFaults(poppytest.ConversationFaults{Replay: 5})
	for i := range 16 {
		e.Srv.Conversations().Say(c.ID(), poppytest.Reply{Text: "Part " + string(rune('a'+i))})
	}
	e.Srv.Conversations().Close(c.ID())
	count := countIDs(collect(t, c, &conversation.EventsOptions{LongPoll: true}, nil))
	// PA-7.5-09
	if len(count) != 19 {
		t.Fatalf("%d distinct events", len(count))
	}
	for id, n := range count {
		if n != 1 {
			t.Errorf("event %s yielded %d times", id, n)
		}
	}
}

// TestPA_7_7_02_UntilIdleStreams: UntilIdle streams where the Company
// streams, text-delta pieces included, and gives the control back at the
// state event that ends the Company's turn; resumed at an idle cursor (a
// restart), it returns at once instead of waiting on a stream.
// untilIdle reads c's events with EventsOptions.UntilIdle to the end of
// the turn, failing at once if the loop goes on (readToEnd).
func untilIdle(t *testing.T, c *conversation.Conversation) []conversation.Event {
	t.Helper()
	return readToEnd(t, c, &conversation.EventsOptions{UntilIdle: true}, func(ev conversation.Event) bool {
		return ev.Type == conversation.EventState && ev.Status != conversation.StatusWorking
	})
}

func TestPA_7_7_02_UntilIdleStreams(t *testing.T) {
	release := make(chan struct{}, 4)
	// stop ends what waits on the SDK, so that a test that fails early
	// ends (the fake's Close waits for its Company Agent's turns).
	stop := make(chan struct{})
	e := newEnv(t, poppytest.ConversationOptions{Streaming: true, ReplyDelay: time.Nanosecond, Agent: func(tn *poppytest.Turn) {
		select {
		case <-release: // the reply comes once the SDK streams
		case <-stop:
			return
		}
		tn.Reply(poppytest.Reply{Text: "Thanks, I have noted that.", Deltas: []string{"Thanks, ", "I have noted that."}})
	}})
	t.Cleanup(func() { close(stop) }) // runs before the fake's Close
	// releaseOnStream lets the Company reply once a stream request came
	// (or a long poll that waits for the reply).
	releaseOnStream := func() {
		base := len(reads(e))
		go func() {
			for {
				for _, r := range reads(e)[base:] {
					if strings.Contains(r.Header.Get("Accept"), "text/event-stream") || query(t, r).Has("wait") {
						release <- struct{}{}
						return
					}
				}
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
	}
	releaseOnStream()
	c := e.start(t, conversation.Text("Hello."), nil)
	evs := untilIdle(t, c)
	deltas := 0
	for _, ev := range evs {
		if ev.Type == conversation.EventTextDelta {
			deltas++
		}
	}
	last := evs[len(evs)-1]
	// PA-7.7-02 with PA-7.6-06: the pieces, the message, then the end of
	// the turn gives the control back.
	if deltas != 2 || last.Type != conversation.EventState || last.Status != conversation.StatusIdle || len(texts(evs)) != 2 {
		t.Fatalf("%d pieces, %v; last event %s %s", deltas, texts(evs), last.Type, last.Status)
	}
	// The next turn, by stream again.
	releaseOnStream()
	if _, err := c.Send(ctx, conversation.Text("And the colour?"), nil); err != nil {
		t.Fatal(err)
	}
	if got := texts(untilIdle(t, c)); len(got) != 2 {
		t.Fatalf("second turn %v", got)
	}
	// A restart at an idle cursor: the loop returns, with nothing, and
	// opens no stream.
	c2, err := conversation.Resume(ctx, e.Session("alice"), c.ID(), nil)
	if err != nil {
		t.Fatal(err)
	}
	base := len(reads(e))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	streamed := make(chan bool, 1)
	go func() {
		// A loop that waits on a stream here would never return: end it.
		for rctx.Err() == nil {
			for _, r := range reads(e)[base:] {
				if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
					streamed <- true
					cancel()
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	for ev, err := range c2.Events(rctx, &conversation.EventsOptions{UntilIdle: true}) {
		if err != nil {
			t.Fatalf("after a restart at an idle cursor: %v", err)
		}
		t.Fatalf("event after a restart at an idle cursor: %+v", ev)
	}
	cancel()
	select {
	case <-streamed:
		t.Fatal("a stream was opened at an idle cursor")
	default:
	}
}
