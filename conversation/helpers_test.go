package conversation_test

import (
	"context"
	"encoding/json"
	"testing"

	"go.uber.org/goleak"

	"github.com/poppyproto/poppy"
	"github.com/poppyproto/poppy/conversation"
	"github.com/poppyproto/poppy/internal/testenv"
	"github.com/poppyproto/poppy/poppytest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
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
// on an error.
func collect(t testing.TB, c *conversation.Conversation, opts *conversation.EventsOptions, stop func(conversation.Event) bool) []conversation.Event {
	t.Helper()
	var out []conversation.Event
	for ev, err := range c.Events(ctx, opts) {
		if err != nil {
			t.Fatalf("Events: %v", err)
		}
		out = append(out, ev)
		if stop != nil && stop(ev) {
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
