package conversation_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/keystore"
	"github.com/poppyproto/poppy/poppytest"
)

// quiet is a Company Agent that says nothing: tests script the events.
func quiet(*poppytest.Turn) {}

func reads(e *env) []poppytest.Request {
	var out []poppytest.Request
	for _, r := range e.convRequests() {
		if r.Method == http.MethodGet {
			out = append(out, r)
		}
	}
	return out
}

func query(t testing.TB, r poppytest.Request) url.Values {
	u, err := url.Parse(r.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query()
}

func TestPA_7_5_ReadsAndCursor(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	c := e.start(t, conversation.Text("Hello."), nil)
	collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	first := reads(e)
	cur := c.Cursor()
	if _, err := c.Send(ctx, conversation.Text("More."), nil); err != nil {
		t.Fatal(err)
	}
	collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	// PA-7.5-01: the next read's cursor is the cursor the previous answer
	// gave (taken verbatim, with random IDs and pages: its own test).
	next := reads(e)[len(first)]
	if got := query(t, next).Get("cursor"); got == "" || got != cur {
		t.Fatalf("cursor %q, want %q", got, cur)
	}
}

func TestPA_7_5_02_RolesAndSenders(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: func(tn *poppytest.Turn) {
		tn.Reply(poppytest.Reply{Text: "An automated answer.", Sender: "agent"})
		tn.Reply(poppytest.Reply{Text: "A person's answer.", Sender: "human"})
	}})
	c := e.start(t, conversation.Text("Hello."), nil)
	evs := collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	var got []string
	for _, ev := range evs {
		if ev.Type == conversation.EventMessage {
			got = append(got, string(ev.Message.Role)+"/"+string(ev.Message.Sender))
		}
	}
	// PA-7.5-02, PA-7.7-06: role and sender as sent, both senders in one read.
	if strings.Join(got, ",") != "user/agent,company/agent,company/human" {
		t.Fatalf("got %v", got)
	}
}

func TestPA_7_5_03_StateEvents(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet})
	c := e.start(t, conversation.Text("Hello."), nil)
	e.Srv.Conversations().SetState(c.ID(), "idle", "human")
	var seen conversation.Responder
	for ev, err := range c.Events(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == conversation.EventState && ev.Responder == conversation.ResponderHuman {
			// PA-7.5-03, PA-7.7-05: both tracked, current inside the loop.
			seen = c.Responder()
			if c.Status() != conversation.StatusIdle {
				t.Fatalf("status %q", c.Status())
			}
			break
		}
	}
	if seen != conversation.ResponderHuman || c.Responder() != conversation.ResponderHuman {
		t.Fatalf("responder %q", seen)
	}
}

func TestPA_7_5_04_UnknownTypes(t *testing.T) {
	for _, stream := range []bool{false, true} {
		e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, Streaming: stream})
		c := e.start(t, conversation.Text("Hello."), nil)
		unknown := e.Srv.Conversations().Append(c.ID(), map[string]any{"type": "poll", "question": "?"})
		e.Srv.Conversations().Say(c.ID(), poppytest.Reply{Text: "After the poll."})
		evs := collect(t, c, nil, func(ev conversation.Event) bool {
			return ev.Type == conversation.EventMessage && ev.Message.Role == conversation.RoleCompany
		})
		for _, ev := range evs {
			if ev.ID == unknown {
				t.Fatal("unknown type yielded") // PA-7.5-04
			}
		}
		// The saved cursor moved past it.
		b, err := e.Store.Get(ctx, keystore.Key{Kind: keystore.KindCursor, User: "alice", Issuer: e.Srv.Issuer(), ID: c.ID()})
		if err != nil || !strings.Contains(string(b), evs[len(evs)-1].ID) {
			t.Fatalf("record %s, %v", b, err)
		}
		// An unknown type at the end moves the cursor too.
		unknown = e.Srv.Conversations().Append(c.ID(), map[string]any{"type": "poll"})
		e.Srv.Conversations().Close(c.ID())
		collect(t, c, nil, nil)
		_ = unknown
	}
}

