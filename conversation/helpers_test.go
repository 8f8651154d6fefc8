package conversation_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/poppyproto/poppy/internal/leakcheck"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/poppytest"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m)
}

var ctx = context.Background()

// env is a fake Company with a conversation endpoint and an agent.
type env struct {
	*testenv.Env
	sess *poppy.Session
}

func newEnv(t testing.TB, co poppytest.ConversationOptions) *env {
	t.Helper()
	e := &env{Env: testenvNew(t, &poppytest.Options{Conversations: co})}
	e.sess = e.Session("alice")
	return e
}

// convRequests returns the SDK's requests to the conversation endpoint.
func (e *env) convRequests() []poppytest.Request {
	return e.Requests(poppytest.EndpointConversation)
}

// start starts a conversation or fails the test.
func (e *env) start(t testing.TB, msg conversation.Message, opts *conversation.StartOptions) *conversation.Conversation {
	t.Helper()
	c, err := conversation.Start(ctx, e.sess, msg, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return c
}

// collect reads events until pred says stop (or the loop ends), failing
// on an error; a loop that neither stops nor ends fails after a minute.
func collect(t testing.TB, c *conversation.Conversation, opts *conversation.EventsOptions, stop func(conversation.Event) bool) []conversation.Event {
	t.Helper()
	return readEvents(t, c, opts, func(ev conversation.Event, _ context.CancelFunc) bool {
		return stop != nil && stop(ev)
	})
}

// readToEnd reads events until the loop ends by itself, which it must do
// once it has yielded the event end matches: the loop body cancels the
// loop's context there, so that a loop that goes on reading fails the
// test at once with the cancellation, instead of waiting on a stream
// that says nothing more.
func readToEnd(t testing.TB, c *conversation.Conversation, opts *conversation.EventsOptions, end func(conversation.Event) bool) []conversation.Event {
	t.Helper()
	return readEvents(t, c, opts, func(ev conversation.Event, cancel context.CancelFunc) bool {
		if end(ev) {
			cancel()
		}
		return false
	})
}

// readEvents ranges over c's events, for a minute at most, and fails on
// an error; each event is kept, then handed to each with the loop's
// cancel, and the loop breaks when each says so.
func readEvents(t testing.TB, c *conversation.Conversation, opts *conversation.EventsOptions, each func(conversation.Event, context.CancelFunc) bool) []conversation.Event {
	t.Helper()
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out []conversation.Event
	for ev, err := range c.Events(rctx, opts) {
		if err != nil {
			t.Fatalf("Events, after %d events (the last %+v): %v", len(out), out[max(len(out)-1, 0):], err)
		}
		out = append(out, ev)
		if each(ev, cancel) {
			break
		}
	}
	return out
}

func isIdle(ev conversation.Event) bool {
	return ev.Type == conversation.EventState && ev.Status == conversation.StatusIdle
}

func texts(evs []conversation.Event) []string {
	var out []string
	for _, ev := range evs {
		if ev.Type == conversation.EventMessage {
			out = append(out, string(ev.Message.Role)+":"+ev.Message.Text)
		}
	}
	return out
}

func bodyOf(t testing.TB, r poppytest.Request) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("request body %q: %v", r.Body, err)
	}
	return m
}

func testenvNew(t testing.TB, opts *poppytest.Options) *testenv.Env {
	t.Helper()
	return testenv.New(t, opts, nil)
}

// testenvWithExtensions is testenv.New with an identity that lists exts.
func testenvWithExtensions(t testing.TB, opts *poppytest.Options, exts map[string]string) *testenv.Env {
	t.Helper()
	srv := poppytest.NewServer(t, opts)
	id, key := testenv.NewIdentity(t, exts)
	e := &testenv.Env{T: t, Srv: srv, ID: id, Key: key}
	e.Serve(nil)
	e.Agent = e.NewAgent(nil)
	return e
}

// isPending reports whether err is a *PendingError: the message stays in
// the outbox.
func isPending(err error) bool {
	var pe *conversation.PendingError
	return errors.As(err, &pe)
}
