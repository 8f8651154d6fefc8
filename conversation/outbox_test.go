package conversation_test

// The outbox's account of what became of each message (Sent, Pending,
// List), and the bounded retries of a POST.

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/poppytest"
)

// posts returns the bodies of the conversation POSTs after the first n
// requests to the conversation endpoint, with their fake clock times.
func posts(e *env, n int) (bodies [][]byte, times []time.Time) {
	for _, r := range e.convRequests()[n:] {
		if r.Method == http.MethodPost {
			bodies = append(bodies, r.Body)
			times = append(times, r.Time)
		}
	}
	return bodies, times
}

// TestPostRetriesBounded: a 429 or 5xx on a conversation POST is sent
// again by the Session transport's policy, at most three times, each after
// Retry-After or 1 s, 2 s, 4 s without one (PA-4.3-27, PA-4.3-29), never
// when Retry-After is longer than MaxRetryWait; then the Company's error
// comes back as a *poppy.Error inside a *PendingError, before any
// deadline, and the message stays in the outbox: the next Flush sends it
// with its ID and bytes (PA-7.3-04), and the Company holds it once.
func TestPostRetriesBounded(t *testing.T) {
	cases := []struct {
		name   string
		fault  func(e *env)
		status int
		posts  int
		gaps   []time.Duration
	}{
		{"429 without Retry-After", func(e *env) { e.Srv.Faults().RateLimit(poppytest.EndpointConversation, 4, "") },
			http.StatusTooManyRequests, 4, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{"429 with Retry-After", func(e *env) { e.Srv.Faults().RateLimit(poppytest.EndpointConversation, 4, "7") },
			http.StatusTooManyRequests, 4, []time.Duration{7 * time.Second, 7 * time.Second, 7 * time.Second}},
		{"503", func(e *env) {
			e.Srv.Faults().ForceError(poppytest.EndpointConversation, poppytest.Fault{Status: http.StatusServiceUnavailable, Times: 4})
		}, http.StatusServiceUnavailable, 4, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{"502", func(e *env) {
			e.Srv.Faults().ForceError(poppytest.EndpointConversation, poppytest.Fault{Status: http.StatusBadGateway, Times: 4})
		}, http.StatusBadGateway, 4, []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}},
		{"503 with Retry-After", func(e *env) {
			e.Srv.Faults().ForceError(poppytest.EndpointConversation, poppytest.Fault{Status: http.StatusServiceUnavailable, RetryAfter: "9", Times: 4})
		}, http.StatusServiceUnavailable, 4, []time.Duration{9 * time.Second, 9 * time.Second, 9 * time.Second}},
		{"503 with a Retry-After beyond MaxRetryWait", func(e *env) {
			e.Srv.Faults().ForceError(poppytest.EndpointConversation, poppytest.Fault{Status: http.StatusServiceUnavailable, RetryAfter: "3600", Times: 1})
		}, http.StatusServiceUnavailable, 1, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, poppytest.ConversationOptions{})
			c := e.start(t, conversation.Text("Hello."), nil)
			before := len(e.convRequests())
			tc.fault(e)
			// A deadline the old endless loop ran into; the bounded one
			// returns long before it.
			tctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			_, err := c.Send(tctx, conversation.Text("Are you there?"), nil)
			if tctx.Err() != nil {
				t.Fatalf("Send ran until its deadline: %v", err)
			}
			var pe *poppy.Error
			var pend *conversation.PendingError
			if !errors.As(err, &pe) || pe.Status != tc.status || !errors.As(err, &pend) || !isPending(err) {
				t.Fatalf("err = %v, want the Company's %d as a *poppy.Error in a *PendingError", err, tc.status)
			}
			if tc.status == http.StatusTooManyRequests && !errors.Is(err, poppy.ErrRateLimited) {
				t.Fatalf("PA-4.3-29: err = %v, want ErrRateLimited", err)
			}
			bodies, times := posts(e, before)
			if len(bodies) != tc.posts {
				t.Fatalf("%d POSTs, want %d", len(bodies), tc.posts)
			}
			for i, want := range tc.gaps {
				if gap := times[i+1].Sub(times[i]); gap < want {
					t.Fatalf("PA-4.3-27: retry %d after %v, want at least %v", i+1, gap, want)
				}
			}
			// The message stays in the outbox, pending, under the ID the
			// SDK chose.
			sent, err := c.Sent(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if last := sent[len(sent)-1]; last.ID != pend.MessageID || last.State != conversation.MessagePending || last.N != 2 {
				t.Fatalf("Sent: %+v, pending %s", sent, pend.MessageID)
			}
			// The next Flush sends it, with its ID and bytes; held once.
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			bodies, _ = posts(e, before)
			if last := bodies[len(bodies)-1]; !bytes.Equal(last, bodies[0]) || !bytes.Contains(last, []byte(pend.MessageID)) {
				t.Fatalf("PA-7.3-04: resent %s, first %s", last, bodies[0])
			}
			info, _ := e.Srv.Conversations().Get(c.ID())
			if len(info.Messages) != 2 || info.Messages[1].ID != pend.MessageID {
				t.Fatalf("the Company holds %+v", info.Messages)
			}
			sent, _ = c.Sent(ctx)
			if last := sent[len(sent)-1]; last.ID != pend.MessageID || last.State != conversation.MessageHeld {
				t.Fatalf("Sent after Flush: %+v", sent)
			}
		})
	}

	// A Company that answers 429 forever, without Retry-After: Send
	// returns after the transport's retries, with no deadline of its own
	// (the test's deadline only stops an endless loop).
	e := newEnv(t, poppytest.ConversationOptions{})
	c := e.start(t, conversation.Text("Hello."), nil)
	before := len(e.convRequests())
	e.Srv.Faults().RateLimit(poppytest.EndpointConversation, 1<<30, "")
	tctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	_, err := c.Send(tctx, conversation.Text("Are you there?"), nil)
	if bodies, _ := posts(e, before); tctx.Err() != nil || !errors.Is(err, poppy.ErrRateLimited) || !isPending(err) || len(bodies) != 4 {
		t.Fatalf("429 forever: %d POSTs, err = %v", len(bodies), err)
	}

	// A start whose 429s outlast the retries is pending; Recover sends it
	// and gets the conversation.
	e = newEnv(t, poppytest.ConversationOptions{})
	e.Srv.Faults().RateLimit(poppytest.EndpointConversation, 4, "")
	_, err = conversation.Start(ctx, e.sess, conversation.Text("Hello."), nil)
	var pe *poppy.Error
	if !errors.As(err, &pe) || pe.Status != http.StatusTooManyRequests || !isPending(err) {
		t.Fatalf("Start: err = %v", err)
	}
	if p, _ := conversation.Pending(ctx, e.sess); len(p) != 1 || p[0].Conversation != "" || p[0].State != conversation.MessagePending {
		t.Fatalf("Pending: %+v", p)
	}
	cs, err := conversation.Recover(ctx, e.sess, nil)
	if err != nil || len(cs) != 1 || len(e.Srv.Conversations().All()) != 1 || e.Srv.Conversations().All()[0].ID != cs[0].ID() {
		t.Fatalf("Recover: %v, %v", cs, err)
	}
}