func TestPA_7_5_06_EarlyReturnRepolls(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, MaxWait: 20 * time.Millisecond})
	c := e.start(t, conversation.Text("Hello."), nil)
	collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	cur := c.Cursor()
	base := len(reads(e))
	n := 0
	go func() {
		for len(reads(e)) < base+4 {
			time.Sleep(time.Millisecond)
		}
		e.Srv.Conversations().Say(c.ID(), poppytest.Reply{Text: "Finally."})
	}()
	collect(t, c, &conversation.EventsOptions{LongPoll: true}, func(ev conversation.Event) bool { return ev.Type == conversation.EventMessage })
	for _, r := range reads(e)[base:] {
		q := query(t, r)
		// PA-7.5-06: the same cursor, without error, until events come.
		if q.Get("cursor") == cur {
			n++
		}
		if q.Get("wait") != "30" {
			t.Fatalf("wait %q", q.Get("wait"))
		}
	}
	if n < 3 {
		t.Fatalf("%d re-polls with the same cursor", n)
	}
}

func TestPA_7_5_07_HasMore(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, PageSize: 3})
	c := e.start(t, conversation.Text("Hello."), nil)
	for i := range 8 {
		e.Srv.Conversations().Say(c.ID(), poppytest.Reply{Text: "Part " + string(rune('a'+i))})
	}
	e.Srv.Conversations().SetState(c.ID(), "idle", "agent")
	evs := collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	if len(evs) != 10 {
		t.Fatalf("%d events", len(evs))
	}
	rs := reads(e)
	// PA-7.5-07: follow-up reads go out at once, without wait, until
	// has_more is false.
	if len(rs) != 4 {
		t.Fatalf("%d reads", len(rs))
	}
	for _, r := range rs[1:] {
		if query(t, r).Has("wait") {
			t.Errorf("follow-up read with wait: %s", r.URL)
		}
	}
}

func TestPA_7_5_08_CursorAfterHandling(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet})
	c := e.start(t, conversation.Text("Hello."), nil)
	e.Srv.Conversations().Say(c.ID(), poppytest.Reply{Text: "One."})
	e.Srv.Conversations().Say(c.ID(), poppytest.Reply{Text: "Two."})
	var firstID string
	func() {
		defer func() { recover() }()
		for ev, err := range c.Events(ctx, nil) {
			if err != nil {
				t.Fatal(err)
			}
			if ev.Message != nil && ev.Message.Text == "Two." {
				panic("handler fails")
			}
			firstID = ev.ID
		}
	}()
	// PA-7.5-08: the persisted cursor is the last event handled.
	b, _ := e.Store.Get(ctx, keystore.Key{Kind: keystore.KindCursor, User: "alice", Issuer: e.Srv.Issuer(), ID: c.ID()})
	var rec struct{ Cursor string }
	json.Unmarshal(b, &rec)
	if rec.Cursor != firstID || firstID == "" {
		t.Fatalf("cursor %q, want %q", rec.Cursor, firstID)
	}
	// A restart delivers "Two." again.
	c2, err := conversation.Resume(ctx, e.Session("alice"), c.ID(), nil)
	if err != nil {
		t.Fatal(err)
	}
	evs := collect(t, c2, nil, func(conversation.Event) bool { return true })
	if evs[0].Message == nil || evs[0].Message.Text != "Two." {
		t.Fatalf("first event after restart: %+v", evs[0])
	}
}

