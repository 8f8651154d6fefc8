package conversation_test

// A hostile Company's answers: the bounds of one answer's work, and its
// text on every way it reaches a person or a model.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/companytext/companytexttest"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/poppytest"
)

// hostileEnv is newEnv with the agent's requests going through a Hostile
// in front of the fake.
func hostileEnv(t testing.TB, co poppytest.ConversationOptions) (*env, *testenv.Hostile) {
	t.Helper()
	e := &env{Env: testenvNew(t, &poppytest.Options{Conversations: co})}
	h := testenv.NewHostile(e.Srv.Transport())
	e.Agent = e.NewAgent(&poppy.AgentOptions{HTTPClient: &http.Client{Transport: h}})
	e.sess = e.Session("alice")
	return e, h
}

// hugeAnswer makes every start's answer carry n events of type typ
// ("e000000", "e000001", ... and, with dup, each ID twice, the second
// copy n/2 events after the first) before the
// fake's own, as a hostile Company did: 116,313 events of an
// unknown type in about 3 MiB. The cursor stays the fake's.
func hugeAnswer(h *testenv.Hostile, n int, typ string, dup bool) {
	h.On("/poppy/conversations", func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusCreated {
			return resp, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var m map[string]json.RawMessage
		json.Unmarshal(b, &m)
		var evs []json.RawMessage
		json.Unmarshal(m["events"], &evs)
		var buf bytes.Buffer
		buf.WriteString(`{"conversation_id":` + string(m["conversation_id"]) + `,"status":` + string(m["status"]) + `,"responder":` + string(m["responder"]) + `,"has_more":false,"cursor":` + string(m["cursor"]) + `,"events":[`)
		for i := range n {
			id := i
			if dup {
				id = i % (n / 2) // each twice, far apart
			}
			if typ == "user_requested" {
				fmt.Fprintf(&buf, `{"id":"e%06d","type":%q,"reason":"r"},`, id, typ)
			} else {
				fmt.Fprintf(&buf, `{"id":"e%06d","type":%q},`, id, typ)
			}
		}
		for _, ev := range evs {
			buf.Write(ev)
			buf.WriteByte(',')
		}
		buf.Truncate(buf.Len() - 1)
		buf.WriteString(`]}`)
		testenv.SetBody(resp, buf.Bytes())
		return resp, nil
	})
}

// TestHostileAnswerEventsBounded: an answer to Start carrying 116,313
// events (3 MiB) is refused for its number, with ErrTooManyEvents, in
// bounded work: none of its events is taken, yet nothing is lost. The
// start is held and the conversation recorded (Start returns it, List
// lists it, Sent has its start), and the next Events loop reads the
// conversation from the Company, page by page.
func TestHostileAnswerEventsBounded(t *testing.T) {
	e, h := hostileEnv(t, poppytest.ConversationOptions{})
	hugeAnswer(h, 116_313, "x", false)
	c, err := conversation.Start(ctx, e.sess, conversation.Text("Hello."), &conversation.StartOptions{Wait: time.Second})
	if !errors.Is(err, conversation.ErrTooManyEvents) || !errors.Is(err, conversation.ErrProtocol) {
		t.Fatalf("err = %v, want ErrTooManyEvents", err)
	}
	if c == nil || c.ID() != e.Srv.Conversations().All()[0].ID {
		t.Fatalf("Start returned %v, the Company started %+v", c, e.Srv.Conversations().All())
	}
	if convs, _ := conversation.List(ctx, e.sess, nil); len(convs) != 1 || convs[0].ID() != c.ID() {
		t.Fatalf("List = %v", convs)
	}
	if sent, _ := c.Sent(ctx); len(sent) != 1 || sent[0].State != conversation.MessageHeld {
		t.Fatalf("Sent = %+v", sent)
	}
	if p, _ := conversation.Pending(ctx, e.sess); len(p) != 0 {
		t.Fatalf("the start is still pending: %+v", p)
	}
	// None of the answer's events was taken: the loop reads the
	// Company's own, from the beginning.
	evs := collect(t, c, &conversation.EventsOptions{UntilIdle: true}, nil)
	got := texts(evs)
	if len(got) != 2 || got[0] != "user:Hello." || !strings.HasPrefix(got[1], "company:") {
		t.Fatalf("events %v", got)
	}
	for _, ev := range evs {
		if strings.HasPrefix(ev.ID, "e0") {
			t.Fatalf("an event of the refused answer was yielded: %s", ev.ID)
		}
	}
}