// TestSentAndList: the outbox's account of every message given to Send
// (pending, held, refused, each with its place and ID) and List of every
// conversation the keystore knows, whatever its status.
func TestSentAndList(t *testing.T) {
	e := newEnv(t, poppytest.ConversationOptions{})
	a := e.start(t, conversation.Text("Hello."), nil)
	if _, err := a.Send(ctx, conversation.Human("Medium, please."), nil); err != nil {
		t.Fatal(err)
	}
	// Refused for good: message_id_conflict; never sent again.
	b := e.start(t, conversation.Message{ID: "msg_fixed", Text: "Other."}, nil)
	if _, err := a.Send(ctx, conversation.Message{ID: "msg_fixed", Text: "Different."}, nil); testenv.Code(err) != "message_id_conflict" {
		t.Fatalf("err = %v", err)
	}
	// Pending: the answer never came.
	e.Srv.Faults().ForceError(poppytest.EndpointConversation, poppytest.Fault{Status: http.StatusServiceUnavailable, Times: 4})
	if _, err := a.Send(ctx, conversation.Text("Still there?"), nil); !isPending(err) {
		t.Fatalf("err = %v", err)
	}
	sent, err := a.Sent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		n     int64
		state conversation.MessageState
		code  string
	}
	var got []row
	for _, s := range sent {
		got = append(got, row{s.N, s.State, s.Code})
	}
	want := []row{{1, conversation.MessageHeld, ""}, {2, conversation.MessageHeld, ""}, {3, conversation.MessageRefused, "message_id_conflict"}, {4, conversation.MessagePending, ""}}
	if !slices.Equal(got, want) {
		t.Fatalf("Sent = %+v, want %+v", got, want)
	}
	info, _ := e.Srv.Conversations().Get(a.ID())
	if sent[0].ID != info.Messages[0].ID || sent[1].ID != info.Messages[1].ID || sent[2].ID != "msg_fixed" {
		t.Fatalf("IDs %+v, the Company holds %+v", sent, info.Messages)
	}
	// Same tells a message by its content, whoever chose its ID.
	if !sent[1].Same(conversation.Human("Medium, please.")) || sent[1].Same(conversation.Text("Medium, please.")) ||
		!sent[3].Same(conversation.Text("Still there?")) || sent[0].Same(conversation.Text("Hello!")) {
		t.Fatal("Same does not tell messages by sender and content")
	}
	// A pending message is listed by Pending too.
	if p, _ := conversation.Pending(ctx, e.sess); len(p) != 1 || p[0].ID != sent[3].ID || p[0].Conversation != a.ID() {
		t.Fatalf("Pending: %+v", p)
	}

	// List: every conversation the keystore knows, closed ones too; no
	// request is sent.
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	before := len(e.convRequests())
	convs, err := conversation.List(ctx, e.sess, nil)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]conversation.Status{}
	for _, c := range convs {
		ids[c.ID()] = c.Status()
	}
	if len(convs) != 2 || ids[a.ID()] != a.Status() || ids[b.ID()] != conversation.StatusClosed {
		t.Fatalf("List = %v", ids)
	}
	if n := len(e.convRequests()) - before; n != 0 {
		t.Fatalf("List sent %d requests", n)
	}
	// Another User's conversations are not listed.
	if others, err := conversation.List(ctx, e.Session("bob"), nil); err != nil || len(others) != 0 {
		t.Fatalf("bob's List = %v, %v", others, err)
	}
	// A listed conversation goes on: its pending message is sent.
	for _, c := range convs {
		if c.ID() == a.ID() {
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	info, _ = e.Srv.Conversations().Get(a.ID())
	if n := len(info.Messages); n != 3 || info.Messages[2].Text != "Still there?" {
		t.Fatalf("the Company holds %d messages", n)
	}
	// Nothing is left pending.
	if p, _ := conversation.Pending(ctx, e.sess); len(p) != 0 {
		t.Fatalf("Pending after Flush: %+v", p)
	}
}