func TestPA_7_5_09_SkipsReplayedEvents(t *testing.T) {
	for _, stream := range []bool{false, true} {
		e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, Streaming: stream, CloseStreamAfter: 3})
		e.Srv.Conversations().SetFaults(poppytest.ConversationFaults{Replay: 2})
		c := e.start(t, conversation.Text("Hello."), nil)
		for i := range 10 {
			e.Srv.Conversations().Say(c.ID(), poppytest.Reply{Text: "Part " + string(rune('a'+i))})
		}
		e.Srv.Conversations().Close(c.ID())
		count := map[string]int{}
		for _, ev := range collect(t, c, &conversation.EventsOptions{LongPoll: !stream}, nil) {
			count[ev.ID]++
		}
		// PA-7.5-09: once per event ID, though the Company sent some twice.
		if len(count) != 13 { // the message, idle, ten parts, closed
			t.Fatalf("stream=%v: %d distinct events", stream, len(count))
		}
		for id, n := range count {
			if n != 1 {
				t.Errorf("event %s yielded %d times", id, n)
			}
		}
	}
}

func TestPA_7_5_10_CursorExpired(t *testing.T) {
	for _, stream := range []bool{false, true} {
		e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, Streaming: stream})
		c := e.start(t, conversation.Text("Hello."), nil)
		collect(t, c, nil, func(conversation.Event) bool { return true })
		var last string
		for i := range 5 {
			last = e.Srv.Conversations().Append(c.ID(), map[string]any{"type": "user_requested", "reason": "r" + string(rune('0'+i))})
		}
		e.Srv.Conversations().PurgeBefore(c.ID(), last)
		e.Srv.Conversations().Close(c.ID())
		evs := collect(t, c, nil, nil)
		// PA-7.5-11: one history gap, then the rest.
		gaps := 0
		for _, ev := range evs {
			if ev.Type == conversation.EventHistoryGap {
				gaps++
			}
		}
		if gaps != 1 || evs[0].Type != conversation.EventHistoryGap || evs[1].ID != last {
			t.Fatalf("stream=%v events %v", stream, evs)
		}
		// PA-7.5-10: after the 410 the next read has no cursor.
		rs := reads(e)
		var after *poppytest.Request
		for i, r := range rs {
			if r.ErrorCode == "cursor_expired" {
				after = &rs[i+1]
			}
		}
		if after == nil || query(t, *after).Has("cursor") || after.Header.Get("Last-Event-ID") != "" {
			t.Fatalf("stream=%v read after the 410: %+v", stream, after)
		}
	}
}