// TestAnswerEventsLinearOnce: with the bound lifted, an answer's events
// are taken in linear time (BenchmarkStartHugeAnswer) and each once,
// though the answer names each twice, 10,000 events apart: further than
// the handled IDs remembered, so only the answer's own set skips the
// second (PA-7.3-08).
func TestAnswerEventsLinearOnce(t *testing.T) {
	e, h := hostileEnv(t, poppytest.ConversationOptions{})
	const n = 20_000
	hugeAnswer(h, n, "user_requested", true)
	c, err := conversation.Start(ctx, e.sess, conversation.Text("Hello."), &conversation.StartOptions{Wait: time.Second, Options: conversation.Options{MaxAnswerEvents: 2*n + 10}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	hostile := 0
	for ev, err := range c.Events(ctx, &conversation.EventsOptions{UntilIdle: true}) {
		if err != nil {
			t.Fatal(err)
		}
		if seen[ev.ID]++; seen[ev.ID] > 1 {
			t.Fatalf("event %s yielded twice", ev.ID)
		}
		if strings.HasPrefix(ev.ID, "e0") {
			hostile++
		}
	}
	if hostile != n/2 {
		t.Fatalf("%d of the answer's %d events yielded", hostile, n/2)
	}
}

// cpuTime is the process's user and system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStartHugeAnswer: CPU of a Start whose answer carries the
// 116,313 events of that hostile answer (about 3 MiB), all taken (the bound lifted),
// against the floor in the same run: decoding the same answer and each of
// its events with encoding/json, which any reading of it must do. Bounded
// (the default MaxAnswerEvents) the answer is refused after the first
// decode. It fails when taking the answer costs more than 20 times the
// floor (the quadratic code cost about 300 times).
//
//	go test -run '^$' -bench StartHugeAnswer -benchtime 3x ./conversation
func BenchmarkStartHugeAnswer(b *testing.B) {
	const n = 116_313
	var body []byte
	floor := func() time.Duration {
		var ans struct {
			Events []json.RawMessage `json:"events"`
		}
		t0 := cpuTime()
		json.Unmarshal(body, &ans)
		for _, raw := range ans.Events {
			var ev struct{ ID, Type string }
			json.Unmarshal(raw, &ev)
		}
		return cpuTime() - t0
	}
	run := func(b *testing.B, max int) time.Duration {
		e, h := hostileEnv(b, poppytest.ConversationOptions{Agent: quiet})
		hugeAnswer(h, n, "x", false)
		var total time.Duration
		for b.Loop() {
			t0 := cpuTime()
			c, err := conversation.Start(ctx, e.sess, conversation.Text("Hello."), &conversation.StartOptions{Wait: time.Second, Options: conversation.Options{MaxAnswerEvents: max}})
			total += cpuTime() - t0
			if max > n && err != nil || max <= n && !errors.Is(err, conversation.ErrTooManyEvents) || c == nil {
				b.Fatalf("Start: %v", err)
			}
		}
		per := total / time.Duration(b.N)
		b.ReportMetric(per.Seconds(), "cpu-s/answer")
		return per
	}
	// The floor's body: the answer as the hostile Company sends it.
	{
		var buf bytes.Buffer
		buf.WriteString(`{"conversation_id":"cnv_x","status":"idle","responder":"agent","has_more":false,"events":[`)
		for i := range n {
			fmt.Fprintf(&buf, `{"id":"e%06d","type":"x"},`, i)
		}
		buf.Truncate(buf.Len() - 1)
		buf.WriteString(`],"cursor":"e116312"}`)
		body = buf.Bytes()
	}
	var fl time.Duration
	b.Run("floor", func(b *testing.B) {
		var total time.Duration
		for b.Loop() {
			total += floor()
		}
		fl = total / time.Duration(b.N)
		b.ReportMetric(fl.Seconds(), "cpu-s/answer")
	})
	b.Run("taken", func(b *testing.B) {
		if per := run(b, 2*n); fl > 0 && per > 20*fl {
			b.Fatalf("implausible: %v of CPU per answer, %.0f times the floor's %v", per, float64(per)/float64(fl), fl)
		}
	})
	b.Run("bounded", func(b *testing.B) { run(b, 0) })
}

// TestOversizedAnswerHeld: a 2xx answer to a message that is larger than
// MaxResponseBytes is refused (ErrResponseTooLarge, ErrProtocol), but the
// Company took the message and would answer a retry with the same
// answer (spec 7.3): it leaves the outbox as held, and is never sent
// again.
func TestOversizedAnswerHeld(t *testing.T) {
	e, h := hostileEnv(t, poppytest.ConversationOptions{})
	c := e.start(t, conversation.Text("Hello."), nil)
	path := "/poppy/conversations/" + c.ID() + "/messages"
	h.On(path, func(req *http.Request, next http.RoundTripper) (*http.Response, error) {
		resp, err := next.RoundTrip(req)
		if err == nil && resp.StatusCode == http.StatusAccepted {
			testenv.SetBody(resp, append([]byte(`{"status":"working","responder":"agent","pad":"`), bytes.Repeat([]byte("x"), 5<<20)...))
		}
		return resp, err
	})
	_, err := c.Send(ctx, conversation.Text("Big answer, please."), nil)
	if !errors.Is(err, poppy.ErrResponseTooLarge) || !errors.Is(err, conversation.ErrProtocol) || isPending(err) {
		t.Fatalf("err = %v", err)
	}
	sent, _ := c.Sent(ctx)
	if last := sent[len(sent)-1]; last.State != conversation.MessageHeld || last.N != 2 {
		t.Fatalf("Sent = %+v", sent)
	}
	h.On(path, nil)
	before := len(e.convRequests())
	if _, err := c.Send(ctx, conversation.Text("Next."), nil); err != nil {
		t.Fatal(err)
	}
	if n := len(e.convRequests()) - before; n != 1 {
		t.Fatalf("%d POSTs: the held message was sent again", n)
	}
}

// TestCompanyTextInEvents: the Company's text reaches the caller, and
// from there a person or a model, through one cleaner
// (internal/companytext): a message's text, its streamed pieces, a
// user_requested reason and an authorization's scopes hold no rune that
// could drive a terminal or reorder or hide text (U+202E and the other
// bidi controls, tag characters, escapes).
func TestCompanyTextInEvents(t *testing.T) {
	hostile := companytexttest.Hostile
	e := newEnv(t, poppytest.ConversationOptions{Streaming: true, Agent: func(turn *poppytest.Turn) {
		turn.Reply(poppytest.Reply{Text: hostile, Deltas: []string{hostile[:40], hostile[40:]}})
	}})
	c := e.start(t, conversation.Text("Hello."), nil)
	e.Srv.Conversations().RequestUser(c.ID(), hostile)
	e.Srv.Conversations().Append(c.ID(), map[string]any{"type": "authorization", "error": "insufficient_scope", "scope": "orders:read\u202e orders:write\U000E0049"})
	e.Srv.Conversations().Append(c.ID(), map[string]any{"type": "state", "status": "idle", "responder": "agent"})
	var got []string
	for ev, err := range c.Events(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case conversation.EventMessage:
			companytexttest.Check(t, "message text", ev.Message.Text)
			got = append(got, "message")
		case conversation.EventTextDelta:
			companytexttest.Check(t, "text-delta", ev.Delta.Text)
			got = append(got, "delta")
		case conversation.EventUserRequested:
			companytexttest.Check(t, "reason", ev.Reason)
			got = append(got, "reason")
		case conversation.EventAuthorization:
			for _, s := range ev.Authorization.Scope {
				companytexttest.Check(t, "scope", s)
			}
			companytexttest.Check(t, "authorization error", ev.Authorization.Error())
			got = append(got, "authorization")
		}
		if ev.Type == conversation.EventAuthorization {
			break
		}
	}
	for _, want := range []string{"message", "delta", "reason", "authorization"} {
		if !slices.Contains(got, want) {
			t.Fatalf("no %s event came: %v", want, got)
		}
	}
}