func TestInvalidCursor(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet})
	rw := e.withRewriter(t)
	c := e.start(t, conversation.Text("Hello."), nil)
	e.Srv.Conversations().Say(c.ID(), poppytest.Reply{Text: "One."})
	collect(t, c, nil, func(ev conversation.Event) bool {
		return ev.Type == conversation.EventMessage && ev.Message.Text == "One."
	})
	e.Srv.Conversations().Say(c.ID(), poppytest.Reply{Text: "Two."})
	var once bool
	rw.fn = func(req *http.Request, resp *http.Response) *http.Response {
		return resp
	}
	// The next read goes out with a cursor the Company doesn't know.
	rw.base = roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet && !once && req.URL.Query().Has("cursor") {
			once = true
			q := req.URL.Query()
			q.Set("cursor", "evt_unknown")
			req.URL.RawQuery = q.Encode()
		}
		return e.Srv.Client().Transport.RoundTrip(req)
	})
	evs := collect(t, c, nil, func(ev conversation.Event) bool {
		return ev.Type == conversation.EventMessage && ev.Message.Text == "Two."
	})
	// PA-7.13-03: the read after the 400 has no cursor, and nothing
	// handled before is yielded again.
	if len(texts(evs)) != 1 || texts(evs)[0] != "company:Two." {
		t.Fatalf("events %v", texts(evs))
	}
	rs := reads(e)
	for i, r := range rs {
		if r.ErrorCode == "invalid_cursor" && (i+1 >= len(rs) || query(t, rs[i+1]).Has("cursor")) {
			t.Fatalf("the read after invalid_cursor: %v", rs[i+1:])
		}
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestPA_7_6_Streaming(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Streaming: true, TextDeltas: true, Heartbeats: true})
	c := e.start(t, conversation.Text("Hello."), nil)
	streamed := collect(t, c, nil, isIdle)
	// PA-7.6-01: Accept: text/event-stream.
	if r := reads(e)[0]; !strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		t.Fatalf("Accept %q", r.Header.Get("Accept"))
	}
	// PA-7.6-03: pings and split data lines give the same events as JSON.
	c2, err := conversation.Resume(ctx, e.Session("alice"), c.ID(), nil)
	if err != nil {
		t.Fatal(err)
	}
	e.Store.Update(ctx, keystore.Key{Kind: keystore.KindCursor, User: "alice", Issuer: e.Srv.Issuer(), ID: c.ID()}, func([]byte) ([]byte, error) { return nil, nil })
	c2, _ = conversation.Resume(ctx, e.Session("alice"), c.ID(), nil)
	polled := collect(t, c2, &conversation.EventsOptions{LongPoll: true}, isIdle)
	var a, b []string
	compact := func(raw []byte) string {
		var buf bytes.Buffer
		json.Compact(&buf, raw)
		return buf.String()
	}
	for _, ev := range streamed {
		if !ev.Provisional() {
			a = append(a, compact(ev.Raw))
		}
	}
	for _, ev := range polled {
		b = append(b, compact(ev.Raw))
	}
	if len(a) < 3 {
		t.Fatalf("streamed %v", a)
	}
	if strings.Join(a, "\n") != strings.Join(b, "\n") {
		t.Fatalf("streamed\n%v\npolled\n%v", a, b)
	}
	// PA-7.6-06: pieces first, then the message with the same ID.
	var pieces []string
	var msgID string
	for _, ev := range streamed {
		switch {
		case ev.Type == conversation.EventTextDelta:
			pieces = append(pieces, ev.Delta.Text)
			msgID = ev.Delta.MessageID
		case ev.Type == conversation.EventMessage && ev.Message.Role == conversation.RoleCompany:
			if ev.Message.ID != msgID || strings.Join(pieces, "") != ev.Message.Text {
				t.Fatalf("pieces %q for %s, message %q %s", pieces, msgID, ev.Message.Text, ev.Message.ID)
			}
		}
	}
}

func TestPA_7_6_02_JSONFallback(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	c := e.start(t, conversation.Text("Hello."), nil)
	evs := collect(t, c, nil, isIdle)
	// PA-7.6-02: asked for a stream, got JSON: delivered all the same, and
	// later reads are long polls.
	if len(texts(evs)) != 2 {
		t.Fatalf("events %v", texts(evs))
	}
	if _, err := c.Send(ctx, conversation.Text("More."), nil); err != nil {
		t.Fatal(err)
	}
	if len(texts(collect(t, c, nil, isIdle))) != 2 {
		t.Fatal("second turn")
	}
}

func TestPA_7_6_04_ReconnectWithLastEventID(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, Streaming: true, CloseStreamAfter: 2})
	c := e.start(t, conversation.Text("Hello."), nil)
	for i := range 5 {
		e.Srv.Conversations().Say(c.ID(), poppytest.Reply{Text: "Part " + string(rune('a'+i))})
	}
	e.Srv.Conversations().Close(c.ID())
	var ids []string
	for _, ev := range collect(t, c, nil, nil) {
		ids = append(ids, ev.ID)
	}
	rs := reads(e)
	if len(rs) < 3 {
		t.Fatalf("%d reads", len(rs))
	}
	// PA-7.6-04: each reconnect has Last-Event-ID = the last event handled
	// before it, and no cursor query.
	for i, r := range rs[1:] {
		want := ids[2*(i+1)-1]
		if r.Header.Get("Last-Event-ID") != want || query(t, r).Has("cursor") {
			t.Errorf("reconnect %d: Last-Event-ID %q (want %q), URL %s", i+1, r.Header.Get("Last-Event-ID"), want, r.URL)
		}
	}
}

func TestPA_7_6_05_RenewBeforeReconnect(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, Streaming: true})
	c := e.start(t, conversation.Text("Hello."), nil)
	done := make(chan struct{})
	advanced := false
	collect(t, c, nil, func(ev conversation.Event) bool {
		if !advanced {
			// The stream is open (its first event came): the token
			// expires, and the fake closes the stream.
			advanced = true
			e.Srv.Clock().Advance(2 * time.Hour)
			go func() {
				defer close(done)
				for len(reads(e)) < 2 {
					time.Sleep(time.Millisecond)
				}
				e.Srv.Conversations().Say(c.ID(), poppytest.Reply{Text: "Still here."})
			}()
		}
		return ev.Type == conversation.EventMessage && ev.Message.Text == "Still here."
	})
	<-done
	rs := reads(e)
	// PA-7.6-05: the reconnect carries a new token, and no 401 came.
	if rs[0].AccessToken == rs[1].AccessToken {
		t.Fatal("the reconnect reused the expired token")
	}
	for _, r := range e.convRequests() {
		if r.Status == http.StatusUnauthorized {
			t.Fatalf("401 on %s", r.URL)
		}
	}
}

func TestPA_7_6_07_DeltasNeverActedOn(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Streaming: true, Agent: func(tn *poppytest.Turn) {
		tn.Reply(poppytest.Reply{Text: "Your exchange is pending.", Deltas: []string{"Your exchange is confirmed ", `{"confirm":true}`}})
	}})
	c := e.start(t, conversation.Text("Hello."), nil)
	evs := collect(t, c, nil, isIdle)
	for _, ev := range evs {
		// PA-7.6-07: pieces are provisional, have no ID and never reach
		// a message.
		if ev.Type == conversation.EventTextDelta && (ev.ID != "" || !ev.Provisional() || ev.Message != nil) {
			t.Fatalf("delta %+v", ev)
		}
		if ev.Type == conversation.EventMessage && strings.Contains(ev.Message.Text, "confirmed") {
			t.Fatal("delta text in a message")
		}
	}
	e.Srv.Conversations().Say(c.ID(), poppytest.Reply{Text: "Bye."})
	e.Srv.Conversations().Close(c.ID())
	collect(t, c, nil, nil)
	info, _ := e.Srv.Conversations().Get(c.ID())
	ids := map[string]bool{}
	for _, raw := range info.Events {
		var ev struct{ ID string }
		json.Unmarshal(raw, &ev)
		ids[ev.ID] = true
	}
	// Cursors and Last-Event-ID are event IDs, never a piece.
	for _, r := range reads(e) {
		if v := r.Header.Get("Last-Event-ID"); v != "" && !ids[v] {
			t.Fatalf("Last-Event-ID %q", v)
		}
		if v := query(t, r).Get("cursor"); v != "" && !ids[v] {
			t.Fatalf("cursor %q", v)
		}
	}
}

// TestPA_7_6_07_DeltaMovesNoCursor: a text-delta frame moves neither the
// cursor nor Last-Event-ID, even one that comes with an SSE id (here the
// ID of a later event, which would skip the events before it) and one
// after it, to which the SSE parser carries that id over.
func TestPA_7_6_07_DeltaMovesNoCursor(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, Streaming: true})
	rw := e.withRewriter(t)
	c := e.start(t, conversation.Text("Hello."), nil)
	collect(t, c, &conversation.EventsOptions{LongPoll: true, UntilIdle: true}, nil)
	ids := appendMany(e, c.ID(), 3)
	e.Srv.Conversations().Close(c.ID())
	var first string
	info, _ := e.Srv.Conversations().Get(c.ID())
	for _, raw := range info.Events {
		if strings.Contains(string(raw), ids[0]) {
			first = string(raw)
		}
	}
	// The first stream brings the first event and two pieces, then ends.
	var mu sync.Mutex
	canned := false
	rw.fn = func(req *http.Request, resp *http.Response) *http.Response {
		mu.Lock()
		defer mu.Unlock()
		if req.Method != http.MethodGet || canned || !strings.Contains(req.Header.Get("Accept"), "text/event-stream") {
			return resp
		}
		canned = true
		resp.Body.Close()
		return replaceBody(resp, []byte("id: "+ids[0]+"\ndata: "+first+"\n\n"+
			"event: text-delta\nid: "+ids[2]+"\ndata: {\"message_id\":\"msg_piece\",\"text\":\"Your order is confirmed\"}\n\n"+
			"event: text-delta\ndata: {\"message_id\":\"msg_piece\",\"text\":\" and paid.\"}\n\n"))
	}
	base := len(reads(e))
	var got []string
	pieces := 0
	for ev, err := range c.Events(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if ev.Type == conversation.EventTextDelta {
			pieces++
			// PA-7.6-07: the cursor is still the last event handled.
			if cur := c.Cursor(); cur != ids[0] {
				t.Fatalf("a text-delta moved the cursor to %q (want %q)", cur, ids[0])
			}
			continue
		}
		if ev.ID != "" {
			got = append(got, ev.ID)
		}
	}
	if pieces != 2 {
		t.Fatalf("%d pieces", pieces)
	}
	// PA-7.6-07: the reconnect resumes after the last event handled, and
	// the events between it and the piece's id are not lost.
	rs := reads(e)[base:]
	if len(rs) < 2 || rs[1].Header.Get("Last-Event-ID") != ids[0] {
		t.Fatalf("reconnect: %+v", rs)
	}
	if len(got) < 3 || got[0] != ids[0] || got[1] != ids[1] || got[2] != ids[2] {
		t.Fatalf("events %v, want %v first", got, ids)
	}
}

// TestPA_7_5_05_ArrayOrderAndVerbatimCursor: with random, non-monotonic
// IDs and pages of 3, events are handled in the order of each answer's
// array, and each read after the first sends the cursor of the answer
// before it, verbatim.
func TestPA_7_5_05_ArrayOrderAndVerbatimCursor(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, OddIDs: true, PageSize: 3})
	rw := e.withRewriter(t)
	type exchange struct{ sent, answered string }
	var mu sync.Mutex
	var log []exchange
	rw.fn = func(req *http.Request, resp *http.Response) *http.Response {
		if req.Method != http.MethodGet || resp.StatusCode != http.StatusOK {
			return resp
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var p struct{ Cursor *string }
		json.Unmarshal(b, &p)
		x := exchange{sent: req.URL.Query().Get("cursor")}
		if p.Cursor != nil {
			x.answered = *p.Cursor
		}
		mu.Lock()
		log = append(log, x)
		mu.Unlock()
		return replaceBody(resp, b)
	}
	c := e.start(t, conversation.Text("Hello."), nil)
	appendMany(e, c.ID(), 14)
	e.Srv.Conversations().Close(c.ID())
	var got []string
	for _, ev := range collect(t, c, &conversation.EventsOptions{LongPoll: true}, nil) {
		got = append(got, ev.ID)
	}
	want := companyEventIDs(t, e, c.ID())
	sorted := slices.Sorted(slices.Values(want))
	reversed := slices.Clone(want)
	slices.Reverse(reversed)
	if slices.Equal(sorted, want) || slices.Equal(sorted, reversed) {
		t.Fatalf("the IDs are in order, the test shows nothing: %v", want)
	}
	// PA-7.5-05: the order of the arrays, never an order of the IDs.
	if !slices.Equal(got, want) {
		t.Fatalf("handled in the order\n%v\nthe Company's order is\n%v", got, want)
	}
	// PA-7.5-05: the next read's cursor is the answer's, verbatim.
	if len(log) < 5 {
		t.Fatalf("%d reads", len(log))
	}
	for i := 1; i < len(log); i++ {
		if log[i].sent != log[i-1].answered {
			t.Fatalf("read %d sent cursor %q, the answer before gave %q", i, log[i].sent, log[i-1].answered)
		}
	}
}

func TestPA_7_6_08_DropPartialPieces(t *testing.T) {
	// The stream is cut after the user message and the first piece; the
	// rest comes on the reconnect.
	e := newEnv(t, poppytest.ConversationOptions{Streaming: true, TextDeltas: true})
	e.Srv.Conversations().Cut(2)
	c := e.start(t, conversation.Text("Hello."), nil)
	evs := collect(t, c, nil, isIdle)
	var order []string
	for _, ev := range evs {
		order = append(order, string(ev.Type))
	}
	// PA-7.6-08: the pieces of the cut message are voided, and the message
	// comes in full once.
	dropped := false
	for _, ev := range evs {
		if ev.Type == conversation.EventPartialDropped {
			dropped = true
		}
	}
	if !dropped || len(texts(evs)) != 2 || texts(evs)[1] != "company:Thanks, I have noted that." {
		t.Fatalf("events %v", order)
	}
}

func TestPA_7_7_Status(t *testing.T) {
	release := make(chan struct{})
	e := newEnv(t, poppytest.ConversationOptions{ReplyDelay: time.Nanosecond, Agent: func(tn *poppytest.Turn) {
		<-release
		tn.Say("Thanks, I have noted that.")
	}})
	c := e.start(t, conversation.Text("Hello."), nil)
	// PA-7.7-01: working → read again; PA-7.7-02: return once idle.
	if c.Status() != conversation.StatusWorking {
		t.Fatalf("status %q", c.Status())
	}
	go func() {
		for len(reads(e)) < 1 {
			time.Sleep(time.Millisecond)
		}
		close(release) // the reply comes while the SDK is reading
	}()
	evs := collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	if c.Status() != conversation.StatusIdle || len(texts(evs)) != 2 {
		t.Fatalf("status %q, %v", c.Status(), texts(evs))
	}
	if len(reads(e)) < 1 {
		t.Fatal("no read")
	}
	// PA-7.7-04: after a closed state, Send fails locally.
	e.Srv.Conversations().Close(c.ID())
	collect(t, c, nil, nil)
	before := len(e.convRequests())
	if _, err := c.Send(ctx, conversation.Text("Hi?"), nil); !errors.Is(err, conversation.ErrConversationClosed) {
		t.Fatalf("err = %v", err)
	}
	// PA-7.12-02: the loop ended; PA-7.12-03: the history stays readable.
	if n := len(e.convRequests()); n != before {
		t.Fatal("a request was sent")
	}
	c3, _ := conversation.Resume(ctx, e.Session("alice"), c.ID(), nil)
	e.Store.Update(ctx, keystore.Key{Kind: keystore.KindCursor, User: "alice", Issuer: e.Srv.Issuer(), ID: c.ID()}, func([]byte) ([]byte, error) { return nil, nil })
	c3, _ = conversation.Resume(ctx, e.Session("alice"), c.ID(), nil)
	if hist := collect(t, c3, nil, nil); len(texts(hist)) != 2 {
		t.Fatalf("history %v", texts(hist))
	}
}

func TestStreamIdleReconnect(t *testing.T) {
	// A stream that sends nothing for StreamIdleTimeout is reconnected.
	e := newEnv(t, poppytest.ConversationOptions{Agent: quiet, Streaming: true})
	c, err := conversation.Start(ctx, e.sess, conversation.Text("Hello."), &conversation.StartOptions{Options: conversation.Options{StreamIdleTimeout: 30 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	collect(t, c, nil, isIdle)
	base := len(reads(e))
	go func() {
		for len(reads(e)) < base+3 {
			time.Sleep(time.Millisecond)
		}
		e.Srv.Conversations().Say(c.ID(), poppytest.Reply{Text: "After the quiet."})
	}()
	evs := collect(t, c, nil, func(ev conversation.Event) bool { return ev.Type == conversation.EventMessage })
	if evs[0].Message.Text != "After the quiet." {
		t.Fatalf("events %v", texts(evs))
	}
	for _, r := range reads(e)[base+1:] {
		if r.Header.Get("Last-Event-ID") == "" {
			t.Fatalf("reconnect without Last-Event-ID: %s", r.URL)
		}
	}
}
